"""Cancellation from every side: a foreign cancellation fails only its call, a process-level
exception raised by a tool propagates as itself under every strategy, and leaving a stream
early stops the run without touching the consumer's task."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio

STRATEGIES = [
    ts.Sequential(),
    ts.Parallel(),
    ts.Batched(2),
    ts.Partitioned(),
    ts.ResourceAware(),
]


def strategy_id(strategy: ts.Strategy) -> str:
    return type(strategy).__name__


@pytest.mark.parametrize("strategy", STRATEGIES, ids=strategy_id)
async def test_a_future_cancelled_by_someone_else_fails_only_its_call(
    strategy: ts.Strategy, anyio_backend: str
) -> None:
    blocker: dict[str, Any] = {}
    waiting = anyio.Event()

    @ts.tool(concurrency_safe=True, resources=lambda args: ts.Access(reads=("a",)))
    async def waits() -> str:
        if anyio_backend == "asyncio":
            future = asyncio.get_running_loop().create_future()
            blocker["future"] = future
            waiting.set()
            await future
        else:
            # trio has no foreign cancellation; an asyncio one raised by hand is the tool's own failure.
            await anyio.sleep(0.01)
            raise asyncio.CancelledError("raised by the tool")
        return "unreachable"

    @ts.tool(concurrency_safe=True, resources=lambda args: ts.Access(reads=("a",)))
    async def fine(n: int) -> int:
        await anyio.sleep(0.02)
        return n

    async def cancel_it_from_outside() -> None:
        await waiting.wait()
        blocker["future"].cancel("somebody else gave up")

    executor = ts.Executor([waits, fine], strategy=strategy)
    calls = [ts.ToolCall("f1", "fine", {"n": 1}), ts.ToolCall("w", "waits"), ts.ToolCall("f2", "fine", {"n": 2})]
    async with anyio.create_task_group() as group:
        if anyio_backend == "asyncio":
            group.start_soon(cancel_it_from_outside)
        outcome = await executor.run(calls)
    by_id = {result.call_id: result for result in outcome.results}
    assert [result.call_id for result in outcome.results] == ["f1", "w", "f2"]
    assert by_id["f1"].output == 1 and by_id["f2"].output == 2
    assert by_id["w"].error_kind == "execution_error"
    assert "CancelledError" in (by_id["w"].error or "")
    # The caller's own task is not cancelled: it carries on.
    await anyio.lowlevel.checkpoint()


# A foreign cancellation is an asyncio notion; trio is covered by the strategy test above.
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_lone_call_cancelled_from_outside_is_its_own_failure(anyio_backend: str) -> None:
    @ts.tool
    async def waits() -> None:
        future = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.01, future.cancel)
        await future

    outcome = await ts.Executor([waits]).run([ts.ToolCall("w", "waits")])
    assert outcome.results[0].error_kind == "execution_error"


CONCURRENT = [ts.Parallel(max_concurrency=3), ts.Partitioned(max_concurrency=3), ts.ResourceAware(max_concurrency=3)]


def self_cancelling_tool(then: str) -> ts.FunctionTool:
    """Call 2 cancels the task it runs in, then awaits (the cancellation lands in the tool) or returns
    (it stays pending on the task)."""

    @ts.tool(concurrency_safe=True, resources=lambda args: ts.Access(reads=("a",)))
    async def work(n: int) -> int:
        await asyncio.sleep(0.01)
        if n == 2:
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            if then == "awaits":
                await asyncio.sleep(0.01)
        return n

    return work


def assert_only_call_2_touched(results: list[ts.ToolResult], then: str) -> None:
    assert [result.call_id for result in results] == [f"c{n}" for n in range(6)]
    for n, result in enumerate(results):
        if n == 2 and then == "awaits":
            assert result.error_kind == "execution_error"
            assert result.error == (
                "`work` failed: the task it ran in was cancelled from outside this run (CancelledError)"
            )
        else:
            assert (result.output, result.error) == (n, None), result


# Cancelling a task by hand is an asyncio notion.
def awaiting_post_hooks() -> ts.Hooks:
    """Post hooks that await: a cancellation a call left pending would land in them."""

    async def observe(event: ts.HookEvent) -> None:
        await asyncio.sleep(0)

    hooks = ts.Hooks()
    hooks.post_tool_use("*", observe)
    hooks.post_tool_use_failure("*", observe)
    return hooks


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("hooked", [False, True], ids=["plain", "post-hooked"])
@pytest.mark.parametrize("then", ["awaits", "returns"])
@pytest.mark.parametrize("strategy", CONCURRENT, ids=strategy_id)
async def test_a_tool_that_cancels_the_worker_it_runs_on_fails_only_its_own_call(
    strategy: ts.Strategy, then: str, hooked: bool, anyio_backend: str
) -> None:
    # Call 0 runs on the caller's task and waits; the later calls run on the pool's workers. A cancellation
    # left pending is taken when the call ends, not blamed on the next call the worker takes, nor on the
    # call's own post hooks.
    hooks = awaiting_post_hooks() if hooked else None
    executor = ts.Executor([self_cancelling_tool(then)], strategy=strategy, hooks=hooks)
    with anyio.fail_after(5):
        outcome = await executor.run([ts.ToolCall(f"c{n}", "work", {"n": n}) for n in range(6)])
    assert_only_call_2_touched(outcome.results, then)
    current = asyncio.current_task()
    assert current is not None and current.cancelling() == 0
    # The executor runs on: the workers it used are not left cancelled.
    again = await executor.run([ts.ToolCall(f"c{n}", "work", {"n": n + 10}) for n in range(3)])
    assert [result.output for result in again.results] == [10, 11, 12]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("hooked", [False, True], ids=["plain", "post-hooked"])
@pytest.mark.parametrize("then", ["awaits", "returns"])
async def test_a_tool_that_cancels_its_task_in_a_streamed_turn_fails_only_its_own_call(
    then: str, hooked: bool, anyio_backend: str
) -> None:
    hooks = awaiting_post_hooks() if hooked else None
    executor = ts.Executor([self_cancelling_tool(then)], strategy=ts.Parallel(max_concurrency=3), hooks=hooks)
    with anyio.fail_after(5):
        async with executor.turn() as turn:
            for n in range(6):
                turn.submit(ts.ToolCall(f"c{n}", "work", {"n": n}))
            turn.close()
            outcome = await turn.outcome()
    assert_only_call_2_touched(outcome.results, then)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_tool_that_cancels_the_caller_s_task_cancels_the_run(anyio_backend: str) -> None:
    # A call run on the caller's own task (Sequential runs them all there): cancelling it is cancelling the
    # caller, as from anywhere else, and the run stops with it.
    ran: list[int] = []

    @ts.tool
    async def work(n: int) -> int:
        ran.append(n)
        if n == 1:
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
        await asyncio.sleep(0.01)
        return n

    executor = ts.Executor([work], strategy=ts.Sequential())
    task = asyncio.ensure_future(executor.run([ts.ToolCall(f"c{n}", "work", {"n": n}) for n in range(3)]))
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert ran == [0, 1]


async def test_the_run_s_own_cancellation_still_propagates(anyio_backend: str) -> None:
    ran: list[str] = []

    @ts.tool(concurrency_safe=True)
    async def slow(n: int) -> None:
        await anyio.sleep(5)
        ran.append("finished")

    executor = ts.Executor([slow])
    with anyio.move_on_after(0.05) as scope:
        await executor.run([ts.ToolCall(str(n), "slow", {"n": n}) for n in range(3)])
    assert scope.cancelled_caught
    assert ran == []


async def test_calls_left_unstarted_when_the_run_is_cancelled_as_the_first_waits() -> None:
    # The first call cancels the scope around the run, then waits: the calls left, each in a task of its own
    # by then, never start.
    entered: list[int] = []

    @ts.tool(concurrency_safe=True)
    async def call(n: int) -> int:
        entered.append(n)
        if n == 0:
            scope.cancel()
        await anyio.sleep(0.01)
        return n

    executor = ts.Executor([call])
    with anyio.CancelScope() as scope:
        await executor.run([ts.ToolCall(f"c{n}", "call", {"n": n}) for n in range(4)])
    assert scope.cancelled_caught
    assert entered == [0]


@pytest.mark.parametrize("stopping", [KeyboardInterrupt, SystemExit])
async def test_a_process_level_exception_from_a_waiting_call_in_its_own_task_is_raised_by_the_run(
    stopping: type[BaseException],
) -> None:
    # Every call of the batch waits: each after the first runs in a task of its own. The exception is the
    # run's (raised where ``run`` is awaited, the event loop going on), not one the event loop raises.
    entered: list[int] = []

    @ts.tool(concurrency_safe=True)
    async def call(n: int) -> int:
        entered.append(n)
        await anyio.sleep(0.01 if n == 2 else 0.5)
        if n == 2:
            raise stopping("stop")
        return n

    executor = ts.Executor([call])
    with anyio.fail_after(5):
        with pytest.raises(stopping) as caught:
            await executor.run([ts.ToolCall(f"c{n}", "call", {"n": n}) for n in range(4)])
        assert not isinstance(caught.value, BaseExceptionGroup)
        assert sorted(entered) == [0, 1, 2, 3]
        outcome = await executor.run([ts.ToolCall("again", "call", {"n": 5})])
    assert outcome.results[0].output == 5


@pytest.mark.parametrize("strategy", STRATEGIES, ids=strategy_id)
@pytest.mark.parametrize("stopping", [KeyboardInterrupt, SystemExit, GeneratorExit])
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_process_level_exception_from_a_tool_propagates_as_itself(
    strategy: ts.Strategy, stopping: type[BaseException], backend: str
) -> None:
    @ts.tool(concurrency_safe=True, resources=lambda args: ts.Access(reads=("a",)))
    async def stops() -> None:
        await anyio.sleep(0.01)
        raise stopping()

    @ts.tool(concurrency_safe=True, resources=lambda args: ts.Access(reads=("a",)))
    async def other(n: int) -> int:
        await anyio.sleep(0.005)
        return n

    async def main() -> None:
        executor = ts.Executor([stops, other], strategy=strategy)
        await executor.run(
            [ts.ToolCall("o1", "other", {"n": 1}), ts.ToolCall("s", "stops"), ts.ToolCall("o2", "other", {"n": 2})]
        )

    with pytest.raises(stopping) as caught:
        anyio.run(main, backend=backend)
    assert not isinstance(caught.value, BaseExceptionGroup)


async def test_leaving_a_stream_with_break_stops_the_run_and_leaves_the_caller_alone(anyio_backend: str) -> None:
    began: list[int] = []
    stopped: list[int] = []
    finished: list[int] = []
    started = 0

    @ts.tool(concurrency_safe=True)
    async def slow(n: int, seconds: float) -> None:
        began.append(n)
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            stopped.append(n)
            raise
        finished.append(n)

    executor = ts.Executor([slow])
    calls = [ts.ToolCall(str(n), "slow", {"n": n, "seconds": 60}) for n in range(4)]
    async for event in executor.stream(calls):
        if isinstance(event, ts.ToolStarted):
            started += 1
            if started == 2:
                break
    gc.collect()
    # The run is cancelled when the closed generator's aclose() runs, at the event loop's next turn:
    # until then nothing stops the calls. A full collection in a process that imported the whole test
    # suite blocks the loop for about half a second, so the calls wait far longer than any such pause,
    # and this one stands for it.
    time.sleep(0.6)  # noqa: ASYNC251 - blocks the event loop on purpose
    # The caller's task is not cancelled, and the run stops: every call that began is cancelled, none finishes.
    with anyio.fail_after(5):
        while True:
            if began and len(stopped) == len(began):
                break
            await anyio.sleep(0.01)
    await anyio.sleep(0.05)
    assert sorted(stopped) == sorted(began)
    assert finished == []
    # And the executor takes the next turn as usual.
    outcome = await executor.run([ts.ToolCall("again", "slow", {"n": 9, "seconds": 0.01})])
    assert finished == [9]
    assert outcome.results[0].is_error is False


@pytest.mark.parametrize(
    "strategy",
    [
        ts.Sequential(),
        ts.Parallel(max_concurrency=1),
        ts.Partitioned(max_concurrency=1),
        ts.ResourceAware(max_concurrency=1),
    ],
    ids=strategy_id,
)
async def test_no_call_starts_once_a_stream_is_left_even_when_the_call_before_ends_at_that_moment(
    anyio_backend: str, strategy: ts.Strategy
) -> None:
    # The first call's wait ends in the very step that leaves the stream: the task running it wakes
    # normally, not cancelled, and would take the next call before it hears of the cancellation.
    began: list[int] = []
    release = anyio.Event()

    @ts.tool(concurrency_safe=True)
    async def step(n: int) -> None:
        began.append(n)
        if n == 0:
            await release.wait()
        else:
            await anyio.lowlevel.checkpoint()

    executor = ts.Executor([step], strategy=strategy)
    events = executor.stream([ts.ToolCall(str(n), "step", {"n": n}) for n in range(3)])
    async for event in events:
        if isinstance(event, ts.ToolStarted):
            break
    left_with = list(began)
    release.set()
    await events.aclose()  # type: ignore[attr-defined]
    for _ in range(20):
        await anyio.lowlevel.checkpoint()
    await anyio.sleep(0.05)
    assert 0 in left_with and 2 not in left_with
    assert began == left_with


async def test_a_stream_read_to_the_end_reports_everything(anyio_backend: str) -> None:
    @ts.tool(concurrency_safe=True)
    async def quick(n: int) -> int:
        await anyio.sleep(0.001)
        return n

    events = [
        event async for event in ts.Executor([quick]).stream([ts.ToolCall(str(n), "quick", {"n": n}) for n in range(3)])
    ]
    assert isinstance(events[-1], ts.RunFinished)
    assert [result.output for result in events[-1].outcome.results] == [0, 1, 2]


@pytest.mark.parametrize("strategy", [ts.Parallel(), ts.Partitioned(), ts.ResourceAware()], ids=strategy_id)
async def test_a_started_sync_sibling_is_waited_for_and_reports_what_it_did(strategy: ts.Strategy) -> None:
    # A failure aborts its batch; a sibling whose body already runs in a thread cannot be stopped,
    # so the model must hear what it did, not `cancelled` (and nothing of it runs after run() returns).
    log: list[str] = []

    @ts.tool(concurrency_safe=True, resources=lambda args: ts.Access(reads=("a",)))
    def writes() -> str:
        log.append("started")
        time.sleep(0.1)
        log.append("wrote")
        return "written"

    @ts.tool(concurrency_safe=True, abort_siblings_on_error=True, resources=lambda args: ts.Access(reads=("a",)))
    async def fails() -> None:
        await anyio.sleep(0.03)
        raise RuntimeError("broken")

    outcome = await ts.Executor([writes, fails], strategy=strategy).run(
        [ts.ToolCall("w", "writes"), ts.ToolCall("f", "fails")]
    )
    assert log == ["started", "wrote"]
    by_id = {result.call_id: result for result in outcome.results}
    assert by_id["f"].error_kind == "execution_error"
    assert by_id["w"].is_error is False and by_id["w"].output == "written"
    await anyio.sleep(0.15)
    assert log == ["started", "wrote"]


async def test_a_cancelled_sync_call_that_never_started_never_runs() -> None:
    # The thread pool is held by another body, so the aborted sibling is still waiting for a thread.
    log: list[str] = []
    release = threading.Event()

    @ts.tool(concurrency_safe=True)
    def holds_the_only_thread() -> str:
        release.wait(2)
        return "held"

    @ts.tool(concurrency_safe=True)
    def waits_for_a_thread() -> str:
        log.append("ran")
        return "ran"

    @ts.tool(concurrency_safe=True, abort_siblings_on_error=True)
    async def fails() -> None:
        await anyio.sleep(0.03)
        release.set()
        raise RuntimeError("broken")

    limiter = anyio.to_thread.current_default_thread_limiter()
    tokens = limiter.total_tokens
    limiter.total_tokens = 1
    try:
        outcome = await ts.Executor([holds_the_only_thread, waits_for_a_thread, fails]).run(
            [
                ts.ToolCall("h", "holds_the_only_thread"),
                ts.ToolCall("w", "waits_for_a_thread"),
                ts.ToolCall("f", "fails"),
            ]
        )
        await anyio.sleep(0.1)
    finally:
        limiter.total_tokens = tokens
    by_id = {result.call_id: result for result in outcome.results}
    assert by_id["w"].error_kind == "cancelled"
    assert log == []
    assert by_id["h"].output == "held"


async def test_a_stuck_sync_call_still_times_out_at_once() -> None:
    release = threading.Event()

    @ts.tool(timeout=0.05)
    def stuck() -> str:
        release.wait(2)
        return "late"

    started = time.monotonic()
    outcome = await ts.Executor([stuck]).run([ts.ToolCall("s", "stuck")])
    release.set()
    assert outcome.results[0].error_kind == "timeout"
    assert time.monotonic() - started < 1


async def test_cancel_by_run_reaches_only_that_run_s_call() -> None:
    # Two conversations on one shared executor both have a call "c1".
    finished: list[str] = []

    @ts.tool(interrupt_behavior="cancel")
    async def work(who: str) -> str:
        await anyio.sleep(0.1)
        finished.append(who)
        return who

    executor = ts.Executor([work])
    outcomes: dict[str, ts.Outcome] = {}

    async def conversation(run_id: str) -> None:
        outcomes[run_id] = await executor.run([ts.ToolCall("c1", "work", {"who": run_id})], run_id=run_id)

    async with anyio.create_task_group() as group:
        group.start_soon(conversation, "alice")
        group.start_soon(conversation, "bob")
        await anyio.sleep(0.02)
        assert executor.cancel("c1", run_id="alice") is True
        assert executor.cancel("c1", run_id="nobody") is False
    assert outcomes["alice"].results[0].error_kind == "cancelled"
    assert outcomes["bob"].results[0].output == "bob"
    assert finished == ["bob"]
    assert outcomes["alice"].run_id == "alice"


async def test_interrupt_by_run_reaches_only_that_run() -> None:
    @ts.tool(interrupt_behavior="cancel")
    async def work(who: str) -> str:
        await anyio.sleep(0.1)
        return who

    executor = ts.Executor([work])
    outcomes: dict[str, ts.Outcome] = {}

    async def conversation(run_id: str) -> None:
        outcomes[run_id] = await executor.run([ts.ToolCall("c1", "work", {"who": run_id})], run_id=run_id)

    async with anyio.create_task_group() as group:
        group.start_soon(conversation, "alice")
        group.start_soon(conversation, "bob")
        await anyio.sleep(0.02)
        assert executor.interrupt(run_id="bob") == 1
    assert outcomes["alice"].results[0].output == "alice"
    assert outcomes["bob"].results[0].error_kind == "cancelled"


@pytest.mark.parametrize("how", ["cancel", "interrupt"])
@pytest.mark.parametrize("cap", [2, 10], ids=["workers-grow", "all-at-once"])
async def test_a_call_cancelled_or_interrupted_by_the_first_call_before_the_rest_start_never_runs(
    cap: int, how: str
) -> None:
    # The first call cancels the third (or interrupts the run) and then waits: the calls after it start in workers
    # (with a cap of 10, all at once, in the next step of the event loop) and each must see that first.
    ran: list[str] = []

    @ts.tool(concurrency_safe=True, interrupt_behavior="cancel")
    async def work(n: int) -> int:
        ran.append(f"c{n}")
        if n == 0:
            if how == "cancel":
                assert executor.cancel("c2") is True
            else:
                assert executor.interrupt("enough") == 1
        await anyio.sleep(0.01)
        return n

    executor = ts.Executor([work], strategy=ts.Partitioned(max_concurrency=cap))
    with anyio.fail_after(5):
        outcome = await executor.run([ts.ToolCall(f"c{n}", "work", {"n": n}) for n in range(4)])
    kinds = [(result.call_id, result.error_kind) for result in outcome.results]
    if how == "cancel":
        assert ran == ["c0", "c1", "c3"]
        assert kinds == [("c0", None), ("c1", None), ("c2", "cancelled"), ("c3", None)]
    else:
        assert ran == ["c0"]
        assert kinds == [("c0", "cancelled"), ("c1", "skipped"), ("c2", "skipped"), ("c3", "skipped")]


@pytest.mark.parametrize("cap", [2, 10], ids=["workers-grow", "all-at-once"])
async def test_a_run_cancelled_while_its_first_call_waits_in_a_shield_is_cancelled_not_half_answered(
    cap: int,
) -> None:
    # The second call cancels the caller's scope; the calls after it never start, and the first finishes its
    # shielded wait. The run is cancelled: no result assembled for calls that never ran.
    ran: list[int] = []
    box: list[anyio.CancelScope] = []

    @ts.tool(concurrency_safe=True)
    async def work(n: int) -> int:
        ran.append(n)
        if n == 0:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.05)
        elif n == 1:
            box[0].cancel()
        else:
            await anyio.sleep(0.01)
        return n

    executor = ts.Executor([work], strategy=ts.Partitioned(max_concurrency=cap))
    with anyio.fail_after(5):
        with anyio.CancelScope() as caller:
            box.append(caller)
            await executor.run([ts.ToolCall(f"c{n}", "work", {"n": n}) for n in range(4)])
            pytest.fail("the run returned after it was cancelled")
    assert caller.cancelled_caught
    assert ran == [0, 1]


async def test_a_journaled_run_whose_deadline_falls_while_a_hook_blocks_is_cancelled(tmp_path: Any) -> None:
    # The calls never wait but in the journal's shielded writes; the caller's deadline passes while the last
    # call's pre hook blocks the event loop. The run is cancelled, and recovering it runs nothing twice.
    ran: list[int] = []

    @ts.tool(concurrency_safe=True)
    async def work(n: int) -> int:
        ran.append(n)
        return n

    async def blocking_hook(event: ts.HookEvent) -> None:
        if event.call_id == "c3":
            time.sleep(0.08)  # noqa: ASYNC251 - blocks the event loop past the deadline on purpose
            await anyio.lowlevel.checkpoint()

    def executor() -> ts.Executor:
        return ts.Executor(
            [work],
            journal=ts.SqliteJournal(str(tmp_path / "journal.db")),
            hooks=ts.Hooks().pre_tool_use("*", blocking_hook),
        )

    with anyio.fail_after(5):
        with anyio.move_on_after(0.05) as caller:
            await executor().run([ts.ToolCall(f"c{n}", "work", {"n": n}) for n in range(4)], run_id="r1")
            pytest.fail("the run returned after its deadline cancelled it")
    assert caller.cancelled_caught
    before = list(ran)
    outcome = await executor().recover("r1")
    assert [result.is_error for result in outcome.results] == [False] * 4
    assert sorted(ran) == [0, 1, 2, 3]
    assert len(ran) == 4, f"a call ran twice: {before} then {ran}"


@pytest.mark.parametrize("cap", [2, 10], ids=["workers-grow", "all-at-once"])
def test_an_event_loop_closing_just_after_a_run_started_in_the_background_is_not_held_open(cap: int) -> None:
    # ``asyncio.run`` cancels every task left once ``main`` returns: the run's workers, made as its first call
    # waited, are cancelled before their first step and never tell their group. The run must end anyway.
    @ts.tool(concurrency_safe=True)
    async def slow(n: int) -> int:
        await asyncio.sleep(0.5)
        return n

    async def main() -> None:
        executor = ts.Executor([slow], strategy=ts.Partitioned(max_concurrency=cap))
        calls = [ts.ToolCall(f"c{n}", "slow", {"n": n}) for n in range(4)]
        # Returns at once: the run takes its first step (its first call waits, its workers are made) in the
        # event loop's last round, and its workers are cancelled before their own.
        running.append(asyncio.get_running_loop().create_task(executor.run(calls)))

    running: list[asyncio.Task[ts.Outcome]] = []

    loop_thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    loop_thread.start()
    loop_thread.join(5)
    assert not loop_thread.is_alive(), "asyncio.run never returned: the run held the event loop open"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # cancels asyncio tasks by hand
@pytest.mark.parametrize("cap", [2, 10], ids=["workers-grow", "all-at-once"])
async def test_a_run_whose_workers_are_cancelled_by_someone_else_before_they_start_ends(cap: int) -> None:
    @ts.tool(concurrency_safe=True)
    async def slow(n: int) -> int:
        await asyncio.sleep(0.5)
        return n

    executor = ts.Executor([slow], strategy=ts.Partitioned(max_concurrency=cap))
    before = asyncio.all_tasks()
    run = asyncio.create_task(executor.run([ts.ToolCall(f"c{n}", "slow", {"n": n}) for n in range(4)]))
    await asyncio.sleep(0)  # the run's first step: its first call waits, its workers are made
    workers = asyncio.all_tasks() - before - {run}
    assert workers, "the run made no worker"
    for task in workers:
        task.cancel()
    run.cancel()
    _, pending = await asyncio.wait({run, *workers}, timeout=3)
    assert not pending
    assert run.cancelled()


@pytest.mark.parametrize("where", ["post_hook", "async_listener"])
@pytest.mark.parametrize("cap", [2, 10], ids=["workers-grow", "all-at-once"])
async def test_a_cancellation_that_is_not_the_runs_in_a_post_hook_or_listener_fails_neither_call_nor_run(
    cap: int, where: str, anyio_backend: str
) -> None:
    # A post hook raises CancelledError by hand, or an async event listener awaits a future someone else
    # cancels: as in a tool's body, that is not the run's cancellation. Hooks and listeners observe, their
    # errors are logged: every call keeps its result, and the run its other calls.
    @ts.tool(concurrency_safe=True)
    async def step(n: int) -> int:
        await anyio.sleep(0.01 * (n + 1))
        return n

    def post(event: ts.HookEvent) -> None:
        if event.call_id == "c1":
            raise asyncio.CancelledError("raised by hand")

    async def listener(event: ts.Event) -> None:
        if isinstance(event, ts.ToolFinished) and event.result.call_id == "c1":
            if anyio_backend == "asyncio":
                future = asyncio.get_running_loop().create_future()
                asyncio.get_running_loop().call_later(0.001, future.cancel)
                await future
            else:
                raise asyncio.CancelledError("raised by hand")

    options: dict[str, Any] = (
        {"hooks": ts.Hooks().post_tool_use("*", post)} if where == "post_hook" else {"on_event": listener}
    )
    executor = ts.Executor([step], strategy=ts.Partitioned(max_concurrency=cap), **options)
    with anyio.fail_after(5):
        outcome = await executor.run([ts.ToolCall(f"c{n}", "step", {"n": n}) for n in range(4)])
    assert [(result.call_id, result.output) for result in outcome.results] == [(f"c{n}", n) for n in range(4)]
