"""Resilience against the breaks a hostile tester found: interrupts during waits, an open circuit
against retries and calls already in flight, timeouts as transient failures, attempts of calls that
never ran, and a retry policy with thousands of attempts."""

from __future__ import annotations

import random
import threading

import anyio
import pytest

import toolsched as ts
from toolsched._policy.resilience import Resilience

pytestmark = pytest.mark.anyio


def call(call_id: str, name: str, **args: object) -> ts.ToolCall:
    return ts.ToolCall(call_id, name, dict(args))


# -- an interrupt stops the waits of a call that is not working ----------------------------


async def test_an_interrupt_during_a_backoff_ends_the_wait_and_the_call_is_not_run_again() -> None:
    failed = anyio.Event()
    runs: list[int] = []

    @ts.tool(idempotent=True, retry=ts.Retry(attempts=3))  # interrupt_behavior="block": a running call finishes
    async def search() -> str:
        runs.append(1)
        if len(runs) == 1:
            failed.set()
            raise ts.Transient("429 too many requests", retry_after=30.0)
        return "ok"

    executor = ts.Executor([search])

    async def user_speaks() -> None:
        await failed.wait()
        await anyio.wait_all_tasks_blocked()  # the call waits out its 30 s backoff
        assert executor.interrupt("user spoke") == 1

    # A hang guard beyond the backoff (a wait that would pass the deadline in force is not started).
    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(user_speaks)
            outcome = await executor.run([call("a", "search")])
    result = outcome.results[0]
    # The retry had not started: it never does, and the answer is the last attempt's failure.
    assert runs == [1]
    assert (result.error_kind, result.attempts) == ("execution_error", 1)
    assert "429 too many requests" in (result.error or "")


async def test_a_broken_stream_ends_a_backoff_wait_as_an_interrupt_does() -> None:
    failed = anyio.Event()
    runs: list[int] = []

    @ts.tool(idempotent=True, retry=ts.Retry(attempts=3))  # interrupt_behavior="block"
    async def search() -> str:
        runs.append(1)
        failed.set()
        raise ts.Transient("429 too many requests", retry_after=120.0)

    # The backoff is two minutes (the wind-down is shielded): only a wait the broken stream ends finishes in time.
    with anyio.fail_after(60), pytest.raises(ts.StreamFailed) as broken:
        async with ts.Executor([search]).turn() as turn:
            turn.submit(call("a", "search"))
            await failed.wait()
            await anyio.wait_all_tasks_blocked()
            raise ConnectionError("the model's stream dropped")
    result = broken.value.outcome.results[0]
    assert runs == [1]
    assert (result.error_kind, result.attempts) == ("execution_error", 1)


async def interrupted_while_waiting_for_a_token() -> tuple[list[int], list[ts.ToolResult]]:
    """Two calls of a tool with one token a minute; the run is interrupted while the second waits."""
    ran: list[int] = []
    first_ran = anyio.Event()

    @ts.tool(read_only=True, concurrency_safe=True, rate_limit=ts.RateLimit(1, per=60.0))
    async def fetch(i: int) -> int:
        ran.append(i)
        first_ran.set()
        return i

    executor = ts.Executor([fetch], strategy=ts.Parallel())

    async def user_speaks() -> None:
        await first_ran.wait()
        await anyio.wait_all_tasks_blocked()  # the second call waits for a token
        assert executor.interrupt("user spoke") == 1

    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(user_speaks)
            outcome = await executor.run([call("c0", "fetch", i=0), call("c1", "fetch", i=1)])
    return ran, outcome.results


async def test_an_interrupt_during_a_token_wait_ends_it_and_the_body_never_runs() -> None:
    ran, results = await interrupted_while_waiting_for_a_token()
    assert ran == [0]
    assert [(result.output, result.attempts) for result in results] == [(0, 1), (None, 0)]
    assert "the user interrupted the run (user spoke)" in (results[1].error or "")


async def test_a_call_interrupted_while_waiting_for_a_token_is_answered_skipped() -> None:
    _, results = await interrupted_while_waiting_for_a_token()
    assert results[1].error_kind == "skipped"


# -- an open circuit stops every attempt -----------------------------------------------------


async def test_a_retry_is_admitted_by_the_circuit_and_an_open_one_ends_the_call() -> None:
    runs: list[int] = []

    @ts.tool(
        idempotent=True,
        retry=ts.Retry(attempts=5, backoff=0.0, jitter=False),
        circuit=ts.CircuitBreaker(failures=2, cooldown=60),
    )
    async def search() -> str:
        runs.append(1)
        raise ts.Transient("503")

    executor = ts.Executor([search])
    result = (await executor.run([call("a", "search")])).results[0]
    # The second failure opened the circuit: the third attempt is refused, the last failure is the answer.
    assert (result.error_kind, result.attempts, len(runs)) == ("execution_error", 2, 2)
    refused = (await executor.run([call("b", "search")])).results[0]
    assert (refused.error_kind, refused.attempts, len(runs)) == ("unavailable", 0, 2)


async def test_calls_in_flight_start_no_attempt_once_the_circuit_opened() -> None:
    arrived = 0
    gate = anyio.Event()
    failures = 0
    late_starts: list[int] = []

    @ts.tool(
        read_only=True,
        concurrency_safe=True,
        idempotent=True,
        retry=ts.Retry(attempts=5, backoff=0.0, jitter=False),
        circuit=ts.CircuitBreaker(failures=2, cooldown=60),
    )
    async def search(q: int) -> str:
        nonlocal arrived, failures
        if failures >= 2:
            late_starts.append(q)  # an attempt that started through the open circuit
        arrived += 1
        if arrived == 5:
            gate.set()
        await gate.wait()
        failures += 1
        raise ts.Transient("503")

    executor = ts.Executor([search], strategy=ts.Parallel())
    with anyio.fail_after(20):
        outcome = await executor.run([call(f"c{i}", "search", q=i) for i in range(5)])
    assert all(result.error_kind == "execution_error" for result in outcome.results)
    assert late_starts == []


async def test_a_failure_that_is_not_transient_while_the_circuit_is_open_does_not_close_it() -> None:
    entered = anyio.Event()
    gate = anyio.Event()
    ran: list[str] = []

    @ts.tool(read_only=True, concurrency_safe=True, circuit=ts.CircuitBreaker(failures=2, cooldown=60))
    async def api(kind: str) -> str:
        ran.append(kind)
        if kind == "slow":
            entered.set()
            await gate.wait()
            raise ValueError("400 bad request")
        raise ts.Transient("503")

    executor = ts.Executor([api])
    slow: list[ts.ToolResult] = []

    async def run_slow() -> None:
        slow.extend((await executor.run([call("s", "api", kind="slow")])).results)

    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(run_slow)
            await entered.wait()  # admitted while the circuit was closed
            for key in ("a", "b"):
                assert (await executor.run([call(key, "api", kind="t")])).results[0].error_kind == "execution_error"
            gate.set()  # fails for a reason of its own inside the cooldown
    assert slow[0].error_kind == "execution_error"
    refused = (await executor.run([call("n", "api", kind="t")])).results[0]
    assert refused.error_kind == "unavailable"
    assert ran == ["slow", "t", "t"]


def test_only_the_probe_settles_an_open_circuit_and_a_probe_failing_for_another_reason_settles_nothing() -> None:
    now = 0.0
    state = Resilience(None, None, ts.CircuitBreaker(failures=1, cooldown=10), clock=lambda: now)
    assert state.admit() is False
    state.record("transient")
    assert state.admit() is None
    state.record("success")  # a call admitted before the circuit opened: it decides nothing
    assert state.admit() is None
    now = 10.0
    assert state.admit() is True  # the probe
    assert state.admit() is None  # the others are refused while it runs
    state.record("other", probe=True)  # a bad request says nothing of the downstream
    assert state.admit() is True  # still half open: the next call probes
    state.record("success", probe=True)
    assert state.admit() is False  # closed


def test_a_probe_body_that_never_returns_holds_the_circuit_for_one_more_cooldown_at_most() -> None:
    now = 0.0
    state = Resilience(None, None, ts.CircuitBreaker(failures=1, cooldown=10), clock=lambda: now)
    state.record("transient")
    now = 10.0
    assert state.admit() is True
    # The probe timed out; its body goes on in a thread that never returns.
    state.record("transient", probe=True, left_running=threading.Event())
    now = 20.0  # the circuit's own cooldown is over, the body still runs: no second probe yet
    assert state.admit() is None
    assert state.open_for() == 10.0
    now = 30.0  # one more cooldown: a probe goes, or the tool would be shut out for good
    assert state.admit() is True
    returned = threading.Event()
    state.release_probe(left_running=returned)
    returned.set()  # a body that returns lets the next probe through at once
    assert state.admit() is True


async def test_a_sync_probe_past_its_timeout_holds_the_probe_until_its_body_returns() -> None:
    release = threading.Event()
    bodies: list[str] = []

    @ts.tool(timeout=0.05, circuit=ts.CircuitBreaker(failures=1, cooldown=0))
    def probe(kind: str) -> str:
        bodies.append(kind)
        if kind == "fail":
            raise ts.Transient("down")
        release.wait(30)  # the downstream hangs until the test lets it go
        return "ok"

    executor = ts.Executor([probe])
    try:
        assert (await executor.run([call("x", "probe", kind="fail")])).results[0].error_kind == "execution_error"
        assert (await executor.run([call("p1", "probe", kind="hang")])).results[0].error_kind == "timeout"
        # p1's body still runs in its thread: it is still the probe, and p2 is refused.
        second = (await executor.run([call("p2", "probe", kind="hang")])).results[0]
        assert (second.error_kind, bodies) == ("unavailable", ["fail", "hang"])
    finally:
        release.set()


# -- timeouts are transient failures ---------------------------------------------------------


async def test_timeouts_count_as_transient_failures_and_open_the_circuit() -> None:
    runs: list[int] = []

    @ts.tool(timeout=0.05, circuit=ts.CircuitBreaker(failures=2, cooldown=60))
    async def slow() -> str:
        runs.append(1)
        await anyio.Event().wait()  # the downstream stopped answering
        return "x"

    executor = ts.Executor([slow])
    kinds = [(await executor.run([call(f"s{i}", "slow")])).results[0].error_kind for i in range(3)]
    assert (kinds, len(runs)) == (["timeout", "timeout", "unavailable"], 2)


# -- attempts count the runs of the body -----------------------------------------------------


async def test_calls_that_timed_out_waiting_for_a_token_report_no_attempt() -> None:
    ran: list[int] = []

    @ts.tool(read_only=True, concurrency_safe=True, timeout=0.1, rate_limit=ts.RateLimit(1, per=60))
    async def limited(i: int) -> int:
        ran.append(i)
        return i

    executor = ts.Executor([limited], strategy=ts.Parallel())
    outcome = await executor.run([call(f"l{i}", "limited", i=i) for i in range(3)])
    assert [(result.error_kind, result.attempts) for result in outcome.results] == [
        (None, 1),
        ("timeout", 0),
        ("timeout", 0),
    ]
    assert ran == [0]


# -- a long retry policy -----------------------------------------------------------------------


def test_the_backoff_bound_stops_at_max_backoff_however_many_retries() -> None:
    retry = ts.Retry(attempts=5000, backoff=1e-6, max_backoff=0.0001, jitter=False, budget=10000.0)
    assert [retry.delay(n, None, random.uniform) for n in (1, 1025, 4999)] == [1e-6, 0.0001, 0.0001]
    huge = ts.Retry(attempts=5000, backoff=1e300, max_backoff=5.0, jitter=False)
    assert huge.delay(4999, None, random.uniform) == 5.0
