"""Attacks on the provider adapters' whole-response paths: calls read from what a gateway or a hand-built dict may
hold, and replies built from results of every kind, checked against the official SDKs' own types.

A call whose arguments are not what its API carries is answered ``invalid_input`` and never run; the assistant
turn handed back is one the API takes in the next request; a builder given something that is not calls or
results says so with a typed error.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types import ToolUseBlockParam
from anthropic_events import block_stop, json_delta, message, tool_use
from google.genai import types as genai_types
from google.protobuf import json_format, struct_pb2
from openai.types.chat import ChatCompletionMessageFunctionToolCallParam
from openai.types.responses import ResponseFunctionToolCallParam
from pydantic import TypeAdapter
from weather import weather

import toolsched as ts
from toolsched.providers import anthropic as ts_anthropic
from toolsched.providers import gemini as ts_gemini
from toolsched.providers import openai_chat as ts_chat
from toolsched.providers import openai_responses as ts_responses
from toolsched.testing import Reply, ToolUse, response_body, stream_events

pytestmark = pytest.mark.anyio

# Arguments an object-carrying API (Anthropic's ``input``, Gemini's ``args``) may be sent as text by a gateway:
# text is no object, whatever it holds.
TEXT_INPUTS = ['{"city": "Oslo"}', '"{\\"city\\": \\"Oslo\\"}"', "Oslo"]


def _anthropic_response(given: Any) -> dict[str, Any]:
    block = {"type": "tool_use", "id": "call_a", "name": "get_weather", "input": given}
    return {"role": "assistant", "content": [{"type": "text", "text": "Looking."}, block]}


@pytest.mark.parametrize("given", TEXT_INPUTS)
async def test_an_anthropic_input_sent_as_text_is_answered_invalid_and_never_run(given: str) -> None:
    """Promise (``anthropic.calls_from``): a non-object ``input`` is answered ``invalid_input``. Text holding a
    JSON object was parsed and the tool run with it."""
    ran: list[str] = []
    execution = await ts_anthropic.execute(ts.Executor(weather(ran)), _anthropic_response(given))
    assert ran == []
    assert [result.error_kind for result in execution.results] == ["invalid_input"]
    assert execution.message is not None
    assert execution.message["content"][0]["is_error"] is True


@pytest.mark.parametrize("given", TEXT_INPUTS)
async def test_an_anthropic_streamed_input_that_is_text_is_answered_invalid_and_never_run(given: str) -> None:
    """The same call streamed: its start input as text, or its streamed JSON a string. Both ran the tool."""
    ran: list[str] = []
    start_input = message(tool_use(0, "call_a", given), block_stop(0))  # type: ignore[arg-type]
    streamed_string = message(tool_use(0, "call_a"), json_delta(0, json.dumps(given)), block_stop(0))
    for events in (start_input, streamed_string):
        execution = await ts_anthropic.execute_stream(ts.Executor(weather(ran)), events)
        assert [result.error_kind for result in execution.results] == ["invalid_input"]
    assert ran == []


async def test_an_anthropic_streamed_input_cut_off_is_still_reported_as_not_json() -> None:
    ran: list[str] = []
    events = message(tool_use(0, "call_a"), json_delta(0, '{"city": "Os'), block_stop(0))
    execution = await ts_anthropic.execute_stream(ts.Executor(weather(ran)), events)
    assert ran == []
    (result,) = execution.results
    assert result.error_kind == "invalid_input"
    assert "not valid JSON" in (result.error or "")


@pytest.mark.parametrize("given", TEXT_INPUTS)
async def test_gemini_args_sent_as_text_are_answered_invalid_and_never_run(given: str) -> None:
    """Promise (the providers guide): arguments that fail the schema are answered with an error result. Gemini's
    ``args`` is an object; text holding one was parsed and the tool run with it."""
    ran: list[str] = []
    response = {"parts": [{"functionCall": {"id": "call_a", "name": "get_weather", "args": given}}]}
    execution = await ts_gemini.execute(ts.Executor(weather(ran)), response)
    assert ran == []
    assert [result.error_kind for result in execution.results] == ["invalid_input"]
    assert execution.content is not None
    assert "error" in execution.content["parts"][0]["functionResponse"]["response"]


NOT_OBJECTS = ['{"city": "Oslo"}', "Oslo", ["Oslo"], 7, True]


@pytest.mark.parametrize("given", NOT_OBJECTS, ids=["json-text", "text", "array", "number", "bool"])
async def test_an_anthropic_turn_with_an_input_that_is_no_object_is_handed_back_as_the_api_takes_it(given: Any) -> None:
    """Promise (the streamed turn's ``assistant``, and ``assistant_message``): the turn handed back is the one to
    send in the next request. The SDK's ``ToolUseBlockParam`` (as the API) takes only an object as ``input``; the
    whole response's turn kept the model's text or array there, and the streamed one the JSON value it parsed, so
    the next request was refused after the calls were answered."""
    check = TypeAdapter(ToolUseBlockParam)
    whole = await ts_anthropic.execute(ts.Executor(weather([])), _anthropic_response(given))
    streamed = await ts_anthropic.execute_stream(
        ts.Executor(weather([])), message(tool_use(0, "call_a"), json_delta(0, json.dumps(given)), block_stop(0))
    )
    for turn in (whole.assistant, ts_anthropic.assistant_message(_anthropic_response(given)), streamed.assistant):
        (use,) = [block for block in turn["content"] if block["type"] == "tool_use"]
        check.validate_python(use)
        assert use["input"] == {}
        assert use["id"] == "call_a"
    assert [result.error_kind for result in (*whole.results, *streamed.results)] == ["invalid_input"] * 2


# --- The reply builders given something that is not calls or results --------------------------------------

BUILDERS = [
    ts_anthropic.results_to_blocks,
    ts_anthropic.results_to_message,
    ts_chat.results_to_messages,
    ts_responses.results_to_items,
    ts_gemini.results_to_parts,
    ts_gemini.results_to_content,
]


@pytest.mark.parametrize("build", BUILDERS, ids=lambda build: f"{build.__module__.rsplit('.', 1)[1]}.{build.__name__}")
async def test_a_reply_builder_given_what_is_not_calls_or_results_says_which_with_a_typed_error(build: Any) -> None:
    """Errors for bad input are typed toolsched errors naming the argument and the rule (``Executor.run`` refuses
    a call that is no ``ToolCall`` with ``MalformedCallError``). The builders raised ``AttributeError`` or
    ``TypeError`` from inside: for the outcome given in place of its results, for the response's own blocks given
    as calls, for a single result, for a ``registry`` that is none."""
    executor = ts.Executor(weather([]))
    calls = [ts.ToolCall("call_a", "get_weather", {"city": "Oslo"})]
    outcome = await executor.run(calls)
    wrong: list[tuple[tuple[Any, ...], dict[str, Any], str]] = [
        ((calls, outcome), {}, r"results must be a list of ToolResult.*outcome\.results"),
        ((calls, outcome.results[0]), {}, r"results must be a list of ToolResult, got ToolResult"),
        ((calls, [None]), {}, r"results\[0\] must be a ToolResult, got NoneType"),
        (([{"id": "call_a"}], outcome.results), {}, r"calls\[0\] must be a ToolCall, got dict"),
        (("call_a", outcome.results), {}, r"calls must be a list of ToolCall, got str"),
        ((calls, outcome.results), {"registry": executor}, r"registry must be a ToolRegistry .*executor\.registry"),
    ]
    for arguments, options, rule in wrong:
        with pytest.raises(ts.OptionError, match=rule):
            build(*arguments, **options)
    assert build(calls, outcome.results, registry=executor.registry)
    # Any collection of calls and of results builds the same reply as lists do: a generator, a tuple.
    listed = build(calls, outcome.results)
    assert build((call for call in calls), (result for result in outcome.results)) == listed
    assert build(tuple(calls), tuple(outcome.results)) == listed


# --- Gemini: outputs as its API reads a functionResponse ---------------------------------------------------


def as_gemini_reads(response: dict[str, Any]) -> dict[str, Any]:
    """A ``functionResponse``'s ``response`` as the Gemini API reads it: a ``google.protobuf.Struct``, whose
    numbers are doubles (the API reference gives the field as "object (Struct format)")."""
    struct = struct_pb2.Struct()
    json_format.ParseDict(response, struct)
    read: dict[str, Any] = json_format.MessageToDict(struct)
    return read


@pytest.mark.parametrize(
    ("output", "digits"),
    [
        (2**60 + 1, "1152921504606846977"),
        (-(2**60) - 1, "-1152921504606846977"),
        ({"id": 1234567890123456789, "name": "order"}, "1234567890123456789"),
        ([2**53 + 1], "9007199254740993"),
        (10**400, "1" + "0" * 400),
    ],
    ids=["a 64-bit id", "its negative", "nested in an object", "in a list", "past a double's range"],
)
async def test_a_gemini_output_with_an_integer_a_double_cannot_hold_reaches_the_model_digit_for_digit(
    output: Any, digits: str
) -> None:
    """Promise (the providers guide): what strict JSON cannot hold, "an integer Gemini's JSON cannot carry" among
    it, is sent as text. Such an integer (a 64-bit database or snowflake ID) went as a JSON number: the API reads
    it into a double, so the model saw another ID (1152921504606846976), and one past a double's range could not
    be read at all (the request refused)."""

    @ts.tool
    def lookup() -> Any:
        """Returns a record."""
        return output

    response = {"parts": [{"functionCall": {"id": "call_a", "name": "lookup", "args": {}}}]}
    execution = await ts_gemini.execute(ts.Executor([lookup]), response)
    assert execution.content is not None
    sent = execution.content["parts"][0]["functionResponse"]["response"]
    assert digits in json.dumps(as_gemini_reads(sent))


async def test_a_gemini_output_of_integers_a_double_holds_still_goes_as_json_values() -> None:
    @ts.tool
    def lookup() -> Any:
        """Returns a record."""
        return {"count": 2**53, "small": -7, "price": 1.5}

    response = {"parts": [{"functionCall": {"id": "call_a", "name": "lookup", "args": {}}}]}
    execution = await ts_gemini.execute(ts.Executor([lookup]), response)
    assert execution.content is not None
    sent = execution.content["parts"][0]["functionResponse"]["response"]
    assert sent == {"output": {"count": 2**53, "small": -7, "price": 1.5}}


# --- execute, execute_stream and resume given what is no executor or execution ------------------------------

MODULES = {
    "anthropic": ts_anthropic,
    "openai_responses": ts_responses,
    "openai_chat": ts_chat,
    "gemini": ts_gemini,
}


@pytest.mark.parametrize("provider", list(MODULES))
async def test_execute_given_what_is_no_executor_says_so_with_a_typed_error_and_runs_nothing(provider: str) -> None:
    """Errors for bad input name the argument and the rule (the loops and ``otel.instrument`` refuse what is no
    ``Executor``). ``execute(response, executor)`` (the two swapped), ``execute(executor.registry, response)``,
    ``execute_stream`` of a registry, and ``resume`` given None for the execution raised ``AttributeError``
    (``'dict' object has no attribute 'registry'``, ``... 'run'``, ``... 'outcome'``)."""
    module = MODULES[provider]
    ran: list[str] = []
    executor = ts.Executor(weather(ran))
    response = response_body(provider, Reply(tool_uses=[ToolUse("get_weather", {"city": "Oslo"})]))
    events = stream_events(provider, Reply(tool_uses=[ToolUse("get_weather", {"city": "Oslo"})]))
    for wrong in ((response, executor), (executor.registry, response), (None, response)):
        with pytest.raises(ts.OptionError, match=r"executor must be a toolsched Executor, got "):
            await module.execute(*wrong)
    with pytest.raises(ts.OptionError, match=r"executor must be a toolsched Executor, got ToolRegistry"):
        await module.execute_stream(executor.registry, [event.data for event in events])
    with pytest.raises(ts.OptionError, match=r"execution must be the .*Execution that execute"):
        await module.resume(executor, None, None)
    assert ran == []


# --- OpenAI: arguments that are no text, in the turn handed back ---------------------------------------------


def _chat_message(arguments: Any) -> dict[str, Any]:
    call = {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def _responses_output(arguments: Any) -> list[dict[str, Any]]:
    return [{"type": "function_call", "call_id": "call_a", "name": "get_weather", "arguments": arguments}]


@pytest.mark.parametrize(
    ("arguments", "ran"),
    [({"city": "Oslo"}, ["Oslo"]), (["Oslo"], []), (7, [])],
    ids=["an object", "an array", "a number"],
)
async def test_openai_arguments_that_are_no_text_are_handed_back_as_the_text_the_api_takes(
    arguments: Any, ran: list[str]
) -> None:
    """Promise (``assistant_message``, ``output_items``): the turn handed back is the one to send in the next
    request. Both APIs carry a call's arguments as JSON text (the SDKs' param types take only a string); a
    gateway's object was run as the call's arguments but handed back as it came, and an array or number
    (answered ``invalid_input``) too, so the next request was refused after the calls were answered."""
    seen: list[str] = []
    message = _chat_message(arguments)
    chat = await ts_chat.execute(ts.Executor(weather(seen)), message)
    (call,) = chat.assistant["tool_calls"]
    TypeAdapter(ChatCompletionMessageFunctionToolCallParam).validate_python(call)
    assert json.loads(call["function"]["arguments"]) == arguments
    assert call["id"] == "call_a"
    output = _responses_output(arguments)
    responses = await ts_responses.execute(ts.Executor(weather(seen)), output)
    (item,) = responses.assistant
    TypeAdapter(ResponseFunctionToolCallParam).validate_python(item)
    assert json.loads(item["arguments"]) == arguments
    assert item["call_id"] == "call_a"
    assert seen == ran * 2
    # The response itself is left as the model sent it.
    assert message["tool_calls"][0]["function"]["arguments"] == output[0]["arguments"] == arguments


@pytest.mark.parametrize("given", NOT_OBJECTS, ids=["json-text", "text", "array", "number", "bool"])
async def test_a_gemini_turn_with_args_that_are_no_object_is_handed_back_as_the_sdk_takes_it(given: Any) -> None:
    """Promise (``execute``'s ``assistant``, and the streamed turn's): the turn to send back in the next request.
    The SDK's ``Content`` (which ``generate_content`` builds from a dict) takes only an object as a
    ``functionCall``'s ``args``; the turn kept the model's text or array there, so the next request failed in the
    SDK once the calls had been answered."""
    call = {"functionCall": {"id": "call_a", "name": "get_weather", "args": given}}
    response = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Looking."}, call]}, "index": 0}]}
    whole = await ts_gemini.execute(ts.Executor(weather([])), response)
    chunk = {"candidates": [{**response["candidates"][0], "finishReason": "STOP"}]}
    streamed = await ts_gemini.execute_stream(ts.Executor(weather([])), [chunk])
    for turn in (whole.assistant, streamed.assistant):
        content = genai_types.Content.model_validate(turn)
        assert content.parts is not None and content.parts[1].function_call is not None
        assert content.parts[1].function_call.args == {}
        assert content.parts[1].function_call.id == "call_a"
    assert [result.error_kind for result in (*whole.results, *streamed.results)] == ["invalid_input"] * 2
    assert call["functionCall"]["args"] == given  # the response itself is left as the model sent it
