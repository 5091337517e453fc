"""Attacks on what a tool's limits promise per event loop (docs/concepts/resilience.md: "shared by every run on
the event loop"; `max_concurrency`: calls in flight): one executor used by two event loops at once, one per
thread, as a threaded server running an event loop per worker does. Another loop's calls must not reset this
loop's circuit, rate limit or cap."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
import pytest

import toolsched as ts


def other_backend(backend: str) -> str:
    return "trio" if backend == "asyncio" else "asyncio"


def on_a_thread(backend: str, body: Callable[[], object]) -> threading.Thread:
    """Runs ``anyio.run(body)`` on a thread of its own (the other loop)."""
    thread = threading.Thread(target=anyio.run, args=(body,), kwargs={"backend": backend}, daemon=True)
    thread.start()
    return thread


def test_another_loops_call_does_not_reset_this_loops_circuit(anyio_backend: str) -> None:
    """CircuitBreaker(failures=2): two transient failures on this loop open its circuit, though another loop
    called the tool in between (its call made this loop's circuit start over: the third call ran)."""
    ran: list[str] = []

    @ts.tool(name="flaky", circuit=ts.CircuitBreaker(failures=2, cooldown=60))
    async def flaky(tag: str) -> str:
        ran.append(tag)
        raise ts.Transient("downstream busy")

    executor = ts.Executor([flaky])
    kinds: list[str | None] = []

    async def one(tag: str) -> None:
        outcome = await executor.run([ts.ToolCall(tag, "flaky", {"tag": tag})])
        kinds.append(outcome.results[0].error_kind)

    async def here() -> None:
        await one("a1")
        other = on_a_thread(other_backend(anyio_backend), lambda: one("b1"))
        await anyio.to_thread.run_sync(other.join, 30)
        await one("a2")
        await one("a3")

    anyio.run(here, backend=anyio_backend)
    assert ran == ["a1", "b1", "a2"]
    assert kinds == ["execution_error", "execution_error", "execution_error", "unavailable"]


def test_another_loops_call_does_not_lift_this_loops_concurrency_cap(anyio_backend: str) -> None:
    """max_concurrency=1: while a call of this loop is in flight, another loop's call of the tool must not let a
    second call of this loop start (it got a fresh cap of its own)."""
    started: list[str] = []
    first_in = anyio.Event()
    hold = threading.Event()

    @ts.tool(name="single", max_concurrency=1, concurrency_safe=True)
    async def single(tag: str) -> str:
        started.append(tag)
        if tag == "a1":
            first_in.set()
            await anyio.to_thread.run_sync(hold.wait, 30)
        return tag

    executor = ts.Executor([single], strategy=ts.Parallel())

    async def other_loop() -> None:
        await executor.run([ts.ToolCall("b1", "single", {"tag": "b1"})])

    async def here() -> list[str]:
        async with anyio.create_task_group() as group:
            group.start_soon(executor.run, [ts.ToolCall("a1", "single", {"tag": "a1"})])
            await first_in.wait()
            other = on_a_thread(other_backend(anyio_backend), other_loop)
            await anyio.to_thread.run_sync(other.join, 30)
            group.start_soon(executor.run, [ts.ToolCall("a2", "single", {"tag": "a2"})])
            await anyio.sleep(0.2)  # a2 would have started by now if the cap let it
            seen = list(started)
            hold.set()
        return seen

    try:
        seen = anyio.run(here, backend=anyio_backend)
    finally:
        hold.set()
    assert seen == ["a1", "b1"]
    assert started == ["a1", "b1", "a2"]


@pytest.mark.parametrize("runs", [12])
def test_loops_that_ended_leave_no_state_behind(anyio_backend: str, runs: int) -> None:
    """One event loop after another (``anyio.run`` per task): the state of the loops that ended is dropped when
    a new loop uses the tool, not kept one per past loop."""

    @ts.tool(name="paced", rate_limit=ts.RateLimit(1000, per=1), max_concurrency=2)
    async def paced(n: int) -> int:
        return n

    executor = ts.Executor([paced])

    async def one(n: int) -> int:
        return (await executor.run([ts.ToolCall("c", "paced", {"n": n})])).results[0].output  # type: ignore[no-any-return]

    assert [anyio.run(one, n, backend=anyio_backend) for n in range(runs)] == list(range(runs))
    facts = executor.registry.get("paced").facts  # type: ignore[union-attr]
    assert len(facts._limiter) == 1 and len(facts._resilience) == 1


def test_a_loop_let_go_of_unclosed_is_collected_not_kept_by_a_tools_state() -> None:
    """``loop = asyncio.new_event_loop(); loop.run_until_complete(...)`` and the loop dropped without ``close()``:
    the garbage collector closes such a loop (its selector and self-pipe), whether or not a capped or resilient
    tool ran on it. The tool's per-loop state must not keep the loop (and its file descriptors) alive."""
    import asyncio
    import gc
    import warnings
    import weakref

    @ts.tool(name="paced", rate_limit=ts.RateLimit(1000, per=1), max_concurrency=2)
    async def paced(n: int) -> int:
        await asyncio.sleep(0)
        return n

    executor = ts.Executor([paced])
    dropped: list[weakref.ref[asyncio.AbstractEventLoop]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # the unclosed loop's, as the collector closes it
        for n in range(3):
            loop = asyncio.new_event_loop()
            outcome = loop.run_until_complete(executor.run([ts.ToolCall("c", "paced", {"n": n})]))
            assert outcome.results[0].output == n
            dropped.append(weakref.ref(loop))
            del loop, outcome
        gc.collect()
    assert [ref() for ref in dropped] == [None, None, None]


@pytest.mark.parametrize("stops", ["before", "while-waiting"])
def test_work_handed_to_a_stopped_asyncio_loop_does_not_wait_for_it(stops: str) -> None:
    """``run_on_loop`` (how a tool's context reaches its run's loop from a plain thread) waited until the loop
    had run the work, looking only whether the loop had closed: for an asyncio loop stopped but not closed,
    before the work was handed or while it waited in the loop's queue, it waited until the loop ran again, for
    good if it never did. It returns once the work is handed to a stopped loop, and the work runs, once, when
    the loop runs again."""
    from toolsched._values.event_loops import run_on_loop

    queued = threading.Event()

    class Observed(asyncio.SelectorEventLoop):
        """Says when work is handed to it from another thread."""

        def call_soon_threadsafe(self, *args: Any, **kwargs: Any) -> asyncio.Handle:
            handle = super().call_soon_threadsafe(*args, **kwargs)
            queued.set()
            return handle

    loop = Observed()
    ran: list[str] = []
    returned = threading.Event()

    def hand_over() -> None:
        run_on_loop(loop, ran.append, "handed")
        returned.set()

    try:
        if stops == "before":
            loop.run_until_complete(asyncio.sleep(0))
            threading.Thread(target=hand_over, daemon=True).start()
        else:
            # The loop runs a callback that holds it until the work is queued, then stops it.
            def held() -> None:
                threading.Thread(target=hand_over, daemon=True).start()
                queued.wait(30)
                loop.stop()

            loop.call_soon(held)
            loop.run_forever()
        assert returned.wait(30), "run_on_loop still waits for the stopped loop"
        assert ran == []
        loop.run_until_complete(asyncio.sleep(0))
        assert ran == ["handed"]
    finally:
        loop.close()
