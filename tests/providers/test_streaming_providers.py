"""``execute_stream`` with the official SDK clients streaming real SSE from a scripted provider on 127.0.0.1.

For each API: a tool starts before the model's answer has finished streaming, the results and the
assembled assistant turn are what the non-streamed path gives for the same answer, and a stream cut
midway keeps (and reports) the results of the calls it completed.
"""

from __future__ import annotations

import threading
import time

import anyio
import pytest
from sdk_clients import MODULES, PROVIDERS, Client, reply_of

import toolsched as ts
from toolsched.providers import anthropic as ts_anthropic
from toolsched.testing import Reply, ScriptedProvider, ToolUse, stream_events

pytestmark = pytest.mark.anyio


def _tools(started: dict[str, float], running: dict[str, threading.Event] | None = None) -> list[ts.Tool]:
    @ts.tool(read_only=True, concurrency_safe=True)
    async def get_weather(city: str) -> str:
        """Current weather for a city."""
        started[city] = time.perf_counter()
        if running is not None and city in running:
            running[city].set()
        await anyio.sleep(0.05)
        return f"{city}: 18°C"

    return [get_weather]


TURN = Reply(
    text="Let me look both up.",
    tool_uses=[
        ToolUse("get_weather", {"city": "Paris"}, id="call_paris"),
        ToolUse("get_weather", {"city": "London"}, id="call_london"),
    ],
    tokens_per_second=200,
    token_chars=3,
)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_tools_start_while_the_answer_streams_and_end_as_the_whole_answer_would(provider: str) -> None:
    started: dict[str, float] = {}
    executor = ts.Executor(_tools(started))
    module = MODULES[provider]
    with ScriptedProvider([TURN, TURN]) as scripted:
        async with Client(provider, scripted.url) as client:
            # The SDKs build their event parsers on first use (the Responses one takes a few hundred
            # milliseconds): a first answer read to the end warms them, as in any long-lived process.
            async for _ in await client.stream():
                pass
            execution = await module.execute_stream(executor, await client.stream())
        stream_end = scripted.sent_at[1]
    # Paris was complete long before the answer ended (London's arguments were still streaming).
    assert started["Paris"] < stream_end
    assert [call.id for call in execution.calls] == ["call_paris", "call_london"]
    assert [result.output for result in execution.results] == ["Paris: 18°C", "London: 18°C"]
    # The assembled turn is a whole answer: the non-streamed path reads the same calls from it.
    assert module.calls_from(execution.assistant) == execution.calls
    whole = await module.execute(ts.Executor(_tools({})), execution.assistant)
    assert [(r.call_id, r.output) for r in whole.results] == [(r.call_id, r.output) for r in execution.results]
    assert reply_of(provider, whole) == reply_of(provider, execution)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_stream_cut_midway_keeps_the_results_of_the_calls_it_completed(provider: str) -> None:
    started: dict[str, float] = {}
    running = {"Paris": threading.Event()}
    executor = ts.Executor(_tools(started, running))
    events = stream_events(provider, TURN)
    # Cut the connection once the second call has begun, before it is complete (Gemini sends a call
    # whole, in one event: there the cut comes just before it), and once Paris runs: a call not
    # started when the stream breaks is answered `skipped`.
    second = next(position for position, (_, _, data) in enumerate(events) if "call_london" in str(data))
    cut = second if provider == "gemini" else second + 1
    with ScriptedProvider([TURN], break_after={0: cut}, gates={0: running["Paris"]}) as scripted:
        async with Client(provider, scripted.url) as client:
            with pytest.raises(ts.StreamFailed) as raised:
                await MODULES[provider].execute_stream(executor, await client.stream())
    outcome = raised.value.outcome
    assert [result.call_id for result in outcome.results] == ["call_paris"]
    assert outcome.results[0].output == "Paris: 18°C"
    assert "London" not in started
    assert raised.value.__cause__ is not None


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_executor_with_batch_hooks_reads_the_whole_stream_first() -> None:
    seen: list[int] = []

    async def before(event: ts.BatchEvent) -> None:
        seen.append(len(event.calls))

    executor = ts.Executor(_tools({}), hooks=ts.Hooks().pre_batch("*", before))
    assert not executor.streams
    with ScriptedProvider([TURN]) as scripted:
        async with Client("anthropic", scripted.url) as client:
            execution = await ts_anthropic.execute_stream(executor, await client.stream())
    assert seen == [2]
    assert [result.output for result in execution.results] == ["Paris: 18°C", "London: 18°C"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_streaming_loop_answers_every_call_and_sends_the_conversation_back(provider: str) -> None:
    started: dict[str, float] = {}
    executor = ts.Executor(_tools(started))
    final = Reply(text="Paris and London are both 18°C.")
    with ScriptedProvider([TURN, final]) as scripted:
        async with Client(provider, scripted.url) as client:
            result = await client.loop(executor, "weather?")
    assert (result.stop, result.turns) == ("done", 2)
    assert result.text == "Paris and London are both 18°C."
    assert sorted(started) == ["London", "Paris"]
    # The second request carried the assistant turn and one answer per call.
    second = str(scripted.requests[1].body)
    assert "call_paris" in second and "call_london" in second and "London: 18°C" in second
    assert scripted.requests[0].stream
