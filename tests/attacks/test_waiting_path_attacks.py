"""Attacks on the waiting path of a concurrent batch: once a call waits, every call left starts at once, each task
running ``execute`` itself (``_Pool.start_each``). Whatever a tool raises there, the run ends with one result per
call in the model's order, or raises the very exception that stops the process; and a failure's message is the
tool's own exception."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest
from swallowing import swallowing_tool

import toolsched as ts

pytestmark = pytest.mark.anyio


def batch(name: str, count: int = 4) -> list[ts.ToolCall]:
    return [ts.ToolCall(f"c{n}", name, {"n": n}) for n in range(count)]


class Stop(BaseException):
    """A BaseException of the tool's own."""


@pytest.mark.parametrize("raised", [KeyboardInterrupt, SystemExit, GeneratorExit, Stop])
async def test_an_exception_that_stops_the_process_leaves_the_run_as_itself(raised: type[BaseException]) -> None:
    @ts.tool(name="wait", concurrency_safe=True)
    async def wait(n: int) -> str:
        await anyio.lowlevel.checkpoint()
        if n == 2:
            raise raised()
        await anyio.sleep(0.01)
        return "ok"

    with pytest.raises(raised):
        await ts.Executor([wait]).run(batch("wait"))


async def test_failures_among_waiting_calls_leave_one_result_per_call_in_order() -> None:
    @ts.tool(name="mixed", concurrency_safe=True)
    async def mixed(n: int) -> str:
        if n % 2:
            await anyio.lowlevel.checkpoint()
        if n == 3:
            raise ValueError("boom")
        if n == 5:
            raise BaseExceptionGroup("grouped", [ValueError("inner")])
        return f"r{n}"

    outcome = await ts.Executor([mixed]).run(batch("mixed", 8))
    assert [result.call_id for result in outcome.results] == [f"c{n}" for n in range(8)]
    assert [result.error_kind for result in outcome.results] == [None] * 3 + ["execution_error", None] + [
        "execution_error"
    ] + [None] * 2


@pytest.mark.parametrize("sync", [True, False])
async def test_a_tool_that_raises_stop_iteration_is_described_by_its_own_exception(sync: bool) -> None:
    """A coroutine cannot raise StopIteration (PEP 479): Python makes it "RuntimeError: coroutine raised
    StopIteration", for a sync tool too (its body's exception crosses toolsched's coroutines). The model was told
    that, not what the tool raised."""
    if sync:

        @ts.tool(name="pages", concurrency_safe=True)
        def pages(n: int) -> str:
            if n == 1:
                raise StopIteration("no page after 3")
            return f"page {n}"

    else:

        @ts.tool(name="pages", concurrency_safe=True)
        async def pages(n: int) -> str:
            await anyio.lowlevel.checkpoint()
            if n == 1:
                raise StopIteration("no page after 3")
            return f"page {n}"

    outcome = await ts.Executor([pages]).run(batch("pages", 3))
    assert [result.output for result in outcome.results] == ["page 0", None, "page 2"]
    failed = outcome.results[1]
    assert failed.error_kind == "execution_error"
    assert "StopIteration: no page after 3" in (failed.error or "")
    assert "RuntimeError" not in (failed.error or "")


def swallowing(timeout: float, started: list[str], returned: list[str]) -> ts.Tool:
    """A tool that catches its own cancellation and returns a value anyway (as a careless ``except BaseException``
    does)."""

    @ts.tool(name="fetch", timeout=timeout, concurrency_safe=True)
    async def fetch(n: int) -> str:
        started.append(f"c{n}")
        try:
            await anyio.sleep(5)
        except anyio.get_cancelled_exc_class():
            returned.append(f"c{n}")
            return "caught it, returned anyway"
        return "fetched"

    return fetch


async def test_a_call_that_swallows_its_timeout_and_returns_still_times_out() -> None:
    """docs/concepts/failures.md: a call that "ran past its `timeout`" is answered ``timeout``; so it was when the
    tool let the cancellation out, or turned it into an error, but one that caught it and returned got a success."""
    returned: list[str] = []
    outcome = await ts.Executor([swallowing(0.05, [], returned)]).run(batch("fetch", 3))
    assert sorted(returned) == ["c0", "c1", "c2"]
    assert [result.error_kind for result in outcome.results] == ["timeout"] * 3
    assert [result.output for result in outcome.results] == [None] * 3


async def test_a_call_cancel_said_would_end_cancelled_ends_cancelled_though_the_tool_returns() -> None:
    """``Executor.cancel`` "returns whether a call will end cancelled": True for a running call in a scope (its tool
    has a timeout). The tool caught the cancellation and returned: the call ended a success, with that output."""
    started: list[str] = []
    returned: list[str] = []
    executor = ts.Executor([swallowing(30, started, returned)])
    outcomes: list[ts.Outcome] = []

    async def run() -> None:
        outcomes.append(await executor.run(batch("fetch", 2)))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        with anyio.fail_after(10):
            while len(started) < 2:
                await anyio.lowlevel.checkpoint()
        assert [executor.cancel(call_id, "not needed") for call_id in ("c0", "c1")] == [True, True]
    [outcome] = outcomes
    assert sorted(returned) == ["c0", "c1"]
    assert [result.error_kind for result in outcome.results] == ["cancelled", "cancelled"]
    assert all("not needed" in (result.error or "") for result in outcome.results)


async def test_a_timeout_the_tool_swallowed_counts_for_its_circuit() -> None:
    """docs/concepts/resilience.md: "after `failures` consecutive transient failures (timeouts included)" the circuit
    opens. A call whose tool caught its timeout and returned is answered ``timeout``, but the circuit was told it
    succeeded: it never opened, and every later call ran into the same timeout."""
    ran: list[int] = []
    slow = swallowing_tool(ran, timeout=0.05, circuit=ts.CircuitBreaker(failures=2, cooldown=30))
    executor = ts.Executor([slow])
    kinds = []
    for n in range(3):
        outcome = await executor.run([ts.ToolCall(f"c{n}", "slow", {"n": n})])
        kinds.append(outcome.results[0].error_kind)
    assert kinds == ["timeout", "timeout", "unavailable"]
    assert ran == [0, 1]


async def test_a_cancellation_the_tool_swallowed_settles_nothing_for_its_circuit() -> None:
    """A call cancelled (``Executor.cancel``) whose tool caught it and returned ends ``cancelled``: like one that let
    the cancellation out, it is no success for the circuit (two timeouts then open it)."""
    started: list[int] = []
    circuit = ts.CircuitBreaker(failures=2, cooldown=30)
    slow = swallowing_tool(started, timeout=0.2, circuit=circuit, concurrency_safe=True)
    executor = ts.Executor([slow])
    kinds: list[str | None] = []
    outcome = await executor.run([ts.ToolCall("c0", "slow", {"n": 0, "mode": "t"})])
    kinds.append(outcome.results[0].error_kind)
    async with anyio.create_task_group() as group:

        async def run() -> None:
            result = (await executor.run([ts.ToolCall("c1", "slow", {"n": 1, "mode": "c"})])).results[0]
            kinds.append(result.error_kind)

        group.start_soon(run)
        with anyio.fail_after(10):
            while 1 not in started:
                await anyio.lowlevel.checkpoint()
        assert executor.cancel("c1")
    for n in (2, 3):
        outcome = await executor.run([ts.ToolCall(f"c{n}", "slow", {"n": n, "mode": "t"})])
        kinds.append(outcome.results[0].error_kind)
    assert kinds == ["timeout", "cancelled", "timeout", "unavailable"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("path", ["stepped", "execute"])
async def test_a_call_whose_task_is_cancelled_from_outside_before_it_began_is_answered(path: str) -> None:
    # Something outside the run cancels the tasks of the calls left in a batch (say, from ``asyncio.all_tasks()``)
    # before they take their first step: those calls never run, and the run answers them ``cancelled`` rather
    # than failing to assemble its results. Both ways a waiting call runs (stepped, or through ``execute``, which
    # an input guardrail asks for).
    import asyncio

    ran: list[int] = []

    @ts.tool(name="wait", concurrency_safe=True)
    async def wait(n: int) -> str:
        ran.append(n)
        await asyncio.sleep(0.01)
        return "ok"

    options = {} if path == "stepped" else {"input_guardrails": [lambda event: None]}
    executor = ts.Executor([wait], **options)
    here = asyncio.current_task()
    before = asyncio.all_tasks()
    run = asyncio.ensure_future(executor.run(batch("wait")))
    workers: set[asyncio.Task[object]] = set()
    for _ in range(100):
        await asyncio.sleep(0)
        workers = asyncio.all_tasks() - before - {run, here}
        if workers:
            break
    assert len(workers) == 3
    for worker in workers:
        worker.cancel()
    with anyio.fail_after(5):
        outcome = await run
    assert [result.call_id for result in outcome.results] == ["c0", "c1", "c2", "c3"]
    assert outcome.results[0].output == "ok" and ran == [0]
    for result in outcome.results[1:]:
        assert result.error_kind == "cancelled" and "cancelled from outside" in (result.error or "")
