"""A streamed answer is a whole turn only once its final event came; anything else is a broken stream.

For every API, a stream cut at each event boundary (the body ending early, or the connection dropping)
either gives a whole turn whose every call is answered, or raises ``StreamFailed`` (``IncompleteStreamError``
as the cause when the stream simply ended) with a result for exactly the calls complete before the cut,
and no reply. The official SDK clients read the streams over HTTP from a scripted provider on 127.0.0.1;
raw event dicts are fed as well.
"""

from __future__ import annotations

import copy
import json
import logging
import re
import threading
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from sdk_clients import MODULES, PROVIDERS, Client

import toolsched as ts
from toolsched.providers import anthropic as ts_anthropic
from toolsched.providers import gemini as ts_gemini
from toolsched.providers import openai_chat as ts_chat
from toolsched.providers import openai_responses as ts_responses
from toolsched.testing import Reply, ScriptedProvider, ToolUse, stream_events

pytestmark = pytest.mark.anyio

REPLY = {
    "anthropic": lambda e: [b["tool_use_id"] for b in e.message["content"]],
    "openai_responses": lambda e: [item["call_id"] for item in e.items],
    "openai_chat": lambda e: [m["tool_call_id"] for m in e.messages],
    "gemini": lambda e: [p["functionResponse"]["id"] for p in e.content["parts"]],
}

TURN = Reply(
    text="Let me look both up.",
    tool_uses=[
        ToolUse("get_weather", {"city": "Paris"}, id="call_paris"),
        ToolUse("get_weather", {"city": "London"}, id="call_london"),
    ],
    token_chars=3,
)
# The same answer in few events (each argument in one piece): cheap to cut at every boundary over HTTP.
COMPACT = Reply(
    text="ok",
    tool_uses=[
        ToolUse("get_weather", {"city": "Oslo"}, id="call_oslo"),
        ToolUse("get_weather", {"city": "Bern"}, id="call_bern"),
    ],
    token_chars=64,
)


COMPACT_AB = Reply(
    tool_uses=[
        ToolUse("get_weather", {"city": "Oslo"}, id="call_a"),
        ToolUse("get_weather", {"city": "Bern"}, id="call_b"),
    ],
    token_chars=64,
)


def weather(ran: list[str], started: dict[str, threading.Event] | None = None) -> list[ts.Tool]:
    @ts.tool(read_only=True, concurrency_safe=True)
    async def get_weather(city: str) -> str:
        """Current weather for a city."""
        if started is not None and city in started:
            started[city].set()
        ran.append(city)
        await anyio.sleep(0.01)
        return f"{city}: 18°C"

    return [get_weather]


def data_of(provider: str, turn: Reply) -> list[Any]:
    """The turn's events as the raw dicts (and text) of their SSE ``data``."""
    return [data for _, _, data in stream_events(provider, turn)]


def completion(provider: str, events: list[Any]) -> tuple[dict[str, int], int]:
    """The position of the event that completes each call, and of the provider's final event."""
    complete: dict[str, int] = {}
    final = -1
    open_call: str | None = None
    blocks: dict[int, str] = {}
    for position, data in enumerate(events):
        if not isinstance(data, dict):
            continue
        kind = data.get("type")
        if provider == "anthropic":
            if kind == "content_block_start" and data["content_block"]["type"] == "tool_use":
                blocks[data["index"]] = data["content_block"]["id"]
            elif kind == "content_block_stop" and data["index"] in blocks:
                complete[blocks[data["index"]]] = position
            elif kind == "message_stop":
                final = position
        elif provider == "openai_responses":
            if kind == "response.output_item.done" and data["item"]["type"] == "function_call":
                complete[data["item"]["call_id"]] = position
            elif kind == "response.completed":
                final = position
        elif provider == "openai_chat":
            choice = data["choices"][0]
            for part in choice["delta"].get("tool_calls", ()):
                if "id" in part:
                    if open_call is not None:
                        complete[open_call] = position
                    open_call = part["id"]
            if choice["finish_reason"] is not None:
                if open_call is not None:
                    complete[open_call] = position
                final = position
        else:
            candidate = data["candidates"][0]
            for part in candidate["content"]["parts"]:
                if "functionCall" in part:
                    complete[part["functionCall"]["id"]] = position
            if "finishReason" in candidate:
                final = position
    assert final >= 0
    return complete, final


async def _check_cut(provider: str, events: list[Any], cut: int, order: list[str], stream: Any) -> None:
    """The outcome of a stream cut after ``cut`` events: a whole turn past the final event, else a broken one."""
    complete, final = completion(provider, events)
    module = MODULES[provider]
    executor = ts.Executor(weather([]))
    if cut > final:
        execution = await module.execute_stream(executor, stream)
        assert [call.id for call in execution.calls] == order
        assert REPLY[provider](execution) == order
        assert [call.id for call in module.calls_from(execution.assistant)] == order
        assert all(not result.is_error for result in execution.results)
        return
    with pytest.raises(ts.StreamFailed) as raised:
        await module.execute_stream(executor, stream)
    assert [result.call_id for result in raised.value.outcome.results] == [
        call_id for call_id in order if complete[call_id] < cut
    ], f"cut after {cut} events"
    assert raised.value.__cause__ is not None


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_raw_events_cut_at_every_boundary_give_a_whole_turn_or_a_broken_stream(provider: str) -> None:
    events = data_of(provider, TURN)
    _, final = completion(provider, events)
    for cut in range(len(events) + 1):
        await _check_cut(provider, events, cut, ["call_paris", "call_london"], copy.deepcopy(events[:cut]))
        if cut <= final:
            # Ended before its final event: IncompleteStreamError says so.
            with pytest.raises(ts.StreamFailed) as raised:
                await MODULES[provider].execute_stream(ts.Executor(weather([])), copy.deepcopy(events[:cut]))
            assert isinstance(raised.value.__cause__, ts.IncompleteStreamError)
            assert raised.value.__cause__.provider == MODULES[provider].PROVIDER


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("mode", ["ends", "drops"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_sdk_stream_cut_at_every_boundary_gives_a_whole_turn_or_a_broken_stream(
    provider: str, mode: str
) -> None:
    framed = stream_events(provider, COMPACT)
    events = [data for _, _, data in framed]
    cuts = list(range(len(events) + 1))
    option = "end_after" if mode == "ends" else "break_after"
    with ScriptedProvider([framed] * len(cuts), **{option: dict(enumerate(cuts))}) as scripted:
        async with Client(provider, scripted.url) as client:
            for cut in cuts:
                with anyio.fail_after(30):
                    await _check_cut(provider, events, cut, ["call_oslo", "call_bern"], await client.stream())


def _second_call_begun(provider: str, events: list[Any]) -> int:
    """The number of events up to the first piece of the second call's arguments (Gemini: its first call)."""
    if provider == "gemini":
        return next(i for i, data in enumerate(events) if "call_paris" in str(data)) + 1
    begun = next(i for i, data in enumerate(events) if "call_london" in str(data))
    return begun + 2


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_stream_that_ends_inside_a_tool_call_is_broken_and_keeps_the_finished_call(provider: str) -> None:
    started = {"Paris": threading.Event()}
    ran: list[str] = []
    events = data_of(provider, TURN)
    end = _second_call_begun(provider, events)
    answers = [stream_events(provider, TURN)]
    with ScriptedProvider(answers, end_after={0: end}, gates={0: started["Paris"]}) as scripted:
        async with Client(provider, scripted.url) as client:
            with anyio.fail_after(30), pytest.raises(ts.StreamFailed) as raised:
                await MODULES[provider].execute_stream(ts.Executor(weather(ran, started)), await client.stream())
    cause = raised.value.__cause__
    assert isinstance(cause, ts.IncompleteStreamError)
    assert "ended before" in str(cause)
    if provider != "gemini":
        assert "cut off" in str(cause)
    # The call that was complete ran to its end (interrupt_behavior "block"); the cut one never started.
    assert [(r.call_id, r.output) for r in raised.value.outcome.results] == [("call_paris", "Paris: 18°C")]
    assert ran == ["Paris"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_streaming_loop_never_sends_back_a_turn_cut_inside_a_call(provider: str) -> None:
    started = {"Paris": threading.Event()}
    events = data_of(provider, TURN)
    answers = [stream_events(provider, TURN), stream_events(provider, Reply(text="Nice weather."))]
    end = {0: _second_call_begun(provider, events)}
    with ScriptedProvider(answers, end_after=end, gates={0: started["Paris"]}) as scripted:
        async with Client(provider, scripted.url) as client:
            with anyio.fail_after(30), pytest.raises(ts.StreamFailed) as raised:
                await client.loop(ts.Executor(weather([], started)), "weather?")
    assert len(scripted.requests) == 1
    assert isinstance(raised.value.__cause__, ts.IncompleteStreamError)
    assert [r.call_id for r in raised.value.outcome.results] == ["call_paris"]
    # The conversation before the broken request: the question alone, ready to be sent again.
    assert raised.value.history is not None and len(raised.value.history) == 1
    assert "weather?" in json.dumps(raised.value.history)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_loop_broken_in_its_second_turn_hands_back_the_first_turn_answered(provider: str) -> None:
    ran: list[str] = []
    second = Reply(tool_uses=[ToolUse("get_weather", {"city": "Rome"}, id="call_rome")])
    answers = [stream_events(provider, TURN), stream_events(provider, second)]
    with ScriptedProvider(answers, break_after={1: 0}) as scripted:
        async with Client(provider, scripted.url) as client:
            with anyio.fail_after(30), pytest.raises(ts.StreamFailed) as raised:
                await client.loop(ts.Executor(weather(ran)), "weather?")
    assert sorted(ran) == ["London", "Paris"]
    history = raised.value.history
    assert history is not None
    assert {"anthropic": 3, "openai_responses": 6, "openai_chat": 4, "gemini": 3}[provider] == len(history)
    # Every call of the first turn is in it, answered, exactly as the second request sent it.
    sent = json.loads(json.dumps(scripted.requests[1].body))
    key = {"anthropic": "messages", "openai_responses": "input", "openai_chat": "messages", "gemini": "contents"}
    kept = json.loads(json.dumps(history, default=_plain))
    # The Gemini SDK sends the snake_case fields of its objects in camelCase.
    assert (_camel(kept) if provider == "gemini" else kept) == sent[key[provider]]


def _plain(value: Any) -> Any:
    return value.model_dump(mode="json", exclude_none=True) if hasattr(value, "model_dump") else str(value)


def _camel(value: Any) -> Any:
    if isinstance(value, dict):
        return {re.sub(r"_([a-z])", lambda m: m[1].upper(), key): _camel(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_camel(item) for item in value]
    return value


# -- the provider's error event, and failures after the final event -----------------------------------


def _error_events(provider: str) -> list[Any]:
    """The events up to a first complete call, then the provider's error event in the middle of the answer."""
    events = data_of(provider, COMPACT_AB)
    complete, _ = completion(provider, events)
    head = events[: complete["call_a"] + 1]
    if provider == "anthropic":
        return [*head, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded now"}}]
    if provider == "openai_responses":
        return [*head, {"type": "error", "code": "server_error", "message": "Overloaded now", "sequence_number": 99}]
    if provider == "openai_chat":
        return [*head, {"error": {"message": "Overloaded now", "type": "server_error"}}]
    return [*head, {"error": {"code": 503, "message": "Overloaded now", "status": "UNAVAILABLE"}}]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_the_providers_error_event_breaks_the_stream(provider: str) -> None:
    with pytest.raises(ts.StreamFailed) as raised:
        await MODULES[provider].execute_stream(ts.Executor(weather([])), _error_events(provider))
    cause = raised.value.__cause__
    assert isinstance(cause, ts.IncompleteStreamError) and "Overloaded now" in str(cause)
    assert [r.call_id for r in raised.value.outcome.results] == ["call_a"]


async def test_a_failed_responses_answer_breaks_the_stream() -> None:
    events = data_of("openai_responses", Reply(tool_uses=[ToolUse("get_weather", {"city": "Oslo"}, id="call_a")]))
    failed = {
        "type": "response.failed",
        "sequence_number": 50,
        "response": {"status": "failed", "error": {"code": "server_error", "message": "model crashed"}},
    }
    with pytest.raises(ts.StreamFailed) as raised:
        await ts_responses.execute_stream(ts.Executor(weather([])), [*events[:-1], failed])
    assert "model crashed" in str(raised.value.__cause__)
    assert [r.call_id for r in raised.value.outcome.results] == ["call_a"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_sdk_stream_with_an_error_event_breaks_and_keeps_the_finished_call(provider: str) -> None:
    framed: list[Any] = [(0.0, None, data) for data in _error_events(provider)]
    if provider == "anthropic":
        framed = [(0.0, data.get("type"), data) for _, _, data in framed]
    with ScriptedProvider([framed]) as scripted:
        async with Client(provider, scripted.url) as client:
            stream = await client.stream()
            with anyio.fail_after(30), pytest.raises(ts.StreamFailed) as raised:
                await MODULES[provider].execute_stream(ts.Executor(weather([])), stream)
    # The SDK raises its own error for some APIs; the others hand the event over.
    assert "Overloaded now" in str(raised.value.__cause__) or "Overloaded now" in repr(raised.value.__cause__.__dict__)
    assert [r.call_id for r in raised.value.outcome.results] == ["call_a"]


async def _failing_after(events: list[Any], error: Exception) -> AsyncIterator[Any]:
    for event in events:
        yield event
        await anyio.lowlevel.checkpoint()
    raise error


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_transport_failure_after_the_final_event_loses_nothing(
    provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    events = data_of(provider, TURN)
    _, final = completion(provider, events)
    with caplog.at_level(logging.WARNING, logger="toolsched.providers"):
        execution = await MODULES[provider].execute_stream(
            ts.Executor(weather([])), _failing_after(events[: final + 1], ConnectionResetError("peer went away"))
        )
    assert REPLY[provider](execution) == ["call_paris", "call_london"]
    assert any("peer went away" in record.getMessage() for record in caplog.records)
    # The same failure one event earlier breaks the stream, with that error as its cause.
    with pytest.raises(ts.StreamFailed) as raised:
        await MODULES[provider].execute_stream(
            ts.Executor(weather([])), _failing_after(events[:final], ConnectionResetError("peer went away"))
        )
    assert isinstance(raised.value.__cause__, ConnectionResetError)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_executor_with_batch_hooks_answers_the_complete_calls_of_a_broken_stream_without_running_them(
    provider: str,
) -> None:
    ran: list[str] = []
    batches: list[Any] = []
    executor = ts.Executor(weather(ran), hooks=ts.Hooks().pre_batch("*", batches.append))
    assert not executor.streams
    events = data_of(provider, TURN)
    with pytest.raises(ts.StreamFailed) as raised:
        await MODULES[provider].execute_stream(executor, events[: _second_call_begun(provider, events)])
    assert isinstance(raised.value.__cause__, ts.IncompleteStreamError)
    # The call complete before the cut is answered (not run: its batch never formed), as run() answers it.
    results = raised.value.outcome.results
    assert [(r.call_id, r.tool_name, r.error_kind) for r in results] == [("call_paris", "get_weather", "skipped")]
    assert "the stream of calls broke" in (results[0].error or "")
    assert ran == [] and batches == []


@pytest.mark.parametrize("batch_hooks", [False, True])
async def test_a_broken_stream_answers_calls_complete_out_of_order_in_the_model_order(batch_hooks: bool) -> None:
    # Block 0 (call_a) stops after block 1 (call_b); the connection drops before `message_stop`.
    events = data_of("anthropic", COMPACT_AB)
    start_a, delta_a, stop_a, start_b, delta_b, stop_b = events[1:7]
    interleaved = [events[0], start_a, delta_a, start_b, delta_b, stop_b, stop_a]
    ran: list[str] = []
    both_ran = anyio.Event()

    @ts.tool(read_only=True, concurrency_safe=True)
    async def get_weather(city: str) -> str:
        ran.append(city)
        if len(ran) == 2:
            both_ran.set()
        return f"{city}: 18°C"

    hooks = ts.Hooks().pre_batch("*", lambda event: None) if batch_hooks else None
    executor = ts.Executor([get_weather], hooks=hooks)

    async def dropped() -> AsyncIterator[Any]:
        for event in interleaved:
            yield event
        if not batch_hooks:
            # Both calls ran before the connection drops.
            with anyio.fail_after(10):
                await both_ran.wait()
        raise ConnectionResetError("reset")

    with pytest.raises(ts.StreamFailed) as raised:
        await ts_anthropic.execute_stream(executor, dropped())
    assert isinstance(raised.value.__cause__, ConnectionResetError)
    results = raised.value.outcome.results
    assert [result.call_id for result in results] == ["call_a", "call_b"]
    if batch_hooks:
        assert [result.error_kind for result in results] == ["skipped", "skipped"] and ran == []
    else:
        assert [result.output for result in results] == ["Oslo: 18°C", "Bern: 18°C"]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_empty_stream_is_no_answer(provider: str) -> None:
    with pytest.raises(ts.StreamFailed) as raised:
        await MODULES[provider].execute_stream(ts.Executor(weather([])), [])
    assert isinstance(raised.value.__cause__, ts.IncompleteStreamError)


# -- what each API can do wrong in a stream -------------------------------------------------------------


async def test_anthropic_blocks_stopped_twice_or_after_the_message_count_once() -> None:
    events = data_of("anthropic", TURN)
    stops = [i for i, data in enumerate(events) if data.get("type") == "content_block_stop"]
    doubled = [*events[: stops[1] + 1], copy.deepcopy(events[stops[1]]), *events[stops[1] + 1 :]]
    late = [*events, {"type": "content_block_start", "index": 9, "content_block": {"type": "tool_use", "id": "late"}}]
    for stream in (doubled, late):
        execution = await ts_anthropic.execute_stream(ts.Executor(weather([])), copy.deepcopy(stream))
        assert REPLY["anthropic"](execution) == ["call_paris", "call_london"]
        assert [b.get("id") for b in execution.assistant["content"] if b["type"] == "tool_use"] == [
            "call_paris",
            "call_london",
        ]


async def test_anthropic_block_started_twice_breaks_the_stream() -> None:
    events = data_of("anthropic", TURN)
    first = next(i for i, data in enumerate(events) if "call_paris" in str(data))
    again = copy.deepcopy(events[first])
    again["content_block"]["id"] = "call_other"
    with pytest.raises(ts.StreamFailed) as raised:
        await ts_anthropic.execute_stream(ts.Executor(weather([])), [*events[: first + 1], again, *events[first + 1 :]])
    assert isinstance(raised.value.__cause__, ts.ResponseFormatError)
    assert "started twice" in str(raised.value.__cause__)


async def test_anthropic_message_stop_with_a_tool_use_still_open_is_incomplete() -> None:
    events = data_of("anthropic", TURN)
    last_stop = max(i for i, data in enumerate(events) if data.get("type") == "content_block_stop")
    with pytest.raises(ts.StreamFailed) as raised:
        await ts_anthropic.execute_stream(ts.Executor(weather([])), events[:last_stop] + events[last_stop + 1 :])
    assert isinstance(raised.value.__cause__, ts.IncompleteStreamError)
    assert "call_london" in str(raised.value.__cause__)
    assert [r.call_id for r in raised.value.outcome.results] == ["call_paris"]


async def test_anthropic_max_tokens_inside_a_call_answers_it_invalid_and_pairs() -> None:
    events = data_of("anthropic", TURN)
    # The model ran out of tokens in London's arguments: its block still stops, with the JSON cut.
    begun = next(i for i, data in enumerate(events) if "call_london" in str(data))
    stop = next(i for i in range(begun, len(events)) if events[i].get("type") == "content_block_stop")
    cut = [*events[: begun + 2], *events[stop:]]
    for data in cut:
        if data.get("type") == "message_delta":
            data["delta"]["stop_reason"] = "max_tokens"
    execution = await ts_anthropic.execute_stream(ts.Executor(weather([])), cut)
    assert REPLY["anthropic"](execution) == ["call_paris", "call_london"]
    assert execution.results[1].error_kind == "invalid_input"
    assert execution.assistant["content"][2]["input"] == {}


async def test_chat_deltas_interleaved_between_calls_break_the_stream() -> None:
    events = data_of("openai_chat", TURN)
    paris_args = [i for i, d in enumerate(events) if _chat_part(d, "index") == 0 and "id" not in _chat_part(d)]
    london_open = next(i for i, d in enumerate(events) if _chat_part(d).get("id") == "call_london")
    # The last piece of Paris's arguments arrives after London began.
    late = paris_args[-1]
    mixed = [*events[:late], *events[late + 1 : london_open + 1], events[late], *events[london_open + 1 :]]
    with pytest.raises(ts.StreamFailed) as raised:
        await ts_chat.execute_stream(ts.Executor(weather([])), mixed)
    assert isinstance(raised.value.__cause__, ts.ResponseFormatError)
    assert "changed after a later call began" in str(raised.value.__cause__)


def _chat_part(data: Any, key: str | None = None) -> Any:
    if not isinstance(data, dict):
        return {} if key is None else None
    parts = data["choices"][0]["delta"].get("tool_calls") or [{}]
    return parts[0] if key is None else parts[0].get(key)


async def test_chat_deltas_without_an_index_or_with_the_name_repeated_make_one_call_each() -> None:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def piece(text: str, **extra: Any) -> dict[str, Any]:
        # No index, and the name in every delta (as some OpenAI-compatible servers send them).
        return chunk({"tool_calls": [{**extra, "function": {"name": "get_weather", "arguments": text}}]})

    stream = [
        piece("", id="call_a", type="function"),
        piece('{"city": '),
        piece('"Oslo"}'),
        piece("", id="call_b", type="function"),
        piece('{"city": "Bern"}'),
        chunk({}, "tool_calls"),
    ]
    execution = await ts_chat.execute_stream(ts.Executor(weather([])), stream)
    assert [(c.id, c.name, c.args) for c in execution.calls] == [
        ("call_a", "get_weather", '{"city": "Oslo"}'),
        ("call_b", "get_weather", '{"city": "Bern"}'),
    ]
    assert REPLY["openai_chat"](execution) == ["call_a", "call_b"]


async def test_chat_length_inside_a_call_answers_it_invalid_and_pairs() -> None:
    events = data_of("openai_chat", TURN)
    london_open = next(i for i, d in enumerate(events) if _chat_part(d).get("id") == "call_london")
    finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
    execution = await ts_chat.execute_stream(ts.Executor(weather([])), [*events[: london_open + 2], finish])
    assert REPLY["openai_chat"](execution) == ["call_paris", "call_london"]
    assert execution.results[1].error_kind == "invalid_input"


async def test_responses_incomplete_answer_is_whole_and_its_cut_call_is_answered() -> None:
    events = data_of("openai_responses", TURN)
    # London's call: the second function call the stream begins.
    added = [
        i
        for i, d in enumerate(events)
        if d.get("type") == "response.output_item.added" and d["item"].get("type") == "function_call"
    ][1]
    london = copy.deepcopy(events[added]["item"])
    london.update(arguments='{"city": "Lon', status="incomplete")
    done = {"type": "response.output_item.done", "sequence_number": 90, "output_index": 2, "item": london}
    final = copy.deepcopy(events[-1])
    final.update(type="response.incomplete")
    final["response"].update(status="incomplete", incomplete_details={"reason": "max_output_tokens"})
    final["response"]["output"][2] = london
    execution = await ts_responses.execute_stream(ts.Executor(weather([])), [*events[: added + 2], done, final])
    assert REPLY["openai_responses"](execution) == ["call_paris", "call_london"]
    assert execution.results[1].error_kind == "invalid_input"


async def test_responses_final_output_is_checked_against_the_streamed_calls() -> None:
    events = data_of("openai_responses", TURN)
    last_done = max(i for i, d in enumerate(events) if d.get("type") == "response.output_item.done")
    # London's item never got its output_item.done, but the final output has it whole: it runs then.
    execution = await ts_responses.execute_stream(ts.Executor(weather([])), events[:last_done] + events[-1:])
    assert REPLY["openai_responses"](execution) == ["call_paris", "call_london"]
    # A final output without a call the stream finished disagrees with what ran.
    final = copy.deepcopy(events[-1])
    del final["response"]["output"][2]
    with pytest.raises(ts.StreamFailed) as raised:
        await ts_responses.execute_stream(ts.Executor(weather([])), [*events[:-1], final])
    assert isinstance(raised.value.__cause__, ts.ResponseFormatError)
    assert [r.call_id for r in raised.value.outcome.results] == ["call_paris", "call_london"]


async def test_gemini_call_streamed_in_pieces_is_refused_and_a_blocked_prompt_is_whole() -> None:
    partial = {
        "candidates": [
            {"content": {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "willContinue": True}}]}}
        ]
    }
    with pytest.raises(ts.StreamFailed) as raised:
        await ts_gemini.execute_stream(ts.Executor(weather([])), [partial])
    assert isinstance(raised.value.__cause__, ts.ResponseFormatError)
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}}
    execution = await ts_gemini.execute_stream(ts.Executor(weather([])), [blocked])
    assert execution.calls == [] and execution.content is None


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", ["anthropic", "openai_responses", "openai_chat"])
async def test_a_stream_given_up_on_a_fault_is_closed_not_left_streaming(provider: str) -> None:
    """(The Gemini SDK's stream is a chain of generators whose ``aclose`` does not reach its HTTP response:
    that closes when the inner generator is collected, whatever toolsched does.)"""
    events = data_of(provider, TURN)
    first = next(i for i, data in enumerate(events) if "call_paris" in str(data))
    # A fault the adapter refuses early in the answer, then a long tail the server keeps streaming.
    fault: Any = {
        "anthropic": copy.deepcopy(events[first]),
        "openai_responses": {"type": "error", "code": "server_error", "message": "fault", "sequence_number": 1},
        "openai_chat": {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0}]}, "finish_reason": None}]},
    }[provider]
    head = events[: first + 1]
    if provider == "openai_chat":
        # Paris is complete once London begins; then more of Paris's arguments arrive.
        london = next(i for i, data in enumerate(events) if "call_london" in str(data))
        head = events[: london + 1]
        fault["choices"][0]["delta"]["tool_calls"][0]["function"] = {"arguments": "more"}
    name = (lambda data: data.get("type")) if provider == "anthropic" else (lambda data: None)
    tail = [(0.02, name(data), data) for data in [*head[-1:]] * 1000]
    framed = [(0.0, name(data), data) for data in [*head, fault]] + tail
    with ScriptedProvider([framed]) as scripted:
        async with Client(provider, scripted.url) as client:
            stream = await client.stream()
            with anyio.fail_after(30), pytest.raises(ts.StreamFailed):
                await MODULES[provider].execute_stream(ts.Executor(weather([])), stream)
            # The adapter closed the stream it gave up on: the server sees the client hang up (long before
            # its 20 seconds of tail are written).
            assert await anyio.to_thread.run_sync(scripted.hang_up.wait, 10.0)
            assert scripted.hung_up == [0]


async def test_a_journaled_turn_cut_short_keeps_its_finished_call_for_recover(tmp_path: Any) -> None:
    ran: list[str] = []
    started = {"Paris": threading.Event()}
    events = data_of("anthropic", TURN)

    paris = completion("anthropic", events)[0]["call_paris"]

    async def cut_after_paris_runs() -> AsyncIterator[Any]:
        for position, data in enumerate(events[: _second_call_begun("anthropic", events)]):
            yield data
            if position == paris:
                await anyio.to_thread.run_sync(started["Paris"].wait, 10.0)

    async with ts.SqliteJournal(str(tmp_path / "journal.db")) as journal:
        executor = ts.Executor(weather(ran, started), journal=journal)
        with anyio.fail_after(30), pytest.raises(ts.StreamFailed) as raised:
            await ts_anthropic.execute_stream(executor, cut_after_paris_runs())
        outcome = raised.value.outcome
        assert [(r.call_id, r.output) for r in outcome.results] == [("call_paris", "Paris: 18°C")], outcome.results
        assert outcome.run_id is not None
        recovered = await executor.recover(outcome.run_id)
        assert [(r.call_id, r.output) for r in recovered.results] == [("call_paris", "Paris: 18°C")]
    assert ran == ["Paris"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_anthropic_message_stream_helper_cut_short_is_a_broken_stream() -> None:
    from anthropic import AsyncAnthropic

    framed = stream_events("anthropic", TURN)
    end = {0: _second_call_begun("anthropic", data_of("anthropic", TURN))}
    with ScriptedProvider([framed, framed], end_after=end) as scripted:
        async with AsyncAnthropic(api_key="test-key", base_url=scripted.url, max_retries=0) as client:
            request: dict[str, Any] = {"model": "m", "max_tokens": 99, "messages": [{"role": "user", "content": "hi"}]}
            async with client.messages.stream(**request) as stream:
                with anyio.fail_after(30), pytest.raises(ts.StreamFailed) as raised:
                    await ts_anthropic.execute_stream(ts.Executor(weather([])), stream)
            assert isinstance(raised.value.__cause__, ts.IncompleteStreamError)
            async with client.messages.stream(**request) as stream:
                execution = await ts_anthropic.execute_stream(ts.Executor(weather([])), stream)
    assert REPLY["anthropic"](execution) == ["call_paris", "call_london"]


async def test_chat_other_choices_finishing_first_do_not_end_the_chosen_one() -> None:
    def chunk(choice: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"choices": [{"index": choice, "delta": delta, "finish_reason": finish}]}

    call = {"index": 0, "id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    stream = [
        chunk(1, {"content": "the other answer"}),
        chunk(1, {}, "stop"),
        chunk(0, {"tool_calls": [call]}),
        chunk(0, {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Oslo"}'}}]}),
        chunk(0, {}, "tool_calls"),
        {"choices": [], "usage": {"total_tokens": 9}},
    ]
    execution = await ts_chat.execute_stream(ts.Executor(weather([])), copy.deepcopy(stream))
    assert REPLY["openai_chat"](execution) == ["call_a"]
    other = await ts_chat.execute_stream(ts.Executor(weather([])), copy.deepcopy(stream), choice=1)
    assert other.calls == [] and other.assistant == {"role": "assistant", "content": "the other answer"}
    with pytest.raises(ts.StreamFailed):
        await ts_chat.execute_stream(ts.Executor(weather([])), copy.deepcopy(stream[:4]))
