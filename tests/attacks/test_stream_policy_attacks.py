"""Attacks on streamed turns combined with the policy features: argument repair, hooks, retries and rate limits,
batch hooks, a stream that breaks meanwhile. Every call is answered once, in model order, with the error kind
that says what happened to it; nothing runs that was not admitted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio


class StreamDropped(Exception):
    """The model's stream broke (the test's own error)."""


async def test_a_repaired_call_whose_hook_waits_when_the_stream_breaks_is_skipped_not_called_invalid() -> None:
    ran: list[str] = []
    hook_entered = anyio.Event()
    events: list[Any] = []

    @ts.tool
    async def read(key: str) -> str:
        ran.append(key)
        return f"read {key}"

    async def repair(call: ts.ToolCall, error: ts.ToolResult) -> dict[str, Any]:
        return {"key": "fixed"}

    async def waiting_hook(event: ts.HookEvent) -> None:
        hook_entered.set()
        await anyio.sleep_forever()

    hooks = ts.Hooks().pre_tool_use("*", waiting_hook)
    executor = ts.Executor([read], repair_arguments=repair, hooks=hooks, on_event=events.append)
    with pytest.raises(ts.StreamFailed) as raised:
        async with executor.turn() as turn:
            turn.submit(ts.ToolCall("c1", "read", {"key": 7}))
            turn.submit(ts.ToolCall("c2", "read", {"key": "b"}))
            with anyio.fail_after(10):
                await hook_entered.wait()
            raise StreamDropped("connection reset")
    results = raised.value.outcome.results
    assert [result.call_id for result in results] == ["c1", "c2"]
    # The repair gave valid arguments: the call was not run because the stream broke, as the call behind it.
    assert [result.error_kind for result in results] == ["skipped", "skipped"]
    assert results[0].repaired and "the stream of calls broke" in (results[0].error or "")
    assert ran == []
    finished = [event.result.call_id for event in events if isinstance(event, ts.ToolFinished)]
    assert finished == ["c1", "c2"]


async def _calls_then_drop(calls: list[ts.ToolCall]) -> AsyncIterator[ts.ToolCall]:
    for call in calls:
        yield call
    raise StreamDropped("connection reset")


@pytest.mark.parametrize("entry", ["run", "stream"])
async def test_a_broken_stream_read_whole_for_batch_hooks_raises_stream_failed_with_every_call_answered(
    entry: str,
) -> None:
    ran: list[str] = []
    batches: list[Any] = []

    @ts.tool(aliases=["look"])
    async def read(key: str) -> str:
        ran.append(key)
        return key

    hooks = ts.Hooks().pre_batch("*", batches.append)
    executor = ts.Executor([read], hooks=hooks)
    assert not executor.streams
    calls = [
        ts.ToolCall("c1", "look", {"key": "a"}),
        ts.ToolCall("c2", "missing", {}),
        ts.ToolCall("c1", "read", {"key": "again"}),
        ts.ToolCall("c3", "read", {"key": "b"}),
    ]
    events: list[Any] = []
    with pytest.raises(ts.StreamFailed) as raised:
        if entry == "run":
            await executor.run(_calls_then_drop(calls))
        else:
            async for event in executor.stream(_calls_then_drop(calls)):
                events.append(event)
    assert isinstance(raised.value.__cause__, StreamDropped)
    outcome = raised.value.outcome
    assert [(r.call_id, r.tool_name, r.error_kind) for r in outcome.results] == [
        ("c1", "read", "skipped"),
        ("c2", "missing", "unknown_tool"),
        ("c3", "read", "skipped"),
    ]
    assert [duplicate.call_id for duplicate in outcome.duplicates] == ["c1"]
    assert ran == [] and batches == []
    if entry == "stream":
        started = [event.call_id for event in events if isinstance(event, ts.ToolStarted)]
        finished = [event.result.call_id for event in events if isinstance(event, ts.ToolFinished)]
        assert started == finished == ["c1", "c2", "c3"]


@pytest.mark.parametrize("strategy", ["parallel", "partitioned", "resource_aware"])
@pytest.mark.parametrize("streamed", [False, True])
async def test_a_call_in_a_retry_backoff_lends_its_slot_in_a_streamed_turn_as_in_a_whole_one(
    strategy: str, streamed: bool
) -> None:
    # Two slots: "a" fails once and waits 2 s before its retry, "b" holds the other slot until "c" has run.
    # "c" can only run in the slot "a" lends while it waits; without the loan it waits for "a", which waits
    # for nothing, and "b" for "c": the turn would still end, but "b" would time out first.
    c_ran = anyio.Event()
    log: list[str] = []
    tries: list[str] = []

    @ts.tool(
        concurrency_safe=True,
        idempotent=True,
        retry=ts.Retry(attempts=2, backoff=0.01),
        resources=lambda args: ts.Access(reads=(args["name"],)),
    )
    async def fetch(name: str) -> str:
        if name == "a" and not tries:
            tries.append(name)
            raise ts.Transient("busy", retry_after=2.0)
        if name == "b":
            with anyio.move_on_after(5):
                await c_ran.wait()
        if name == "c":
            c_ran.set()
        log.append(name)
        return name

    strategies = {
        "parallel": ts.Parallel(max_concurrency=2),
        "partitioned": ts.Partitioned(max_concurrency=2),
        "resource_aware": ts.ResourceAware(max_concurrency=2),
    }
    executor = ts.Executor([fetch], strategy=strategies[strategy])
    calls = [ts.ToolCall(name, "fetch", {"name": name}) for name in "abc"]

    async def given() -> AsyncIterator[ts.ToolCall]:
        for call in calls:
            yield call

    outcome = await executor.run(given() if streamed else calls)
    assert [result.output for result in outcome.results] == ["a", "b", "c"]
    # "c" ran in the slot "a" lent, so "b" saw it before "a" came back from its wait.
    assert log.index("c") < log.index("b") < log.index("a")


@pytest.mark.parametrize("streamed", [False, True])
async def test_calls_of_a_capped_tool_in_backoff_never_leave_each_other_without_a_slot(streamed: bool) -> None:
    # Each call fails twice before it answers, and the tool runs one call at a time (max_concurrency=1) in a
    # batch of two slots. A call in backoff holds its tool's slot: had it lent its batch slot, the calls
    # waiting for the tool's slot would take both, and it could never work again.
    tries: dict[str, int] = {}

    @ts.tool(
        concurrency_safe=True,
        idempotent=True,
        max_concurrency=1,
        interrupt_behavior="cancel",
        retry=ts.Retry(attempts=3, backoff=0.01, max_backoff=0.02),
    )
    async def flaky(tag: str) -> str:
        tries[tag] = tries.get(tag, 0) + 1
        if tries[tag] < 3:
            raise ts.Transient("down")
        return tag

    executor = ts.Executor([flaky], strategy=ts.Parallel(max_concurrency=2))
    calls = [ts.ToolCall(f"c{number}", "flaky", {"tag": f"c{number}"}) for number in range(4)]

    async def given() -> AsyncIterator[ts.ToolCall]:
        for call in calls:
            yield call

    with anyio.fail_after(10):
        outcome = await executor.run(given() if streamed else calls)
    assert [(result.call_id, result.output, result.attempts) for result in outcome.results] == [
        (f"c{number}", f"c{number}", 3) for number in range(4)
    ]
