"""Hostile streams for the provider adapters: what a proxy, a gateway or a broken server may send.

A streamed turn is either answered whole (every call run with the arguments the model gave, answered once,
in the order the turn holds them) or refused with a typed error (``ResponseFormatError`` as the cause of
``StreamFailed``); never a call run with other arguments than the model's, never a bare ``TypeError``.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from anthropic_events import block_stop, json_delta, message, tool_use
from sdk_clients import MODULES, PROVIDERS, Client, reply_of
from weather import weather

import toolsched as ts
from toolsched.providers import anthropic as ts_anthropic
from toolsched.providers import openai_chat as ts_chat
from toolsched.providers import openai_responses as ts_responses
from toolsched.testing import Reply, ScriptedProvider, ToolUse, response_body

pytestmark = pytest.mark.anyio


# --- Anthropic: a tool_use whose input came whole in its content_block_start -------------------------------


async def test_anthropic_input_given_whole_at_the_blocks_start_is_the_calls_input() -> None:
    ran: list[str] = []
    events = message(tool_use(0, "call_a", {"city": "Oslo"}), block_stop(0))
    execution = await ts_anthropic.execute_stream(ts.Executor(weather(ran)), events)
    assert ran == ["Oslo"]
    assert [call.args for call in execution.calls] == [{"city": "Oslo"}]
    assert execution.assistant["content"][0]["input"] == {"city": "Oslo"}
    assert execution.message is not None
    assert execution.message["content"] == [{"type": "tool_result", "tool_use_id": "call_a", "content": "Oslo: 18°C"}]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("deltas", [0, 1], ids=["no delta", "an empty delta"])
async def test_anthropic_sdk_stream_with_the_input_at_the_blocks_start_runs_the_sdks_input(deltas: int) -> None:
    # The official SDK reads such a block as a call with that input (its own accumulated message says so),
    # with no input_json_delta after the start (as some gateways send it) or the empty one the API sends.
    events = message(tool_use(0, "call_a", {"city": "Oslo"}), *[json_delta(0, "")] * deltas, block_stop(0))
    framed = [(0.0, event["type"], event) for event in events]
    ran: list[str] = []
    with ScriptedProvider([framed, framed]) as scripted:
        async with Client("anthropic", scripted.url) as client:
            async with client.sdk.messages.stream(
                model="claude-sonnet-4-6", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
            ) as sdk_stream:
                sdk_message = await sdk_stream.get_final_message()
            stream = await client.stream()
            with anyio.fail_after(30):
                execution = await ts_anthropic.execute_stream(ts.Executor(weather(ran)), stream)
    assert [block.input for block in sdk_message.content] == [{"city": "Oslo"}]
    assert ran == ["Oslo"]
    assert [call.args for call in execution.calls] == [{"city": "Oslo"}]


@pytest.mark.parametrize("blank", ["", " ", "\n"])
async def test_anthropic_blank_input_deltas_after_a_whole_start_input_keep_it(blank: str) -> None:
    # The API sends one empty input_json_delta even for a call whose input came whole at its start.
    ran: list[str] = []
    events = message(tool_use(0, "call_a", {"city": "Oslo"}), json_delta(0, blank), json_delta(0, ""), block_stop(0))
    execution = await ts_anthropic.execute_stream(ts.Executor(weather(ran)), events)
    assert ran == ["Oslo"]
    assert [call.args for call in execution.calls] == [{"city": "Oslo"}]
    assert execution.assistant["content"][0]["input"] == {"city": "Oslo"}


async def test_anthropic_blank_input_deltas_after_a_start_input_that_is_no_object_are_answered_invalid() -> None:
    events = message(tool_use(0, "call_a", "Oslo"), json_delta(0, ""), block_stop(0))  # type: ignore[arg-type]
    execution = await ts_anthropic.execute_stream(ts.Executor(weather([])), events)
    assert [result.error_kind for result in execution.results] == ["invalid_input"]
    assert execution.assistant["content"][0]["input"] == {}


async def test_anthropic_deltas_after_a_whole_start_input_replace_it_as_the_sdk_does() -> None:
    ran: list[str] = []
    events = message(
        tool_use(0, "call_a", {"city": "Oslo"}), json_delta(0, '{"city": '), json_delta(0, '"Bern"}'), block_stop(0)
    )
    execution = await ts_anthropic.execute_stream(ts.Executor(weather(ran)), events)
    assert ran == ["Bern"]
    assert execution.assistant["content"][0]["input"] == {"city": "Bern"}


async def test_anthropic_start_input_that_is_no_object_is_answered_invalid_and_the_turn_stays_sendable() -> None:
    events = message(tool_use(0, "call_a", "Oslo"), block_stop(0))  # type: ignore[arg-type]
    execution = await ts_anthropic.execute_stream(ts.Executor(weather([])), events)
    assert [result.error_kind for result in execution.results] == ["invalid_input"]
    assert execution.assistant["content"][0]["input"] == {}


# --- Anthropic: deltas that are no part of an open call -----------------------------------------------------


@pytest.mark.parametrize(
    "events",
    [
        message(tool_use(0, "call_a"), json_delta(0, 7), block_stop(0)),
        message(
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ["x"]}},
            block_stop(0),
        ),
        message(tool_use(0, "call_a"), json_delta(3, '{"city": "Oslo"}'), block_stop(0)),
        message(tool_use(0, "call_a"), json_delta(0, '{"city": "Oslo"}'), block_stop(0), json_delta(0, "garbage")),
    ],
    ids=["partial-json-not-text", "text-not-text", "input-for-a-block-never-started", "input-after-the-stop"],
)
async def test_anthropic_deltas_that_are_no_part_of_an_open_block_break_the_stream_with_a_typed_error(
    events: list[dict[str, Any]],
) -> None:
    with pytest.raises(ts.StreamFailed) as raised:
        await ts_anthropic.execute_stream(ts.Executor(weather([])), events)
    assert isinstance(raised.value.__cause__, ts.ResponseFormatError)


# --- Anthropic: blocks that stop out of their order ---------------------------------------------------------


def _stopped_backwards(first: str, second: str) -> list[dict[str, Any]]:
    """A message of two calls (Oslo, then Bern) whose second block stops before its first."""
    return message(
        tool_use(0, first),
        tool_use(1, second),
        json_delta(0, '{"city": "Oslo"}'),
        json_delta(1, '{"city": "Bern"}'),
        block_stop(1),
        block_stop(0),
    )


async def test_anthropic_blocks_stopped_out_of_order_are_answered_in_the_turns_order() -> None:
    ran: list[str] = []
    events = _stopped_backwards("call_a", "call_b")
    execution = await ts_anthropic.execute_stream(ts.Executor(weather(ran)), events)
    assert sorted(ran) == ["Bern", "Oslo"]
    sent = [block["id"] for block in execution.assistant["content"]]
    assert sent == ["call_a", "call_b"]
    assert execution.message is not None
    assert [block["tool_use_id"] for block in execution.message["content"]] == sent
    assert [call.id for call in execution.calls] == sent
    assert [result.call_id for result in execution.results] == sent


async def test_anthropic_blocks_without_ids_stopped_out_of_order_keep_their_ids_and_the_turns_order() -> None:
    events = _stopped_backwards("", "")
    execution = await ts_anthropic.execute_stream(ts.Executor(weather([])), events)
    sent = [(block["id"], block["input"]["city"]) for block in execution.assistant["content"]]
    assert [city for _, city in sent] == ["Oslo", "Bern"]
    assert execution.message is not None
    answered = [(block["tool_use_id"], block["content"]) for block in execution.message["content"]]
    assert answered == [(call_id, f"{city}: 18°C") for call_id, city in sent]
    assert [call.id for call in ts_anthropic.calls_from(execution.assistant)] == [call_id for call_id, _ in sent]


async def test_calls_held_for_approval_out_of_stream_order_wait_and_resume_in_the_turns_order() -> None:
    @ts.tool(needs_approval=True)
    async def get_weather(city: str) -> str:
        """Current weather for a city."""
        return f"{city}: 18°C"

    executor = ts.Executor([get_weather])
    events = _stopped_backwards("call_a", "call_b")
    execution = await ts_anthropic.execute_stream(executor, events)
    assert [request.call_id for request in execution.outcome.pending] == ["call_a", "call_b"]
    state = execution.outcome.state
    assert state is not None
    for request in execution.outcome.pending:
        state.approve(request.call_id)
    resumed = await ts_anthropic.resume(executor, execution, state)
    assert [result.call_id for result in resumed.results] == ["call_a", "call_b"]
    assert resumed.message is not None
    assert [block["tool_use_id"] for block in resumed.message["content"]] == ["call_a", "call_b"]


# --- OpenAI chat: deltas whose pieces are not text ----------------------------------------------------------


def _chunk(part: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
    delta: dict[str, Any] = {} if part is None else {"tool_calls": [part]}
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


@pytest.mark.parametrize(
    "function",
    [{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": 7, "arguments": "{}"}],
    ids=["arguments-an-object", "name-a-number"],
)
async def test_chat_deltas_whose_name_or_arguments_are_not_text_break_the_stream_with_a_typed_error(
    function: dict[str, Any],
) -> None:
    events = [
        _chunk({"index": 0, "id": "call_a", "type": "function", "function": function}),
        _chunk(None, "tool_calls"),
    ]
    with pytest.raises(ts.StreamFailed) as raised:
        await ts_chat.execute_stream(ts.Executor(weather([])), events)
    assert isinstance(raised.value.__cause__, ts.ResponseFormatError)


async def test_chat_delta_ids_that_are_not_text_are_replaced_as_in_a_whole_response() -> None:
    part = {
        "index": 0,
        "id": 42,
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
    }
    execution = await ts_chat.execute_stream(ts.Executor(weather([])), [_chunk(part), _chunk(None, "tool_calls")])
    call_id = execution.calls[0].id
    assert call_id.startswith("toolsched_call_0_")
    assert execution.assistant["tool_calls"][0]["id"] == call_id
    assert [message["tool_call_id"] for message in execution.messages] == [call_id]


# --- OpenAI Responses: a final output that is not what was streamed -----------------------------------------


def _done(index: int, arguments: str, name: str = "get_weather") -> dict[str, Any]:
    item = {"type": "function_call", "id": f"fc_{index}", "call_id": "call_a", "name": name, "arguments": arguments}
    return {"type": "response.output_item.done", "output_index": index, "item": item}


@pytest.mark.parametrize(
    ("field", "value"), [("arguments", '{"city": "Bern"}'), ("name", "get_time")], ids=["arguments", "name"]
)
async def test_responses_final_output_with_another_call_than_the_streamed_one_breaks_the_stream(
    field: str, value: str
) -> None:
    ran: list[str] = []
    final = dict(_done(0, '{"city": "Oslo"}')["item"])
    final[field] = value
    events = [_done(0, '{"city": "Oslo"}'), {"type": "response.completed", "response": {"output": [final]}}]
    with pytest.raises(ts.StreamFailed) as raised:
        await ts_responses.execute_stream(ts.Executor(weather(ran)), events)
    assert isinstance(raised.value.__cause__, ts.ResponseFormatError)
    # The streamed call is answered in the broken stream's outcome; no reply answers a call the turn does not hold.
    assert [result.call_id for result in raised.value.outcome.results] == ["call_a"]


async def test_responses_items_that_are_no_objects_in_a_whole_turn_leave_its_calls_answered() -> None:
    events = [
        _done(0, '{"city": "Oslo"}'),
        {"type": "response.output_item.done", "output_index": 1, "item": "stray"},
        {"type": "response.completed", "response": {}},
    ]
    execution = await ts_responses.execute_stream(ts.Executor(weather([])), events)
    assert [item["call_id"] for item in execution.items] == ["call_a"]


# --- Replies: text a request body can carry -----------------------------------------------------------------


CAFE = b"caf\xe9".decode("utf-8", "surrogateescape")


def listing() -> list[ts.Tool]:
    @ts.tool(read_only=True)
    async def list_files(folder: str) -> Any:
        """The names in a folder (Linux hands non-UTF-8 names back with surrogate escapes)."""
        if folder == "fail":
            raise OSError(f"cannot open {CAFE}")
        if folder == "paired":
            return "smile \ud83d\ude00"
        return {"names": [f"{CAFE}.txt", "ok.txt"]}

    return [list_files]


LISTING = Reply(
    tool_uses=[
        ToolUse("list_files", {"folder": "docs"}, id="call_list"),
        ToolUse("list_files", {"folder": "fail"}, id="call_fail"),
        ToolUse("list_files", {"folder": "paired"}, id="call_pair"),
    ]
)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_outputs_and_errors_with_lone_surrogates_go_back_through_the_sdk(provider: str, stream: bool) -> None:
    with ScriptedProvider([LISTING, Reply(text="done")]) as scripted:
        async with Client(provider, scripted.url) as client:
            with anyio.fail_after(30):
                result = await client.loop(ts.Executor(listing()), "list", stream=stream)
    assert (result.stop, result.turns) == ("done", 2)
    second = json.dumps(scripted.requests[1].body, ensure_ascii=False)
    assert "caf\ufffd.txt" in second and "cannot open caf\ufffd" in second and "smile \U0001f600" in second


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_every_reply_text_encodes_as_utf8(provider: str) -> None:
    module = MODULES[provider]
    execution = await module.execute(ts.Executor(listing()), response_body(provider, LISTING))
    reply = reply_of(provider, execution)
    json.dumps(reply, ensure_ascii=False).encode("utf-8")
    # The results themselves keep what the tool returned.
    assert execution.results[0].output["names"][0] == "caf\udce9.txt"


# --- Long answers: assembled in one pass, never copied at every delta ---------------------------------------


class Piece(str):
    """A delta's text that counts the characters copied when text is grown by ``+`` onto it."""

    copied = 0

    def __radd__(self, other: str) -> str:
        Piece.copied += len(other)
        return str.__add__(other, self)


DELTAS = 2000


def _grown(provider: str) -> tuple[list[dict[str, Any]], str]:
    """A stream whose one long text (Anthropic thinking, chat arguments, Gemini text) comes in DELTAS pieces."""
    if provider == "anthropic":
        start = {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}
        pieces = [
            {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": Piece("abcd")}}
            for _ in range(DELTAS)
        ]
        return message(start, *pieces, block_stop(0)), "abcd" * DELTAS
    if provider == "openai_chat":
        arguments = '{"city": "' + "o" * (4 * DELTAS) + '"}'
        first = _chunk({"index": 0, "id": "call_a", "type": "function", "function": {"name": "get_weather"}})
        pieces = [
            _chunk({"index": 0, "function": {"arguments": Piece(arguments[at : at + 4])}})
            for at in range(0, len(arguments), 4)
        ]
        return [first, *pieces, _chunk(None, "tool_calls")], arguments
    chunks = [
        {"candidates": [{"content": {"role": "model", "parts": [{"text": Piece("abcd")}]}}]} for _ in range(DELTAS)
    ]
    chunks.append({"candidates": [{"content": {"role": "model", "parts": [{"text": "!"}]}, "finishReason": "STOP"}]})
    return chunks, "abcd" * DELTAS + "!"


@pytest.mark.parametrize("provider", ["anthropic", "openai_chat", "gemini"])
async def test_a_long_text_streamed_in_many_deltas_is_joined_once_not_copied_at_each(provider: str) -> None:
    events, whole = _grown(provider)
    Piece.copied = 0
    execution = await MODULES[provider].execute_stream(ts.Executor(weather([])), events)
    assembled = {
        "anthropic": lambda turn: turn["content"][0]["thinking"],
        "openai_chat": lambda turn: turn["tool_calls"][0]["function"]["arguments"],
        "gemini": lambda turn: turn["parts"][0]["text"],
    }[provider](execution.assistant)
    assert assembled == whole
    # Grown by `+` at every delta, the text would be copied DELTAS / 2 times over (millions of characters).
    assert Piece.copied <= len(whole)
