"""Failures, timeouts, cancellation, steering and interrupts: every call answered, nothing left behind."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio


class Recorder:
    """Keeps every event of a run; checks that each call started and finished exactly once."""

    def __init__(self) -> None:
        self.events: list[ts.Event] = []

    def __call__(self, event: ts.Event) -> None:
        self.events.append(event)

    def starts(self) -> list[str]:
        return [e.call_id for e in self.events if isinstance(e, ts.ToolStarted)]

    def ran(self) -> list[str]:
        return [e.call_id for e in self.events if isinstance(e, ts.ToolStarted) and e.ran]

    def finishes(self) -> list[ts.ToolResult]:
        return [e.result for e in self.events if isinstance(e, ts.ToolFinished)]

    def assert_one_start_and_one_end(self, results: list[ts.ToolResult]) -> None:
        ids = [r.call_id for r in results]
        assert sorted(self.starts()) == sorted(ids)
        assert sorted(r.call_id for r in self.finishes()) == sorted(ids)
        assert {r.call_id: r for r in self.finishes()} == {r.call_id: r for r in results}


def kinds(outcome: ts.Outcome) -> dict[str, str | None]:
    return {r.call_id: r.error_kind for r in outcome.results}


# -- timeouts --------------------------------------------------------------------


async def test_a_stuck_async_tool_times_out_and_its_siblings_keep_their_results() -> None:
    cleaned: list[str] = []

    @ts.tool(concurrency_safe=True, timeout=0.05)
    async def stuck() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            cleaned.append("stuck")

    @ts.tool(concurrency_safe=True)
    async def quick(n: int) -> int:
        return n

    with anyio.fail_after(5):
        outcome = await ts.Executor([stuck, quick]).run(
            [ts.ToolCall("1", "quick", {"n": 1}), ts.ToolCall("2", "stuck"), ts.ToolCall("3", "quick", {"n": 3})]
        )
    assert [r.output for r in outcome.results] == [1, None, 3]
    assert outcome.results[1].error_kind == "timeout"
    assert outcome.results[1].error == "`stuck` did not finish within 0.05 seconds"
    assert cleaned == ["stuck"]


async def test_a_stuck_sync_tool_never_holds_the_run_and_its_thread_learns_it_was_stopped() -> None:
    release = threading.Event()
    noticed = threading.Event()

    @ts.tool(timeout=0.05)
    def blocking(ctx: ts.ToolContext) -> str:
        release.wait(10)
        if ctx.cancelled:
            noticed.set()
        return "late"

    try:
        with anyio.fail_after(5):
            outcome = await ts.Executor([blocking]).run([ts.ToolCall("1", "blocking")])
        assert outcome.results[0].error_kind == "timeout"
    finally:
        release.set()
    with anyio.fail_after(5):
        await anyio.to_thread.run_sync(noticed.wait, 5)
    assert noticed.is_set()


async def test_a_timeout_counts_from_when_the_call_gets_its_concurrency_slot() -> None:
    # "a" holds the tool's only slot until its own timeout; "b" waits for the slot
    # as long as that and then needs no time: it must not be charged for the wait.
    @ts.tool(concurrency_safe=True, max_concurrency=1, timeout=0.05)
    async def gate(name: str) -> str:
        if name == "a":
            await anyio.sleep_forever()
        return name

    outcome = await ts.Executor([gate], strategy=ts.Parallel()).run(
        [ts.ToolCall("a", "gate", {"name": "a"}), ts.ToolCall("b", "gate", {"name": "b"})]
    )
    assert kinds(outcome) == {"a": "timeout", "b": None}


async def test_timeout_behavior_raise_raises_after_the_batch_settles_with_every_result() -> None:
    finished: list[str] = []

    @ts.tool(concurrency_safe=True, timeout=0.02, timeout_behavior="raise")
    async def stuck() -> None:
        await anyio.sleep_forever()

    @ts.tool(concurrency_safe=True)
    async def steady(name: str) -> str:
        await anyio.sleep(0.06)
        finished.append(name)
        return name

    @ts.tool
    async def later() -> str:
        finished.append("later")
        return "later"

    recorder = Recorder()
    calls = [
        ts.ToolCall("1", "steady", {"name": "a"}),
        ts.ToolCall("2", "stuck"),
        ts.ToolCall("3", "later"),
    ]
    with pytest.raises(ts.ToolTimeoutError) as caught:
        await ts.Executor([stuck, steady, later], on_event=recorder).run(calls)
    error = caught.value
    assert isinstance(error, TimeoutError)
    assert isinstance(error, ts.ToolCallFailed)
    assert error.result.call_id == "2"
    assert error.result.error_kind == "timeout"
    # The sibling finished before the error was raised; the next batch never ran.
    assert finished == ["a"]
    assert [(r.call_id, r.error_kind) for r in error.results] == [("1", None), ("2", "timeout"), ("3", "skipped")]
    assert "call 2 (`stuck`) failed" in str(error.results[2].error)
    recorder.assert_one_start_and_one_end(list(error.results))


async def test_a_tool_that_turns_its_cancellation_into_an_error_still_times_out() -> None:
    @ts.tool(timeout=0.02)
    async def upload() -> None:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            raise ConnectionAbortedError("upload interrupted") from None

    outcome = await ts.Executor([upload]).run([ts.ToolCall("1", "upload")])
    assert outcome.results[0].error_kind == "timeout"


async def test_a_timeout_with_behavior_error_is_a_result_even_when_on_error_raises() -> None:
    @ts.tool(timeout=0.02)
    async def stuck() -> None:
        await anyio.sleep_forever()

    outcome = await ts.Executor([stuck], on_error="raise").run([ts.ToolCall("1", "stuck")])
    assert outcome.results[0].error_kind == "timeout"


# -- errors ------------------------------------------------------------------------


async def test_the_error_formatter_writes_the_message_the_model_sees() -> None:
    @ts.tool
    async def fetch(url: str) -> str:
        raise ConnectionError(f"cannot reach {url}")

    def advise(exc: BaseException, call: ts.ToolCall) -> str:
        return f"{call.name} failed ({exc}); check the URL and try again"

    outcome = await ts.Executor([fetch], error_formatter=advise).run([ts.ToolCall("1", "fetch", {"url": "x.test"})])
    assert outcome.results[0].error == "fetch failed (cannot reach x.test); check the URL and try again"
    assert outcome.results[0].error_kind == "execution_error"


@pytest.mark.parametrize("formatter_returns", ["raise", "non-string"])
async def test_a_broken_error_formatter_falls_back_to_the_default_message(formatter_returns: str) -> None:
    @ts.tool
    async def fetch() -> str:
        raise ConnectionError("refused")

    def broken(exc: BaseException, call: ts.ToolCall) -> Any:
        if formatter_returns == "raise":
            raise RuntimeError("formatter bug")
        return 42

    outcome = await ts.Executor([fetch], error_formatter=broken).run([ts.ToolCall("1", "fetch")])
    assert outcome.results[0].error == "ConnectionError: refused"
    assert outcome.results[0].error_kind == "execution_error"


async def test_an_exception_whose_text_fails_still_gets_a_message() -> None:
    class Opaque(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    @ts.tool
    async def odd() -> None:
        raise Opaque

    outcome = await ts.Executor([odd]).run([ts.ToolCall("1", "odd")])
    assert outcome.results[0].error == "Opaque"


async def test_on_error_raise_answers_the_later_calls_and_chains_the_tool_exception() -> None:
    runs: list[str] = []

    @ts.tool
    async def step(name: str, fail: bool = False) -> str:
        runs.append(name)
        if fail:
            raise KeyError(name)
        return name

    recorder = Recorder()
    calls = [ts.ToolCall(str(i), "step", {"name": f"s{i}", "fail": i == 1}) for i in range(4)]
    with pytest.raises(ts.ToolCallFailed) as caught:
        await ts.Executor([step], on_error="raise", on_event=recorder).run(calls)
    assert not isinstance(caught.value, ts.ToolTimeoutError)
    assert isinstance(caught.value.__cause__, KeyError)
    assert runs == ["s0", "s1"]
    assert [r.error_kind for r in caught.value.results] == [None, "execution_error", "skipped", "skipped"]
    recorder.assert_one_start_and_one_end(list(caught.value.results))


def test_bad_failure_options_are_refused_by_name() -> None:
    with pytest.raises(ts.OptionError, match="abort_siblings_on_error"):
        ts.Executor([], abort_siblings_on_error="yes")  # type: ignore[arg-type]
    with pytest.raises(ts.OptionError, match="error_formatter"):
        ts.Executor([], error_formatter="short")  # type: ignore[arg-type]


# -- aborting siblings ----------------------------------------------------------------


def abort_tools(started: list[str], finished: list[str], *, abort: bool) -> list[ts.Tool]:
    """``fragile`` fails once two ``work`` calls have started (``delay`` after that); ``work`` waits ``delay``
    (long enough by default that only a cancellation ends it in these tests)."""
    two_started = anyio.Event()

    @ts.tool(concurrency_safe=True, abort_siblings_on_error=abort)
    async def fragile(delay: float) -> None:
        await two_started.wait()
        await anyio.sleep(delay)
        raise OSError("device gone")

    @ts.tool(concurrency_safe=True)
    async def work(name: str, delay: float = 10.0) -> str:
        started.append(name)
        if len(started) == 2:
            two_started.set()
        await anyio.sleep(delay)
        finished.append(name)
        return name

    @ts.tool
    async def after() -> str:
        started.append("after")
        return "after"

    return [fragile, work, after]


ABORT_TURN = [
    ts.ToolCall("w1", "work", {"name": "w1"}),
    ts.ToolCall("f", "fragile", {"delay": 0.01}),
    ts.ToolCall("w2", "work", {"name": "w2"}),
    ts.ToolCall("w3", "work", {"name": "w3"}),
    ts.ToolCall("next", "after"),
]


async def test_a_tool_that_aborts_its_siblings_cancels_the_rest_of_its_batch_only() -> None:
    started: list[str] = []
    finished: list[str] = []
    recorder = Recorder()
    executor = ts.Executor(
        abort_tools(started, finished, abort=True), strategy=ts.Partitioned(max_concurrency=3), on_event=recorder
    )
    outcome = await executor.run(ABORT_TURN)
    assert kinds(outcome) == {
        "w1": "cancelled",
        "f": "execution_error",
        "w2": "cancelled",
        "w3": "cancelled",
        "next": None,
    }
    # w1 and w2 were running and were stopped; w3 was waiting for a worker and never started.
    assert started == ["w1", "w2", "after"]
    assert finished == []
    errors = {r.call_id: str(r.error) for r in outcome.results}
    assert errors["w1"] == "`work` was cancelled: call f (`fragile`) failed and cancelled the rest of its batch"
    assert errors["w3"] == "not run: call f (`fragile`) failed and cancelled the rest of its batch"
    assert "w3" not in recorder.ran()
    recorder.assert_one_start_and_one_end(outcome.results)


async def test_the_executor_can_abort_siblings_for_every_tool() -> None:
    started: list[str] = []
    finished: list[str] = []
    executor = ts.Executor(
        abort_tools(started, finished, abort=False),
        strategy=ts.Partitioned(max_concurrency=3),
        abort_siblings_on_error=True,
    )
    outcome = await executor.run(ABORT_TURN)
    assert kinds(outcome)["w1"] == "cancelled"
    assert kinds(outcome)["next"] is None


async def test_without_the_policy_a_failure_keeps_every_sibling_result() -> None:
    started: list[str] = []
    finished: list[str] = []
    executor = ts.Executor(abort_tools(started, finished, abort=False), strategy=ts.Partitioned(max_concurrency=3))
    turn = [
        ts.ToolCall(c.id, c.name, {**c.args, "delay": 0.02} if c.name == "work" else c.args)  # type: ignore[dict-item]
        for c in ABORT_TURN
    ]
    outcome = await executor.run(turn)
    assert kinds(outcome) == {"w1": None, "f": "execution_error", "w2": None, "w3": None, "next": None}
    assert sorted(finished) == ["w1", "w2", "w3"]


async def test_a_timeout_also_aborts_the_batch() -> None:
    @ts.tool(concurrency_safe=True, timeout=0.02, abort_siblings_on_error=True)
    async def stuck() -> None:
        await anyio.sleep_forever()

    @ts.tool(concurrency_safe=True)
    async def wait() -> None:
        await anyio.sleep_forever()

    with anyio.fail_after(5):
        outcome = await ts.Executor([stuck, wait]).run([ts.ToolCall("1", "wait"), ts.ToolCall("2", "stuck")])
    assert kinds(outcome) == {"1": "cancelled", "2": "timeout"}


# -- cancelling one call ----------------------------------------------------------------


async def test_a_tool_can_cancel_its_own_call() -> None:
    @ts.tool(concurrency_safe=True)
    async def search(query: str, ctx: ts.ToolContext) -> str:
        if not query:
            ctx.cancel("empty query")
            return "what the tool returns after cancelling is discarded"
        return query

    outcome = await ts.Executor([search]).run(
        [ts.ToolCall("1", "search", {"query": ""}), ts.ToolCall("2", "search", {"query": "x"})]
    )
    assert kinds(outcome) == {"1": "cancelled", "2": None}
    assert outcome.results[0].error == "`search` was cancelled: empty query"
    assert outcome.results[0].output is None
    assert outcome.results[1].output == "x"


async def test_a_tool_in_a_cancel_scope_that_cancels_itself_stops_at_its_next_await() -> None:
    after: list[str] = []

    @ts.tool(interrupt_behavior="cancel")
    async def search(ctx: ts.ToolContext) -> str:
        ctx.cancel("nothing to find")
        await anyio.sleep(10)
        after.append("resumed")
        return "never"

    with anyio.fail_after(5):
        outcome = await ts.Executor([search]).run([ts.ToolCall("1", "search")])
    assert outcome.results[0].error == "`search` was cancelled: nothing to find"
    assert after == []


async def test_a_sync_tool_can_cancel_its_own_call_from_its_thread() -> None:
    @ts.tool
    def scan(ctx: ts.ToolContext) -> str:
        ctx.cancel()
        return "ignored" if ctx.cancelled else "never"

    with anyio.fail_after(5):
        outcome = await ts.Executor([scan]).run([ts.ToolCall("1", "scan")])
    assert outcome.results[0].error_kind == "cancelled"
    assert outcome.results[0].error == "`scan` was cancelled"


async def test_the_caller_cancels_one_running_call_and_one_waiting_call() -> None:
    started: list[str] = []
    finished: list[str] = []

    @ts.tool(concurrency_safe=True, interrupt_behavior="cancel")
    async def crawl(site: str) -> str:
        started.append(site)
        await anyio.sleep(0.2 if site != "c" else 0)
        finished.append(site)
        return site

    executor: ts.Executor
    answers: dict[str, bool] = {}

    def on_event(event: ts.Event) -> None:
        if isinstance(event, ts.ToolStarted) and event.call_id == "a":
            answers["a"] = executor.cancel("a", "too slow")
            answers["b"] = executor.cancel("b")
            answers["missing"] = executor.cancel("zzz")

    executor = ts.Executor([crawl], strategy=ts.Parallel(max_concurrency=1), on_event=on_event)
    outcome = await executor.run([ts.ToolCall(s, "crawl", {"site": s}) for s in "abc"])
    assert answers == {"a": True, "b": True, "missing": False}
    assert kinds(outcome) == {"a": "cancelled", "b": "cancelled", "c": None}
    # "a" was cancelled as it started (at its first await); "b" never started.
    assert started == ["a", "c"]
    assert finished == ["c"]
    assert outcome.results[0].error == "`crawl` was cancelled by the caller: too slow"
    assert executor.cancel("c") is False


async def test_a_running_call_without_a_cancel_scope_finishes_when_cancelled() -> None:
    @ts.tool
    async def commit(n: int) -> int:
        await anyio.sleep(0.02)
        return n

    executor: ts.Executor
    answers: list[bool] = []

    def on_event(event: ts.Event) -> None:
        if isinstance(event, ts.ToolStarted):
            answers.append(executor.cancel(event.call_id))

    executor = ts.Executor([commit], on_event=on_event)
    outcome = await executor.run([ts.ToolCall("1", "commit", {"n": 1})])
    assert answers == [False]
    assert outcome.results[0].output == 1


@pytest.mark.parametrize("confirm", [False, True])
async def test_a_running_call_without_a_cancel_scope_is_asked_to_stop_through_its_context(confirm: bool) -> None:
    @ts.tool
    async def index(ctx: ts.ToolContext) -> str:
        for _ in range(1000):
            if ctx.cancelled:
                break
            await anyio.sleep(0.005)
        if confirm:
            ctx.cancel("stopped on request")
        return "partial index"

    executor = ts.Executor([index])
    answers: list[bool] = []

    async def cancel_soon() -> None:
        await anyio.sleep(0.02)
        answers.append(executor.cancel("1"))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(cancel_soon)
            outcome = await executor.run([ts.ToolCall("1", "index")])
    assert answers == [False]
    if confirm:
        assert outcome.results[0].error == "`index` was cancelled: stopped on request"
    else:
        assert outcome.results[0].output == "partial index"


# -- cancelling the run ------------------------------------------------------------------


@pytest.mark.parametrize("strategy", [ts.Sequential(), ts.Parallel(max_concurrency=2)])
async def test_cancelling_the_run_propagates_and_is_never_turned_into_results(strategy: ts.Strategy) -> None:
    cleaned: list[str] = []
    entered = anyio.Event()

    @ts.tool(concurrency_safe=True, interrupt_behavior="cancel")
    async def hold(name: str, ctx: ts.ToolContext) -> str:
        try:
            entered.set()
            await anyio.sleep_forever()
        finally:
            cleaned.append(name)
        return name

    @ts.tool(concurrency_safe=True)
    async def plain(name: str) -> str:
        try:
            await anyio.sleep_forever()
        finally:
            cleaned.append(name)
        return name

    recorder = Recorder()
    executor = ts.Executor([hold, plain], strategy=strategy, on_event=recorder)
    before = {task.id for task in anyio.get_running_tasks()}
    returned: list[ts.Outcome] = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:

            async def run() -> None:
                returned.append(
                    await executor.run(
                        [ts.ToolCall("h", "hold", {"name": "h"}), ts.ToolCall("p", "plain", {"name": "p"})]
                    )
                )

            group.start_soon(run)
            await entered.wait()
            await anyio.sleep(0.01)
            group.cancel_scope.cancel()
    assert returned == []
    assert recorder.finishes() == []
    assert sorted(cleaned) == sorted(recorder.ran())
    assert {task.id for task in anyio.get_running_tasks()} <= before
    assert executor.interrupt() == 0


async def test_cancelling_the_run_does_not_wait_for_a_blocked_thread() -> None:
    release = threading.Event()
    returned = threading.Event()
    seen: list[bool] = []

    @ts.tool
    def blocking(ctx: ts.ToolContext) -> None:
        release.wait(10)
        seen.append(ctx.cancelled)
        returned.set()

    try:
        with anyio.move_on_after(0.05) as scope:
            await ts.Executor([blocking]).run([ts.ToolCall("1", "blocking")])
        assert scope.cancelled_caught
    finally:
        release.set()
    with anyio.fail_after(5):
        await anyio.to_thread.run_sync(returned.wait, 5)
    assert seen == [True]


async def test_a_tool_that_turns_the_run_cancellation_into_an_error_does_not_produce_a_result() -> None:
    recorder = Recorder()

    @ts.tool
    async def upload() -> None:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            raise ConnectionAbortedError("upload interrupted") from None

    with anyio.move_on_after(0.02) as scope:
        await ts.Executor([upload], on_event=recorder).run([ts.ToolCall("1", "upload")])
    assert scope.cancelled_caught
    assert recorder.ran() == ["1"]
    assert recorder.finishes() == []


# -- steering ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "expected_runs"),
    [(ts.Sequential(), ["0", "1"]), (ts.Batched(2), ["0", "1"]), (ts.Batched(3), ["0", "1", "2"])],
)
async def test_steering_stops_between_calls_or_batches(strategy: ts.Strategy, expected_runs: list[str]) -> None:
    runs: list[str] = []

    @ts.tool(concurrency_safe=True)
    async def step(n: int) -> int:
        runs.append(str(n))
        return n

    recorder = Recorder()

    def steer() -> list[str] | None:
        return ["user: wait"] if len(runs) >= 2 else None

    outcome = await ts.Executor([step], strategy=strategy, on_event=recorder).run(
        [ts.ToolCall(str(i), "step", {"n": i}) for i in range(6)], steering=steer
    )
    assert sorted(runs) == expected_runs
    assert [r.error_kind for r in outcome.results] == [None] * len(runs) + ["skipped"] * (6 - len(runs))
    assert outcome.steering_messages == ["user: wait"]
    recorder.assert_one_start_and_one_end(outcome.results)


async def test_a_steering_callback_returning_nothing_lets_every_call_run() -> None:
    @ts.tool
    async def step(n: int) -> int:
        return n

    async def steer() -> list[str]:
        return []

    outcome = await ts.Executor([step], strategy=ts.Sequential()).run(
        [ts.ToolCall(str(i), "step", {"n": i}) for i in range(3)], steering=steer
    )
    assert [r.output for r in outcome.results] == [0, 1, 2]
    assert outcome.steering_messages == []


# -- interrupts -----------------------------------------------------------------------------------


def interrupt_tools(started: list[str], browsing: anyio.Event | None = None) -> list[ts.Tool]:
    @ts.tool(concurrency_safe=True, interrupt_behavior="cancel")
    async def browse(name: str) -> str:
        started.append(name)
        if browsing is not None and len(started) == 2:
            browsing.set()
        await anyio.sleep(5)
        return name

    @ts.tool(concurrency_safe=True)
    async def save(name: str) -> str:
        started.append(name)
        await anyio.sleep(0.05)
        return name

    @ts.tool
    async def tail(name: str) -> str:
        started.append(name)
        return name

    return [browse, save, tail]


async def test_an_interrupt_cancels_cancel_tools_lets_block_tools_finish_and_skips_the_rest() -> None:
    started: list[str] = []
    recorder = Recorder()
    executor = ts.Executor(interrupt_tools(started), strategy=ts.Partitioned(max_concurrency=2), on_event=recorder)
    reached: list[int] = []

    async def interrupt_soon() -> None:
        await anyio.sleep(0.01)
        reached.append(executor.interrupt("the user typed a message"))

    calls = [
        ts.ToolCall("b", "browse", {"name": "b"}),
        ts.ToolCall("s", "save", {"name": "s"}),
        ts.ToolCall("w", "save", {"name": "w"}),
        ts.ToolCall("t", "tail", {"name": "t"}),
    ]
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(interrupt_soon)
            outcome = await executor.run(calls)
    assert reached == [1]
    assert kinds(outcome) == {"b": "cancelled", "s": None, "w": "skipped", "t": "skipped"}
    assert started == ["b", "s"]
    assert outcome.results[0].error == (
        "`browse` was cancelled because the user interrupted the run (the user typed a message)"
    )
    assert outcome.results[2].error == "not run: the user interrupted the run (the user typed a message)"
    recorder.assert_one_start_and_one_end(outcome.results)
    # The interrupt belonged to that run: the next one runs normally.
    again = await executor.run([ts.ToolCall("t2", "tail", {"name": "t2"})])
    assert again.results[0].output == "t2"


async def test_an_interrupt_reaches_every_run_in_progress_on_the_executor() -> None:
    started: list[str] = []
    both_browsing = anyio.Event()
    executor = ts.Executor(interrupt_tools(started, both_browsing), strategy=ts.Sequential())
    outcomes: dict[str, ts.Outcome] = {}

    async def run(tag: str) -> None:
        outcomes[tag] = await executor.run(
            [ts.ToolCall(f"{tag}1", "browse", {"name": f"{tag}1"}), ts.ToolCall(f"{tag}2", "tail", {"name": f"{tag}2"})]
        )

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(run, "x")
            group.start_soon(run, "y")
            await both_browsing.wait()
            assert executor.interrupt() == 2
    for tag in "xy":
        assert [r.error_kind for r in outcomes[tag].results] == ["cancelled", "skipped"]
    assert sorted(started) == ["x1", "y1"]
    assert executor.interrupt() == 0


# -- a lone call (no batch hooks, no event sinks: it skips the batch bookkeeping) ----------


async def test_a_lone_call_is_batch_zero_and_not_concurrent_under_every_strategy() -> None:
    @ts.tool(concurrency_safe=True)
    async def echo(text: str) -> str:
        await anyio.lowlevel.checkpoint()
        return text

    for strategy in (ts.Sequential(), ts.Parallel(), ts.Batched(3), ts.Partitioned(), ts.ResourceAware()):
        outcome = await ts.Executor([echo], strategy=strategy).run([ts.ToolCall("c", "echo", {"text": "x"})])
        (result,) = outcome.results
        assert (result.output, result.batch, result.was_concurrent, result.is_error) == ("x", 0, False, False)


async def test_a_lone_call_can_be_cancelled_by_the_caller_and_interrupted() -> None:
    def browse_tool(entered: anyio.Event) -> ts.Tool:
        @ts.tool(interrupt_behavior="cancel")
        async def browse(name: str) -> str:
            entered.set()
            await anyio.sleep(5)
            return name

        return browse

    for stop in ("cancel", "interrupt"):
        entered = anyio.Event()
        executor = ts.Executor([browse_tool(entered)])

        async def stop_soon(executor: ts.Executor = executor, stop: str = stop, entered: anyio.Event = entered) -> None:
            await entered.wait()
            if stop == "cancel":
                assert executor.cancel("b", "the user closed the tab")
            else:
                assert executor.interrupt("the user typed a message") == 1

        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                group.start_soon(stop_soon)
                outcome = await executor.run([ts.ToolCall("b", "browse", {"name": "b"})])
        (result,) = outcome.results
        assert result.error_kind == "cancelled", stop


async def test_a_lone_call_that_fails_raises_when_the_executor_raises() -> None:
    @ts.tool
    async def broken() -> None:
        raise RuntimeError("disk on fire")

    with pytest.raises(ts.ToolCallFailed) as caught:
        await ts.Executor([broken], on_error="raise").run([ts.ToolCall("c", "broken")])
    assert caught.value.result.error_kind == "execution_error"
    assert [r.call_id for r in caught.value.results] == ["c"]
