"""Attacks on a process's own concurrency cap beside ``ts.RedisCoordination``'s fleet slots (docs/fleet.md): a call
made inside a call of its own tool runs on its ancestor's slot whichever of the two executors has the fleet's limits
and whether Redis answers; the local fallback keeps the process's cap with calls the fleet admitted still running.

The real server comes from tests/redis_server.sh (``TOOLSCHED_TEST_REDIS_URL``); a test that stops a server starts
its own with the same binary.
"""

from __future__ import annotations

import socket
import sys
import warnings
from pathlib import Path

import anyio
import pytest
from crashes import kill_at
from fleet_redis import delegating, namespace, redis_url

import toolsched as ts
from tests.attacks.test_fleet_attacks import start_server, stop_server

pytestmark = pytest.mark.anyio


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(("parent_fleet", "child_fleet"), [(True, False), (False, True), (True, True)])
async def test_a_nested_call_on_a_slot_its_ancestor_took_in_the_local_fallback_runs(
    anyio_backend: str, parent_fleet: bool, child_fleet: bool
) -> None:
    """Redis unreachable, ``on_unavailable="local"``: a call holding the per-process slot of a capped tool (the
    fallback's, or an executor's own without coordination) runs a nested call of the same tool on another executor
    (with or without coordination, a namespace of its own). The nested call runs on its ancestor's slot: before,
    the fallback and the executor's own cap each kept their own record of the slots held, and the nested call
    asked anyio's limiter for a second token of the task holding one (``RuntimeError``)."""
    url = f"redis://127.0.0.1:{free_port()}"
    box: dict[str, ts.Executor] = {}

    delegate = delegating(box)

    def make(fleet: bool) -> ts.Executor:
        if not fleet:
            return ts.Executor([delegate])
        coordination = ts.RedisCoordination(url, namespace=namespace(), connect_timeout=0.5)
        return ts.Executor([delegate], coordination=coordination)

    box["child"] = make(child_fleet)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with anyio.fail_after(20):
            outcome = await make(parent_fleet).run([ts.ToolCall("c1", "delegate", {"depth": 2})])
    assert [(result.error_kind, result.output) for result in outcome.results] == [(None, "2/1/leaf")]


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_the_local_fallback_counts_the_calls_the_fleet_admitted(anyio_backend: str, tmp_path: Path) -> None:
    """Promise: with Redis unreachable, ``on_unavailable="local"`` falls back to each process's own limits.
    ``max_concurrency=2``: two calls run on fleet slots, four more wait; Redis stops. The waiting calls fall
    back to the process's cap, which the two running calls count against: never more than two run at once.
    Before, the fleet's calls held no slot of the process's cap, and the fallback started two more beside them
    (four in flight)."""
    port = free_port()
    server = start_server(port, tmp_path)
    running: set[int] = set()
    peak = 0
    two_running, release = anyio.Event(), anyio.Event()

    @ts.tool(name="capped", max_concurrency=2)
    async def capped(n: int) -> int:
        nonlocal peak
        running.add(n)
        peak = max(peak, len(running))
        if len(running) == 2:
            two_running.set()
        try:
            await release.wait()
        finally:
            running.discard(n)
        return n

    coordination = ts.RedisCoordination(
        f"redis://127.0.0.1:{port}", namespace=namespace(), connect_timeout=0.3, lease=5
    )
    executor = ts.Executor([capped], coordination=coordination)
    outputs: list[object] = []

    async def call(n: int) -> None:
        outputs.extend(
            result.output for result in (await executor.run([ts.ToolCall(f"c{n}", "capped", {"n": n})])).results
        )

    try:
        with warnings.catch_warnings(), anyio.fail_after(20):
            warnings.simplefilter("ignore")
            async with anyio.create_task_group() as group:
                for n in range(6):
                    group.start_soon(call, n)
                await two_running.wait()
                stop_server(server)
                await anyio.sleep(1.0)  # the waiting calls meet the stopped server and fall back meanwhile
                assert len(running) == 2
                release.set()
    finally:
        if server.poll() is None:
            stop_server(server)
    assert sorted(outputs) == [0, 1, 2, 3, 4, 5]
    assert peak == 2


# -- a worker killed while its journaled call waits for the fleet ------------------------------------------------

WAITING_WORKER = """
import functools, sys, anyio
import toolsched as ts

url, space, path, log, backend, kind = sys.argv[1:7]

async def body(n: int) -> int:
    with open(log, "a") as out:
        out.write(f"ran {n}\\n")
    return n

limits = {
    "cap": {"max_concurrency": 1},
    "cap-circuit": {"max_concurrency": 1, "circuit": ts.CircuitBreaker(failures=3, cooldown=1)},
    "rate": {"rate_limit": ts.RateLimit(1, per=3600)},
}[kind]
charge = ts.tool(name="charge", **limits)(body)

async def main() -> None:
    coordination = ts.RedisCoordination(url, namespace=space, on_unavailable="refuse")
    async with ts.SqliteJournal(path, lease=600) as journal:
        executor = ts.Executor([charge], journal=journal, coordination=coordination)
        async with anyio.create_task_group() as group:
            run = functools.partial(executor.run, run_id="fleet-run")
            group.start_soon(run, [ts.ToolCall("k", "charge", {"n": 2})])
            await anyio.sleep(1.0)
            print("waiting", flush=True)
            await anyio.sleep(60)

anyio.run(main, backend=backend)
"""


@pytest.mark.parametrize("kind", ["cap", "cap-circuit", "rate"])
async def test_a_worker_killed_while_its_call_waits_for_the_fleet_leaves_it_unstarted(
    anyio_backend: str, kind: str, tmp_path: Path
) -> None:
    """Promise (docs/concepts/durability.md): a call journaled started is one that may have run; calls that never
    started run as they would have on ``recover``. A journaled run's call of a tool that is not idempotent waits
    for the fleet (its only slot held by another worker, or its rate spent for the hour) when its worker is
    killed. ``recover`` runs it: it never started. Before, it was journaled started before the fleet admitted it,
    and ``recover`` answered it ``interrupted`` though it never ran."""
    url, space = redis_url(), namespace()
    path, log = tmp_path / "journal.db", tmp_path / "log"
    other = ts.RedisCoordination(url, namespace=space)
    if kind == "rate":
        # Another worker took the hour's only call.
        await other._call("SET", f"{space}:{{charge}}:rate", 10**18, "PX", 3_600_000)
    else:
        # Another worker holds the only slot (its lease far from running out).
        await other._call("ZADD", f"{space}:{{charge}}:slots", 10**15, "elsewhere")
    command = [sys.executable, "-c", WAITING_WORKER, url, space, str(path), str(log), anyio_backend, kind]
    await kill_at(command, "waiting")
    assert not log.exists()
    await other._call("DEL", f"{space}:{{charge}}:slots", f"{space}:{{charge}}:rate")

    @ts.tool(name="charge", max_concurrency=1)
    async def charge(n: int) -> int:
        return n * 10

    with warnings.catch_warnings(), anyio.fail_after(20):
        warnings.simplefilter("error")
        async with ts.SqliteJournal(path, lease=600) as journal:
            executor = ts.Executor([charge], journal=journal, coordination=ts.RedisCoordination(url, namespace=space))
            (result,) = (await executor.recover("fleet-run")).results
    assert (result.error_kind, result.output) == (None, 20)


# -- the outage's report -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("on_unavailable", ["local", "refuse"])
async def test_an_outage_first_met_by_a_release_is_reported_with_its_cause(
    anyio_backend: str, on_unavailable: str, tmp_path: Path
) -> None:
    """Promise (docs/fleet.md): an outage is reported once, with a ``RuntimeWarning`` and a
    ``CoordinationUnavailable`` event whose ``error`` says what failed. Redis stops while a call holds its slot:
    the call's end meets the outage first (its release cannot be sent), and the next call reports it. The report
    names the server and what failed (no connection); before, it said only "Redis was unreachable a moment ago"."""
    port = free_port()
    server = start_server(port, tmp_path)
    inside, release = anyio.Event(), anyio.Event()
    events: list[object] = []

    @ts.tool(name="held", max_concurrency=1)
    async def held(n: int) -> int:
        if n == 1:
            inside.set()
            await release.wait()
        return n

    coordination = ts.RedisCoordination(
        f"redis://127.0.0.1:{port}",
        namespace=namespace(),
        on_unavailable=on_unavailable,  # type: ignore[arg-type]
        connect_timeout=0.3,
    )
    executor = ts.Executor([held], coordination=coordination, on_event=events.append)
    try:
        with warnings.catch_warnings(record=True) as caught, anyio.fail_after(20):
            warnings.simplefilter("always")
            async with anyio.create_task_group() as group:
                group.start_soon(executor.run, [ts.ToolCall("h", "held", {"n": 1})])
                await inside.wait()
                stop_server(server)
                release.set()
            await executor.run([ts.ToolCall("n", "held", {"n": 2})])
    finally:
        if server.poll() is None:
            stop_server(server)
    (outage,) = [event for event in events if isinstance(event, ts.CoordinationUnavailable)]
    assert f"cannot reach Redis at 127.0.0.1:{port}: " in outage.error
    (warned,) = [w for w in caught if "fleet-wide limits unavailable" in str(w.message)]
    assert outage.error in str(warned.message)
