"""Retries, rate limits and circuit breakers, shared by every run of an executor."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import toolsched as ts

pytestmark = pytest.mark.anyio


class Downstream:
    """A scripted downstream: each call takes the next answer ("ok", "transient", "permanent", ...)."""

    def __init__(self, answers: list[str] | None = None, default: str = "ok") -> None:
        self.answers = list(answers or [])
        self.default = default
        self.calls: list[tuple[str, float]] = []

    def answer(self, key: str) -> str:
        self.calls.append((key, time.monotonic()))
        kind = self.answers.pop(0) if self.answers else self.default
        if kind == "transient":
            raise ts.Transient("429 too many requests")
        if kind.startswith("after:"):
            raise ts.Transient("429", retry_after=float(kind.split(":")[1]))
        if kind == "timeout":
            raise TimeoutError("read timed out")
        if kind == "permanent":
            raise ValueError("400 bad request")
        if kind == "connection":
            raise ConnectionError("reset by peer")
        return f"{key}: done"


def fetch_tool(downstream: Downstream, **options: Any) -> ts.FunctionTool:
    @ts.tool(concurrency_safe=True, **options)
    async def fetch(key: str) -> str:
        return downstream.answer(key)

    return fetch


def calls(*keys: str) -> list[ts.ToolCall]:
    return [ts.ToolCall(f"c{i}", "fetch", {"key": key}) for i, key in enumerate(keys)]


FAST = ts.Retry(attempts=3, backoff=0.001, max_backoff=0.002)


async def test_a_transient_failure_is_run_again_and_the_result_counts_its_attempts() -> None:
    downstream = Downstream(["transient", "timeout"])
    events: list[ts.Event] = []
    executor = ts.Executor([fetch_tool(downstream, idempotent=True, retry=FAST)], on_event=events.append)
    outcome = await executor.run(calls("a"))
    result = outcome.results[0]
    assert (result.output, result.attempts, result.is_error) == ("a: done", 3, False)
    retrying = [event for event in events if isinstance(event, ts.ToolRetrying)]
    assert [(event.attempt, event.error) for event in retrying] == [
        (1, "Transient: 429 too many requests"),
        (2, "TimeoutError: read timed out"),
    ]


async def test_a_permanent_failure_is_not_retried() -> None:
    downstream = Downstream(["permanent"])
    executor = ts.Executor([fetch_tool(downstream, idempotent=True, retry=FAST)])
    result = (await executor.run(calls("a"))).results[0]
    assert (result.error_kind, result.attempts, len(downstream.calls)) == ("execution_error", 1, 1)
    assert "400 bad request" in (result.error or "")


async def test_on_adds_exception_types_that_count_as_transient() -> None:
    downstream = Downstream(["connection"])
    retry = ts.Retry(attempts=2, backoff=0.001, on=(ConnectionError,))
    executor = ts.Executor([fetch_tool(downstream, idempotent=True, retry=retry)])
    result = (await executor.run(calls("a"))).results[0]
    assert (result.output, result.attempts) == ("a: done", 2)


async def test_attempts_are_never_exceeded_and_the_last_failure_is_the_result() -> None:
    downstream = Downstream(default="transient")
    executor = ts.Executor([fetch_tool(downstream, idempotent=True, retry=FAST)])
    result = (await executor.run(calls("a"))).results[0]
    assert (result.error_kind, result.attempts, len(downstream.calls)) == ("execution_error", 3, 3)


async def test_retry_after_is_honoured() -> None:
    downstream = Downstream(["after:0.15"])
    executor = ts.Executor([fetch_tool(downstream, idempotent=True, retry=FAST)])
    result = (await executor.run(calls("a"))).results[0]
    assert result.attempts == 2
    first, second = downstream.calls
    assert second[1] - first[1] >= 0.15


async def test_every_attempt_stays_inside_the_calls_timeout() -> None:
    # A backoff that would pass the deadline is not waited for: the failure is the answer at once.
    downstream = Downstream(["after:5"])
    executor = ts.Executor([fetch_tool(downstream, idempotent=True, retry=FAST, timeout=0.5)])
    started = time.monotonic()
    result = (await executor.run(calls("a"))).results[0]
    assert time.monotonic() - started < 0.4
    assert (result.error_kind, result.attempts) == ("execution_error", 1)


async def test_a_timeout_during_backoff_answers_timeout() -> None:
    downstream = Downstream(default="transient")
    retry = ts.Retry(attempts=50, backoff=0.05, max_backoff=0.05, jitter=False, budget=100)
    executor = ts.Executor([fetch_tool(downstream, idempotent=True, retry=retry, timeout=0.3)])
    result = (await executor.run(calls("a"))).results[0]
    assert result.error_kind in ("timeout", "execution_error")
    assert 2 <= len(downstream.calls) <= 8


async def test_an_interrupt_stops_a_backoff_wait_at_once() -> None:
    downstream = Downstream(["after:30"])
    executor = ts.Executor(
        [fetch_tool(downstream, idempotent=True, retry=ts.Retry(attempts=2), interrupt_behavior="cancel")]
    )

    async def interrupt_soon() -> None:
        await anyio.sleep(0.1)
        executor.interrupt("stop")

    started = time.monotonic()
    async with anyio.create_task_group() as group:
        group.start_soon(interrupt_soon)
        outcome = await executor.run(calls("a"))
    assert time.monotonic() - started < 5
    assert outcome.results[0].error_kind == "cancelled"
    assert len(downstream.calls) == 1


async def test_a_cancelled_run_stops_its_backoff_wait_at_once() -> None:
    downstream = Downstream(["after:30"])
    executor = ts.Executor([fetch_tool(downstream, idempotent=True, retry=ts.Retry(attempts=2))])
    started = time.monotonic()
    with anyio.move_on_after(0.1):
        await executor.run(calls("a"))
    assert time.monotonic() - started < 5
    assert len(downstream.calls) == 1


def test_retry_on_a_tool_that_is_not_idempotent_is_refused_naming_it() -> None:
    downstream = Downstream()
    with pytest.raises(ts.ToolDefinitionError, match=r"tool `fetch`: retry=.*idempotent=True"):
        ts.Executor([fetch_tool(downstream, retry=FAST)])


def test_class_form_tools_take_the_policies_as_attributes() -> None:
    class Fetch(ts.Tool):
        name = "fetch"
        input_schema = {"type": "object", "properties": {"key": {"type": "string"}}}
        retry = ts.Retry(attempts=2)

        async def call(self, args: Any, ctx: ts.ToolContext) -> str:
            return "ok"

    with pytest.raises(ts.ToolDefinitionError, match="idempotent"):
        ts.Executor([Fetch()])

    class BadFetch(Fetch):
        idempotent = True
        retry = 3  # type: ignore[assignment]

    with pytest.raises(ts.ToolDefinitionError, match=r"retry must be a ts\.Retry"):
        ts.Executor([BadFetch()])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ts.Retry(attempts=0), "attempts"),
        (lambda: ts.Retry(attempts=2.5), "an integer of at least 1"),
        (lambda: ts.Retry(backoff=-1), "backoff"),
        (lambda: ts.Retry(on=("ValueError",)), "exception types"),
        (lambda: ts.Retry(jitter="yes"), "jitter"),
        (lambda: ts.RateLimit(0), "calls"),
        (lambda: ts.RateLimit(5, per=0), "per"),
        (lambda: ts.RateLimit(5, burst=0), "burst"),
        (lambda: ts.CircuitBreaker(failures=0), "failures"),
        (lambda: ts.CircuitBreaker(cooldown=float("nan")), "cooldown"),
    ],
)
def test_bad_policies_are_refused_saying_which_argument(make: Any, message: str) -> None:
    with pytest.raises(ts.OptionError, match=message):
        make()


def test_a_bad_retry_after_is_refused() -> None:
    with pytest.raises(ValueError, match="retry_after"):
        ts.Transient("x", retry_after=-1)


async def test_a_rate_limit_paces_calls_across_runs() -> None:
    downstream = Downstream()
    tool = fetch_tool(downstream, rate_limit=ts.RateLimit(10, per=1.0, burst=2))
    executor = ts.Executor([tool], strategy=ts.Parallel(max_concurrency=20))
    started = time.monotonic()
    async with anyio.create_task_group() as group:
        for run in range(3):
            group.start_soon(executor.run, calls(*(f"r{run}-{i}" for i in range(2))))
    elapsed = time.monotonic() - started
    times = sorted(moment for _, moment in downstream.calls)
    assert len(times) == 6
    # Two at once (the burst), then one every 0.1 s: the sixth starts about 0.4 s in.
    assert elapsed >= 0.35
    # The bucket's promise, however late the loop wakes (a late loop may start two at once, on tokens it
    # saved meanwhile): no span holds more starts than the burst and the span's tokens allow.
    for first, earlier in enumerate(times):
        for last in range(first + 2, len(times)):
            assert times[last] - earlier >= (last - first - 1) * 0.1 - 0.02


async def test_an_open_circuit_answers_at_once_without_running_the_tool_then_a_probe_closes_it() -> None:
    downstream = Downstream(["transient", "transient"])
    tool = fetch_tool(downstream, circuit=ts.CircuitBreaker(failures=2, cooldown=0.2))
    executor = ts.Executor([tool])
    for key in ("a", "b"):
        assert (await executor.run(calls(key))).results[0].error_kind == "execution_error"
    refused = (await executor.run(calls("c"))).results[0]
    assert refused.error_kind == "unavailable" and refused.attempts == 0
    assert "2 calls in a row failed transiently" in (refused.error or "")
    assert [key for key, _ in downstream.calls] == ["a", "b"]
    await anyio.sleep(0.25)
    probe = (await executor.run(calls("d"))).results[0]
    assert probe.output == "d: done"
    assert (await executor.run(calls("e"))).results[0].output == "e: done"


async def test_a_failed_probe_opens_the_circuit_again() -> None:
    downstream = Downstream(["transient", "transient"])
    executor = ts.Executor([fetch_tool(downstream, circuit=ts.CircuitBreaker(failures=1, cooldown=0.1))])
    assert (await executor.run(calls("a"))).results[0].error_kind == "execution_error"
    await anyio.sleep(0.15)
    assert (await executor.run(calls("probe"))).results[0].error_kind == "execution_error"
    assert (await executor.run(calls("b"))).results[0].error_kind == "unavailable"


async def test_while_a_probe_runs_the_other_calls_are_refused() -> None:
    gate = anyio.Event()
    ran: list[str] = []

    @ts.tool(concurrency_safe=True, circuit=ts.CircuitBreaker(failures=1, cooldown=0.05))
    async def fetch(key: str) -> str:
        ran.append(key)
        if key == "a":
            raise ts.Transient("down")
        await gate.wait()
        return key

    executor = ts.Executor([fetch], strategy=ts.Parallel(max_concurrency=5))
    await executor.run(calls("a"))
    await anyio.sleep(0.1)

    async def open_gate() -> None:
        await anyio.sleep(0.05)
        gate.set()

    async with anyio.create_task_group() as group:
        group.start_soon(open_gate)
        outcome = await executor.run(calls("probe", "x", "y"))
    assert [result.error_kind for result in outcome.results] == [None, "unavailable", "unavailable"]
    assert ran == ["a", "probe"]


async def test_the_retry_budget_stops_a_storm_of_retries() -> None:
    downstream = Downstream(default="transient")
    retry = ts.Retry(attempts=5, backoff=0.0, jitter=False, budget=0.2)
    executor = ts.Executor([fetch_tool(downstream, idempotent=True, retry=retry)], strategy=ts.Parallel(20))
    outcome = await executor.run(calls(*(f"k{i}" for i in range(50))))
    assert all(result.error_kind == "execution_error" for result in outcome.results)
    # 50 first attempts: at most 20% of them again plus the floor, not 4 more each (200).
    assert len(downstream.calls) <= 50 + 10 + ts_floor()


async def test_results_with_attempts_survive_the_journal(tmp_path: Any) -> None:
    downstream = Downstream(["transient"])
    journal = ts.SqliteJournal(str(tmp_path / "journal.db"))
    executor = ts.Executor([fetch_tool(downstream, idempotent=True, retry=FAST)], journal=journal)
    outcome = await executor.run(calls("a"), run_id="run-1")
    assert outcome.results[0].attempts == 2
    recovered = await executor.recover("run-1")
    assert recovered.results[0].attempts == 2
    assert len(downstream.calls) == 2


def ts_floor() -> int:
    from toolsched._policy.resilience import RETRY_FLOOR

    return RETRY_FLOOR


MIXES = st.lists(st.sampled_from(["ok", "transient", "timeout", "permanent"]), min_size=0, max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(answers=MIXES, count=st.integers(min_value=1, max_value=6), attempts=st.integers(min_value=1, max_value=4))
async def test_random_failure_mixes_answer_every_call_once_within_its_attempts(
    answers: list[str], count: int, attempts: int
) -> None:
    downstream = Downstream(list(answers))
    retry = ts.Retry(attempts=attempts, backoff=0.0, jitter=False, budget=100)
    idempotent = fetch_tool(downstream, idempotent=True, retry=retry)
    once: list[str] = []

    @ts.tool(name="write", concurrency_safe=True)
    async def write(key: str) -> str:
        once.append(key)
        return downstream.answer(key)

    executor = ts.Executor([idempotent, write], strategy=ts.Parallel(max_concurrency=3))
    batch = [ts.ToolCall(f"c{i}", "fetch" if i % 2 else "write", {"key": f"k{i}"}) for i in range(count)]
    outcome = await executor.run(batch)
    assert [result.call_id for result in outcome.results] == [call.id for call in batch]
    runs: dict[str, int] = {}
    for key, _ in downstream.calls:
        runs[key] = runs.get(key, 0) + 1
    for call, result in zip(batch, outcome.results, strict=True):
        key = call.args["key"]
        assert 1 <= runs[key] <= (attempts if call.name == "fetch" else 1)
        assert result.attempts == runs[key]
    assert sorted(once) == sorted({call.args["key"] for call in batch if call.name == "write"})


class Working:
    """Counts the calls inside a tool body at once."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self.started: dict[str, float] = {}

    async def work(self, key: str, seconds: float) -> str:
        self.started[key] = time.monotonic()
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await anyio.sleep(seconds)
        finally:
            self.now -= 1
        return key


async def test_a_call_waiting_for_a_token_lends_its_slot_to_other_calls() -> None:
    working = Working()

    @ts.tool(concurrency_safe=True, rate_limit=ts.RateLimit(1, per=0.6, burst=1))
    async def limited(key: str) -> str:
        return await working.work(key, 0.3)

    @ts.tool(concurrency_safe=True)
    async def other(key: str) -> str:
        return await working.work(key, 0.05)

    executor = ts.Executor([limited, other], strategy=ts.Parallel(max_concurrency=2))
    batch = [
        ts.ToolCall("l1", "limited", {"key": "l1"}),
        ts.ToolCall("l2", "limited", {"key": "l2"}),
        ts.ToolCall("o1", "other", {"key": "o1"}),
        ts.ToolCall("o2", "other", {"key": "o2"}),
    ]
    started = time.monotonic()
    outcome = await executor.run(batch)
    assert [result.output for result in outcome.results] == ["l1", "l2", "o1", "o2"]
    # l2 waits 0.6 s for its token; meanwhile o1 and o2 run in its slot instead of after l1.
    assert working.started["o1"] - started < 0.2
    assert working.started["l2"] - started >= 0.5
    assert working.peak <= 2


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kinds=st.lists(st.sampled_from(["limited", "retried", "plain"]), min_size=1, max_size=10),
    cap=st.integers(min_value=1, max_value=4),
    strategy=st.sampled_from(["parallel", "partitioned", "resource_aware"]),
)
async def test_calls_that_lend_their_slots_never_let_more_than_the_cap_work_at_once(
    kinds: list[str], cap: int, strategy: str
) -> None:
    working = Working()
    failures: dict[str, int] = {}
    # Declared, so that ResourceAware runs them at once as the other strategies do.
    shared = ts.Access(reads=("x",))

    @ts.tool(concurrency_safe=True, rate_limit=ts.RateLimit(50, per=1.0, burst=1), resources=lambda arguments: shared)
    async def limited(key: str) -> str:
        return await working.work(key, 0.005)

    @ts.tool(
        concurrency_safe=True,
        idempotent=True,
        retry=ts.Retry(attempts=2, backoff=0.01, jitter=False, budget=100),
        resources=lambda arguments: shared,
    )
    async def retried(key: str) -> str:
        await working.work(key, 0.002)
        failures[key] = failures.get(key, 0) + 1
        if failures[key] == 1:
            raise ts.Transient("once")
        return key

    @ts.tool(concurrency_safe=True, resources=lambda arguments: shared)
    async def plain(key: str) -> str:
        return await working.work(key, 0.003)

    strategies = {
        "parallel": ts.Parallel(max_concurrency=cap),
        "partitioned": ts.Partitioned(max_concurrency=cap),
        "resource_aware": ts.ResourceAware(max_concurrency=cap),
    }
    executor = ts.Executor([limited, retried, plain], strategy=strategies[strategy])
    batch = [ts.ToolCall(f"c{i}", kind, {"key": f"c{i}"}) for i, kind in enumerate(kinds)]
    with anyio.fail_after(20):
        outcome = await executor.run(batch)
    assert [result.output for result in outcome.results] == [call.id for call in batch]
    assert working.peak <= cap


STRATEGIES = {"parallel": ts.Parallel, "partitioned": ts.Partitioned, "resource_aware": ts.ResourceAware}


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@pytest.mark.parametrize("stopped", ["cancelled", "timed out"])
async def test_calls_stopped_while_lending_their_slots_leave_the_cap_as_it_was(strategy: str, stopped: str) -> None:
    # Each limited call after the first waits for its token and lends its slot, so another worker starts; then
    # the waiting call is stopped and takes no slot back, while the worker that ran it goes on taking calls:
    # each such call let one more call work at once (with three stopped, five under a cap of two).
    working = Working()
    shared = ts.Access(reads=("x",))

    @ts.tool(
        concurrency_safe=True,
        rate_limit=ts.RateLimit(1, per=60, burst=1),
        timeout=0.03 if stopped == "timed out" else None,
        resources=lambda arguments: shared,
    )
    async def limited(key: str) -> str:
        return await working.work(key, 0)

    @ts.tool(concurrency_safe=True, resources=lambda arguments: shared)
    async def plain(key: str) -> str:
        return await working.work(key, 0.05)

    executor = ts.Executor([limited, plain], strategy=STRATEGIES[strategy](max_concurrency=2))
    batch = [ts.ToolCall(f"l{n}", "limited", {"key": f"l{n}"}) for n in range(4)]
    batch += [ts.ToolCall(f"p{n}", "plain", {"key": f"p{n}"}) for n in range(8)]

    async def cancel_the_waiting() -> None:
        await anyio.sleep(0.02)
        for n in range(1, 4):
            executor.cancel(f"l{n}")

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            if stopped == "cancelled":
                group.start_soon(cancel_the_waiting)
            outcome = await executor.run(batch)
    kinds = [result.error_kind for result in outcome.results]
    assert kinds == [None] + ["cancelled" if stopped == "cancelled" else "timeout"] * 3 + [None] * 8
    assert working.peak <= 2


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
async def test_a_call_timed_out_while_waiting_for_its_slot_back_leaves_the_cap_as_it_was(strategy: str) -> None:
    # The retried call's backoff ends while the other calls hold every slot; its timeout comes as it waits for
    # one: it takes none, and the worker that ran it must not be one worker too many.
    working = Working()
    shared = ts.Access(reads=("x",))

    @ts.tool(
        concurrency_safe=True,
        idempotent=True,
        timeout=0.05,
        retry=ts.Retry(attempts=2, backoff=0.01, jitter=False, budget=100),
        resources=lambda arguments: shared,
    )
    async def flaky(key: str) -> str:
        raise ts.Transient("try again")

    @ts.tool(concurrency_safe=True, resources=lambda arguments: shared)
    async def plain(key: str) -> str:
        return await working.work(key, 0.2)

    executor = ts.Executor([flaky, plain], strategy=STRATEGIES[strategy](max_concurrency=2))
    batch = [ts.ToolCall("r", "flaky", {"key": "r"})]
    batch += [ts.ToolCall(f"p{n}", "plain", {"key": f"p{n}"}) for n in range(6)]
    with anyio.fail_after(10):
        outcome = await executor.run(batch)
    assert [result.error_kind for result in outcome.results] == ["timeout"] + [None] * 6
    assert working.peak <= 2


@pytest.mark.parametrize("cap", [2, 3])
@pytest.mark.parametrize("strategy", ["parallel", "resource_aware"])
async def test_a_call_done_lending_gets_a_slot_back_while_the_other_workers_wait_with_nothing_to_take(
    cap: int, strategy: str
) -> None:
    # The retried call lends its slot for its backoff; another worker starts and takes the last call; every
    # other call finishes before the backoff ends, so the workers left are idle, none of them finishing
    # anything, when the retried call asks for its slot back: one of them must give it up. (The calls declare
    # what they touch, or ResourceAware would run them one at a time.)
    working = Working()
    shared = ts.Access(reads=("x",))
    failures: list[str] = []

    @ts.tool(
        concurrency_safe=True,
        idempotent=True,
        retry=ts.Retry(attempts=2, backoff=0.05, jitter=False),
        resources=lambda arguments: shared,
    )
    async def flaky(key: str) -> str:
        await working.work(key, 0.005)
        failures.append(key)
        if len(failures) == 1:
            raise ts.Transient("once")
        return key

    @ts.tool(concurrency_safe=True, resources=lambda arguments: shared)
    async def plain(key: str, seconds: float) -> str:
        return await working.work(key, seconds)

    strategies = {"parallel": ts.Parallel(max_concurrency=cap), "resource_aware": ts.ResourceAware(max_concurrency=cap)}
    executor = ts.Executor([flaky, plain], strategy=strategies[strategy])
    batch = [
        ts.ToolCall("a", "flaky", {"key": "a"}),
        *(ts.ToolCall(f"p{n}", "plain", {"key": f"p{n}", "seconds": 0.01 + 0.005 * n}) for n in range(cap)),
    ]
    with anyio.fail_after(5):
        outcome = await executor.run(batch)
    assert [result.output for result in outcome.results] == [call.id for call in batch]
    assert outcome.results[0].attempts == 2
    assert working.peak <= cap


@pytest.mark.parametrize("strategy", ["parallel", "resource_aware"])
async def test_a_call_waiting_for_its_slot_back_takes_the_one_another_call_lends(strategy: str) -> None:
    # a backs off briefly and asks for its slot back while b and c work; then b fails and lends its slot for
    # a long backoff (1.5 s): a must take it at once, not wait for b's backoff or c (10 s) to end.
    attempts: dict[str, int] = {}
    second: dict[str, float] = {}
    ran_again = anyio.Event()
    shared = ts.Access(reads=("x",))
    started = time.monotonic()

    def retried(backoff: float) -> Any:
        return ts.tool(
            concurrency_safe=True,
            idempotent=True,
            retry=ts.Retry(attempts=2, backoff=backoff, jitter=False),
            resources=lambda arguments: shared,
        )

    @retried(0.02)
    async def a() -> str:
        attempts["a"] = attempts.get("a", 0) + 1
        if attempts["a"] == 2:
            second["a"] = time.monotonic() - started
            ran_again.set()
            return "a"
        await anyio.sleep(0.01)
        raise ts.Transient("once")

    @retried(1.5)
    async def b() -> str:
        attempts["b"] = attempts.get("b", 0) + 1
        if attempts["b"] == 2:
            return "b"
        await anyio.sleep(0.05)
        raise ts.Transient("once")

    @ts.tool(concurrency_safe=True, resources=lambda arguments: shared)
    async def c() -> str:
        with anyio.move_on_after(10):
            await ran_again.wait()
        return "c"

    strategies = {"parallel": ts.Parallel(max_concurrency=2), "resource_aware": ts.ResourceAware(max_concurrency=2)}
    executor = ts.Executor([a, b, c], strategy=strategies[strategy])
    with anyio.fail_after(20):
        outcome = await executor.run([ts.ToolCall("a", "a"), ts.ToolCall("b", "b"), ts.ToolCall("c", "c")])
    assert [result.output for result in outcome.results] == ["a", "b", "c"]
    # a ran again about 0.05 s in; had it waited for b's backoff, 1.55 s (c ends as soon as a ran again).
    assert second["a"] < 0.75, second


@pytest.mark.parametrize("strategy", ["parallel", "resource_aware"])
async def test_workers_that_end_together_give_a_waiting_call_one_slot_not_all_of_theirs(strategy: str) -> None:
    # a waits for its slot back while b, c and d work; they end together, and only one worker may leave for a:
    # e and f, ready meanwhile, start on the others while a works again for a long time.
    attempts: list[int] = []
    started: dict[str, float] = {}
    shared = ts.Access(reads=("x",))
    release = anyio.Event()
    began = time.monotonic()

    @ts.tool(
        concurrency_safe=True,
        idempotent=True,
        retry=ts.Retry(attempts=2, backoff=0.02, jitter=False),
        resources=lambda arguments: shared,
    )
    async def a() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            await anyio.sleep(0.01)
            raise ts.Transient("once")
        with anyio.move_on_after(10):
            await release.wait()
        return "a"

    @ts.tool(concurrency_safe=True, resources=lambda arguments: shared)
    async def work(key: str, until: float) -> str:
        # Ends at ``until`` seconds into the run, whenever it started: b, c and d end together.
        started[key] = time.monotonic()
        await anyio.sleep(max(0.0, until - (started[key] - began)))
        if key in ("e", "f") and "e" in started and "f" in started:
            release.set()
        return key

    strategies = {"parallel": ts.Parallel(max_concurrency=3), "resource_aware": ts.ResourceAware(max_concurrency=3)}
    executor = ts.Executor([a, work], strategy=strategies[strategy])
    calls = [
        ts.ToolCall("a", "a"),
        *(ts.ToolCall(key, "work", {"key": key, "until": 0.05}) for key in "bcd"),
        *(ts.ToolCall(key, "work", {"key": key, "until": 0.0}) for key in "ef"),
    ]
    with anyio.fail_after(20):
        outcome = await executor.run(calls)
    assert [result.output for result in outcome.results] == [call.id for call in calls]
    # e and f started while a worked (a waited for both): had every worker left, they would wait out a's 10 s.
    assert started["e"] - began < 5 and started["f"] - began < 5, started


async def test_a_call_timed_out_while_waiting_for_a_token_takes_none_and_never_runs() -> None:
    downstream = Downstream()
    tool = fetch_tool(downstream, rate_limit=ts.RateLimit(1, per=10.0, burst=1), timeout=0.2)
    executor = ts.Executor([tool], strategy=ts.Parallel(max_concurrency=3))
    outcome = await executor.run(calls("first", "second", "third"))
    assert [result.error_kind for result in outcome.results] == [None, "timeout", "timeout"]
    assert [key for key, _ in downstream.calls] == ["first"]


async def test_a_cancelled_waiter_leaves_the_queue_and_the_next_one_gets_the_token() -> None:
    downstream = Downstream()
    tool = fetch_tool(downstream, rate_limit=ts.RateLimit(1, per=0.3, burst=1))
    executor = ts.Executor([tool])
    await executor.run(calls("spend the burst"))
    with anyio.move_on_after(0.05):
        await executor.run(calls("given up"))
    started = time.monotonic()
    outcome = await executor.run(calls("next"))
    assert outcome.results[0].output == "next: done"
    assert time.monotonic() - started < 0.5
    assert [key for key, _ in downstream.calls] == ["spend the burst", "next"]


async def test_a_keyboard_interrupt_is_never_retried() -> None:
    runs: list[int] = []

    @ts.tool(idempotent=True, retry=ts.Retry(attempts=5, backoff=0.0, on=(BaseException,)))
    async def fetch(key: str) -> str:
        runs.append(1)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        await ts.Executor([fetch]).run(calls("a"))
    assert runs == [1]


async def test_a_cancelled_probe_lets_the_next_call_probe() -> None:
    gate = anyio.Event()
    ran: list[str] = []

    @ts.tool(circuit=ts.CircuitBreaker(failures=1, cooldown=0.05))
    async def fetch(key: str) -> str:
        ran.append(key)
        if key == "fail":
            raise ts.Transient("down")
        if key == "hang":
            await gate.wait()
        return key

    executor = ts.Executor([fetch])
    await executor.run(calls("fail"))
    await anyio.sleep(0.1)
    with anyio.move_on_after(0.05):
        await executor.run(calls("hang"))  # the probe, cancelled before it settles anything
    assert (await executor.run(calls("after"))).results[0].output == "after"
    assert ran == ["fail", "hang", "after"]


async def test_a_failure_that_is_not_transient_breaks_the_streak_of_the_circuit() -> None:
    downstream = Downstream(["transient", "permanent", "transient"])
    executor = ts.Executor([fetch_tool(downstream, circuit=ts.CircuitBreaker(failures=2, cooldown=10))])
    kinds = [(await executor.run(calls(key))).results[0].error_kind for key in ("a", "b", "c", "d")]
    # a: transient (1), b: permanent (the downstream answered: the streak restarts), c: transient (1), d: runs.
    assert kinds == ["execution_error", "execution_error", "execution_error", None]
