"""Attacks on the fleet's leases and options (docs/fleet.md): workers of one namespace built with different
leases, and URLs a worker cannot use refused when the coordination is built rather than at its first call.

The real server comes from tests/redis_server.sh (``TOOLSCHED_TEST_REDIS_URL``).
"""

from __future__ import annotations

import socket
import sys
import time
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest
from crashes import kill_at
from fleet_redis import namespace, redis_url

import toolsched as ts
from toolsched._policy.redis_wire import blocking_request

pytestmark = pytest.mark.anyio


async def test_a_short_lease_workers_call_does_not_expire_a_long_lease_workers_slot(anyio_backend: str) -> None:
    """Promise: a slot is held while its holder lives ("a killed process loses them", a live one keeps them).
    Two workers of one namespace with different leases (a rolling change of ``lease``, or a worker built for
    long calls): the short-lease worker's admission set the whole slot set's expiry to its own twice its lease, so
    the long-lease worker's slot vanished with it while its call still ran, and the fleet ran past its cap."""
    space = namespace()
    release = anyio.Event()
    holding = anyio.Event()
    running: list[str] = []
    peak = 0

    @ts.tool(name="capped", max_concurrency=2)
    async def capped(n: int) -> int:
        nonlocal peak
        running.append(str(n))
        peak = max(peak, len(running))
        try:
            if n == 0:
                holding.set()
                await release.wait()
            else:
                await anyio.sleep(0.01)
        finally:
            running.remove(str(n))
        return n

    long_lease = ts.Executor(
        [capped], coordination=ts.RedisCoordination(redis_url(), namespace=space, lease=60, on_unavailable="refuse")
    )
    short_lease = ts.Executor(
        [capped], coordination=ts.RedisCoordination(redis_url(), namespace=space, lease=0.1, on_unavailable="refuse")
    )
    outputs: list[Any] = []

    async def run(executor: ts.Executor, n: int) -> None:
        outcome = await executor.run([ts.ToolCall(f"c{n}", "capped", {"n": n})])
        outputs.append(outcome.results[0].output)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        async with anyio.create_task_group() as group:
            group.start_soon(run, long_lease, 0)
            await holding.wait()
            # A short call of the other worker, then more than its slot set's expiry (twice 0.1 s) goes by.
            await run(short_lease, 1)
            await anyio.sleep(0.3)
            # The long call still holds its slot: two more calls fit beside it one at a time, never two at once.
            async with anyio.create_task_group() as more:
                for n in (2, 3, 4, 5):
                    more.start_soon(run, short_lease, n)
            release.set()
    assert sorted(outputs) == [0, 1, 2, 3, 4, 5]
    assert peak == 2


# -- URLs ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://[::1", "is not a URL"),
        ("redis://h/²", "database must be a number"),
        ("redis://h/99999999999999999999", "database must be a number"),
        ("redis://h:0", "bad port"),
        ("redis://two words", "bad host name"),
        ("redis://" + "ü" * 70 + ".example", "bad host name"),
        ("redis://h?db=2", r"no \?query"),
        ("redis://h/0#x", "#fragment"),
        ("redis://alice@h", "user without a password"),
    ],
)
def test_a_url_no_worker_could_use_is_refused_when_built(url: str, message: str) -> None:
    """Promise: "Bad options raise OptionError" when the coordination is built. `[::1` and a database of
    non-ASCII digits raised ValueError; port 0 became 6379, `?db=2` was ignored (database 0: the limits of
    another fleet), a user name without a password was dropped; a host with a space and a database past any
    Redis's were only found out at the first call, as an outage, and a host name IDNA cannot encode failed every
    call with `IDNAError` (neither falling back nor answered unavailable)."""
    with pytest.raises(ts.OptionError, match=message):
        ts.RedisCoordination(url)


@pytest.mark.parametrize("host", ["h%00", "a..b", ".", "a" * 64, ("a" * 60 + ".") * 5 + "a", "-h", "h-.x", "h!"])
def test_a_host_no_resolver_could_look_up_is_refused_when_built(host: str) -> None:
    """Promise (docs/fleet.md): a URL a worker could not use is refused with ``ts.OptionError`` when the coordination
    is built. A host name that is not one (an empty label, a label past 63 characters or a name past 253, a label
    that starts or ends with a hyphen, a character no host name has) was taken, and found out only at the first
    call, as an outage."""
    with pytest.raises(ts.OptionError, match="bad host name"):
        ts.RedisCoordination(f"redis://{host}:6379")


@pytest.mark.parametrize(
    ("host", "shown"),
    [
        ("localhost", "localhost"),
        ("redis_1.internal", "redis_1.internal"),
        ("limits.example.", "limits.example."),
        ("[::1]", "::1"),
        ("127.0.0.1", "127.0.0.1"),
        ("bücher.example", "xn--bcher-kva.example"),
        ("a" * 63 + ".example", "a" * 63 + ".example"),
    ],
)
def test_host_names_and_addresses_are_taken(host: str, shown: str) -> None:
    assert (
        repr(ts.RedisCoordination(f"redis://{host}:6380")) == f"RedisCoordination({shown}:6380, namespace='toolsched')"
    )


@pytest.mark.parametrize("url", ["redis://:s3cret@h:0", "redis://u:s3cret@h?db=1", "redis://:s3@c@ret@[::1"])
def test_a_refused_url_does_not_show_its_password(url: str) -> None:
    with pytest.raises(ts.OptionError) as refused:
        ts.RedisCoordination(url)
    assert "***" in str(refused.value)
    for part in ("s3cret", "ret@", "s3@"):
        assert part not in str(refused.value)


def raw(url: str, *parts: str) -> bytes:
    """One command to the test's Redis server, outside toolsched's coordination."""
    where = urlsplit(url)
    with socket.create_connection((where.hostname, where.port or 6379), timeout=5) as connection:
        return blocking_request(connection, *parts)


async def test_an_acl_user_of_the_url_is_who_the_workers_authenticate_as(anyio_backend: str) -> None:
    """Promise: the URL's credentials authenticate the worker. `redis://user:password@host` (a Redis 6 ACL
    user) sent only the password, as the `default` user's: Redis refused it and every call fell back (or, with
    "refuse", was answered unavailable). The renewal thread authenticates the same way (its slot outlives a
    lease of 0.1 s)."""
    url = redis_url()
    user = f"fleet-{namespace()}"
    assert raw(url, "ACL", "SETUSER", user, "on", ">p@ss", "~*", "+@all") == b"+OK\r\n"
    try:
        authenticated = url.replace("redis://", f"redis://{user}:p%40ss@")
        coordination = ts.RedisCoordination(authenticated, namespace=namespace(), lease=0.1, on_unavailable="refuse")
        gate = anyio.Event()
        started = anyio.Event()

        @ts.tool(name="capped", max_concurrency=1)
        async def capped(n: int) -> int:
            if n == 0:
                started.set()
                await gate.wait()
            return n

        executor = ts.Executor([capped], coordination=coordination)
        outputs: list[Any] = []

        async def run(n: int) -> None:
            outcome = await executor.run([ts.ToolCall(f"c{n}", "capped", {"n": n})])
            outputs.append(outcome.results[0].output)

        with warnings.catch_warnings(), anyio.fail_after(10):
            warnings.simplefilter("error")
            async with anyio.create_task_group() as group:
                group.start_soon(run, 0)
                await started.wait()
                # Past three leases: the slot is the renewal thread's to keep, the second call still waits.
                with anyio.move_on_after(0.35):
                    await run(1)
                assert outputs == []
                gate.set()
            await run(1)
        assert outputs == [0, 1]
    finally:
        raw(url, "ACL", "DELUSER", user)


# -- the circuit's probe ---------------------------------------------------------------------------------


async def test_a_probe_that_runs_past_its_lease_is_still_the_only_one(anyio_backend: str) -> None:
    """Promise: "once its cooldown is over exactly one call in the fleet probes"; the probe is a lease so that a
    worker that dies probing does not hold the circuit shut. The probe's lease (the longer of ``lease`` and the
    cooldown) was never renewed: a probing call that ran longer than it, its worker alive, let a second call of
    the fleet probe beside it. It is renewed with the slots now, and still lapses when its worker is gone."""
    space = namespace()
    gate = anyio.Event()
    probing = anyio.Event()
    ran: list[int] = []

    @ts.tool(name="flaky", circuit=ts.CircuitBreaker(failures=1, cooldown=0.1))
    async def flaky(n: int) -> int:
        ran.append(n)
        if n == 0:
            raise ts.Transient("downstream busy")
        if n == 1:
            probing.set()
            await gate.wait()
        return n

    def make() -> ts.Executor:
        coordination = ts.RedisCoordination(redis_url(), namespace=space, lease=0.1, on_unavailable="refuse")
        return ts.Executor([flaky], coordination=coordination)

    first, second = make(), make()

    async def one(executor: ts.Executor, n: int) -> ts.ToolResult:
        return (await executor.run([ts.ToolCall(f"c{n}", "flaky", {"n": n})])).results[0]

    with warnings.catch_warnings(), anyio.fail_after(10):
        warnings.simplefilter("error")
        assert (await one(first, 0)).error_kind == "execution_error"
        await anyio.sleep(0.15)  # the cooldown
        answers: dict[int, ts.ToolResult] = {}

        async def probe() -> None:
            answers[1] = await one(first, 1)

        async with anyio.create_task_group() as group:
            group.start_soon(probe)
            await probing.wait()
            # Past three of the probe's leases, its call still running: the other worker is refused.
            await anyio.sleep(0.35)
            answers[2] = await one(second, 2)
            gate.set()
        assert ran == [0, 1]
        assert answers[1].output == 1
        assert answers[2].error_kind == "unavailable"
        # The probe's success closed the circuit for the fleet.
        assert (await one(second, 3)).output == 3


# -- a stalled event loop ----------------------------------------------------------------------------------


async def test_a_loop_stalled_as_redis_grants_a_slot_keeps_the_slot(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Promise: "a stalled event loop keeps its slots". The renewal thread learnt of a slot only once the call's
    task resumed with the admission's reply: a loop stalled (a sync body blocking it) between Redis granting the
    slot and that moment, for longer than the lease, lost the slot while its call went on to run, and another
    worker's call ran beside it past the fleet's cap. The stall is made here right after the reply is read."""
    space = namespace()
    gate = anyio.Event()
    started = anyio.Event()
    ran: list[str] = []

    @ts.tool(name="capped", max_concurrency=1)
    async def capped(who: str) -> str:
        ran.append(who)
        if who == "stalled":
            started.set()
            await gate.wait()
        return who

    def make() -> tuple[ts.Executor, ts.RedisCoordination]:
        coordination = ts.RedisCoordination(redis_url(), namespace=space, lease=0.1, on_unavailable="refuse")
        return ts.Executor([capped], coordination=coordination), coordination

    (stalling, stalls), (other, _) = make(), make()
    admit = stalls._admit

    async def stalled_admit(*args: Any) -> Any:
        reply = await admit(*args)
        time.sleep(0.4)  # noqa: ASYNC251 (the event loop blocked past four leases, the slot granted)
        return reply

    monkeypatch.setattr(stalls, "_admit", stalled_admit)
    answers: dict[str, ts.ToolResult] = {}

    async def run(executor: ts.Executor, who: str) -> None:
        answers[who] = (await executor.run([ts.ToolCall(who, "capped", {"who": who})])).results[0]

    with warnings.catch_warnings(), anyio.fail_after(10):
        warnings.simplefilter("error")
        async with anyio.create_task_group() as group:
            group.start_soon(run, stalling, "stalled")
            await started.wait()
            # The stalled worker's call holds the fleet's one slot: the other's waits.
            with anyio.move_on_after(0.3):
                await run(other, "other")
            assert ran == ["stalled"]
            gate.set()
        await run(other, "other")
    assert ran == ["stalled", "other"]
    assert answers["stalled"].output == "stalled" and answers["other"].output == "other"


# -- a worker killed with the journal and the fleet ------------------------------------------------------

WORKER = """
import os, pathlib, signal, sys, anyio
import toolsched as ts

url, space, path, log, point, backend, name = sys.argv[1:8]

async def body(name: str, n: int) -> int:
    with open(log, "a") as out:
        out.write(f"{{name}} {{n}}\\n")
    if point == "mid-call":
        print("killed", flush=True)
        await anyio.sleep(60)
    return n

@ts.tool(max_concurrency=1)
async def charge(n: int) -> int:
    return await body("charge", n)

@ts.tool(max_concurrency=1, idempotent=True)
async def search(n: int) -> int:
    return await body("search", n)

async def main() -> None:
    coordination = ts.RedisCoordination(url, namespace=space, lease=0.5, on_unavailable="refuse")
    async with ts.SqliteJournal(path, lease=600) as journal:
        record = journal.record

        async def frozen(run_id, call_id, transition, payload=None):
            if transition == "finished" and point == "unjournaled":
                print("killed", flush=True)
                await anyio.sleep(60)
            await record(run_id, call_id, transition, payload)

        journal.record = frozen
        executor = ts.Executor([charge, search], journal=journal, coordination=coordination)
        await executor.run([ts.ToolCall("k", name, {{"n": 2}})], run_id="fleet-run")

anyio.run(main, backend=backend)
"""


@pytest.mark.parametrize("name", ["charge", "search"])
@pytest.mark.parametrize("point", ["mid-call", "unjournaled"])
async def test_a_worker_killed_holding_a_fleet_slot_is_recovered_once(
    anyio_backend: str, point: str, name: str, tmp_path: Path
) -> None:
    """Promise (docs/fleet.md, "When a worker dies"): a worker killed mid-call holding the fleet's only slot of
    its tool, or after the call returned but before its result was journaled: another process recovers the
    run, the slot comes back within its lease, the idempotent tool's call runs again once and the other's is
    answered ``interrupted``, never run twice."""
    url, space = redis_url(), namespace()
    path, log = tmp_path / "journal.db", tmp_path / "log"
    command = [sys.executable, "-c", WORKER.format(), url, space, str(path), str(log), point, anyio_backend, name]
    await kill_at(command, "killed")
    ran: list[str] = []

    @ts.tool(max_concurrency=1)
    async def charge(n: int) -> int:
        ran.append("charge")
        return n * 10

    @ts.tool(max_concurrency=1, idempotent=True)
    async def search(n: int) -> int:
        ran.append("search")
        return n * 10

    coordination = ts.RedisCoordination(url, namespace=space, lease=0.5, on_unavailable="refuse")
    with warnings.catch_warnings(), anyio.fail_after(20):
        warnings.simplefilter("error")
        async with ts.SqliteJournal(path, lease=600) as journal:
            executor = ts.Executor([charge, search], journal=journal, coordination=coordination)
            (result,) = (await executor.recover("fleet-run")).results
    assert log.read_text().splitlines() == [f"{name} 2"]
    if name == "search":
        assert result.output == 20 and ran == ["search"]
    else:
        assert result.error_kind == "interrupted" and ran == []
