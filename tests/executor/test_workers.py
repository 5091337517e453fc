"""The pool's worker group keeps a task group's promises on every event loop (asyncio workers are plain tasks)."""

from __future__ import annotations

import contextvars

import anyio
import anyio.lowlevel
import pytest

from toolsched._backends.workers import WorkerGroup

pytestmark = pytest.mark.anyio

seen_in_worker: contextvars.ContextVar[str] = contextvars.ContextVar("seen_in_worker", default="unset")


async def sleep_until_cancelled(stopped: list[str], who: str) -> None:
    """Sleeps until cancelled, noting ``who`` was stopped."""
    try:
        await anyio.sleep(10)
    except anyio.get_cancelled_exc_class():
        stopped.append(who)
        raise


async def fails_soon() -> None:
    """Fails a moment after it starts."""
    await anyio.sleep(0.01)
    raise RuntimeError("boom")


async def test_the_group_waits_for_every_worker() -> None:
    done: list[int] = []

    async def work(n: int) -> None:
        await anyio.sleep(0.01 * n)
        done.append(n)

    async with WorkerGroup() as group:
        for n in range(5):
            group.start_soon(lambda n=n: work(n))
    assert sorted(done) == [0, 1, 2, 3, 4]


async def test_a_failing_worker_stops_the_body_and_the_other_workers_and_is_raised() -> None:
    stopped: list[str] = []

    with anyio.fail_after(5):
        with pytest.raises(BaseExceptionGroup) as caught:
            async with WorkerGroup() as group:
                group.start_soon(lambda: sleep_until_cancelled(stopped, "worker"))
                group.start_soon(fails_soon)
                await sleep_until_cancelled(stopped, "body")
    assert [type(error) for error in caught.value.exceptions] == [RuntimeError]
    assert sorted(stopped) == ["body", "worker"]


async def test_an_exception_from_the_body_cancels_the_workers() -> None:
    stopped: list[str] = []

    with anyio.fail_after(5):
        with pytest.raises(BaseExceptionGroup) as caught:
            async with WorkerGroup() as group:
                group.start_soon(lambda: sleep_until_cancelled(stopped, "worker"))
                await anyio.sleep(0.01)
                raise ValueError("body")
    assert [type(error) for error in caught.value.exceptions] == [ValueError]
    assert stopped == ["worker"]


async def test_an_outer_cancellation_stops_workers_while_the_body_waits_for_them() -> None:
    finished: list[str] = []

    async def sleeps() -> None:
        await anyio.sleep(10)
        finished.append("worker")

    with anyio.fail_after(5):
        with anyio.move_on_after(0.05) as outer:
            async with WorkerGroup() as group:
                group.start_soon(sleeps)
                group.start_soon(sleeps)
        assert outer.cancelled_caught
    await anyio.sleep(0.05)
    assert finished == []


async def test_an_outer_cancellation_of_the_body_stops_the_workers_before_it_goes_on() -> None:
    ended: list[str] = []

    async def sleeps() -> None:
        try:
            await anyio.sleep(10)
        finally:
            ended.append("worker")

    with anyio.fail_after(5):
        with anyio.move_on_after(0.05) as outer:
            try:
                async with WorkerGroup() as group:
                    group.start_soon(sleeps)
                    await anyio.sleep(10)
            finally:
                # Every worker has ended by the time the cancellation leaves the group.
                ended.append("group left")
        assert outer.cancelled_caught
    assert ended == ["worker", "group left"]


async def test_a_shield_inside_a_worker_holds_when_the_group_stops_it() -> None:
    finished: list[str] = []

    async def must_finish() -> None:
        with anyio.CancelScope(shield=True):
            await anyio.sleep(0.1)
            finished.append("shielded work")

    with anyio.fail_after(5):
        with pytest.raises(BaseExceptionGroup):
            async with WorkerGroup() as group:
                group.start_soon(must_finish)
                group.start_soon(fails_soon)
    assert finished == ["shielded work"]


async def test_deadlines_inside_a_worker_work_as_in_any_task() -> None:
    results: list[bool] = []

    async def bounded() -> None:
        with anyio.move_on_after(0.02) as scope:
            await anyio.sleep(10)
        results.append(scope.cancelled_caught)

    with anyio.fail_after(5):
        async with WorkerGroup() as group:
            group.start_soon(bounded)
            group.start_soon(bounded)
    assert results == [True, True]


async def test_workers_start_in_a_copy_of_the_starting_context() -> None:
    seen: list[str] = []

    async def read_and_write() -> None:
        seen.append(seen_in_worker.get())
        seen_in_worker.set("changed by the worker")

    seen_in_worker.set("the caller's")
    async with WorkerGroup() as group:
        group.start_soon(read_and_write)
    assert seen == ["the caller's"]
    assert seen_in_worker.get() == "the caller's"


async def test_a_keyboard_interrupt_in_a_worker_comes_out_of_the_group() -> None:
    async def interrupted() -> None:
        await anyio.lowlevel.checkpoint()
        raise KeyboardInterrupt

    with anyio.fail_after(5):
        with pytest.raises(BaseExceptionGroup) as caught:
            async with WorkerGroup() as group:
                group.start_soon(interrupted)
                await anyio.sleep(1)
    assert [type(error) for error in caught.value.exceptions] == [KeyboardInterrupt]


async def test_a_group_that_started_nothing_leaves_the_callers_scopes_working() -> None:
    with anyio.move_on_after(0.01) as deadline:
        async with WorkerGroup():
            pass
        await anyio.sleep(1)
    assert deadline.cancelled_caught
    for _ in range(20):
        with anyio.CancelScope():
            async with WorkerGroup():
                pass


async def test_a_worker_that_swallows_its_stop_is_asked_again_until_it_ends() -> None:
    # The group stops a worker again each time it waits: one swallowed request does not keep it running.
    swallowed: list[int] = []

    async def stubborn() -> None:
        for attempt in range(3):
            try:
                await anyio.sleep(10)
            except anyio.get_cancelled_exc_class():
                swallowed.append(attempt)
        await anyio.sleep(10)

    with anyio.fail_after(5):
        with pytest.raises(BaseExceptionGroup) as caught:
            async with WorkerGroup() as group:
                group.start_soon(stubborn)
                group.start_soon(fails_soon)
    assert swallowed == [0, 1, 2]
    assert [type(error) for error in caught.value.exceptions] == [RuntimeError]


async def test_a_worker_started_while_the_group_stops_is_stopped_too() -> None:
    reached: list[str] = []

    async def late() -> None:
        await anyio.sleep(10)
        reached.append("late")

    async def starts_another() -> None:
        try:
            await anyio.sleep(10)
        finally:
            group.start_soon(late)

    with anyio.fail_after(5):
        with anyio.move_on_after(0.02) as outer:
            async with WorkerGroup() as group:
                group.start_soon(starts_another)
                await anyio.sleep(10)
    assert outer.cancelled_caught and reached == []


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_tool_that_turns_the_stop_of_its_pool_into_an_error_ends_the_run_cancelled() -> None:
    import toolsched as ts

    ran: list[str] = []

    @ts.tool(read_only=True, concurrency_safe=True)
    async def converts(name: str) -> str:
        """Turns any cancellation into an error of its own."""
        ran.append(name)
        try:
            await anyio.sleep(10)
        except BaseException as exc:
            raise RuntimeError("cancelled, so I failed") from exc
        return name

    executor = ts.Executor([converts], strategy=ts.Partitioned(max_concurrency=2))
    calls = [ts.ToolCall(str(i), "converts", {"name": str(i)}) for i in range(4)]
    with anyio.fail_after(5):
        with anyio.move_on_after(0.05) as outer:
            await executor.run(calls)
    assert outer.cancelled_caught
    # Only the two calls the cap let start ever ran: none started after the run was cancelled.
    assert sorted(ran) == ["0", "1"]


async def test_a_shield_in_the_body_holds_and_one_around_the_group_does_not() -> None:
    finished: list[str] = []

    with anyio.fail_after(5):
        # A shield the body enters holds: its work finishes before the group raises.
        with pytest.raises(BaseExceptionGroup):
            async with WorkerGroup() as group:
                group.start_soon(fails_soon)
                with anyio.CancelScope(shield=True):
                    await anyio.sleep(0.1)
                    finished.append("shielded body")
                await anyio.sleep(10)
        # A shield around the whole group does not keep its body from being stopped by the group.
        with anyio.CancelScope(shield=True):
            with pytest.raises(BaseExceptionGroup):
                async with WorkerGroup() as group:
                    group.start_soon(fails_soon)
                    await anyio.sleep(10)
    assert finished == ["shielded body"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_group_takes_back_the_stops_it_sent_the_entering_task() -> None:
    import asyncio

    task = asyncio.current_task()
    assert task is not None
    before = task.cancelling()
    with pytest.raises(BaseExceptionGroup):
        async with WorkerGroup() as group:
            group.start_soon(fails_soon)
            await anyio.sleep(10)
    assert task.cancelling() == before
    # Nothing is left pending for the entering task: it goes on waiting normally.
    await anyio.sleep(0.02)


async def test_an_outer_cancellation_with_a_failing_worker_is_not_swallowed() -> None:
    async def fails_late() -> None:
        try:
            await anyio.sleep(10)
        finally:
            raise RuntimeError("boom while stopping")

    with anyio.fail_after(5):
        with anyio.move_on_after(0.02) as outer:
            with pytest.raises(BaseExceptionGroup):
                async with WorkerGroup() as group:
                    group.start_soon(fails_late)
                    await anyio.sleep(10)
            await anyio.sleep(10)  # the outer deadline still stops this
    assert outer.cancelled_caught


async def test_a_worker_that_tells_its_own_end_is_waited_for_stopped_and_its_failure_raised() -> None:
    # ``start`` takes a coroutine that reports how it ended (``ended``), as the pool's workers do.
    stopped: list[str] = []
    done: list[str] = []

    async def reporting(group: WorkerGroup, name: str, fails: bool) -> None:
        try:
            if fails:
                await anyio.sleep(0.01)
                raise RuntimeError(f"{name} failed")
            await sleep_until_cancelled(stopped, name)
        except BaseException as exc:
            done.append(name)
            group.ended(exc)
        else:
            group.ended(None)

    with anyio.fail_after(5):
        with pytest.raises(BaseExceptionGroup) as caught:
            async with WorkerGroup() as group:
                group.start(reporting(group, "sleeper", fails=False))
                group.start(reporting(group, "failer", fails=True))
                await sleep_until_cancelled(stopped, "body")
    assert [str(error) for error in caught.value.exceptions] == ["failer failed"]
    assert sorted(stopped) == ["body", "sleeper"]
    assert sorted(done) == ["failer", "sleeper"]


async def test_a_worker_that_tells_its_own_end_is_waited_for() -> None:
    finished: list[int] = []

    async def reporting(group: WorkerGroup, n: int) -> None:
        try:
            await anyio.sleep(0.01 * n)
            finished.append(n)
        except BaseException as exc:
            group.ended(exc)
        else:
            group.ended(None)

    with anyio.fail_after(5):
        async with WorkerGroup() as group:
            for n in range(4):
                group.start(reporting(group, n))
    assert sorted(finished) == [0, 1, 2, 3]
