"""Random turns of tools that succeed, raise, overrun their timeout, hang, get cancelled or interrupt the run.

Under each strategy and on both backends, every run must keep the promises of
DESIGN §4 and §5, checked on every example:

- exactly one result per unique call ID, in model order, and exactly one
  start and one finish event per call, skipped and cancelled ones included;
- every result is what its tool's fault allows, and every ``cancelled`` or
  ``skipped`` result has a cause that really happened (an aborting failure in
  the same batch, an interrupt, the caller, steering, a raising failure);
- no call starts after steering stopped the run or after an interrupt;
- sibling results are kept; no tool body and no task is left running when
  ``run`` returns or raises;
- cancelling the run from outside raises, returns nothing, and never turns
  into a ``cancelled`` result;
- a call answered ``cancelled`` or ``skipped`` without having started never
  runs its body, not even later (sync bodies in threads included), and a
  cancellation from outside the run (a future someone else cancels) fails only
  its own call.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import toolsched as ts

pytestmark = pytest.mark.anyio

TIMEOUT = 0.005


@dataclass
class Harness:
    """What one example's tools share: the executor, the event log, a count of tool bodies alive."""

    executor: ts.Executor | None = None
    log: list[Any] = field(default_factory=list)
    alive: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    # The calls (by ``n``) whose bodies started, for the tools that note it.
    bodies: list[int] = field(default_factory=list)


CURRENT = [Harness()]


def harness() -> Harness:
    return CURRENT[0]


def safe(args: Any) -> bool:
    return bool(args["safe"])


def access(args: Any) -> ts.Access:
    """For ResourceAware: safe calls only read; the others write one of three keys, so some conflict."""
    return ts.Access(reads=["shared"]) if args["safe"] else ts.Access(writes=[f"key{args['n'] % 3}"])


async def body(seconds: float, value: Any = None, error: Exception | None = None) -> Any:
    """A tool body that counts itself alive until it ends, however it ends."""
    state = harness()
    state.alive += 1
    try:
        if seconds == float("inf"):
            await anyio.sleep_forever()
        await anyio.sleep(seconds)
        if error is not None:
            raise error
        return value
    finally:
        state.alive -= 1


def started_body(n: int) -> None:
    """Notes that call ``n``'s body started (from the loop or a worker thread)."""
    harness().bodies.append(n)


@ts.tool(resources=access, concurrency_safe=safe)
async def work(n: int, safe: bool, delay: float) -> int:
    started_body(n)
    return int(await body(delay, n))


@ts.tool(resources=access, concurrency_safe=safe)
def sync_work(n: int, safe: bool, delay: float) -> int:
    # In a worker thread: it cannot be stopped once it started, so it must be waited for.
    started_body(n)
    time.sleep(delay * 3)
    return n


@ts.tool(resources=access, concurrency_safe=safe)
async def foreign(n: int, safe: bool, delay: float) -> None:
    # What it awaits is cancelled by something outside the run.
    started_body(n)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        await anyio.sleep(delay)
        raise asyncio.CancelledError("cancelled by someone else") from None
    future = loop.create_future()
    loop.call_later(delay, future.cancel)
    await future


@ts.tool(resources=access, concurrency_safe=safe, interrupt_behavior="cancel")
async def browse(n: int, safe: bool, delay: float) -> int:
    return int(await body(delay * 5, n))


@ts.tool(resources=access, concurrency_safe=safe)
async def fail(n: int, safe: bool, delay: float) -> None:
    await body(delay, error=ValueError(f"fault {n}"))


@ts.tool(resources=access, concurrency_safe=safe, abort_siblings_on_error=True)
async def fail_abort(n: int, safe: bool, delay: float) -> None:
    await body(delay, error=OSError(f"fault {n}"))


@ts.tool(resources=access, concurrency_safe=safe, timeout=TIMEOUT)
async def slow(n: int, safe: bool, delay: float) -> None:
    await body(5)


@ts.tool(resources=access, concurrency_safe=safe, timeout=TIMEOUT)
async def hang(n: int, safe: bool, delay: float) -> None:
    await body(float("inf"))


@ts.tool(resources=access, concurrency_safe=safe, timeout=TIMEOUT)
def hang_sync(n: int, safe: bool, delay: float, ctx: ts.ToolContext) -> None:
    harness().release.wait(5)


@ts.tool(resources=access, concurrency_safe=safe, timeout=5)
async def quit_early(n: int, safe: bool, delay: float, ctx: ts.ToolContext) -> None:
    # In a cancel scope (it has a timeout): stopped at its next await.
    ctx.cancel("gave up")
    await body(5)


@ts.tool(resources=access, concurrency_safe=safe)
async def quit_returning(n: int, safe: bool, delay: float, ctx: ts.ToolContext) -> int:
    # Without a cancel scope: it returns, and the result is still cancelled.
    ctx.cancel("gave up")
    return int(await body(delay, n))


@ts.tool(resources=access, concurrency_safe=safe, timeout=5)
async def victim(n: int, safe: bool, delay: float, ctx: ts.ToolContext) -> None:
    # Cancelled by the caller as it starts; its cancel scope stops it.
    await body(5)


@ts.tool(resources=access, concurrency_safe=safe)
async def polite(n: int, safe: bool, delay: float, ctx: ts.ToolContext) -> int:
    # Asked by the caller to stop as it starts; without a cancel scope it stops by itself.
    state = harness()
    state.alive += 1
    try:
        for _ in range(5000):
            if ctx.cancelled:
                return n
            await anyio.sleep(0.001)
        raise AssertionError("never asked to stop")
    finally:
        state.alive -= 1


@ts.tool(resources=access, concurrency_safe=safe)
async def interrupter(n: int, safe: bool, delay: float) -> int:
    state = harness()
    state.log.append("interrupt")
    assert state.executor is not None
    state.executor.interrupt("new user message")
    return n


TOOLS = [
    work,
    sync_work,
    foreign,
    browse,
    fail,
    fail_abort,
    slow,
    hang,
    hang_sync,
    quit_early,
    quit_returning,
    victim,
    polite,
    interrupter,
]
ABORTING = {"fail_abort"}

# What a call that ran may end as, by tool (besides being cancelled by an aborting sibling).
RAN_KINDS: dict[str, set[str | None]] = {
    "work": {None},
    "sync_work": {None},
    "foreign": {"execution_error"},
    "browse": {None, "cancelled"},
    "fail": {"execution_error"},
    "fail_abort": {"execution_error"},
    "slow": {"timeout"},
    "hang": {"timeout"},
    "hang_sync": {"timeout"},
    "quit_early": {"cancelled"},
    "quit_returning": {"cancelled"},
    "victim": {"cancelled"},
    "polite": {None},
    "interrupter": {None},
}

ABORTED = re.compile(r"call (\S+) \(`(\w+)`\) failed and cancelled the rest of its batch$")
STOPPED_BY = re.compile(r"^not run: call (\S+) \(`(\w+)`\) failed$")

call_specs = st.tuples(
    st.sampled_from("abcdefghij"),
    st.sampled_from(["work", "work", *[t.name for t in TOOLS]]),
    st.booleans(),
    st.sampled_from([0.0, 0.001, 0.003]),
)
turns = st.lists(call_specs, min_size=1, max_size=8)

STRATEGIES = [
    ts.Sequential(),
    ts.Parallel(max_concurrency=3),
    ts.Batched(2),
    ts.Partitioned(max_concurrency=3),
    ts.ResourceAware(max_concurrency=3),
]


@dataclass
class Run:
    """One example's run and what was observed of it."""

    calls: list[ts.ToolCall]
    results: list[ts.ToolResult]
    log: list[Any]
    raised: ts.ToolCallFailed | None
    abort_all: bool
    cancelled_pending: str | None
    scoped_batches: set[int]

    def index(self, marker: str) -> int | None:
        return self.log.index(marker) if marker in self.log else None

    def started(self) -> dict[str, bool]:
        return {e.call_id: e.ran for e in self.log if isinstance(e, ts.ToolStarted)}


def check_every_call_answered_once(run: Run) -> None:
    unique = list(dict.fromkeys(call.id for call in run.calls))
    assert [r.call_id for r in run.results] == unique
    starts = [e.call_id for e in run.log if isinstance(e, ts.ToolStarted)]
    finishes = [e.result for e in run.log if isinstance(e, ts.ToolFinished)]
    assert sorted(starts) == sorted(unique)
    assert sorted(r.call_id for r in finishes) == sorted(unique)
    assert {r.call_id: r for r in finishes} == {r.call_id: r for r in run.results}


def check_nothing_started_after(run: Run, marker: str) -> None:
    stop = run.index(marker)
    if stop is None:
        return
    late = [e.call_id for e in run.log[stop:] if isinstance(e, ts.ToolStarted) and e.ran]
    assert late == [], f"started after {marker}: {late}"


def check_an_aborting_failure_stops_its_batch(run: Run) -> None:
    first_call = {call.id: call for call in reversed(run.calls)}
    for position, entry in enumerate(run.log):
        if not isinstance(entry, ts.ToolFinished) or entry.result.error_kind not in ("execution_error", "timeout"):
            continue
        if not (run.abort_all or entry.result.tool_name in ABORTING):
            continue
        late = [
            e.call_id
            for e in run.log[position:]
            if isinstance(e, ts.ToolStarted) and e.ran and e.batch == entry.result.batch
        ]
        assert late == [], f"started in batch {entry.result.batch} after {entry.result.call_id} aborted it: {late}"
        assert first_call[entry.result.call_id].name == entry.result.tool_name


def check_each_result_has_a_real_cause(run: Run) -> None:
    by_id = {r.call_id: r for r in run.results}
    first_call = {call.id: call for call in reversed(run.calls)}
    ran = run.started()
    for result in run.results:
        tool = first_call[result.call_id].name
        message = str(result.error)
        aborted = ABORTED.search(message) if result.error_kind == "cancelled" else None
        if aborted:
            failed = by_id[aborted.group(1)]
            assert failed.error_kind in ("execution_error", "timeout")
            assert failed.batch == result.batch
            assert run.abort_all or aborted.group(2) in ABORTING
            continue
        if "the user interrupted the run" in message:
            assert run.index("interrupt") is not None
            assert result.error_kind == ("cancelled" if ran[result.call_id] else "skipped")
            assert not ran[result.call_id] or tool == "browse"
            continue
        if not ran[result.call_id]:
            if result.error_kind == "skipped" and "steered away" in message:
                assert run.index("steered") is not None
            elif result.error_kind == "skipped":
                stopped = STOPPED_BY.match(message)
                assert stopped is not None and run.raised is not None
                assert stopped.group(1) == run.raised.result.call_id
            else:
                assert result.error_kind == "cancelled"
                assert result.call_id == run.cancelled_pending
                assert message == f"`{tool}` was cancelled by the caller"
            continue
        if tool == "polite" and result.batch in run.scoped_batches and result.error_kind == "cancelled":
            # In a batch that a failure may abort, every call has a cancel scope: the caller stopped it.
            assert message == "`polite` was cancelled by the caller"
            continue
        assert result.error_kind in RAN_KINDS[tool], (tool, result)
        if tool in ("work", "polite") and result.error_kind is None:
            assert result.output == first_call[result.call_id].args["n"]  # type: ignore[index]
        if tool in ("quit_early", "quit_returning"):
            assert message == f"`{tool}` was cancelled: gave up"
        if tool == "victim":
            assert message == "`victim` was cancelled by the caller"
        if tool == "browse" and result.error_kind == "cancelled":
            raise AssertionError(f"browse cancelled without a cause: {message}")


def check_no_body_ran_for_a_call_that_never_started(run: Run, bodies: list[int]) -> None:
    """A call answered without running (``cancelled``, ``skipped``, ...) never runs its body, even later."""
    ran = run.started()
    position = {call.id: n for n, call in enumerate(run.calls)}
    for result in run.results:
        if not ran[result.call_id]:
            assert position[result.call_id] not in bodies, f"{result.call_id} ran after it was answered {result}"
    assert len(bodies) == len(set(bodies)), f"a body ran twice: {bodies}"


def check_raise_semantics(run: Run, on_error: str) -> None:
    failures = [r for r in run.results if r.error_kind == "execution_error"]
    if on_error == "result" or not failures:
        assert run.raised is None
        return
    assert run.raised is not None
    assert run.raised.result == failures[0]
    assert list(run.raised.others) == failures[1:]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    turn=turns,
    on_error=st.sampled_from(["result", "raise"]),
    abort_all=st.booleans(),
    steer_after=st.none() | st.integers(0, 4),
    cancel_last=st.booleans(),
)
@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: type(s).__name__)
async def test_random_faults_keep_every_promise(
    strategy: ts.Strategy,
    turn: list[tuple[str, str, bool, float]],
    on_error: str,
    abort_all: bool,
    steer_after: int | None,
    cancel_last: bool,
) -> None:
    state = CURRENT[0] = Harness()
    calls = turn_calls(turn)
    last_id = list(dict.fromkeys(call.id for call in calls))[-1]
    cancelled_pending: list[str] = []
    # What executor.cancel answered, and what it should have (callbacks must not raise:
    # the executor logs and drops their errors).
    answers: list[tuple[bool, bool]] = []

    def on_event(event: ts.Event) -> None:
        state.log.append(event)
        if not isinstance(event, ts.ToolStarted) or not event.ran:
            return
        if event.tool_name == "victim":
            answers.append((executor.cancel(event.call_id), True))
        if event.tool_name == "polite":
            # Without a cancel scope the call can only be asked (unless its batch may be aborted).
            scoped = event.batch is not None and batch_scoped.get(event.batch, False)
            answers.append((executor.cancel(event.call_id), scoped))
        if cancel_last and not cancelled_pending and event.call_id != last_id:
            # The first call to start cancels the turn's last call, which has not started yet.
            cancelled_pending.append(last_id)
            answers.append((executor.cancel(last_id), True))
        return

    batch_scoped: dict[int, bool] = {}

    def on_batch(event: ts.Event) -> None:
        if isinstance(event, ts.BatchStarted):
            names = {first_name[call_id] for call_id in event.call_ids}
            batch_scoped[event.batch] = event.concurrent and (abort_all or bool(names & ABORTING))

    first_name = {call.id: call.name for call in reversed(calls)}

    def steer() -> list[str] | None:
        finished = sum(isinstance(e, ts.ToolFinished) for e in state.log)
        if steer_after is not None and finished >= steer_after:
            state.log.append("steered")
            return ["user: change of plan"]
        return None

    def observe(event: ts.Event) -> None:
        on_batch(event)
        on_event(event)

    executor = state.executor = ts.Executor(
        TOOLS,
        strategy=strategy,
        on_event=observe,
        on_error=on_error,  # type: ignore[arg-type]
        abort_siblings_on_error=abort_all,
    )
    before = {task.id for task in anyio.get_running_tasks()}
    raised: ts.ToolCallFailed | None = None
    try:
        with anyio.fail_after(5):
            try:
                outcome = await executor.run(calls, steering=steer)
                results = outcome.results
                if "steered" in state.log:
                    assert outcome.steering_messages == ["user: change of plan"]
            except ts.ToolCallFailed as error:
                raised = error
                results = list(error.results)
        assert state.alive == 0
        assert {task.id for task in anyio.get_running_tasks()} <= before
    finally:
        state.release.set()

    assert all(answer == expected for answer, expected in answers)
    for marker in ("steered", "interrupt"):
        if marker in state.log:
            event(marker)
    if raised is not None:
        event("raised")
    for kind in sorted({str(r.error_kind) for r in results}):
        event(f"result: {kind}")
    scoped_batches = {number for number, scoped in batch_scoped.items() if scoped and number is not None}
    run = Run(
        calls,
        results,
        state.log,
        raised,
        abort_all,
        cancelled_pending[0] if cancelled_pending else None,
        scoped_batches,
    )
    check_every_call_answered_once(run)
    check_nothing_started_after(run, "steered")
    check_nothing_started_after(run, "interrupt")
    check_an_aborting_failure_stops_its_batch(run)
    check_each_result_has_a_real_cause(run)
    check_raise_semantics(run, on_error)
    # Later too: a thread that was queued must not start its body after the run returned.
    await anyio.sleep(0.02)
    check_no_body_ran_for_a_call_that_never_started(run, list(state.bodies))
    assert executor.interrupt() == 0


OUTSIDE_FAULTS = ["work", "work", "sync_work", "foreign", "browse", "fail", "fail_abort", "slow", "hang", "hang_sync"]
# A turn of (call ID, tool, concurrency-safe, delay) for the tests that stop a run from outside.
OUTSIDE_TURNS = st.lists(
    st.tuples(
        st.sampled_from("abcdefgh"),
        st.sampled_from(OUTSIDE_FAULTS),
        st.booleans(),
        st.sampled_from([0.0, 0.001, 0.003]),
    ),
    min_size=1,
    max_size=8,
)


def turn_calls(turn: list[tuple[str, str, bool, float]]) -> list[ts.ToolCall]:
    """The calls of a drawn turn of (call ID, tool, concurrency-safe, delay)."""
    return [
        ts.ToolCall(call_id, name, {"n": n, "safe": flag, "delay": delay})
        for n, (call_id, name, flag, delay) in enumerate(turn)
    ]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    turn=OUTSIDE_TURNS,
    strategy=st.sampled_from(STRATEGIES),
    cancel_after=st.sampled_from([0.0, 0.001, 0.003, 0.008, 0.02]),
)
async def test_cancelling_the_run_from_outside_raises_and_leaves_nothing_behind(
    turn: list[tuple[str, str, bool, float]], strategy: ts.Strategy, cancel_after: float
) -> None:
    state = CURRENT[0] = Harness()
    calls = turn_calls(turn)
    state.executor = ts.Executor(TOOLS, strategy=strategy, on_event=state.log.append)
    before = {task.id for task in anyio.get_running_tasks()}
    outcomes: list[ts.Outcome] = []
    try:
        with anyio.fail_after(5):
            with anyio.move_on_after(cancel_after) as scope:
                outcomes.append(await state.executor.run(calls))
        assert state.alive == 0
        assert {task.id for task in anyio.get_running_tasks()} <= before
    finally:
        state.release.set()

    finished = [e.result for e in state.log if isinstance(e, ts.ToolFinished)]
    event("run cancelled from outside" if scope.cancelled_caught else "run finished first")
    if scope.cancelled_caught:
        # The run raised: no outcome, and the cancellation became no call's result.
        assert outcomes == []
        assert all(r.error_kind != "cancelled" or ABORTED.search(str(r.error)) for r in finished)
    else:
        assert [r.call_id for r in outcomes[0].results] == list(dict.fromkeys(call.id for call in calls))
    assert state.executor.interrupt() == 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    turn=OUTSIDE_TURNS,
    strategy=st.sampled_from(STRATEGIES),
    leave_after=st.integers(0, 12),
)
async def test_leaving_a_stream_early_stops_the_run_and_leaves_nothing_behind(
    turn: list[tuple[str, str, bool, float]], strategy: ts.Strategy, leave_after: int
) -> None:
    state = CURRENT[0] = Harness()
    calls = turn_calls(turn)
    state.executor = ts.Executor(TOOLS, strategy=strategy)
    before = {task.id for task in anyio.get_running_tasks()}
    read_to_the_end = False
    try:
        with anyio.fail_after(5):
            async with aclosing(state.executor.stream(calls)) as events:
                async for streamed in events:
                    state.log.append(streamed)
                    read_to_the_end = isinstance(streamed, ts.RunFinished)
                    if len(state.log) > leave_after:
                        break
            # Left (or read to the end): the run stops, and the caller's task carries on.
            while True:
                if not state.alive and {task.id for task in anyio.get_running_tasks()} <= before:
                    break
                await anyio.sleep(0.001)
    finally:
        state.release.set()

    event("read to the end" if read_to_the_end else "left early")
    bodies = list(state.bodies)
    # Nothing of the run starts once it is down, and every call reported finished is reported once.
    await anyio.sleep(0.02)
    assert state.bodies == bodies
    assert len(bodies) == len(set(bodies))
    finished = [e.result.call_id for e in state.log if isinstance(e, ts.ToolFinished)]
    assert len(finished) == len(set(finished))
    assert state.executor.interrupt() == 0
