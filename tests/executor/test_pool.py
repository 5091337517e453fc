"""The growing worker pool: overlap when calls wait, no tasks when they do not."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import InFlight
from toolsched._executor.pool import run_pool

pytestmark = pytest.mark.anyio


async def failure_of(count: int, cap: int, work: Callable[[int], Awaitable[None]]) -> BaseException:
    """What a pool of ``count`` items raises (within five seconds)."""
    with pytest.raises(BaseException) as caught:
        with anyio.fail_after(5):
            await run_pool(list(range(count)), cap, work)
    return caught.value


async def test_waiting_calls_overlap_up_to_the_cap(in_flight: InFlight) -> None:
    async def work(name: str) -> None:
        await in_flight.hold(name, 0.02)

    await run_pool([f"c{i}" for i in range(7)], 3, work)
    assert in_flight.peak == 3
    assert sorted(name for event, name in in_flight.log if event == "end") == [f"c{i}" for i in range(7)]


async def test_calls_that_never_wait_spawn_no_task() -> None:
    baseline = len(anyio.get_running_tasks())
    seen: list[int] = []

    async def work(n: int) -> None:
        seen.append(len(anyio.get_running_tasks()))

    await run_pool(list(range(20)), 10, work)
    assert seen == [baseline] * 20


@pytest.mark.parametrize("cap", [4, 12])
async def test_calls_start_in_order(cap: int) -> None:
    # Under the cap (4), each worker takes the next call as one waits; at it (12), every call left starts at once.
    started: list[int] = []

    async def work(n: int) -> None:
        started.append(n)
        await anyio.sleep(0.001 * (n % 3))

    await run_pool(list(range(12)), cap, work)
    assert started == list(range(12))


async def test_an_exception_propagates_and_stops_the_rest() -> None:
    started: list[int] = []

    async def work(n: int) -> None:
        started.append(n)
        await anyio.sleep(0.01)
        if n == 1:
            raise RuntimeError("boom")
        await anyio.sleep(1)

    assert "boom" in repr(await failure_of(6, 2, work))
    assert len(started) < 6


async def test_cancellation_passes_through_waiting_calls() -> None:
    finished: list[int] = []

    async def work(n: int) -> None:
        await anyio.sleep(10)
        finished.append(n)

    with anyio.move_on_after(0.05) as scope:
        await run_pool(list(range(4)), 4, work)
    assert scope.cancelled_caught
    assert finished == []


async def test_return_values_and_exceptions_cross_the_proxy_after_waiting() -> None:
    results: list[str] = []

    async def work(n: int) -> None:
        try:
            await anyio.sleep(0.001)
            if n % 2:
                raise KeyError(n)
            results.append(f"ok {n}")
        except KeyError:
            results.append(f"caught {n}")

    await run_pool(list(range(4)), 2, work)
    assert sorted(results) == ["caught 1", "caught 3", "ok 0", "ok 2"]


@settings(max_examples=25, deadline=None)
@given(delays=st.lists(st.sampled_from([0, 0, 1, 2]), max_size=16), cap=st.integers(1, 5))
async def test_every_item_runs_once_and_the_cap_holds(delays: list[int], cap: int) -> None:
    running = 0
    peak = 0
    done: list[int] = []

    async def work(index: int) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if delays[index]:
            await anyio.sleep(delays[index] / 1000)
        running -= 1
        done.append(index)

    await run_pool(list(range(len(delays))), cap, work)
    assert sorted(done) == list(range(len(delays)))
    assert peak <= cap


async def test_a_pool_whose_calls_never_wait_leaves_the_callers_scopes_as_it_found_them() -> None:
    # The group of such a pool is left without a checkpoint; the caller's own scopes must still work:
    # a deadline set around it fires at the next wait, and a cancelled scope still cancels.
    async def work(n: int) -> None:
        return None

    with anyio.move_on_after(0.01) as deadline:
        await run_pool(list(range(5)), 5, work)
        await anyio.sleep(1)
    assert deadline.cancelled_caught
    with anyio.CancelScope() as scope:
        scope.cancel()
        await run_pool(list(range(5)), 5, work)
        await anyio.sleep(1)
    assert scope.cancelled_caught
    # And a scope entered and left around many such pools is left cleanly.
    for _ in range(50):
        with anyio.CancelScope():
            await run_pool(list(range(3)), 3, work)


async def test_a_pool_whose_first_call_finishes_at_once_still_overlaps_the_ones_that_wait(in_flight: InFlight) -> None:
    async def work(name: str) -> None:
        if name != "c0":
            await in_flight.hold(name, 0.02)

    await run_pool([f"c{i}" for i in range(5)], 4, work)
    assert in_flight.peak == 4


async def test_a_first_call_that_waits_inside_its_own_shield_does_not_hide_the_runs_cancellation() -> None:
    # The group is made when the first call waits, entered as it would have been before that call ran: the
    # scope it watches is the caller's, not the shielded one the call entered. A worker between two calls
    # sees the caller's scope cancelled and starts nothing more.
    started: list[int] = []

    async def work(n: int) -> None:
        started.append(n)
        if n == 0:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.2)
        else:
            await anyio.sleep(0.02)

    with anyio.fail_after(5):
        with anyio.CancelScope() as run:
            async with anyio.create_task_group() as outside:

                async def cancel_soon() -> None:
                    await anyio.sleep(0.005)
                    run.cancel()

                outside.start_soon(cancel_soon)
                await run_pool(list(range(6)), 2, work)
    assert run.cancelled_caught
    assert started == [0, 1]


@pytest.mark.parametrize("waits_first", [False, True])
@pytest.mark.parametrize("raised", [ValueError, KeyboardInterrupt])
async def test_a_call_that_raises_before_any_call_waited_fails_the_pool_as_one_that_raises_after(
    waits_first: bool, raised: type[BaseException]
) -> None:
    # The group made only once a call waits (or raises) keeps the group's ways: an error comes out in a
    # group, a KeyboardInterrupt as itself, and the calls after the failing one never start.
    started: list[int] = []

    async def work(n: int) -> None:
        started.append(n)
        if waits_first:
            await anyio.lowlevel.checkpoint()
        if n == 0:
            raise raised("boom")
        await anyio.sleep(1)

    failure = await failure_of(4, 1, work)
    if raised is KeyboardInterrupt:
        assert type(failure) is KeyboardInterrupt
    else:
        assert isinstance(failure, BaseExceptionGroup)
        assert [type(error) for error in failure.exceptions] == [ValueError]
    assert started == [0]
