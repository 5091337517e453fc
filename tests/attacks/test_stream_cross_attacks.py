"""Attacks on streamed turns combined with durable journals (SQLite and PostgreSQL) and fleet-wide limits on Redis
(``ts.RedisCoordination``): a stream that breaks or a caller that gives up while calls wait for the fleet, a turn
recovered after it was cut short, limits shared by a streamed turn and a whole one, Redis gone during a turn,
repeated call IDs and repeated call objects. Every call is answered once, nothing runs that should not, and
every fleet slot comes back.

The Redis server comes from tests/redis_server.sh (``TOOLSCHED_TEST_REDIS_URL``), PostgreSQL from
tests/postgres_server.sh (``TOOLSCHED_TEST_POSTGRES_DSN``).
"""

from __future__ import annotations

import socket
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from fleet_redis import namespace, redis_url
from journal_child import Store, store_in

import toolsched as ts

pytestmark = pytest.mark.anyio


class StreamDropped(Exception):
    """The model's stream broke (the test's own error)."""


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_in(request.param, tmp_path, "stream_cross")


def fleet(**options: Any) -> ts.RedisCoordination:
    return ts.RedisCoordination(redis_url(), namespace=namespace(), **options)


def unreachable(**options: Any) -> ts.RedisCoordination:
    """A coordination whose Redis refuses every connection (a port nothing listens on)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return ts.RedisCoordination(f"redis://127.0.0.1:{port}", namespace=namespace(), connect_timeout=0.5, **options)


# -- a call waiting for the fleet's rate limit when the turn stops ------------------------------------------------


@pytest.mark.parametrize("redis", ["up", "unreachable"])
@pytest.mark.parametrize("stop", ["stream", "interrupt"])
async def test_a_call_waiting_for_the_fleet_rate_limit_is_skipped_when_the_turn_stops(
    anyio_backend: str, stop: str, redis: str
) -> None:
    # One call a minute: one call takes it, the other waits a minute for the next (a reservation of the fleet's,
    # or a token of the process's own limit while Redis cannot be reached). The stream breaks (or the run is
    # interrupted) meanwhile: the waiting call works no more, as with an executor without the fleet.
    ran: list[str] = []
    running = anyio.Event()

    @ts.tool(concurrency_safe=True, interrupt_behavior="block", rate_limit=ts.RateLimit(1, per=60))
    async def send(tag: str) -> str:
        ran.append(tag)
        running.set()
        await anyio.sleep(0.05)
        return tag

    coordination = fleet() if redis == "up" else unreachable()
    executor = ts.Executor([send], coordination=coordination, strategy=ts.Parallel(max_concurrency=4))
    calls = [ts.ToolCall(tag, "send", {"tag": tag}) for tag in ("c1", "c2")]
    with anyio.fail_after(20), warnings.catch_warnings():
        # The fallback's RuntimeWarning about Redis.
        warnings.simplefilter("ignore", RuntimeWarning)
        if stop == "stream":
            with pytest.raises(ts.StreamFailed) as raised:
                async with executor.turn() as turn:
                    for call in calls:
                        turn.submit(call)
                    await running.wait()
                    raise StreamDropped("connection reset")
            results = raised.value.outcome.results
        else:
            async with anyio.create_task_group() as group:

                async def interrupt() -> None:
                    await running.wait()
                    executor.interrupt("the user sent a new message")

                group.start_soon(interrupt)
                results = (await executor.run(calls)).results
    # Which of the two asked first is not fixed (the fallback's calls both find Redis gone, then race for the token).
    assert [result.call_id for result in results] == ["c1", "c2"]
    assert sorted((result.error_kind or "", result.attempts) for result in results) == [("", 1), ("skipped", 0)]
    assert ran == [result.call_id for result in results if result.error_kind is None]


async def test_a_retry_waiting_for_the_fleet_rate_limit_ends_with_its_last_failure_when_the_stream_breaks(
    anyio_backend: str,
) -> None:
    # The first attempt fails transiently and takes the minute's only call; the retry waits for the next.
    tries: list[int] = []
    failed = anyio.Event()

    @ts.tool(
        idempotent=True,
        interrupt_behavior="block",
        rate_limit=ts.RateLimit(1, per=60),
        retry=ts.Retry(attempts=3, backoff=0.01, max_backoff=0.01),
    )
    async def flaky() -> str:
        tries.append(len(tries))
        failed.set()
        raise ts.Transient("busy")

    executor = ts.Executor([flaky], coordination=fleet())
    with anyio.fail_after(20), pytest.raises(ts.StreamFailed) as raised:
        async with executor.turn() as turn:
            turn.submit(ts.ToolCall("c1", "flaky"))
            await failed.wait()
            await anyio.sleep(0.1)
            raise StreamDropped("connection reset")
    [result] = raised.value.outcome.results
    assert (result.error_kind, result.attempts) == ("execution_error", 1)
    assert "busy" in (result.error or "")
    assert tries == [0]


# -- limits shared by a streamed turn and a whole one ------------------------------------------------------------


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_call_that_waits_a_long_fleet_reservation_runs_at_its_reserved_start(anyio_backend: str) -> None:
    # One call every 20 s for the fleet, shared by a streamed turn and a whole run of two workers. The second call
    # waits 20 s: a sleep that long may end 20 ms late (the kernel's slack), later than a reservation is held for,
    # and each late wake took a new reservation 20 s on: the call never ran.
    space = namespace()
    ran: list[str] = []
    first_ran = anyio.Event()

    def worker() -> ts.Executor:
        @ts.tool(name="report", concurrency_safe=True, rate_limit=ts.RateLimit(1, per=20))
        async def report(tag: str) -> str:
            ran.append(tag)
            first_ran.set()
            return tag

        return ts.Executor([report], coordination=ts.RedisCoordination(redis_url(), namespace=space))

    streamed, whole = worker(), worker()
    outcomes: dict[str, ts.Outcome] = {}

    async def run_whole() -> None:
        await first_ran.wait()
        outcomes["whole"] = await whole.run([ts.ToolCall("w1", "report", {"tag": "w1"})])

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(run_whole)
            async with streamed.turn() as turn:
                turn.submit(ts.ToolCall("s1", "report", {"tag": "s1"}))
                turn.close()
                outcomes["streamed"] = await turn.outcome()
    assert [result.output for result in outcomes["streamed"].results] == ["s1"]
    assert [result.output for result in outcomes["whole"].results] == ["w1"]
    assert ran == ["s1", "w1"]


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_call_waiting_for_a_fleet_reservation_lends_its_slot(anyio_backend: str, streamed: bool) -> None:
    # Two slots. "s2" waits about 2 s for the fleet's next call of `send`; "h1" holds the other slot until "q1"
    # has run, and "q1" can only run in the slot "s2" lends while it waits, as with a local rate limit.
    log: list[str] = []
    q1_ran = anyio.Event()

    @ts.tool(concurrency_safe=True, rate_limit=ts.RateLimit(1, per=2))
    async def send(tag: str) -> str:
        log.append(tag)
        return tag

    @ts.tool(concurrency_safe=True)
    async def hold(tag: str) -> str:
        with anyio.move_on_after(10):
            await q1_ran.wait()
        log.append(tag)
        return tag

    @ts.tool(concurrency_safe=True)
    async def quick(tag: str) -> str:
        q1_ran.set()
        log.append(tag)
        return tag

    executor = ts.Executor([send, hold, quick], coordination=fleet(), strategy=ts.Parallel(max_concurrency=2))
    calls = [
        ts.ToolCall("s1", "send", {"tag": "s1"}),
        ts.ToolCall("s2", "send", {"tag": "s2"}),
        ts.ToolCall("h1", "hold", {"tag": "h1"}),
        ts.ToolCall("q1", "quick", {"tag": "q1"}),
    ]

    async def given() -> AsyncIterator[ts.ToolCall]:
        for call in calls:
            yield call

    with anyio.fail_after(30):
        outcome = await executor.run(given() if streamed else calls)
    assert [result.output for result in outcome.results] == ["s1", "s2", "h1", "q1"]
    assert log.index("q1") < log.index("h1") < log.index("s2")
