"""Hostile streams and replies for the provider doors: pieces of the wrong shape, events out of order, a
consumer that gives up.

A streamed turn is answered whole (every call run with the arguments the model gave, answered once, in the
turn's order) or refused with a typed error (``ResponseFormatError`` or ``IncompleteStreamError`` as the
cause of ``StreamFailed``), as the whole response would be: never a call run with arguments the stream lost,
never a call the model did not make.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import anyio
import pytest
from anthropic_events import block_stop, message, tool_use
from sdk_clients import MODULES, PROVIDERS, Client, reply_of
from weather import weather

import toolsched as ts
from toolsched.providers import anthropic as ts_anthropic
from toolsched.providers import gemini as ts_gemini
from toolsched.providers import openai_chat as ts_chat
from toolsched.providers import openai_responses as ts_responses
from toolsched.testing import Reply, ScriptedProvider, ToolUse, response_body, stream_events

pytestmark = pytest.mark.anyio


# --- OpenAI Chat: tool call deltas that are no list of objects --------------------------------------------


def _chunk(tool_calls: Any = None, finish: str | None = None, *, delta: Any = None) -> dict[str, Any]:
    if delta is None:
        delta = {} if tool_calls is None else {"tool_calls": tool_calls}
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


OSLO = {"index": 0, "id": "call_oslo", "type": "function", "function": {"name": "get_weather", "arguments": ""}}


@pytest.mark.parametrize(
    "tool_calls",
    [
        {"index": 0, "id": "call_oslo", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
        "get_weather",
        [None],
        [3],
        [["get_weather"]],
    ],
    ids=["one-object", "text", "none", "number", "list"],
)
async def test_chat_tool_call_deltas_that_are_no_list_of_objects_break_the_stream_as_the_whole_reply_would(
    tool_calls: Any,
) -> None:
    ran: list[str] = []
    whole = {"role": "assistant", "tool_calls": tool_calls}
    with pytest.raises(ts.ResponseFormatError):
        ts_chat.calls_from(whole)
    with pytest.raises(ts.StreamFailed) as raised:
        await ts_chat.execute_stream(ts.Executor(weather(ran)), [_chunk(tool_calls), _chunk(None, "tool_calls")])
    assert isinstance(raised.value.__cause__, ts.ResponseFormatError)
    assert raised.value.outcome.results == []
    assert ran == []


@pytest.mark.parametrize("delta", ["Oslo is sunny", 7, ["text"]], ids=["text", "number", "list"])
async def test_chat_a_delta_that_is_no_object_breaks_the_stream(delta: Any) -> None:
    with pytest.raises(ts.StreamFailed) as raised:
        await ts_chat.execute_stream(ts.Executor(weather([])), [_chunk(delta=delta), _chunk(None, "stop")])
    assert isinstance(raised.value.__cause__, ts.ResponseFormatError)


async def test_chat_arguments_split_at_every_character_run_as_the_model_wrote_them() -> None:
    ran: list[str] = []
    text = '{"city": "Z\u00fcrich \U0001f600"}'
    chunks = [_chunk([OSLO])]
    chunks += [_chunk([{"index": 0, "function": {"arguments": piece}}]) for piece in text]
    chunks.append(_chunk(None, "tool_calls"))
    execution = await ts_chat.execute_stream(ts.Executor(weather(ran)), chunks)
    assert ran == ["Z\u00fcrich \U0001f600"]
    assert execution.assistant["tool_calls"][0]["function"]["arguments"] == text


# --- Anthropic: a delta that is no object -------------------------------------------------------------------


@pytest.mark.parametrize("delta", ['{"city": "Oslo"}', 7, ['{"city": "Oslo"}']], ids=["text", "number", "list"])
async def test_anthropic_a_delta_that_is_no_object_breaks_the_stream_not_the_calls_input(delta: Any) -> None:
    ran: list[str] = []

    @ts.tool(read_only=True)
    async def get_weather(city: str = "here") -> str:
        """Current weather (here when no city is given)."""
        ran.append(city)
        return city

    events = message(tool_use(0, "toolu_1"), {"type": "content_block_delta", "index": 0, "delta": delta}, block_stop(0))
    with pytest.raises(ts.StreamFailed) as raised:
        await ts_anthropic.execute_stream(ts.Executor([get_weather]), events)
    assert isinstance(raised.value.__cause__, ts.ResponseFormatError)
    # The call never ran with the input the broken delta lost (its default, "here").
    assert ran == []


@pytest.mark.parametrize("index", [[0], {"at": 0}, "0", None, True], ids=["list", "dict", "text", "none", "bool"])
@pytest.mark.parametrize("kind", ["content_block_delta", "content_block_stop"])
async def test_anthropic_a_block_event_without_an_integer_index_breaks_the_stream_with_a_typed_error(
    index: Any, kind: str
) -> None:
    ran: list[str] = []
    event: dict[str, Any] = {"type": kind, "index": index}
    if kind == "content_block_delta":
        event["delta"] = {"type": "input_json_delta", "partial_json": '{"city": "Oslo"}'}
    events = message(
        tool_use(0, "toolu_0"), tool_use(1, "toolu_1", {"city": "Bern"}), event, block_stop(0), block_stop(1)
    )
    with pytest.raises(ts.StreamFailed) as raised:
        await ts_anthropic.execute_stream(ts.Executor(weather(ran)), events)
    # A list or a dict there was looked up as a block and raised TypeError; True was taken for block 1.
    assert isinstance(raised.value.__cause__, ts.ResponseFormatError)
    assert ran == []


async def test_anthropic_an_assembler_that_read_a_stream_is_refused_for_the_next_not_handed_the_first_turn_again() -> (
    None
):
    ran: list[str] = []
    reader = ts_anthropic.MessageAssembler()
    oslo = message(tool_use(0, "toolu_oslo", {"city": "Oslo"}), block_stop(0))
    first = await ts_anthropic.execute_stream(ts.Executor(weather(ran)), oslo, assembler=reader)
    assert reader.stop_reason == "tool_use" and [call.id for call in first.calls] == ["toolu_oslo"]
    bern = message(tool_use(0, "toolu_bern", {"city": "Bern"}), block_stop(0))
    # Read by the same assembler, the second turn was taken as the rest of the first: Bern's call was dropped
    # and the first turn's message handed back as the second's, with no reply.
    with pytest.raises(ts.OptionError, match="new MessageAssembler"):
        await ts_anthropic.execute_stream(ts.Executor(weather(ran)), bern, assembler=reader)
    second = await ts_anthropic.execute_stream(
        ts.Executor(weather(ran)), bern, assembler=ts_anthropic.MessageAssembler()
    )
    assert [call.id for call in second.calls] == ["toolu_bern"]
    assert ran == ["Oslo", "Bern"]


# --- OpenAI Responses: items done out of their output order ---------------------------------------------------


def _call(call_id: str, city: str) -> dict[str, Any]:
    arguments = '{"city": "' + city + '"}'
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": "get_weather",
        "arguments": arguments,
    }


def _done(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.done", "output_index": index, "item": item}


async def test_responses_calls_done_out_of_output_order_match_the_final_output_in_its_order() -> None:
    ran: list[str] = []
    oslo, bern = _call("call_oslo", "Oslo"), _call("call_bern", "Bern")
    events = [
        _done(1, bern),
        _done(0, oslo),
        {"type": "response.completed", "response": {"output": [dict(oslo), dict(bern)]}},
    ]
    execution = await ts_responses.execute_stream(ts.Executor(weather(ran)), events)
    assert sorted(ran) == ["Bern", "Oslo"]
    assert [call.id for call in execution.calls] == ["call_oslo", "call_bern"]
    assert [item["call_id"] for item in execution.items] == ["call_oslo", "call_bern"]
    assert [item["call_id"] for item in execution.assistant] == ["call_oslo", "call_bern"]


async def test_responses_a_final_output_in_another_order_than_the_output_indexes_still_breaks_the_stream() -> None:
    oslo, bern = _call("call_oslo", "Oslo"), _call("call_bern", "Bern")
    events = [
        _done(0, oslo),
        _done(1, bern),
        {"type": "response.completed", "response": {"output": [dict(bern), dict(oslo)]}},
    ]
    with pytest.raises(ts.StreamFailed) as raised:
        await ts_responses.execute_stream(ts.Executor(weather([])), events)
    assert isinstance(raised.value.__cause__, ts.ResponseFormatError)


@pytest.mark.parametrize("index", [[1], {"at": 1}, "1", None], ids=["list", "dict", "text", "none"])
async def test_responses_an_output_index_that_is_no_integer_places_the_item_after_the_others(index: Any) -> None:
    ran: list[str] = []
    oslo, bern = _call("call_oslo", "Oslo"), _call("call_bern", "Bern")
    events = [
        {"type": "response.output_item.added", "output_index": index, "item": dict(bern, status="in_progress")},
        _done(0, oslo),
        {"type": "response.output_item.done", "output_index": index, "item": bern},
        {"type": "response.completed", "response": {"id": "resp_1"}},
    ]
    # A list or a dict as the index raised TypeError (no ResponseFormatError: the stream is whole).
    execution = await ts_responses.execute_stream(ts.Executor(weather(ran)), events)
    assert sorted(ran) == ["Bern", "Oslo"]
    assert [item["call_id"] for item in execution.items] == ["call_oslo", "call_bern"]


# --- Gemini: a part that is no object -------------------------------------------------------------------------


def _chunk_of(parts: list[Any], finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}}
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate]}


@pytest.mark.parametrize("part", ["It is sunny.", None, 7], ids=["text", "none", "number"])
async def test_gemini_a_streamed_part_that_is_no_object_breaks_the_stream_as_the_whole_reply_would(part: Any) -> None:
    ran: list[str] = []
    oslo = {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}, "id": "g1"}}
    with pytest.raises(ts.ResponseFormatError):
        ts_gemini.calls_from(_chunk_of([part, oslo]))
    with pytest.raises(ts.StreamFailed) as raised:
        await ts_gemini.execute_stream(ts.Executor(weather(ran)), [_chunk_of([part, oslo]), _chunk_of([], "STOP")])
    assert isinstance(raised.value.__cause__, ts.ResponseFormatError)
    assert ran == []


# --- What is no stream ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_what_is_no_stream_is_refused_before_anything_is_read_not_reported_as_a_broken_one(provider: str) -> None:
    # A StreamFailed asks the caller to send the request again: for a coroutine never awaited, a stream manager
    # never entered or a whole response, every retry would "break" the same way.
    module = MODULES[provider]
    with ScriptedProvider([Reply(text="It is sunny.")] * 2) as scripted:
        async with Client(provider, scripted.url) as client:
            pending = client.stream()
            with pytest.raises(ts.OptionError, match="await it first"):
                await module.execute_stream(ts.Executor(weather([])), pending)
            whole = await pending
            async for _ in whole:
                pass
            if provider == "anthropic":
                manager = client.sdk.messages.stream(
                    model="m", max_tokens=99, messages=[{"role": "user", "content": "hi"}]
                )
                with pytest.raises(ts.OptionError, match="enter it first"):
                    await module.execute_stream(ts.Executor(weather([])), manager)
    body = response_body(provider, Reply(tool_uses=[ToolUse("get_weather", {"city": "Oslo"})]))
    for value in (body, None, 7):
        with pytest.raises(ts.OptionError, match="stream of events"):
            await module.execute_stream(ts.Executor(weather([])), value)


# --- Resuming with the state of another execution ------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_execution_resumed_with_another_executions_state_is_refused_not_answered_with_its_results(
    provider: str,
) -> None:
    ran: list[str] = []

    @ts.tool(needs_approval=True)
    async def get_weather(city: str) -> str:
        """Current weather for a city (asks first)."""
        ran.append(city)
        return f"{city}: 18°C"

    executor = ts.Executor([get_weather])
    module = MODULES[provider]

    def asking(city: str) -> Any:
        # Both turns use the same call ID, as a model that numbers its calls from 0 in every response does.
        return response_body(provider, Reply(tool_uses=[ToolUse("get_weather", {"city": city}, id="call_0")]))

    oslo = await module.execute(executor, asking("Oslo"))
    bern = await module.execute(executor, asking("Bern"))
    state = bern.outcome.state
    state.approve("call_0")
    # Bern's result answered Oslo's call: the model was told Oslo is "Bern: 18°C".
    with pytest.raises(ts.StateError, match="not the one of this execution"):
        await module.resume(executor, oslo, state)
    assert ran == []
    # Its own state, saved and read back, resumes it.
    own = oslo.outcome.state
    own.approve("call_0")
    finished = await module.resume(executor, oslo, ts.RunState.from_json(own.to_json()))
    assert ran == ["Oslo"]
    assert "Oslo: 18°C" in str(reply_of(provider, finished))


# --- Which choice or candidate --------------------------------------------------------------------------------


@pytest.mark.parametrize("position", ["0", True, 0.0, None, -1], ids=["text", "bool", "float", "none", "negative"])
@pytest.mark.parametrize("provider", ["openai_chat", "gemini"])
async def test_a_choice_or_candidate_that_is_no_whole_number_is_refused_whole_or_streamed(
    provider: str, position: Any
) -> None:
    # Text raised a bare TypeError on a whole response, and a stream skipped every chunk of a choice "0" and
    # "broke" (StreamFailed, asking for the request again); True read choice 1.
    module = MODULES[provider]
    keyword = "choice" if provider == "openai_chat" else "candidate"
    reply = Reply(tool_uses=[ToolUse("get_weather", {"city": "Oslo"}, id="call_oslo")])
    whole, events = response_body(provider, reply), [data for _, _, data in stream_events(provider, reply)]
    with pytest.raises(ts.OptionError, match=f"{keyword} must be a whole number"):
        await module.execute(ts.Executor(weather([])), whole, **{keyword: position})
    with pytest.raises(ts.OptionError, match=f"{keyword} must be a whole number"):
        await module.execute_stream(ts.Executor(weather([])), events, **{keyword: position})
    execution = await module.execute_stream(ts.Executor(weather([])), events, **{keyword: 0})
    assert [result.output for result in execution.results] == ["Oslo: 18°C"]


# --- Streams mutated at random ----------------------------------------------------------------------------------

HOSTILE: list[Any] = [None, 7, "x", [], {}, True, -1, 1.5, "\ud800"]


def _mutated(events: list[Any], rng: random.Random) -> list[Any]:
    """``events`` with one to three changes: an event dropped, repeated or swapped with the next, or one value in
    it (at any depth) replaced by a hostile one."""
    events = copy.deepcopy(events)
    for _ in range(rng.randint(1, 3)):
        position = rng.randrange(len(events))
        change = rng.choice(["drop", "repeat", "swap", "value"])
        if change == "drop":
            events.pop(position)
        elif change == "repeat":
            events.insert(position, copy.deepcopy(events[position]))
        elif change == "swap" and position + 1 < len(events):
            events[position], events[position + 1] = events[position + 1], events[position]
        elif change == "value":
            node: Any = events[position]
            while isinstance(node, (dict, list)) and node:
                key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
                if isinstance(node[key], (dict, list)) and node[key] and rng.random() < 0.7:
                    node = node[key]
                else:
                    node[key] = rng.choice(HOSTILE)
                    break
    return events


MUTATED = Reply(
    text="Let me see.",
    tool_uses=[
        ToolUse("get_weather", {"city": "Paris"}, id="call_paris"),
        ToolUse("get_weather", {"city": "Lyon"}, id="call_lyon"),
        ToolUse("get_weather", {"city": "Rome"}, send_id=False),
    ],
    token_chars=2,
)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_stream_mutated_at_random_is_a_whole_turn_answered_once_per_call_or_a_typed_refusal(
    provider: str,
) -> None:
    rng = random.Random(1)
    events = [data for _, _, data in stream_events(provider, MUTATED)]
    for _ in range(300):
        stream = _mutated(events, rng)
        try:
            with anyio.fail_after(10):
                execution = await MODULES[provider].execute_stream(ts.Executor(weather([])), stream)
        except ts.StreamFailed as failed:
            assert isinstance(failed.__cause__, (ts.ResponseFormatError, ts.IncompleteStreamError)), stream
            continue
        answered = [result.call_id for result in execution.results]
        assert answered == list(dict.fromkeys(call.id for call in execution.calls)), stream
