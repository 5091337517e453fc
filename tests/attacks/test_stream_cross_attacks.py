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
import sys
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from crashes import kill_at
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


# -- a journaled streamed turn under the fleet's limits, cut short ------------------------------------------------


def slots_held(coordination: ts.RedisCoordination, tool: str) -> Any:
    return coordination._call("ZCARD", f"{coordination.namespace}:{{{tool}}}:slots")


@pytest.mark.parametrize("behavior", ["cancel", "block"])
async def test_a_journaled_streamed_turn_broken_while_calls_wait_for_fleet_slots_is_recovered_as_it_ended(
    anyio_backend: str, store: Store, behavior: str
) -> None:
    # One fleet slot: "c1" runs in it, "c2" and "c3" wait for it, and "c1" comes again late in the stream (a
    # repeated ID). The stream breaks: every slot comes back, every call is journaled answered, and recover
    # answers the turn as StreamFailed did, running nothing again.
    ran: list[str] = []
    c1_running = anyio.Event()

    @ts.tool(concurrency_safe=True, max_concurrency=1, interrupt_behavior=behavior)
    async def capped(tag: str) -> str:
        ran.append(tag)
        c1_running.set()
        await anyio.sleep(0.2)
        return tag

    coordination = fleet()
    async with store.open() as journal:
        executor = ts.Executor(
            [capped], journal=journal, coordination=coordination, strategy=ts.Parallel(max_concurrency=4)
        )
        with anyio.fail_after(30), pytest.raises(ts.StreamFailed) as raised:
            async with executor.turn(run_id="broken") as turn:
                for tag in ("c1", "c2", "c3"):
                    turn.submit(ts.ToolCall(tag, "capped", {"tag": tag}))
                await c1_running.wait()
                turn.submit(ts.ToolCall("c1", "capped", {"tag": "again"}))
                raise StreamDropped("connection reset")
        broken = raised.value.outcome
        assert await slots_held(coordination, "capped") == 0
        record = await journal.load("broken")
        assert [(entry.call_id, entry.state) for entry in record.calls] == [
            ("c1", "finished"),
            ("c2", "finished"),
            ("c3", "finished"),
        ]
        ran_before = sorted(ran)
        with anyio.fail_after(30):
            recovered = await executor.recover("broken")
    assert [r.call_id for r in broken.results] == ["c1", "c2", "c3"]
    assert [(r.call_id, r.error_kind, r.output) for r in recovered.results] == [
        (r.call_id, r.error_kind, r.output) for r in broken.results
    ]
    assert recovered.duplicates == broken.duplicates and [d.call_id for d in broken.duplicates] == ["c1"]
    assert sorted(ran) == ran_before and len(set(ran)) == len(ran)
    assert {r.output for r in broken.results if r.error_kind is None} <= set(ran)


STREAMED_WORKER = """
import sys, anyio
import toolsched as ts
from journal_child import Store

url, space, spec, log, backend = sys.argv[1:6]

@ts.tool(name="charge", max_concurrency=1)
async def charge(n: int) -> int:
    with open(log, "a") as out:
        out.write(f"ran {n}\\n")
    return n

async def calls():
    yield ts.ToolCall("k1", "charge", {"n": 1})
    yield ts.ToolCall("k2", "charge", {"n": 2})
    await anyio.sleep(1.0)
    print("waiting", flush=True)
    await anyio.sleep(60)

async def main() -> None:
    coordination = ts.RedisCoordination(url, namespace=space, on_unavailable="refuse")
    async with Store.from_spec(spec).open(lease=600) as journal:
        executor = ts.Executor([charge], journal=journal, coordination=coordination, strategy=ts.Parallel())
        await executor.run(calls(), run_id="streamed-run")

anyio.run(main, backend=backend)
"""


async def test_a_worker_killed_while_its_streamed_calls_wait_for_a_fleet_slot_runs_them_once_on_recover(
    anyio_backend: str, store: Store, tmp_path: Path
) -> None:
    # Another worker holds the tool's only slot: the streamed turn's two calls wait for it when the worker is
    # killed, its stream still open. Neither started: recover runs both, each once (the tool is not idempotent).
    url, space = redis_url(), namespace()
    log = tmp_path / "log"
    other = ts.RedisCoordination(url, namespace=space)
    await other._call("ZADD", f"{space}:{{charge}}:slots", 10**15, "elsewhere")
    command = [sys.executable, "-c", STREAMED_WORKER, url, space, store.spec(), str(log), anyio_backend]
    await kill_at(command, "waiting")
    assert not log.exists()
    await other._call("DEL", f"{space}:{{charge}}:slots")
    ran: list[int] = []

    @ts.tool(name="charge", max_concurrency=1)
    async def charge(n: int) -> int:
        ran.append(n)
        return n

    async with store.open(lease=600) as journal:
        executor = ts.Executor([charge], journal=journal, coordination=ts.RedisCoordination(url, namespace=space))
        with anyio.fail_after(30):
            outcome = await executor.recover("streamed-run", force=True)
    assert [(r.call_id, r.error_kind, r.output) for r in outcome.results] == [("k1", None, 1), ("k2", None, 2)]
    assert sorted(ran) == [1, 2]


# -- Redis gone during a streamed turn ---------------------------------------------------------------------------


@pytest.mark.parametrize("on_unavailable", ["local", "refuse"])
async def test_a_streamed_turn_with_redis_unreachable_falls_back_or_refuses_every_call(
    anyio_backend: str, on_unavailable: str
) -> None:
    ran: list[str] = []
    events: list[Any] = []

    @ts.tool(concurrency_safe=True, max_concurrency=1, rate_limit=ts.RateLimit(100, per=1))
    async def capped(tag: str) -> str:
        ran.append(tag)
        return tag

    executor = ts.Executor(
        [capped],
        coordination=unreachable(on_unavailable=on_unavailable),
        strategy=ts.Parallel(),
        on_event=events.append,
    )
    with warnings.catch_warnings(), anyio.fail_after(20):
        warnings.simplefilter("ignore", RuntimeWarning)
        async with executor.turn() as turn:
            for tag in ("c1", "c2", "c3"):
                turn.submit(ts.ToolCall(tag, "capped", {"tag": tag}))
                await anyio.sleep(0.01)
            turn.close()
            outcome = await turn.outcome()
    outages = [event for event in events if isinstance(event, ts.CoordinationUnavailable)]
    assert len(outages) == 1
    if on_unavailable == "local":
        assert [(r.output, r.attempts) for r in outcome.results] == [("c1", 1), ("c2", 1), ("c3", 1)]
        assert sorted(ran) == ["c1", "c2", "c3"]
    else:
        assert [(r.error_kind, r.attempts) for r in outcome.results] == [("unavailable", 0)] * 3
        assert ran == []


# -- the same call object twice ----------------------------------------------------------------------------------


async def test_a_stream_that_gives_the_same_call_object_twice_runs_it_once_and_recovers_so(
    anyio_backend: str, store: Store
) -> None:
    ran: list[str] = []

    @ts.tool
    async def echo(tag: str) -> str:
        ran.append(tag)
        return tag

    call = ts.ToolCall("x", "echo", {"tag": "x"})

    async def calls() -> AsyncIterator[ts.ToolCall]:
        yield call
        yield ts.ToolCall("y", "echo", {"tag": "y"})
        yield call

    async with store.open() as journal:
        executor = ts.Executor([echo], journal=journal, coordination=fleet())
        outcome = await executor.run(calls(), run_id="twice")
        recovered = await executor.recover("twice")
    for answered in (outcome, recovered):
        assert [(r.call_id, r.output) for r in answered.results] == [("x", "x"), ("y", "y")]
        assert [(d.call_id, d.index, d.first_index, d.args_differ) for d in answered.duplicates] == [("x", 2, 0, False)]
    assert ran == ["x", "y"]


# -- a journaled executor that reads the stream whole (batch hooks) -----------------------------------------------


@pytest.mark.parametrize("named", [True, False])
async def test_a_broken_stream_read_whole_by_a_journaled_executor_is_journaled_and_recovered(
    anyio_backend: str, store: Store, named: bool
) -> None:
    # Batch hooks: the stream is read whole before anything runs, and it breaks. StreamFailed answers the calls
    # read under a run ID that recover knows, as a streamed turn's would be; nothing runs, then or on recover.
    ran: list[str] = []

    @ts.tool
    async def echo(tag: str) -> str:
        ran.append(tag)
        return tag

    async def calls() -> AsyncIterator[ts.ToolCall]:
        yield ts.ToolCall("x", "echo", {"tag": "x"})
        yield ts.ToolCall("u", "missing", {})
        yield ts.ToolCall("x", "echo", {"tag": "again"})
        raise StreamDropped("connection reset")

    async with store.open() as journal:
        executor = ts.Executor([echo], journal=journal, hooks=ts.Hooks().pre_batch("*", lambda event: None))
        with pytest.raises(ts.StreamFailed) as raised:
            await executor.run(calls(), run_id="whole" if named else None)
        broken = raised.value.outcome
        assert broken.run_id == "whole" if named else broken.run_id is not None
        assert broken.run_id is not None
        recovered = await executor.recover(broken.run_id)
        with pytest.raises(ts.RunExistsError):
            await executor.run(calls(), run_id=broken.run_id)
    assert [(r.call_id, r.error_kind) for r in broken.results] == [("x", "skipped"), ("u", "unknown_tool")]
    assert [(r.call_id, r.error_kind, r.error) for r in recovered.results] == [
        (r.call_id, r.error_kind, r.error) for r in broken.results
    ]
    assert [d.call_id for d in recovered.duplicates] == [d.call_id for d in broken.duplicates] == ["x"]
    assert ran == []
