"""Streamed turns (``Executor.turn``, ``run`` of an async iterable): calls start while later ones are still
coming, with every promise ``run`` keeps for the same calls.

The property test is the contract: for random mixes of calls (safe and unsafe, failing, unknown, invalid,
repeated IDs, declared resources, calls that ask for approval) arriving with random gaps, the streamed
outcome equals ``run(list)``'s under every strategy. The rest are the attacks: a stream that breaks, a
caller that gives up, steering, interrupts and cancellation mid-stream, misuse of the turn.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import anyio
import anyio.to_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import toolsched as ts

pytestmark = pytest.mark.anyio

STRATEGIES = {
    "sequential": ts.Sequential,
    "parallel": lambda: ts.Parallel(max_concurrency=3),
    "batched": lambda: ts.Batched(2),
    "partitioned": lambda: ts.Partitioned(max_concurrency=3),
    "resource_aware": lambda: ts.ResourceAware(max_concurrency=3),
}


async def until(condition: Callable[[], bool]) -> None:
    """Waits (at most 10 s) until ``condition()`` holds: what a fixed sleep assumed, a loaded machine may not do
    in time."""
    with anyio.fail_after(10):
        while not condition():  # noqa: ASYNC110 - the condition is the tools' own notes, set by no event
            await anyio.sleep(0.001)


def _tools() -> list[Any]:
    @ts.tool(concurrency_safe=True, read_only=True, resources=lambda args: ts.Access(reads=(args["key"],)))
    async def read(key: str, ms: int = 0) -> str:
        await anyio.sleep(ms / 1000)
        return f"read {key}"

    @ts.tool(resources=lambda args: ts.Access(writes=(args["key"],)))
    async def write(key: str, ms: int = 0) -> str:
        await anyio.sleep(ms / 1000)
        return f"wrote {key}"

    @ts.tool(concurrency_safe=True)
    async def fail(ms: int = 0) -> str:
        await anyio.sleep(ms / 1000)
        raise RuntimeError("boom")

    @ts.tool(needs_approval=True, concurrency_safe=True)
    async def guarded(ms: int = 0) -> str:
        return "guarded ran"

    return [read, write, fail, guarded]


CALL = st.one_of(
    st.tuples(st.just("read"), st.sampled_from(["a", "a/x", "b"]), st.integers(0, 3)),
    st.tuples(st.just("write"), st.sampled_from(["a", "a/x", "b"]), st.integers(0, 3)),
    st.tuples(st.just("fail"), st.none(), st.integers(0, 2)),
    st.tuples(st.just("guarded"), st.none(), st.just(0)),
    st.tuples(st.just("missing"), st.none(), st.just(0)),
    st.tuples(st.just("invalid"), st.none(), st.just(0)),
)


def _call(position: int, spec: tuple[str, str | None, int], repeat: int | None) -> ts.ToolCall:
    name, key, ms = spec
    call_id = f"c{position if repeat is None else repeat}"
    if name == "invalid":
        return ts.ToolCall(call_id, "read", {"key": 7})
    if name == "missing":
        return ts.ToolCall(call_id, "missing", {})
    args: dict[str, Any] = {"ms": ms}
    if key is not None:
        args["key"] = key
    return ts.ToolCall(call_id, name, args)


def _comparable(outcome: ts.Outcome) -> tuple[Any, ...]:
    results = [replace(result, duration_ms=0.0) for result in outcome.results]
    pending = [request.call_id for request in outcome.pending]
    return results, outcome.duplicates, outcome.interrupted, pending


async def _trickle(calls: list[ts.ToolCall], gaps: list[int]) -> Any:
    for call, gap in zip(calls, gaps, strict=False):
        if gap:
            await anyio.sleep(gap / 1000)
        yield call


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    strategy=st.sampled_from(sorted(STRATEGIES)),
    specs=st.lists(st.tuples(CALL, st.one_of(st.none(), st.integers(0, 3))), min_size=0, max_size=8),
    gaps=st.lists(st.integers(0, 2), min_size=8, max_size=8),
)
def test_a_streamed_turn_ends_as_the_same_turn_run_whole(strategy: str, specs: list[Any], gaps: list[int]) -> None:
    # Without sibling aborts every result depends on its own call only, so both runs must agree exactly
    # (aborts race by nature; tests/executor/test_streaming.py checks them with timings that cannot).
    calls = [_call(position, spec, repeat) for position, (spec, repeat) in enumerate(specs)]
    executor = ts.Executor(_tools(), strategy=STRATEGIES[strategy]())

    async def both() -> tuple[Any, Any]:
        whole = await executor.run(list(calls))
        streamed = await executor.run(_trickle(calls, gaps))
        return _comparable(whole), _comparable(streamed)

    for backend in ("asyncio", "trio"):
        whole, streamed = anyio.run(both, backend=backend)
        assert streamed == whole, backend


async def test_a_call_starts_before_the_stream_ends_and_results_come_in_model_order() -> None:
    started: dict[str, float] = {}

    @ts.tool(concurrency_safe=True)
    async def work(name: str, ms: int) -> str:
        started[name] = time.perf_counter()
        await anyio.sleep(ms / 1000)
        return name

    executor = ts.Executor([work])
    given: list[tuple[str, float]] = []
    async with executor.turn() as turn:
        turn.submit(ts.ToolCall("a", "work", {"name": "a", "ms": 150}))
        await anyio.sleep(0.05)
        turn.submit(ts.ToolCall("b", "work", {"name": "b", "ms": 0}))
        await anyio.sleep(0.05)
        stream_end = time.perf_counter()
        turn.close()
        async for result in turn.results():
            given.append((result.call_id, time.perf_counter()))
        outcome = await turn.outcome()
    assert started["a"] < stream_end and started["b"] < stream_end
    assert [call_id for call_id, _ in given] == ["a", "b"]
    # b finished long before a, but comes out after it.
    assert given[1][1] >= given[0][1]
    assert [result.output for result in outcome.results] == ["a", "b"]
    assert all(result.batch == 0 and result.was_concurrent for result in outcome.results)


async def test_an_unsafe_call_waits_for_every_earlier_call_and_holds_every_later_one() -> None:
    log: list[str] = []

    @ts.tool(concurrency_safe=True)
    async def look(name: str) -> str:
        log.append(f"start {name}")
        await anyio.sleep(0.03)
        log.append(f"end {name}")
        return name

    @ts.tool
    async def change(name: str) -> str:
        log.append(f"start {name}")
        await anyio.sleep(0.03)
        log.append(f"end {name}")
        return name

    executor = ts.Executor([look, change])
    async with executor.turn() as turn:
        turn.submit(ts.ToolCall("1", "look", {"name": "l1"}))
        turn.submit(ts.ToolCall("2", "change", {"name": "c"}))
        turn.submit(ts.ToolCall("3", "look", {"name": "l2"}))
        await until(lambda: bool(log))
        # Only the first safe call runs: the change waits for it, the later look waits for the change.
        assert log == ["start l1"]
    assert log == ["start l1", "end l1", "start c", "end c", "start l2", "end l2"]


async def test_resource_aware_starts_independent_calls_at_once_and_orders_conflicts() -> None:
    log: list[str] = []

    @ts.tool(resources=lambda args: ts.Access(writes=(args["path"],)))
    async def edit(path: str) -> str:
        log.append(f"start {path}")
        await anyio.sleep(0.03)
        log.append(f"end {path}")
        return path

    executor = ts.Executor([edit], strategy=ts.ResourceAware())
    async with executor.turn() as turn:
        turn.submit(ts.ToolCall("1", "edit", {"path": "src/a"}))
        await anyio.sleep(0.005)
        turn.submit(ts.ToolCall("2", "edit", {"path": "src/b"}))
        turn.submit(ts.ToolCall("3", "edit", {"path": "src"}))
        await anyio.sleep(0.005)
        assert log == ["start src/a", "start src/b"]
    assert log.index("start src") > max(log.index("end src/a"), log.index("end src/b"))


async def test_a_broken_stream_keeps_what_ran_cancels_cancel_calls_and_finishes_block_calls() -> None:
    finished: list[str] = []

    @ts.tool(concurrency_safe=True, interrupt_behavior="cancel")
    async def stoppable() -> str:
        await anyio.sleep(5)
        finished.append("stoppable")
        return "no"

    @ts.tool(concurrency_safe=True, interrupt_behavior="block")
    async def stubborn() -> str:
        await anyio.sleep(0.05)
        finished.append("stubborn")
        return "done anyway"

    @ts.tool(concurrency_safe=True)
    async def quick() -> str:
        return "quick"

    class Broken(Exception):
        pass

    # The stream breaks once both slow calls are running (a fixed wait could break it before they start).
    started: set[str] = set()
    both_running = anyio.Event()

    def note(event: ts.Event) -> None:
        if isinstance(event, ts.ToolStarted):
            started.add(event.call_id)
            if {"s", "b"} <= started:
                both_running.set()

    async def calls() -> Any:
        yield ts.ToolCall("q", "quick", {})
        yield ts.ToolCall("s", "stoppable", {})
        yield ts.ToolCall("b", "stubborn", {})
        with anyio.fail_after(5):
            await both_running.wait()
        raise Broken("connection reset")

    executor = ts.Executor([stoppable, stubborn, quick], on_event=note)
    with pytest.raises(ts.StreamFailed) as raised:
        await executor.run(calls())
    assert isinstance(raised.value.__cause__, Broken)
    results = {result.call_id: result for result in raised.value.outcome.results}
    assert [result.call_id for result in raised.value.outcome.results] == ["q", "s", "b"]
    assert results["q"].output == "quick"
    assert results["s"].error_kind == "cancelled" and "connection reset" in (results["s"].error or "")
    assert results["b"].output == "done anyway"
    assert finished == ["stubborn"]


async def test_a_failure_cancels_the_siblings_that_join_its_batch_later_as_run_does() -> None:
    ran: list[str] = []

    @ts.tool(concurrency_safe=True)
    async def slow(name: str) -> str:
        ran.append(name)
        await anyio.sleep(0.5)
        return name

    @ts.tool(concurrency_safe=True, abort_siblings_on_error=True)
    async def fail() -> str:
        raise RuntimeError("boom")

    executor = ts.Executor([slow, fail])
    whole_calls = [
        ts.ToolCall("1", "slow", {"name": "one"}),
        ts.ToolCall("2", "fail", {}),
        ts.ToolCall("3", "slow", {"name": "three"}),
    ]
    async with executor.turn() as turn:
        turn.submit(whole_calls[0])
        await until(lambda: bool(ran))
        turn.submit(whole_calls[1])
        await anyio.sleep(0.01)
        turn.submit(whole_calls[2])
    streamed = await turn.outcome()
    assert ran == ["one"]
    assert [result.error_kind for result in streamed.results] == ["cancelled", "execution_error", "cancelled"]
    ran.clear()
    whole = await executor.run(whole_calls)
    assert [result.error_kind for result in whole.results] == ["cancelled", "execution_error", "cancelled"]
    assert [result.error for result in whole.results] == [result.error for result in streamed.results]


async def test_a_caller_that_gives_up_winds_the_turn_down_and_is_still_cancelled() -> None:
    finished: list[str] = []
    started = anyio.Event()

    @ts.tool(concurrency_safe=True, interrupt_behavior="block")
    async def stubborn() -> str:
        started.set()
        await anyio.sleep(0.05)
        finished.append("stubborn")
        return "done"

    @ts.tool(concurrency_safe=True, interrupt_behavior="cancel")
    async def stoppable() -> str:
        await anyio.sleep(5)
        finished.append("stoppable")
        return "no"

    executor = ts.Executor([stubborn, stoppable])

    async def calls() -> Any:
        yield ts.ToolCall("b", "stubborn", {})
        yield ts.ToolCall("s", "stoppable", {})
        await anyio.sleep(10)
        yield ts.ToolCall("late", "stubborn", {})

    with anyio.move_on_after(0.02) as scope:
        await executor.run(calls())
    assert scope.cancelled_caught
    assert finished == ["stubborn"]


async def test_calls_arriving_after_steering_are_skipped() -> None:
    ran: list[str] = []

    @ts.tool
    async def step(name: str) -> str:
        ran.append(name)
        return name

    messages: list[str] = []

    def steering() -> list[str]:
        return list(messages)

    executor = ts.Executor([step])
    async with executor.turn(steering=steering) as turn:
        turn.submit(ts.ToolCall("1", "step", {"name": "one"}))
        turn.submit(ts.ToolCall("2", "step", {"name": "two"}))
        # Both ran before the user speaks (a fixed sleep was too short on a loaded machine).
        await until(lambda: len(ran) == 2)
        messages.append("stop, the user said something")
        turn.submit(ts.ToolCall("3", "step", {"name": "three"}))
        turn.submit(ts.ToolCall("4", "step", {"name": "four"}))
    outcome = await turn.outcome()
    assert ran == ["one", "two"]
    assert [result.error_kind for result in outcome.results] == [None, None, "skipped", "skipped"]
    assert outcome.steering_messages == ["stop, the user said something"]


async def test_an_interrupt_mid_stream_skips_what_comes_after() -> None:
    ran: list[str] = []

    @ts.tool(concurrency_safe=True)
    async def step(name: str) -> str:
        ran.append(name)
        return name

    executor = ts.Executor([step])
    async with executor.turn(run_id="r1") as turn:
        turn.submit(ts.ToolCall("1", "step", {"name": "one"}))
        await until(lambda: bool(ran))
        assert executor.interrupt("user pressed escape", run_id="r1") == 1
        turn.submit(ts.ToolCall("2", "step", {"name": "two"}))
    outcome = await turn.outcome()
    assert ran == ["one"]
    assert outcome.results[1].error_kind == "skipped"
    assert "user pressed escape" in (outcome.results[1].error or "")
    assert outcome.run_id == "r1"


async def test_a_call_cancelled_before_it_starts_never_runs() -> None:
    ran: list[str] = []

    @ts.tool
    async def step(name: str, ms: int = 0) -> str:
        ran.append(name)
        await anyio.sleep(ms / 1000)
        return name

    executor = ts.Executor([step])
    async with executor.turn(run_id="r") as turn:
        turn.submit(ts.ToolCall("1", "step", {"name": "one", "ms": 30}))
        turn.submit(ts.ToolCall("2", "step", {"name": "two"}))
        await anyio.sleep(0.005)
        assert executor.cancel("2", "not needed", run_id="r")
    outcome = await turn.outcome()
    assert ran == ["one"]
    assert outcome.results[1].error_kind == "cancelled"


async def test_a_held_call_blocks_no_later_independent_call_and_the_turn_resumes() -> None:
    ran: list[str] = []

    @ts.tool(needs_approval=True, concurrency_safe=True)
    async def deploy() -> str:
        ran.append("deploy")
        return "deployed"

    @ts.tool(concurrency_safe=True)
    async def look() -> str:
        ran.append("look")
        return "looked"

    executor = ts.Executor([deploy, look])
    async with executor.turn() as turn:
        turn.submit(ts.ToolCall("d", "deploy", {}))
        turn.submit(ts.ToolCall("l", "look", {}))
        await until(lambda: bool(ran))
        assert ran == ["look"]
    outcome = await turn.outcome()
    assert outcome.interrupted and [request.call_id for request in outcome.pending] == ["d"]
    state = outcome.state
    assert state is not None
    state.approve("d")
    resumed = await executor.resume(state)
    assert [result.output for result in resumed.results] == ["deployed", "looked"]
    assert ran == ["look", "deploy"]


async def test_a_raising_failure_is_raised_from_the_block_when_nobody_asked_for_the_outcome() -> None:
    @ts.tool
    async def fail() -> str:
        raise RuntimeError("boom")

    @ts.tool
    async def after() -> str:
        return "after"

    executor = ts.Executor([fail, after], on_error="raise")
    with pytest.raises(ts.ToolCallFailed) as raised:
        async with executor.turn() as turn:
            turn.submit(ts.ToolCall("1", "fail", {}))
            turn.submit(ts.ToolCall("2", "after", {}))
    assert [result.error_kind for result in raised.value.results] == ["execution_error", "skipped"]


async def test_each_call_runs_in_its_own_copy_of_the_callers_context() -> None:
    where: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="unset")
    seen: list[str] = []
    first_done = anyio.Event()

    @ts.tool(concurrency_safe=True)
    async def spoil(name: str) -> str:
        seen.append(where.get())
        where.set(name)
        await anyio.sleep(0.005)
        seen.append(where.get())
        if name == "one":
            first_done.set()
        return name

    executor = ts.Executor([spoil])
    where.set("caller")
    async with executor.turn() as turn:
        turn.submit(ts.ToolCall("1", "spoil", {"name": "one"}))
        # The second call is submitted once the first has run (by an event, not a race of two sleeps).
        with anyio.fail_after(10):
            await first_done.wait()
        turn.submit(ts.ToolCall("2", "spoil", {"name": "two"}))
    assert seen == ["caller", "one", "caller", "two"]
    assert where.get() == "caller"


async def test_a_tool_raising_keyboard_interrupt_stops_the_turn_with_it() -> None:
    @ts.tool
    async def stop() -> str:
        raise KeyboardInterrupt

    executor = ts.Executor([stop])

    async def calls() -> Any:
        yield ts.ToolCall("1", "stop", {})

    with pytest.raises(KeyboardInterrupt):
        await executor.run(calls())


async def test_misuse_of_a_turn_is_refused_in_words() -> None:
    @ts.tool
    async def noop() -> str:
        return "ok"

    executor = ts.Executor([noop])
    turn = executor.turn()
    with pytest.raises(ts.TurnStateError, match="block"):
        turn.submit(ts.ToolCall("1", "noop", {}))
    async with turn:
        with pytest.raises(TypeError, match="ToolCall"):
            turn.submit({"id": "1", "name": "noop"})  # type: ignore[arg-type]
        turn.submit(ts.ToolCall("1", "noop", {}))
        turn.close()
        turn.close()
        with pytest.raises(ts.TurnStateError, match="closed"):
            turn.submit(ts.ToolCall("2", "noop", {}))
    assert [result.output for result in (await turn.outcome()).results] == ["ok"]
    with pytest.raises(ts.TurnStateError):
        async with turn:
            pass


async def test_unknown_tool_raise_ends_the_streamed_turn_with_the_error() -> None:
    @ts.tool
    async def noop() -> str:
        return "ok"

    executor = ts.Executor([noop], unknown_tool="raise")
    with pytest.raises(ts.UnknownToolError):
        async with executor.turn() as turn:
            turn.submit(ts.ToolCall("1", "noop", {}))
            turn.submit(ts.ToolCall("2", "nope", {}))


async def test_batch_hooks_refuse_the_push_form_and_run_reads_the_stream_first() -> None:
    @ts.tool
    async def noop() -> str:
        return "ok"

    seen: list[int] = []

    async def before(event: ts.BatchEvent) -> None:
        seen.append(len(event.calls))

    executor = ts.Executor([noop], hooks=ts.Hooks().pre_batch("*", before), strategy=ts.Parallel())
    with pytest.raises(ts.OptionError, match="whole batch"):
        executor.turn()

    async def calls() -> Any:
        yield ts.ToolCall("1", "noop", {})
        yield ts.ToolCall("2", "noop", {})

    outcome = await executor.run(calls())
    assert [result.output for result in outcome.results] == ["ok", "ok"]
    assert seen == [2]


async def test_a_broken_journaled_stream_is_known_to_recover_which_runs_nothing_again(tmp_path: Any) -> None:
    ran: list[str] = []

    @ts.tool(concurrency_safe=True)
    async def step(name: str) -> str:
        ran.append(name)
        return name

    class Broken(Exception):
        pass

    # The stream breaks once both calls have finished (their results journaled): waiting a fixed time
    # instead lets a slow journal write leave a call unstarted when the stream breaks.
    finished: set[str] = set()
    both_finished = anyio.Event()

    def note(event: ts.Event) -> None:
        if isinstance(event, ts.ToolFinished):
            finished.add(event.result.call_id)
            if finished == {"1", "2"}:
                both_finished.set()

    async def calls() -> Any:
        yield ts.ToolCall("1", "step", {"name": "one"})
        yield ts.ToolCall("1", "step", {"name": "repeat"})
        yield ts.ToolCall("2", "step", {"name": "two"})
        with anyio.fail_after(5):
            await both_finished.wait()
        raise Broken("the model's connection dropped")

    async with ts.SqliteJournal(tmp_path / "journal.db") as journal:
        executor = ts.Executor([step], journal=journal, on_event=note)
        with pytest.raises(ts.StreamFailed) as raised:
            await executor.run(calls(), run_id="streamed")
        broken = raised.value.outcome
        assert broken.run_id == "streamed"
        assert [result.output for result in broken.results] == ["one", "two"]
        record = await journal.load("streamed")
        assert [call.id for call in record.turn] == ["1", "1", "2"] and record.complete
        recovered = await executor.recover("streamed")
        assert recovered.results == broken.results
        assert [duplicate.call_id for duplicate in recovered.duplicates] == ["1"]
    # Each body ran once, in the broken run only. In either order: both calls are concurrency-safe and each
    # body begins once its start is journaled, and under load the second call's write can finish first.
    assert sorted(ran) == ["one", "two"]


async def test_stream_of_an_async_iterable_reports_a_call_before_the_next_one_arrives() -> None:
    @ts.tool(concurrency_safe=True)
    async def step(name: str) -> str:
        return name

    executor = ts.Executor([step])
    first_started = anyio.Event()

    async def calls() -> Any:
        yield ts.ToolCall("1", "step", {"name": "one"})
        # Only comes once the first call's start was reported: a turn that read the whole stream first hangs here.
        await first_started.wait()
        yield ts.ToolCall("2", "step", {"name": "two"})

    kinds: list[str] = []
    with anyio.fail_after(5):
        async for event in executor.stream(calls(), run_id="events"):
            kinds.append(type(event).__name__)
            if isinstance(event, ts.ToolStarted) and event.call_id == "1":
                first_started.set()
    assert isinstance(event, ts.RunFinished)
    assert [result.output for result in event.outcome.results] == ["one", "two"]
    assert event.outcome.run_id == "events"
    assert kinds.count("ToolFinished") == 2


class SteeringGone(Exception):
    pass


def broken_steering() -> None:
    raise SteeringGone("the steering store is gone")


@pytest.mark.parametrize("source", ["turn outcome", "async iterable run"])
async def test_a_steering_failure_comes_out_as_itself_not_as_a_broken_stream(source: str) -> None:
    # A list given to run() raises the steering's own error; so must a streamed turn and an async iterable.
    @ts.tool
    async def work(n: int) -> int:
        return n

    executor = ts.Executor([work], strategy=ts.Sequential())
    calls = [ts.ToolCall(f"c{n}", "work", {"n": n}) for n in range(3)]

    async def arriving() -> Any:
        for call in calls:
            yield call

    with pytest.raises(SteeringGone):
        if source == "turn outcome":
            async with executor.turn(steering=broken_steering) as turn:
                for call in calls:
                    turn.submit(call)
                turn.close()
                await turn.outcome()
        else:
            await executor.run(arriving(), steering=broken_steering)


async def test_a_consumer_that_awaits_between_results_gets_every_result() -> None:
    """A consumer of ``results()`` that awaits while it holds a result (as one that sends each to the model
    does): the turn may end meanwhile, and every result still comes, in model order (it ended early before,
    with one result of three on asyncio and two on trio)."""

    @ts.tool(concurrency_safe=True)
    async def step(i: int) -> int:
        await anyio.sleep(0.001 * i)
        return i

    executor = ts.Executor([step])
    got: list[str] = []
    async with executor.turn() as turn:
        for i in range(3):
            turn.submit(ts.ToolCall(f"c{i}", "step", {"i": i}))
        turn.close()
        async for result in turn.results():
            got.append(result.call_id)
            await anyio.sleep(0.05)
    assert got == ["c0", "c1", "c2"]
    # A consumer left for after the block: every result too.
    late = executor.turn()
    async with late:
        late.submit(ts.ToolCall("f1", "step", {"i": 1}))
        late.close()
        consumer = late.results()
    assert [result.call_id async for result in consumer] == ["f1"]


async def test_submit_or_close_from_another_thread_is_refused_and_the_turn_goes_on() -> None:
    """Nothing in another thread wakes the turn's event loop (asyncio took the call and never ran it; trio
    half took it and the turn hung): a ``TurnStateError`` naming the way to hand it over, and the turn intact."""

    @ts.tool
    async def echo(text: str) -> str:
        return text

    refused: list[BaseException] = []

    def from_thread(turn: ts.StreamingTurn, method: str) -> None:
        try:
            if method == "submit":
                turn.submit(ts.ToolCall("t", "echo", {"text": "thread"}))
            else:
                turn.close()
        except BaseException as exc:
            refused.append(exc)

    with anyio.fail_after(10):
        async with ts.Executor([echo]).turn() as turn:
            turn.submit(ts.ToolCall("a", "echo", {"text": "a"}))
            for method in ("submit", "close"):
                thread = threading.Thread(target=from_thread, args=(turn, method))
                thread.start()
                await anyio.to_thread.run_sync(thread.join)
            turn.submit(ts.ToolCall("b", "echo", {"text": "b"}))
            turn.close()
        outcome = await turn.outcome()
    assert [type(exc) for exc in refused] == [ts.TurnStateError, ts.TurnStateError]
    assert "another thread" in str(refused[0]) and "anyio.from_thread.run_sync(turn.submit" in str(refused[0])
    assert [(result.call_id, result.output) for result in outcome.results] == [("a", "a"), ("b", "b")]


def test_a_streamed_turn_cancelled_twice_on_asyncio_winds_down_before_the_cancellation_goes_on(
    tmp_path: Any,
) -> None:
    """asyncio's ``task.cancel()`` passes anyio's shield: a second one, while the block waited for its "block" call
    to finish, left the call running, the run live (``interrupt`` reached it) and the journaled run's lease held
    (``recover`` refused it as in progress). Now the cancellation goes on once the turn is down."""
    import asyncio

    ran: list[str] = []
    first_started: asyncio.Event | None = None

    @ts.tool
    async def slow(i: int) -> int:
        ran.append(f"start {i}")
        assert first_started is not None
        first_started.set()
        await asyncio.sleep(0.6)
        ran.append(f"end {i}")
        return i

    async def main() -> None:
        nonlocal first_started
        first_started = asyncio.Event()
        async with ts.SqliteJournal(str(tmp_path / "journal.db")) as journal:
            executor = ts.Executor([slow], strategy=ts.Sequential(), journal=journal)

            async def block() -> None:
                async with executor.turn(run_id="r1") as turn:
                    for i in range(3):
                        turn.submit(ts.ToolCall(f"c{i}", "slow", {"i": i}))
                    await asyncio.sleep(30)

            task = asyncio.create_task(block())
            await asyncio.wait_for(first_started.wait(), 10)  # the first call runs: the block waits for it
            for _ in range(2):
                task.cancel()
                await asyncio.sleep(0.02)
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 10)
            # The call that had started finished before the cancellation went on; no later call started.
            assert ran == ["start 0", "end 0"]
            assert executor.interrupt("late") == 0
            recovered = await executor.recover("r1")
            assert [result.call_id for result in recovered.results] == ["c0", "c1", "c2"]
            # The call that finished is not run again.
            assert recovered.results[0].output == 0 and ran.count("start 0") == 1

    asyncio.run(main())


async def test_leaving_the_events_of_a_streamed_turn_early_logs_nothing_and_misuse_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Leaving ``stream()`` of an async iterable early winds its turn down as a broken stream: a "block" call
    finishes (as ``interrupt`` lets it), and the events it sends after the consumer left are dropped, not logged
    as a failing event callback (a ``BrokenResourceError`` traceback each). ``outcome()`` and ``results()`` of a
    turn never entered are refused (they waited forever)."""
    log: list[str] = []

    @ts.tool
    async def slow() -> str:
        log.append("started")
        await anyio.sleep(0.2)
        log.append("finished")
        return "done"

    async def calls() -> Any:
        yield ts.ToolCall("c1", "slow", {})

    executor = ts.Executor([slow])
    with anyio.fail_after(10):
        async with contextlib.aclosing(executor.stream(calls())) as events:
            async for event in events:
                if isinstance(event, ts.ToolStarted):
                    break
        await anyio.sleep(0.4)
    assert log == ["started", "finished"]
    assert not [record for record in caplog.records if "failed" in record.getMessage()]

    never = executor.turn()
    with pytest.raises(ts.TurnStateError, match="outcome"):
        await never.outcome()
    with pytest.raises(ts.TurnStateError, match="results"):
        async for _ in never.results():
            pass


@pytest.mark.parametrize("waits_on", ["pre hook", "approver", "steering"])
async def test_a_streamed_run_is_cancelled_while_it_waits_for_a_hook_a_person_or_steering(
    waits_on: str, tmp_path: Any
) -> None:
    """A timeout around ``run()`` of an async iterable ended while admission awaited a pre hook without a
    timeout or a person, or the turn a steering question: the run hung (a list run times out at once). Now the
    broken stream ends those waits, the call waiting is answered without running, and a journaled run is left
    with every call answered (``recover`` runs nothing)."""
    ran: list[str] = []

    async def forever(*_: Any) -> Any:
        await anyio.sleep_forever()

    @ts.tool(needs_approval=waits_on == "approver")
    async def work(name: str) -> str:
        ran.append(name)
        return name

    options: dict[str, Any] = {}
    if waits_on == "pre hook":
        options["hooks"] = ts.Hooks().pre_tool_use("*", forever)
    elif waits_on == "approver":
        options["approver"] = forever
    steering = forever if waits_on == "steering" else None

    async def calls() -> Any:
        for name in ("a", "b"):
            yield ts.ToolCall(name, "work", {"name": name})

    async with ts.SqliteJournal(str(tmp_path / "journal.db")) as journal:
        executor = ts.Executor([work], strategy=ts.Sequential(), journal=journal, **options)
        started = anyio.current_time()
        with pytest.raises(TimeoutError):
            with anyio.fail_after(0.5):
                await executor.run(calls(), steering=steering, run_id="r1")
        assert anyio.current_time() - started < 5
        # Steering is asked between the calls (after the first ran); nothing else ran.
        assert ran == (["a"] if waits_on == "steering" else [])
        recovered = await executor.recover("r1")
        assert [result.call_id for result in recovered.results] == ["a", "b"]
        assert ran == (["a"] if waits_on == "steering" else [])


async def test_a_stream_broken_while_a_hook_waits_answers_every_call_queued_behind_it(tmp_path: Any) -> None:
    """The block raises while a pre hook waits on ``b``; behind it wait an unknown tool (with
    ``unknown_tool="raise"``, which raised out of the answering and left every later call unanswered and
    unjournaled), arguments the schema refuses, a repeated call ID and a valid call: ``StreamFailed`` carries
    one result for each call ID in model order, nothing after ``a`` ran, and ``recover`` gives the same."""
    ran: list[str] = []
    waiting = anyio.Event()
    first_ran = anyio.Event()

    @ts.tool
    async def work(name: str) -> str:
        ran.append(name)
        first_ran.set()
        return name

    async def hook(event: ts.HookEvent) -> None:
        if event.call_id == "b":
            waiting.set()
            await anyio.sleep_forever()

    async with ts.SqliteJournal(str(tmp_path / "journal.db")) as journal:
        executor = ts.Executor(
            [work],
            strategy=ts.Sequential(),
            unknown_tool="raise",
            hooks=ts.Hooks().pre_tool_use("*", hook),
            journal=journal,
        )
        calls = [
            ts.ToolCall("a", "work", {"name": "a"}),
            ts.ToolCall("b", "work", {"name": "b"}),
            ts.ToolCall("c", "nope", {}),
            ts.ToolCall("d", "work", {"name": 5}),
            ts.ToolCall("a", "work", {"name": "again"}),
            ts.ToolCall("e", "work", {"name": "e"}),
        ]
        with anyio.fail_after(10):
            with pytest.raises(ts.StreamFailed) as failed:
                async with executor.turn(run_id="r1") as turn:
                    for call in calls:
                        turn.submit(call)
                    await first_ran.wait()
                    await waiting.wait()
                    raise ValueError("the model's stream broke")
        expected = [("a", None), ("b", "skipped"), ("c", "unknown_tool"), ("d", "invalid_input"), ("e", "skipped")]
        assert [(result.call_id, result.error_kind) for result in failed.value.outcome.results] == expected
        recovered = await executor.recover("r1")
        assert [(result.call_id, result.error_kind) for result in recovered.results] == expected
        assert ran == ["a"]
