"""Attacks on the pipeline of ``ts.RedisCoordination`` (docs/fleet.md): the writer of a batch cancelled with the
batch in flight, a probe given back by an attempt that no longer holds it, a batch lost after it was written.

The real server comes from tests/redis_server.sh (``TOOLSCHED_TEST_REDIS_URL``).
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from fleet_redis import namespace, redis_url

import toolsched as ts
import toolsched._policy.coordination as coordination_module
from tests.fleet.test_coordination import child, lines_of
from toolsched._policy.coordination import _ADMIT, _FRESH_US, _discard, _sha1
from toolsched._policy.redis_wire import Connection, CoordinationError, Incomplete, parsed

pytestmark = pytest.mark.anyio


def capped(cap: int = 5) -> Any:
    @ts.tool(name="capped", max_concurrency=cap)
    async def capped_tool() -> None:
        return None

    return capped_tool


def admits(data: bytes) -> bool:
    return _sha1(_ADMIT).encode() in data or _ADMIT.encode() in data


async def slots(coordination: ts.RedisCoordination, space: str, name: str) -> list[bytes]:
    return sorted(await coordination._call("ZRANGE", f"{space}:{{{name}}}:slots", 0, -1))


async def emptied(coordination: ts.RedisCoordination, tool: Any, space: str) -> None:
    """The admission script loaded (one admission), then the tool's slots emptied."""
    await coordination._admit(tool, "warm", None)
    await coordination._call("DEL", f"{space}:{{{tool.name}}}:slots")


def held_up(picks: Callable[[bytes, int], bool]) -> Callable[..., Awaitable[Any]]:
    """A ``Connection.exchange`` that reads the replies of a batch of admissions ``picks`` (its request and its
    command count), then waits 10 s before handing them out: whatever the test does meanwhile happens with
    the replies read and nobody told."""
    original = Connection.exchange

    async def exchange(self: Connection, data: bytes, count: int, per_reply: float = math.inf) -> Any:
        replies = await original(self, data, count, per_reply)
        if admits(data) and picks(data, count):
            await asyncio.sleep(10)
        return replies

    return exchange


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_batch_writer_cancelled_natively_mid_round_trip_strands_no_other_caller(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Promise: the others of a batch get their own replies whatever happens to its writer. An asyncio task
    cancelled natively (``task.cancel()``, ``asyncio.wait_for``, a loop's end) gets through the writer's shield
    with its batch in flight: the other callers were woken with no reply and no error, each told the server "is
    not Redis" (the fleet given up for per-process limits) while their admissions held fleet slots nobody used,
    and the writer's own slot stayed taken too, all until the lease ran out. Now each caller sends its command
    again (its lease id takes no second slot) and the writer's slot is given back with the next batch."""
    tool = capped()
    space = namespace()
    coordination = ts.RedisCoordination(redis_url(), namespace=space)
    await emptied(coordination, tool, space)
    replied = asyncio.Event()

    def first_of_four(data: bytes, count: int) -> bool:
        # The replies are in; the writer is cancelled before it hands them out.
        if count != 4 or replied.is_set():
            return False
        replied.set()
        return True

    monkeypatch.setattr(Connection, "exchange", held_up(first_of_four))
    writer = asyncio.ensure_future(coordination._admit(tool, "writer", None))
    others = [asyncio.ensure_future(coordination._admit(tool, f"other{n}", None)) for n in range(3)]
    await replied.wait()
    writer.cancel()
    outcomes = await asyncio.gather(writer, *others, return_exceptions=True)
    assert isinstance(outcomes[0], asyncio.CancelledError)
    assert [outcome[0] for outcome in outcomes[1:]] == [0, 0, 0], outcomes  # admitted, each on its one slot
    assert await slots(coordination, space, "capped") == [b"other0", b"other1", b"other2"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_batch_writer_cancelled_natively_gives_its_slot_back_when_the_loop_ends(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer of a batch (its admission run, the slot taken) cancelled natively with its reply unread, and no
    other command of its loop after it: the slot goes back when the loop ends, not after the lease."""
    tool = capped(cap=1)
    space = namespace()
    url = redis_url()
    # The writer's reply is in; the writer is cancelled before it reads it.
    exchange = held_up(lambda data, count: b"writer" in data)

    def run() -> None:
        async def main() -> None:
            coordination = ts.RedisCoordination(url, namespace=space)
            checker = ts.RedisCoordination(url, namespace=space)
            await emptied(coordination, tool, space)
            writer = asyncio.ensure_future(coordination._admit(tool, "writer", None))
            while not await slots(checker, space, "capped"):  # noqa: ASYNC110 (the server's state)
                await asyncio.sleep(0.005)
            writer.cancel()
            with pytest.raises(asyncio.CancelledError):
                await writer

        asyncio.run(main())

    with monkeypatch.context() as patched:
        patched.setattr(Connection, "exchange", exchange)
        await anyio.to_thread.run_sync(run)
    assert await slots(ts.RedisCoordination(url, namespace=space), space, "capped") == []


def probed(cap: int | None) -> Any:
    @ts.tool(name="probed", max_concurrency=cap, circuit=ts.CircuitBreaker(failures=1, cooldown=30))
    async def probed_tool() -> None:
        return None

    return probed_tool


async def opened_and_cooled(coordination: ts.RedisCoordination, space: str) -> None:
    """The circuit of ``probed`` opened by one failure, its cooldown over: the next attempt is its one probe."""
    await coordination._call("HSET", f"{space}:{{probed}}:circuit", "failures", 1, "open_until", 0)


@pytest.mark.parametrize("cap", [1, None])
async def test_a_probe_past_its_lease_does_not_free_the_next_probe(anyio_backend: str, cap: int | None) -> None:
    """Promise: a half-open circuit lets one probe through at a time. A probe that ran past its lease (the probe
    passed to another attempt meanwhile) gave back the probe when it ended, whoever held it: a third attempt was
    let through as a second probe while the second still ran."""
    tool = probed(cap if cap is None else 2)
    space = namespace()
    coordination = ts.RedisCoordination(redis_url(), namespace=space)
    await opened_and_cooled(coordination, space)
    assert (await coordination._admit(tool, "first", None))[0] == 1
    # The first probe's lease runs out while it runs: the next attempt takes the probe.
    await coordination._call("HSET", f"{space}:{{probed}}:circuit", "probe_until", 0)
    assert (await coordination._admit(tool, "second", None))[0] == 1
    await coordination._settle(tool, "first", "none", True)  # the first ends (cancelled: no outcome)
    assert (await coordination._admit(tool, "third", None))[0] == -1  # the second still probes
    await coordination._settle(tool, "second", "none", True)
    assert (await coordination._admit(tool, "third", None))[0] == 1


class Stall:
    """Whether the next batch written (on any ``FirstReplyOnly`` connection) is cut after its first reply."""

    def __init__(self) -> None:
        self.armed = False


class FirstReplyOnly(anyio.abc.ByteStream):
    """A connection that, for the batch written while its ``stall`` is armed, hands over the first reply and then
    nothing (Redis stalled midway: the batch's reply timeout ends it); every other batch goes through."""

    def __init__(self, inner: anyio.abc.ByteStream, stall: Stall) -> None:
        self.inner, self.stall = inner, stall
        self.state = "through"  # "cut": the first reply is next; "stalled": nothing more comes
        self.closed = False

    async def send(self, item: bytes) -> None:
        if self.stall.armed:
            self.stall.armed = False
            self.state = "cut"
        await self.inner.send(item)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self.state == "through":
            return await self.inner.receive(max_bytes)
        if self.state == "stalled":
            await anyio.sleep_forever()
        buffer = bytearray()
        while True:
            buffer += await self.inner.receive(max_bytes)
            try:
                _, end = parsed(buffer, 0)
            except (Incomplete, IndexError):
                continue
            self.state = "stalled"
            return bytes(buffer[:end])

    async def send_eof(self) -> None:
        await self.inner.send_eof()

    async def aclose(self) -> None:
        self.closed = True
        await self.inner.aclose()


def first_reply_only(monkeypatch: pytest.MonkeyPatch, stall: Stall) -> list[FirstReplyOnly]:
    """Every connection opened from now on a ``FirstReplyOnly`` of ``stall``'s; the list of them."""
    original = anyio.connect_tcp
    opened: list[FirstReplyOnly] = []

    async def connect(*args: Any, **kwargs: Any) -> anyio.abc.ByteStream:
        opened.append(FirstReplyOnly(await original(*args, **kwargs), stall))
        return opened[-1]

    monkeypatch.setattr(anyio, "connect_tcp", connect)
    return opened


async def in_one_batch(
    coordination: ts.RedisCoordination,
    stall: Stall,
    group: anyio.abc.TaskGroup,
    *asks: Callable[[], Awaitable[None]],
) -> None:
    """Starts ``asks`` (each making one command) so that their commands go in one batch, in this order, the stall
    armed for it: a round trip of the loop held in flight meanwhile, the batch takes them until it is back."""
    link = coordination._link()
    await link.gate.acquire()
    try:
        for count, ask in enumerate(asks, 1):
            group.start_soon(ask)
            while link.open is None or len(link.open) < count:
                await anyio.lowlevel.checkpoint()
        stall.armed = True
    finally:
        link.gate.release()


async def test_a_reply_timeout_mid_batch_answers_the_callers_whose_replies_were_read(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Promise: a caller whose reply came has its answer. A batch whose replies stopped coming midway (Redis
    stalled past the reply timeout) told every caller Redis did not answer, those whose replies had been read too:
    they fell back to per-process limits for nothing, their fleet slots given back. Now they are admitted on their
    replies; only the others fall back (nothing taken by them is left held), and the stalled connection is closed."""
    tool = capped(cap=5)
    space = namespace()
    stall = Stall()
    opened = first_reply_only(monkeypatch, stall)
    coordination = ts.RedisCoordination(redis_url(), namespace=space, connect_timeout=0.3)
    await coordination._admit(tool, "warm", None)  # the script loaded
    await coordination._settle(tool, "warm", "none", False)
    answers: dict[str, Any] = {}

    def ask(lease: str) -> Callable[[], Awaitable[None]]:
        async def admission() -> None:
            try:
                answers[lease] = (await coordination._admit(tool, lease, None))[0]
            except CoordinationError as exc:
                answers[lease] = str(exc)

        return admission

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            await in_one_batch(coordination, stall, group, ask("read"), ask("unread"))
    assert answers["read"] == 0, answers  # admitted on its reply
    assert "did not answer" in answers["unread"], answers
    stalled = [connection for connection in opened if connection.state == "stalled"]
    assert len(stalled) == 1 and stalled[0].closed
    # The admitted caller holds its slot; the other's was given back (if its script took one).
    assert await slots(coordination, space, "capped") == [b"read"]
    await coordination._settle(tool, "read", "success", False)
    assert await slots(coordination, space, "capped") == []


async def test_a_call_ending_while_redis_cannot_be_reached_does_not_wait_to_connect(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Promise: a call's end is not held up by an outage it cannot help. Within the second after Redis could not
    be reached (a new connection not opened: a host blackholed), a fleet-admitted call's settle opened a fresh
    connection again, its end waiting up to ``connect_timeout`` for it. It returns at once now, no connection
    tried, the slot's lease running out by itself (a settle within an outage that was replies stopping midway on
    a connection Redis answered on is still sent: the reply-timeout tests above)."""
    tool = capped(cap=5)
    space = namespace()
    coordination = ts.RedisCoordination(redis_url(), namespace=space, connect_timeout=0.3)
    assert (await coordination._admit(tool, "held", None))[0] == 0
    link = coordination._link()
    kept, link.idle = link.idle, []
    await _discard(*kept)  # the next command needs a new connection
    tried: list[object] = []

    async def blackholed(*args: Any, **kwargs: Any) -> anyio.abc.ByteStream:
        tried.append(args)
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    monkeypatch.setattr(anyio, "connect_tcp", blackholed)
    with pytest.raises(CoordinationError, match="cannot reach"):
        await coordination._admit(tool, "next", None)
    assert len(tried) == 1
    await coordination._settle(tool, "held", "success", False)
    assert len(tried) == 1  # the settle tried no connection
    monkeypatch.undo()
    checker = ts.RedisCoordination(redis_url(), namespace=space)
    assert await slots(checker, space, "capped") == [b"held"]  # held until its lease runs out


async def test_a_batch_cut_off_before_its_scripts_are_sent_again_is_not_answered_by_its_first_replies(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Promise: a caller is answered by its own command's reply, or told Redis was lost. A batch whose scripts
    Redis did not have (``NOSCRIPT``) sends them again by their text in a second exchange; a connection lost
    before that exchange began handed the callers the first exchange's replies as the second's (the admission
    told "Redis refused a script: NOSCRIPT"). It is told the connection was lost, and nothing stays taken."""
    tool = capped(cap=5)
    space = namespace()
    coordination = ts.RedisCoordination(redis_url(), namespace=space, connect_timeout=0.3)
    await coordination._admit(tool, "warm", None)
    await coordination._settle(tool, "warm", "none", False)
    await coordination._call("SCRIPT", "FLUSH")

    def cut(request: Any) -> bytes:
        raise ConnectionError("cut before the scripts were sent again")

    monkeypatch.setattr(coordination_module, "_fallback", cut)
    with pytest.raises(CoordinationError, match="lost the connection"):
        await coordination._admit(tool, "cut", None)
    monkeypatch.undo()
    checker = ts.RedisCoordination(redis_url(), namespace=space)
    assert await slots(checker, space, "capped") == []


@pytest.mark.parametrize("cap", [1, None])
async def test_a_probe_taken_by_an_admission_whose_reply_was_lost_is_given_back(
    anyio_backend: str, cap: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Promise: a probe is held by an attempt in flight (or by a dead worker, until its lease runs out). An
    admission that took the half-open circuit's probe and whose reply never came (Redis stalled after answering
    the command before it in the batch; the attempt falls back to per-process limits) gave back its slot but not
    the probe: the fleet's calls were refused as the circuit open for the whole lease, though nobody probed. The
    command whose reply was read is answered, and what it took is its caller's."""
    tool = probed(cap)
    other = capped(cap=5)
    space = namespace()
    url = redis_url()
    stall = Stall()
    checker = ts.RedisCoordination(url, namespace=space)
    await checker._admit(tool, "warm", None)  # the script loaded
    await checker._settle(tool, "warm", "none", False)
    await opened_and_cooled(checker, space)
    first_reply_only(monkeypatch, stall)
    coordination = ts.RedisCoordination(url, namespace=space, connect_timeout=0.3)
    await coordination._call("PING")  # a connection kept: the batch goes on it
    answers: dict[str, Any] = {}

    async def read() -> None:
        answers["read"] = await coordination._admit(other, "read", None)

    async def lost() -> None:
        with pytest.raises(CoordinationError, match="did not answer"):
            await coordination._admit(tool, "lost", None)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            await in_one_batch(coordination, stall, group, read, lost)
    assert answers["read"][0] == 0
    assert await checker._call("HGET", f"{space}:{{probed}}:circuit", "prober") is None
    assert (await checker._admit(tool, "next", None))[0] == 1
    assert await slots(checker, space, "capped") == [b"read"]  # the answered admission's slot is its caller's


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_event_loop_ending_with_a_batch_in_flight_gives_its_slots_back(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Promise: a fleet slot is held by a call in flight. ``asyncio.run`` ending while five admissions of its loop
    are in flight (their script run, the replies unread): the loop cancels every task natively, through the batch
    writer's shield, and the five slots stayed taken for the whole lease, held by nobody."""
    tool = capped(cap=10)
    space = namespace()
    url = redis_url()
    # The five replies are in; the loop ends before they are handed out.
    exchange = held_up(lambda data, count: count == 5)

    def run() -> None:
        async def main() -> None:
            coordination = ts.RedisCoordination(url, namespace=space)
            checker = ts.RedisCoordination(url, namespace=space)
            await emptied(coordination, tool, space)
            for n in range(5):
                asyncio.ensure_future(coordination._admit(tool, f"left{n}", None))  # noqa: RUF006 (left running)
            while len(await slots(checker, space, "capped")) < 5:  # noqa: ASYNC110 (the server's state)
                await asyncio.sleep(0.005)

        asyncio.run(main())

    with monkeypatch.context() as patched:
        patched.setattr(Connection, "exchange", exchange)
        await anyio.to_thread.run_sync(run)
    assert await slots(ts.RedisCoordination(url, namespace=space), space, "capped") == []


class Trickle(anyio.abc.ByteStream):
    """A connection whose replies come ``size`` bytes per read."""

    def __init__(self, inner: anyio.abc.ByteStream, size: int) -> None:
        self.inner, self.size = inner, size

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self.inner.receive(min(max_bytes, self.size))

    async def send(self, item: bytes) -> None:
        await self.inner.send(item)

    async def send_eof(self) -> None:
        await self.inner.send_eof()

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize("size", [1, 7])
async def test_replies_split_across_reads_are_each_their_own_commands(
    anyio_backend: str, size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of admissions, errors and plain replies read a byte (or seven) at a time: every caller gets its own
    reply, in one round trip."""
    tool = capped(cap=100)
    space = namespace()
    coordination = ts.RedisCoordination(redis_url(), namespace=space)
    await coordination._admit(tool, "warm", None)  # the script loaded
    original = anyio.connect_tcp

    async def trickling(*args: Any, **kwargs: Any) -> anyio.abc.ByteStream:
        return Trickle(await original(*args, **kwargs), size)

    await coordination._call("SET", f"{space}:text", "x" * 300)
    monkeypatch.setattr(anyio, "connect_tcp", trickling)
    for link in coordination._links.values():
        for connection in link.idle:
            connection.stream = Trickle(connection.stream, size)
    answers: dict[str, Any] = {}

    async def ask(key: str, call: Callable[[], Awaitable[Any]]) -> None:
        try:
            answers[key] = await call()
        except Exception as exc:
            answers[key] = exc

    trips = coordination.round_trips
    async with anyio.create_task_group() as group:
        for n in range(20):
            group.start_soon(ask, f"admit{n}", functools.partial(coordination._admit, tool, f"a{n}", None))
            group.start_soon(ask, f"get{n}", functools.partial(coordination._call, "GET", f"{space}:text"))
            group.start_soon(ask, f"bad{n}", functools.partial(coordination._call, "INCR", f"{space}:text"))
    assert coordination.round_trips - trips == 1
    for n in range(20):
        assert answers[f"admit{n}"][0] == 0
        assert answers[f"get{n}"] == b"x" * 300
        assert "not an integer" in str(answers[f"bad{n}"])
    assert len(await slots(coordination, space, "capped")) == 21  # and the warm-up's


def test_four_processes_bursting_keep_the_fleets_rate(anyio_backend: str) -> None:
    """Promise: one rate limit for the fleet. Four processes start 10 calls each at once under RateLimit(20, per=1,
    burst=4): every call runs, and the admissions, stamped with the Redis server's clock by the admission script
    itself, number at most floor((W + freshness + tolerance) / interval) + 1 in any window of W."""
    url, space = redis_url(), namespace()
    workers = [child(anyio_backend, url, space, "burst", 10) for _ in range(4)]
    lines = [line for worker in workers for line in lines_of(worker)]
    assert lines.count("done") == 4
    stamps = sorted(int(line.split()[1]) for line in lines if line.startswith("admitted "))
    assert len(stamps) == 40
    interval, tolerance = 50_000, 3 * 50_000
    for window in (1, 100_000, 500_000, 1_000_000):
        bound = (window + _FRESH_US + tolerance) // interval + 1
        busiest = max(sum(1 for t in stamps if first <= t < first + window) for first in stamps)
        assert busiest <= bound, (window, busiest, bound, [t - stamps[0] for t in stamps])
