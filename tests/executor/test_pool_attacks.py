"""Attacks on the pool's worker group made only once a call waits: wherever and however the pool's coroutine
is made and awaited, it behaves as the group entered before the first call did. Five failed when the running
task was noted as the coroutine was made rather than at its first step (a coroutine made outside a scope and
awaited inside it, made inside a scope left before the await, a pool in a task of its own beside its creator,
under ``asyncio.wait_for``, and scheduled from a loop callback); the others behaved alike before and after."""

from __future__ import annotations

import asyncio
import time

import anyio
import anyio.lowlevel
import pytest

from toolsched._executor.pool import run_pool

pytestmark = pytest.mark.anyio

ASYNCIO_ONLY = pytest.mark.parametrize("anyio_backend", ["asyncio"])


async def second_fails(n: int) -> None:
    """A call that waits; the second raises, the others wait on long after."""
    await anyio.sleep(0.01)
    if n == 1:
        raise RuntimeError("boom")
    await anyio.sleep(2)


def running_task() -> asyncio.Task[object] | None:
    """The running asyncio task, None on trio."""
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


async def test_coroutine_made_outside_a_scope_and_awaited_inside_it_stops_when_that_scope_is_cancelled() -> None:
    # The old group noted the scope the coroutine ran in; the new note is the scope where run_pool() was called.
    started: list[int] = []
    box: list[anyio.CancelScope] = []

    async def work(n: int) -> None:
        started.append(n)
        if n == 0:
            await anyio.sleep(1)
        else:
            await anyio.lowlevel.checkpoint()
            if n == 1:
                box[0].cancel()

    with anyio.fail_after(5):
        pending = run_pool(list(range(6)), 2, work)
        with anyio.CancelScope() as scope:
            box.append(scope)
            await pending
    assert scope.cancelled_caught
    assert started == [0, 1]


async def test_coroutine_made_inside_a_scope_left_before_it_is_awaited_runs_every_item() -> None:
    # The note keeps the scope run_pool(...) was called in; once that scope is left, its cancellation has
    # nothing to do with the run, which must still run every item.
    seen: list[int] = []

    async def work(n: int) -> None:
        await anyio.sleep(0.01 if n == 0 else 0.001)
        seen.append(n)

    with anyio.fail_after(5):
        with anyio.CancelScope() as left:  # noqa: ASYNC100  (the coroutine is made here, awaited after)
            pending = run_pool(list(range(6)), 2, work)
        left.cancel()
        await pending
    assert sorted(seen) == list(range(6))


@ASYNCIO_ONLY
async def test_pool_awaited_in_a_task_of_its_own_stops_its_own_task_when_a_worker_fails() -> None:
    # asyncio.create_task(run_pool(...)) (and gather, wait_for on 3.11, anyio's start_soon on asyncio all
    # call run_pool in the parent task): the group's host must be the task that runs the pool.
    outer = asyncio.current_task()
    assert outer is not None

    begin = time.monotonic()
    with anyio.fail_after(5):
        inner = asyncio.create_task(run_pool([0, 1, 2], 3, second_fails))
        with pytest.raises(BaseExceptionGroup):
            await inner  # the outer task must not be cancelled by the inner pool's group
    assert time.monotonic() - begin < 1.0  # the host's own item (n == 0) was stopped, not left to finish
    assert outer.cancelling() == 0


@ASYNCIO_ONLY
async def test_pool_in_a_task_of_its_own_leaves_the_creating_task_alone_when_a_worker_fails() -> None:
    # The task that called run_pool(...) goes on with its own work while another task runs the pool; a failing
    # worker must not cancel it (the old group's host was the task that ran the pool).
    outer = asyncio.current_task()
    assert outer is not None

    with anyio.fail_after(5):
        inner = asyncio.create_task(run_pool([0, 1, 2], 3, second_fails))
        await asyncio.sleep(0.1)  # the outer task's own work: must not be cancelled
        assert inner.done()
        with pytest.raises(BaseExceptionGroup):
            await inner
    assert outer.cancelling() == 0


async def test_pool_started_with_anyio_start_soon_fails_as_one_awaited_directly() -> None:
    begin = time.monotonic()
    with anyio.fail_after(5):
        with pytest.raises(BaseExceptionGroup) as caught:
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_pool, [0, 1, 2], 3, second_fails)
    assert time.monotonic() - begin < 1.0
    assert "boom" in repr(caught.value)
    task = running_task()
    assert task is None or task.cancelling() == 0


@ASYNCIO_ONLY
async def test_wait_for_timeout_of_a_pool_raises_timeout() -> None:

    async def work(n: int) -> None:
        await asyncio.sleep(2)

    outer = asyncio.current_task()
    assert outer is not None
    with anyio.fail_after(5):
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(run_pool([0, 1, 2], 2, work), 0.05)
    assert outer.cancelling() == 0


@ASYNCIO_ONLY
async def test_gather_of_two_pools_one_failing() -> None:
    async def good(n: int) -> None:
        await asyncio.sleep(0.05)

    outer = asyncio.current_task()
    assert outer is not None
    begin = time.monotonic()
    with anyio.fail_after(5):
        with pytest.raises(BaseExceptionGroup):
            await asyncio.gather(run_pool([0, 1, 2], 3, second_fails), run_pool([0, 1], 2, good))
    assert time.monotonic() - begin < 1.0
    assert outer.cancelling() == 0


def test_pool_scheduled_from_a_callback_outside_any_task_stops_its_own_item() -> None:
    # run_pool called where a loop runs but no task does (a call_soon callback): the note has no host,
    # so a failing worker never stops the task that then runs the pool.
    async def main() -> float:
        loop = asyncio.get_running_loop()
        holder: list[asyncio.Task[None]] = []
        loop.call_soon(lambda: holder.append(asyncio.ensure_future(run_pool([0, 1, 2], 3, second_fails))))
        await asyncio.sleep(0)
        begin = time.monotonic()
        with pytest.raises(BaseExceptionGroup):
            await asyncio.wait_for(holder[0], 5)
        return time.monotonic() - begin

    assert asyncio.run(main()) < 1.0


@pytest.mark.parametrize("cap", [1, 3, 5])
@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("raised", [KeyboardInterrupt, SystemExit, GeneratorExit])
async def test_base_exceptions(cap: int, where: str, raised: type[BaseException]) -> None:
    started: list[int] = []

    async def work(n: int) -> None:
        started.append(n)
        if where == "after":
            await anyio.sleep(0.001)
        if n == 1:
            raise raised("boom")
        await anyio.sleep(0.5)

    with anyio.fail_after(5):
        with pytest.raises(raised):
            await run_pool(list(range(5)), cap, work)
    assert 1 in started
    assert len(started) <= 1 + cap
    task = running_task()
    assert task is None or task.cancelling() == 0


@ASYNCIO_ONLY
@pytest.mark.parametrize("cap", [1, 3, 4])
@pytest.mark.parametrize("where", ["before", "after"])
async def test_hand_raised_cancelled_error(cap: int, where: str) -> None:
    started: list[int] = []

    async def work(n: int) -> None:
        started.append(n)
        if where == "after":
            await anyio.sleep(0.001)
        if n == 0:
            raise asyncio.CancelledError()
        await anyio.sleep(0.05)

    task = asyncio.current_task()
    assert task is not None
    with anyio.fail_after(5):
        try:
            await run_pool(list(range(4)), cap, work)
        except asyncio.CancelledError:
            outcome = "cancelled"
        except BaseException as exc:
            outcome = type(exc).__name__
        else:
            outcome = "ok"
    assert outcome == "cancelled"
    assert task.cancelling() == 0


@ASYNCIO_ONLY
@pytest.mark.parametrize("then", ["return", "suspend"])
@pytest.mark.parametrize("cap", [1, 2, 4])
async def test_item_cancels_its_own_task(then: str, cap: int) -> None:
    started: list[int] = []
    task = asyncio.current_task()
    assert task is not None

    async def work(n: int) -> None:
        started.append(n)
        if n == 0:
            asyncio.current_task().cancel()  # type: ignore[union-attr]
            if then == "suspend":
                await asyncio.sleep(0.01)
            return
        await asyncio.sleep(0.01)

    with anyio.fail_after(5):
        with pytest.raises(asyncio.CancelledError):
            await run_pool(list(range(4)), cap, work)
    assert task.cancelling() == 1
    task.uncancel()


@pytest.mark.parametrize("moment", [0.0, 0.005, 0.03])
@pytest.mark.parametrize("cap", [1, 3, 6])
async def test_outer_scope_cancel_while_item_inside_own_scope(moment: float, cap: int) -> None:
    started: list[int] = []
    finished: list[int] = []

    async def work(n: int) -> None:
        started.append(n)
        with anyio.CancelScope(shield=n == 0):
            with anyio.move_on_after(1):
                await anyio.sleep(0.01)
        # Long enough that the last moment falls inside the run whatever the cap (all six at once with 6).
        await anyio.sleep(0.04)
        finished.append(n)

    with anyio.fail_after(5):
        with anyio.CancelScope() as run:
            async with anyio.create_task_group() as tg:

                async def cancel() -> None:
                    await anyio.sleep(moment)
                    run.cancel()

                tg.start_soon(cancel)
                await run_pool(list(range(6)), cap, work)
    assert run.cancelled_caught
    task = running_task()
    assert task is None or task.cancelling() == 0


@ASYNCIO_ONLY
@pytest.mark.parametrize("cap", [2, 6])
@pytest.mark.parametrize("when", ["before", "first", "later"])
async def test_task_cancel_from_outside(when: str, cap: int) -> None:
    started: list[int] = []

    async def work(n: int) -> None:
        started.append(n)
        # "later" (30 ms) falls inside the run: three rounds of 20 ms with a cap of 2, one of 60 ms with 6.
        await asyncio.sleep(0.02 if cap == 2 else 0.06)

    async def runner() -> None:
        await run_pool(list(range(6)), cap, work)

    with anyio.fail_after(5):
        t = asyncio.create_task(runner())
        if when == "before":
            t.cancel()
        elif when == "first":
            await asyncio.sleep(0)
            t.cancel()
        else:
            await asyncio.sleep(0.03)
            t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
    n = len(started)
    await asyncio.sleep(0.05)
    assert len(started) == n


@ASYNCIO_ONLY
@pytest.mark.parametrize("cap", [2, 4])
async def test_pending_cancellation_before_run_pool(cap: int) -> None:
    task = asyncio.current_task()
    assert task is not None
    started: list[int] = []

    async def work(n: int) -> None:
        started.append(n)
        await asyncio.sleep(0.01)
        if n == 1:
            raise RuntimeError("boom")

    task.cancel()
    try:
        await asyncio.sleep(0)
    except asyncio.CancelledError:
        pass
    assert task.cancelling() == 1
    with anyio.fail_after(5):
        with pytest.raises(BaseExceptionGroup):
            await run_pool(list(range(4)), cap, work)
    assert task.cancelling() == 1
    task.uncancel()


async def test_nested_run_pool_inner_failure() -> None:
    async def inner(i: int) -> None:
        await anyio.sleep(0.001)
        if i == 2:
            raise ValueError("inner")
        await anyio.sleep(1)

    async def outer(n: int) -> None:
        await run_pool(list(range(4)), 2, inner)

    with anyio.fail_after(5):
        with pytest.raises(BaseExceptionGroup) as caught:
            await run_pool(list(range(3)), 2, outer)
    assert "inner" in repr(caught.value)
    task = running_task()
    assert task is None or task.cancelling() == 0


@pytest.mark.parametrize("cap", [2, 5])
@pytest.mark.parametrize(
    ("canceller", "shielded_first", "expected"),
    [(1, False, [0, 1]), (0, False, [0]), (1, True, [0, 1])],
    ids=["a-later-item-cancels-and-returns", "the-first-cancels-then-waits", "a-later-cancels-the-first-shielded"],
)
async def test_an_item_cancels_the_enclosing_scope_and_nothing_after_it_starts(
    cap: int, canceller: int, shielded_first: bool, expected: list[int]
) -> None:
    # The items after the one that cancels get workers (with a cap of 5, all at once once the first waits) before
    # the run's own task hears of it: each must see it before its item starts. A first item shielded from it goes
    # on and returns: the pool must still raise the run's cancellation, not return as if every item had run.
    started: list[int] = []
    box: list[anyio.CancelScope] = []

    async def work(n: int) -> None:
        started.append(n)
        if n == canceller:
            box[0].cancel()
            if n:
                return
        if n == 0 and shielded_first:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.05)
        else:
            await anyio.sleep(0.01)

    with anyio.fail_after(5):
        with anyio.CancelScope() as run:
            box.append(run)
            await run_pool(list(range(5)), cap, work)
            pytest.fail("the pool returned from a cancelled run")
    assert run.cancelled_caught
    assert started == expected
    task = running_task()
    assert task is None or task.cancelling() == 0
