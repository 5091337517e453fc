"""A failure's ``retry_after``, whatever it holds, never breaks the retry logic.

An ``on=`` exception is the downstream client's own: its ``retry_after`` may be text (an HTTP
date), None, NaN, infinite, negative, an integer past any float, a bool or an attribute that
raises. Only a finite number ≥ 0 is a wait; anything else is ignored and the backoff applies,
the tool's own failure kept. ``ts.Transient(retry_after=...)`` is toolsched's: a bad value is
refused where it is made, with an ``OptionError`` naming it.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import anyio
import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio

BACKOFF = 0.001
RETRY = ts.Retry(attempts=2, backoff=BACKOFF, max_backoff=BACKOFF, jitter=False)


class Throttled(Exception):
    """A downstream client's 429, carrying whatever its ``retry_after`` was given."""

    def __init__(self, retry_after: Any) -> None:
        super().__init__("429 too many requests")
        self.retry_after = retry_after


class RaisingRetryAfter(Exception):
    @property
    def retry_after(self) -> float:
        raise RuntimeError("the header could not be read")


class TouchyFloat(float):
    """A float whose comparisons raise."""

    def __ge__(self, other: object) -> bool:
        raise RuntimeError("no comparing")

    def __gt__(self, other: object) -> bool:
        raise RuntimeError("no comparing")


UNUSABLE = [
    pytest.param("3", id="text-number"),
    pytest.param("Wed, 21 Oct 2015 07:28:00 GMT", id="http-date"),
    pytest.param(None, id="none"),
    pytest.param(-1, id="negative-int"),
    pytest.param(-0.5, id="negative-float"),
    pytest.param(math.nan, id="nan"),
    pytest.param(math.inf, id="inf"),
    pytest.param(-math.inf, id="minus-inf"),
    pytest.param(10**400, id="huge-int"),
    pytest.param(-(10**5000), id="huge-negative-int"),
    pytest.param(True, id="true"),
    pytest.param(False, id="false"),
    pytest.param(b"3", id="bytes"),
    pytest.param([3], id="list"),
    pytest.param(complex(3, 0), id="complex"),
    pytest.param(Decimal("3"), id="decimal"),
    pytest.param(Fraction(1, 2), id="fraction"),
    pytest.param(TouchyFloat(3.0), id="float-subclass-raising"),
    pytest.param(object(), id="object"),
]


def flaky(
    raise_first: Any, fails: int = 1, on: tuple[type[Exception], ...] = (Throttled,), **options: Any
) -> tuple[ts.FunctionTool, list[int]]:
    """An idempotent tool whose first ``fails`` runs raise ``raise_first()``, retried on ``on``."""
    runs: list[int] = []
    retry = ts.Retry(attempts=RETRY.attempts, backoff=BACKOFF, max_backoff=BACKOFF, jitter=False, on=on)

    @ts.tool(idempotent=True, retry=retry, concurrency_safe=True, **options)
    async def fetch(key: str) -> str:
        runs.append(1)
        if len(runs) <= fails:
            raise raise_first()
        return f"{key}: done"

    return fetch, runs


def retrying_events(events: list[ts.Event]) -> list[ts.ToolRetrying]:
    return [event for event in events if isinstance(event, ts.ToolRetrying)]


@pytest.mark.parametrize("retry_after", UNUSABLE)
async def test_an_unusable_retry_after_of_an_on_exception_is_ignored_and_the_backoff_applies(retry_after: Any) -> None:
    fetch, runs = flaky(lambda: Throttled(retry_after))
    events: list[ts.Event] = []
    executor = ts.Executor([fetch], on_event=events.append)
    result = (await executor.run([ts.ToolCall("c1", "fetch", {"key": "a"})])).results[0]
    assert (result.output, result.attempts, result.error_kind) == ("a: done", 2, None)
    assert len(runs) == 2
    [retrying] = retrying_events(events)
    assert retrying.delay == BACKOFF
    assert "Throttled: 429 too many requests" in retrying.error


@pytest.mark.parametrize("retry_after", UNUSABLE)
async def test_an_unusable_retry_after_keeps_the_tools_own_failure(retry_after: Any) -> None:
    fetch, runs = flaky(lambda: Throttled(retry_after), fails=10)
    result = (await ts.Executor([fetch]).run([ts.ToolCall("c1", "fetch", {"key": "a"})])).results[0]
    assert (result.error_kind, result.attempts) == ("execution_error", 2)
    assert result.error == "Throttled: 429 too many requests"
    assert len(runs) == 2


async def test_a_retry_after_attribute_that_raises_is_ignored() -> None:
    fetch, _runs = flaky(lambda: RaisingRetryAfter("busy"), on=(RaisingRetryAfter,))
    events: list[ts.Event] = []
    result = (
        await ts.Executor([fetch], on_event=events.append).run([ts.ToolCall("c", "fetch", {"key": "a"})])
    ).results[0]
    assert (result.output, result.attempts) == ("a: done", 2)
    assert [event.delay for event in retrying_events(events)] == [BACKOFF]


@pytest.mark.parametrize(
    ("retry_after", "wait"),
    [
        pytest.param(0, BACKOFF, id="zero: the backoff is longer"),
        pytest.param(0.05, 0.05, id="float"),
        pytest.param(1 - 1, BACKOFF, id="int-zero"),
        pytest.param(type("Seconds", (float,), {})(0.05), 0.05, id="float-subclass"),
        pytest.param(-0.0, BACKOFF, id="negative-zero"),
    ],
)
async def test_a_usable_retry_after_of_an_on_exception_is_honoured(retry_after: Any, wait: float) -> None:
    fetch, _runs = flaky(lambda: Throttled(retry_after))
    events: list[ts.Event] = []
    result = (
        await ts.Executor([fetch], on_event=events.append).run([ts.ToolCall("c", "fetch", {"key": "a"})])
    ).results[0]
    assert (result.output, result.attempts) == ("a: done", 2)
    assert [event.delay for event in retrying_events(events)] == [wait]
    assert all(type(event.delay) is float for event in retrying_events(events))


async def test_a_transient_whose_retry_after_was_changed_to_text_is_retried_on_the_backoff() -> None:
    def changed() -> ts.Transient:
        error = ts.Transient("busy", retry_after=1.0)
        error.retry_after = "soon"  # type: ignore[assignment]
        return error

    fetch, _runs = flaky(changed)
    events: list[ts.Event] = []
    result = (
        await ts.Executor([fetch], on_event=events.append).run([ts.ToolCall("c", "fetch", {"key": "a"})])
    ).results[0]
    assert (result.output, result.attempts) == ("a: done", 2)
    assert [event.delay for event in retrying_events(events)] == [BACKOFF]


async def test_a_transient_subclass_that_skips_its_init_is_retried_on_the_backoff() -> None:
    class Bare(ts.Transient):
        def __init__(self) -> None:
            Exception.__init__(self, "bare")  # no retry_after attribute at all

    fetch, _runs = flaky(Bare)
    result = (await ts.Executor([fetch]).run([ts.ToolCall("c", "fetch", {"key": "a"})])).results[0]
    assert (result.output, result.attempts) == ("a: done", 2)


async def test_a_failure_whose_text_cannot_be_read_is_still_retried() -> None:
    class Mute(ts.Transient):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    fetch, _runs = flaky(Mute)
    events: list[ts.Event] = []
    result = (
        await ts.Executor([fetch], on_event=events.append).run([ts.ToolCall("c", "fetch", {"key": "a"})])
    ).results[0]
    assert (result.output, result.attempts) == ("a: done", 2)
    [retrying] = retrying_events(events)
    assert retrying.error == "Mute"


async def test_an_on_type_whose_isinstance_check_raises_leaves_the_tools_failure() -> None:
    class Touchy(type):
        def __instancecheck__(cls, instance: object) -> bool:
            raise RuntimeError("cannot tell")

    class Odd(Exception, metaclass=Touchy):
        pass

    runs: list[int] = []

    @ts.tool(idempotent=True, retry=ts.Retry(attempts=3, backoff=BACKOFF, on=(Odd,)))
    async def fetch(key: str) -> str:
        runs.append(1)
        raise ValueError("400 bad request")

    result = (await ts.Executor([fetch]).run([ts.ToolCall("c", "fetch", {"key": "a"})])).results[0]
    # Not transient: the tool's own failure, run once.
    assert (result.error_kind, result.error, result.attempts) == ("execution_error", "ValueError: 400 bad request", 1)
    assert runs == [1]


async def test_concurrent_calls_with_unusable_retry_afters_are_all_answered() -> None:
    values = [param.values[0] for param in UNUSABLE]
    runs: dict[str, int] = {}
    retry = ts.Retry(attempts=2, backoff=BACKOFF, max_backoff=BACKOFF, jitter=False, on=(Throttled,), budget=100)

    @ts.tool(idempotent=True, retry=retry, concurrency_safe=True)
    async def fetch(index: int) -> int:
        key = str(index)
        runs[key] = runs.get(key, 0) + 1
        await anyio.sleep(0.001)
        if runs[key] == 1:
            raise Throttled(values[index])
        return index

    calls = [ts.ToolCall(f"c{index}", "fetch", {"index": index}) for index in range(len(values))]
    outcome = await ts.Executor([fetch], strategy=ts.Parallel()).run(calls)
    assert [(result.output, result.attempts) for result in outcome.results] == [(i, 2) for i in range(len(values))]


async def test_a_retry_after_past_the_calls_timeout_answers_the_failure_at_once() -> None:
    fetch, runs = flaky(lambda: Throttled(10**6), fails=10, timeout=5.0)
    with anyio.fail_after(4):
        result = (await ts.Executor([fetch]).run([ts.ToolCall("c", "fetch", {"key": "a"})])).results[0]
    assert (result.error_kind, result.attempts) == ("execution_error", 1)
    assert len(runs) == 1


async def watchdog(scope: anyio.CancelScope, stuck: list[bool]) -> None:
    """Cancels ``scope`` (a cancellation, not a deadline: a deadline would cut the retry's wait short) if the
    test is still going after a few seconds."""
    await anyio.sleep(4)
    stuck.append(True)
    scope.cancel()


async def test_a_huge_retry_after_without_a_timeout_ends_at_an_interrupt() -> None:
    fetch, runs = flaky(lambda: Throttled(1e300), fails=10)
    waiting = anyio.Event()
    retrying: list[float] = []

    def on_event(event: ts.Event) -> None:
        if isinstance(event, ts.ToolRetrying):
            retrying.append(event.delay)
            waiting.set()

    executor = ts.Executor([fetch], on_event=on_event)
    stuck: list[bool] = []

    async def interrupt() -> None:
        await waiting.wait()
        executor.interrupt("the user spoke")

    async with anyio.create_task_group() as group:
        group.start_soon(watchdog, group.cancel_scope, stuck)
        group.start_soon(interrupt)
        outcome = await executor.run([ts.ToolCall("c", "fetch", {"key": "a"})])
        group.cancel_scope.cancel()
    assert not stuck
    assert retrying == [1e300]
    result = outcome.results[0]
    assert (result.error_kind, result.error, result.attempts) == (
        "execution_error",
        "Throttled: 429 too many requests",
        1,
    )
    assert len(runs) == 1


async def test_a_huge_retry_after_ends_when_the_caller_cancels() -> None:
    fetch, runs = flaky(lambda: Throttled(1e300), fails=10)
    waiting = anyio.Event()

    def on_event(event: ts.Event) -> None:
        if isinstance(event, ts.ToolRetrying):
            waiting.set()

    executor = ts.Executor([fetch], on_event=on_event)
    stuck: list[bool] = []
    async with anyio.create_task_group() as group:
        group.start_soon(watchdog, group.cancel_scope, stuck)
        with anyio.CancelScope() as scope:

            async def cancel() -> None:
                await waiting.wait()
                scope.cancel()

            group.start_soon(cancel)
            await executor.run([ts.ToolCall("c", "fetch", {"key": "a"})])
        group.cancel_scope.cancel()
    assert not stuck and scope.cancelled_caught
    assert len(runs) == 1


async def test_a_retry_after_past_the_callers_deadline_answers_the_failure_at_once() -> None:
    fetch, runs = flaky(lambda: Throttled(60), fails=10)
    with anyio.move_on_after(10) as scope:
        result = (await ts.Executor([fetch]).run([ts.ToolCall("c", "fetch", {"key": "a"})])).results[0]
    assert not scope.cancelled_caught
    assert (result.error_kind, result.attempts) == ("execution_error", 1)
    assert len(runs) == 1


BAD_TRANSIENT = [
    pytest.param("3", id="text"),
    pytest.param(math.nan, id="nan"),
    pytest.param(math.inf, id="inf"),
    pytest.param(-1, id="negative"),
    pytest.param(10**400, id="huge-int"),
    pytest.param(10**5000, id="huger-int"),
    pytest.param(True, id="bool"),
    pytest.param(Fraction(1, 2), id="fraction"),
    pytest.param(Decimal("1"), id="decimal"),
]


@pytest.mark.parametrize("retry_after", BAD_TRANSIENT)
def test_a_bad_retry_after_of_a_transient_is_refused_where_it_is_made(retry_after: Any) -> None:
    with pytest.raises(ts.OptionError, match=r"Transient\(retry_after=\.\.\.\) must be None or seconds to wait"):
        ts.Transient("429", retry_after=retry_after)


@pytest.mark.parametrize("retry_after", [0, 0.0, 2, 2.5, 10**20, None])
def test_a_good_retry_after_of_a_transient_is_kept_as_a_float(retry_after: Any) -> None:
    error = ts.Transient("429", retry_after=retry_after)
    if retry_after is None:
        assert error.retry_after is None
    else:
        assert error.retry_after == retry_after and type(error.retry_after) is float


async def test_a_transient_refused_in_the_tool_fails_the_call_saying_why() -> None:
    runs: list[int] = []

    @ts.tool(idempotent=True, retry=RETRY)
    async def fetch(key: str) -> str:
        runs.append(1)
        raise ts.Transient("429", retry_after="Wed, 21 Oct 2015 07:28:00 GMT")  # type: ignore[arg-type]

    result = (await ts.Executor([fetch]).run([ts.ToolCall("c", "fetch", {"key": "a"})])).results[0]
    # The mistake is the tool's: not transient, not retried, and the message says what was wrong.
    assert (result.error_kind, result.attempts) == ("execution_error", 1)
    assert "Transient(retry_after=...) must be None or seconds to wait" in (result.error or "")
    assert runs == [1]
