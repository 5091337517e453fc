"""Fleet-wide limits: every tool's rate limit, circuit and concurrency cap shared through Redis.

``RedisCoordination(url, namespace=..., on_unavailable=...)`` passed as ``Executor(...,
coordination=...)`` makes each tool's ``rate_limit``, ``circuit`` and ``max_concurrency`` one
limit for every process that uses the same Redis server and namespace:

- one atomic server-side script admits an attempt: the circuit (refused while open; its single
  half-open probe is a lease), the rate limit (GCRA on the server's clock: an attempt that must
  wait gets a reservation, waits it out holding nothing, then asks again) and a concurrency slot
  (a lease in a sorted set that expires unless renewed, so a killed worker's slots come back
  within ``lease`` seconds), taken only once the attempt may start. An attempt is admitted on
  its reservation only within ``_FRESH_US`` of the reserved start (a later one takes a new
  reservation), so a worker whose event loop stalled past its reservations cannot release them
  all at once;
- a second script gives the slot back and records the outcome for the circuit (skipped when
  there is nothing to record);
- the commands of one event loop are pipelined: those issued in one turn of the loop, or while a round
  trip is in flight, are written together in the next (one round trip for all), and the calls of a
  process whose reservations fall due in the same few milliseconds wake together;
- Redis unreachable: ``on_unavailable="local"`` falls back to the per-process limits (a warning
  and a ``CoordinationUnavailable`` event, once per outage), ``"refuse"`` answers the calls
  ``unavailable``.

The Redis client is a small RESP2 client over anyio sockets, in this module: the maintained
Python clients (``redis``, ``coredis``, ``valkey-glide``) run on asyncio only, and toolsched runs
on asyncio and trio alike. It needs no package beyond anyio.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import ipaddress
import logging
import math
import os
import random
import re
import secrets
import socket
import threading
import time
import warnings
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote, urlsplit

import anyio
import anyio.abc
import anyio.lowlevel
import idna
import sniffio

from toolsched._policy.redis_wire import (
    Connection,
    CoordinationError,
    ReplyError,
    blocking_request,
    bulk,
    encoded,
)
from toolsched._policy.resilience import CircuitBreaker, CircuitOpen, RateLimit, Resilience, is_transient
from toolsched._policy.slots import slot_of
from toolsched._values.numeric_options import numeric_fault, shown
from toolsched.errors import OptionError

if TYPE_CHECKING:
    from toolsched._tools.tools import Tool, ToolFacts

__all__ = ["CoordinationError", "FleetUnavailable", "RedisCoordination", "guarded", "returned"]

logger = logging.getLogger("toolsched.coordination")

# Round trips one event loop has in flight at once, each on its own connection: the commands issued
# meanwhile wait, and go together in the next one.
_PIPELINES = 1
# A reservation is waited out to the next multiple of this on the event loop's clock (seconds), at most this
# late: well within ``_FRESH_US``, and the calls due in the same few ms ask again together.
_WAKE_GRID = 0.004
# A sleep of a second or more may end late by up to 0.1% of it (Linux's timer slack for a normal task's epoll
# timeout, at most 100 ms): past ``_FRESH_US`` beyond 10 s, where every wake would take a new reservation. Such a
# reservation is waited out to this share of it earlier (at most ``_LEAD_MOST`` seconds), then asked for the rest.
_LEAD_SHARE = 0.002
_LEAD_MOST = 0.2
# Commands written together in one round trip at most.
_MAX_BATCH = 100
# How long a batch's replies may take before its connection is given up, in seconds.
_REPLY_TIMEOUT = 5.0
# The longest ``lease`` and ``connect_timeout`` taken, in seconds (a year): the server's numbers and the renewal
# thread's timers hold them.
_MOST_SECONDS = 365 * 86_400
# The shortest ``lease`` taken, in seconds: the renewal thread wakes every third of it and makes a round trip to
# Redis, so a shorter one would keep it busy (and outrun the round trip) rather than renew anything.
_LEAST_LEASE = 0.1
# The longest rate interval sent to the server, in µs (about 31 years, one call per that long is none at all in
# practice): a longer one is sent as this, so the script's arithmetic stays in whole numbers Redis accepts.
_MOST_INTERVAL_US = 10**15
# How long a refused connection keeps the fleet on its fallback before Redis is tried again, in seconds.
_RETRY_CONNECT = 1.0
# The slot sets (``namespace:{tool}:slots``) whose slots the calls this code runs inside hold, in the fleet or in
# the fallback's per-process cap, each with the id of the process holding it; nested runs inherit it. A call of such
# a tool (made in a nested run of the body of one of its own calls) runs on its ancestor's slot: a slot of its own
# could be one only its ancestor frees. A process forked inside a call holds none of its parent's slots.
_holding: contextvars.ContextVar[frozenset[tuple[int, str]]] = contextvars.ContextVar(
    "toolsched_fleet_holding", default=frozenset()
)

# Waits between two tries for a concurrency slot held elsewhere (seconds): from the first, doubling to the last.
_SLOT_POLL = (0.002, 0.05)

# How late after its reserved start an attempt may still be admitted on its reservation, in µs; a later one
# (its event loop busy or stalled) takes a new reservation instead of starting in a clump with the next ones.
_FRESH_US = 10_000

# KEYS: circuit, slots, rate (the GCRA's theoretical arrival time, µs). ARGV: lease id, the reserved start (µs,
# server clock) of a reservation the attempt waited out or '' for none, failures, cooldown ms, probe lease ms, cap,
# slot lease ms, emission interval µs, tolerance µs, freshness µs. Returns {code, wait µs or open ms, failures,
# start µs}: code 0 admitted, 1 admitted as the circuit's probe, 2 a reservation (wait until its start, holding
# nothing, then ask again passing the start), -1 circuit open, -2 no slot free (nothing taken; a reservation held
# is given up). An attempt asking again with its lease id, its first reply lost, is admitted on what it holds: its
# slot, and the circuit's probe (the circuit's ``prober`` is the lease id of the attempt holding the probe). An
# attempt is admitted at its reservation's start or at most the freshness after it, so the admissions in any window
# of W µs number at most floor((W + freshness + tolerance) / interval) + 1, however late the callers woke.
_ADMIT = """
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local failures = 0
local probe = 0
local threshold = tonumber(ARGV[3])
if threshold > 0 then
  local state = redis.call('HMGET', KEYS[1], 'failures', 'open_until', 'probe_until', 'prober')
  failures = tonumber(state[1] or '0')
  if failures >= threshold then
    local open_until = tonumber(state[2] or '0')
    local probe_until = tonumber(state[3] or '0')
    if now < open_until then return {-1, open_until - now, failures, now_us} end
    if now < probe_until then
      if state[4] ~= ARGV[1] then return {-1, probe_until - now, failures, now_us} end
      -- This attempt asking again (its first reply lost): admitted on the probe it holds.
      if tonumber(ARGV[6]) > 0 then redis.call('ZADD', KEYS[2], now + tonumber(ARGV[7]), ARGV[1]) end
      return {1, 0, failures, now_us}
    end
    probe = 1
  end
end
local cap = tonumber(ARGV[6])
if cap > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
    redis.call('ZADD', KEYS[2], now + tonumber(ARGV[7]), ARGV[1])
    if probe == 1 then redis.call('HSET', KEYS[1], 'probe_until', now + tonumber(ARGV[5]), 'prober', ARGV[1]) end
    return {probe, 0, failures, now_us}
  end
  if redis.call('ZCARD', KEYS[2]) >= cap then return {-2, 0, failures, now_us} end
end
local interval = tonumber(ARGV[8])
if interval > 0 and ARGV[2] ~= '' and now_us < tonumber(ARGV[2]) then
  return {2, tonumber(ARGV[2]) - now_us, failures, tonumber(ARGV[2])}
end
if interval > 0 and (ARGV[2] == '' or now_us > tonumber(ARGV[2]) + tonumber(ARGV[10])) then
  local tat = tonumber(redis.call('GET', KEYS[3]) or '0')
  if tat < now_us then tat = now_us end
  redis.call('SET', KEYS[3], tat + interval, 'PX', math.floor((tat + interval - now_us) / 1000) + 1000)
  local start = tat - tonumber(ARGV[9])
  if start > now_us then return {2, start - now_us, failures, start} end
end
if cap > 0 then
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[7]), ARGV[1])
  -- Lengthened, never shortened: a worker with a longer lease holds slots in the same set.
  if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[7]) * 2 then redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[7]) * 2) end
end
if probe == 1 then
  redis.call('HSET', KEYS[1], 'probe_until', now + tonumber(ARGV[5]), 'prober', ARGV[1])
end
return {probe, 0, failures, now_us}
"""

# KEYS: circuit, slots. ARGV: lease id (the attempt's id), outcome (success/transient/other/none), probe (0/1),
# failures, cooldown ms. The circuit's probe is given back only by the attempt holding it (a probe that outlived its
# lease may have passed to another attempt meanwhile).
_SETTLE = """
if ARGV[1] ~= '' then redis.call('ZREM', KEYS[2], ARGV[1]) end
local threshold = tonumber(ARGV[4])
if threshold == 0 then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local failures = tonumber(redis.call('HGET', KEYS[1], 'failures') or '0')
local outcome = ARGV[2]
if outcome == 'transient' then
  failures = failures + 1
  redis.call('HSET', KEYS[1], 'failures', failures)
  if failures >= threshold then redis.call('HSET', KEYS[1], 'open_until', now + tonumber(ARGV[5])) end
elseif outcome ~= 'none' and (failures < threshold or (ARGV[3] == '1' and outcome == 'success')) then
  redis.call('HSET', KEYS[1], 'failures', 0, 'open_until', 0)
end
if ARGV[3] == '1' and redis.call('HGET', KEYS[1], 'prober') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'probe_until', 0)
  redis.call('HDEL', KEYS[1], 'prober')
end
return failures
"""

# KEYS: the slots of each tool, then the circuits whose probe this process holds. ARGV: lease ms, the number of slot
# sets, then for each key the count of its ids and the ids (lease ids for a slot set, attempt ids for a circuit).
# Extends the leases still held (never revives one that expired) and each set's expiry (never shortens it: workers
# with other leases hold slots in it too), and each probe still held by its attempt (never shortens it either: it
# was taken for the longer of the lease and the cooldown); returns how many it extended.
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local sets = tonumber(ARGV[2])
local at = 3
local renewed = 0
for k, key in ipairs(KEYS) do
  local count = tonumber(ARGV[at])
  for i = at + 1, at + count do
    if k <= sets then
      local held = redis.call('ZSCORE', key, ARGV[i])
      if held and tonumber(held) >= now then
        redis.call('ZADD', key, 'XX', now + lease, ARGV[i])
        renewed = renewed + 1
      end
    elseif redis.call('HGET', key, 'prober') == ARGV[i] then
      local held_until = tonumber(redis.call('HGET', key, 'probe_until') or '0')
      if held_until >= now then
        if held_until < now + lease then redis.call('HSET', key, 'probe_until', now + lease) end
        renewed = renewed + 1
      end
    end
  end
  if k <= sets and redis.call('PTTL', key) < lease * 2 then redis.call('PEXPIRE', key, lease * 2) end
  at = at + count + 1
end
return renewed
"""


#: How an attempt awaits a wait for the rate limit (``run_attempt``'s ``wait``).
Pause = Callable[[Coroutine[Any, Any, None]], Awaitable[None]]


async def _awaited(wait: Coroutine[Any, Any, None]) -> None:
    await wait


class FleetUnavailable(CircuitOpen):
    """A call refused because Redis is unreachable and ``on_unavailable="refuse"`` (internal: ``unavailable``)."""


@functools.cache
def _sha1(script: str) -> str:
    return hashlib.sha1(script.encode()).hexdigest()


@dataclass(slots=True, eq=False)
class _Request:
    """One command in a pipeline (internal)."""

    data: bytes
    # The command sent instead when the reply to ``data`` is ``NOSCRIPT`` (a script by its text).
    fallback: Callable[[], bytes] | None = None
    # For an admission: the command that gives back what its reply says it took (sent when its caller was
    # cancelled before it had the reply).
    undo: Callable[[Any], _Request | None] | None = None
    # Set once the reply (or ``error``) is in; None while nobody waits for it.
    done: anyio.Event | None = None
    reply: Any = None
    # The loop's clock when the reply was read (a reservation's wait counts from then, not from when its
    # caller resumed).
    received: float = 0.0
    # The loop's clock when the command was written (the server ran it after that: a reservation's wait is
    # counted from then, so that a reply read late does not make the attempt ask late).
    sent: float = 0.0
    error: str | None = None
    abandoned: bool = False
    # Set when the batch's writer was cancelled before this command's reply was read (an asyncio task cancelled
    # natively through its shield): its caller sends it again, in a batch of its own.
    again: bool = False
    # Whether the command was written to Redis (it may have run).
    written: bool = False


def _said(exc: BaseException) -> str:
    """An exception as text for a message: its own words, or its type when it has none."""
    return str(exc) or type(exc).__name__


@dataclass(slots=True)
class _Link:
    """The connections to Redis of one event loop (internal)."""

    idle: list[Connection] = field(default_factory=list)
    # At most this many round trips of the loop in flight at once: the batch behind them takes commands.
    gate: anyio.Semaphore = field(default_factory=lambda: anyio.Semaphore(_PIPELINES))
    down_until: float = -math.inf
    # Whether that outage is replies that stopped coming on a connection Redis had answered on (Redis reachable
    # a moment before): releases are still sent within it. Any other outage (no connection, not Redis) fails
    # them at once, as it does every command.
    stalled: bool = False
    warned: bool = False
    # What made Redis count as unreachable until ``down_until`` (the calls meanwhile are told it).
    outage: str = "Redis was unreachable"
    # Per tool name: the lock a call holds while it asks Redis again for a slot (one poller per loop and tool).
    pollers: dict[str, anyio.Lock] = field(default_factory=dict)
    # The batch still taking commands (written together on one connection once its leader has one), or None.
    open: list[_Request] | None = None
    # Commands whose caller is gone, left unwritten or unanswered by a batch writer cancelled mid-round-trip (bare
    # releases, the undos of admissions that may have run): written with the loop's next batch, or when it ends.
    stray: list[_Request] = field(default_factory=list)


class _Renewer:
    """Renews every slot lease and circuit probe this process holds, all of them in one round trip each third of
    the lease (internal).

    It runs in a daemon thread with a connection of its own while any lease is held: a worker whose event
    loop is busy or stalled keeps its slots; a killed one loses them within the lease.
    """

    def __init__(self, owner: RedisCoordination) -> None:
        self.owner = owner
        # Lease ids per slot set, and attempt ids per circuit whose probe they hold.
        self.held: dict[str, set[str]] = {}
        self.probes: dict[str, set[str]] = {}
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        # The renewal thread's connection to Redis while it has one.
        self.connection: socket.socket | None = None
        # Round trips made to renew leases (read by tests and benches/fleet.py).
        self.round_trips = 0

    def hold(self, key: str, lease_id: str, *, probe: bool = False) -> None:
        """Renews ``lease_id``'s slot in the set ``key`` (``probe``: the probe of the circuit ``key`` its attempt
        holds) until it is released."""
        with self.lock:
            (self.probes if probe else self.held).setdefault(key, set()).add(lease_id)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="toolsched-lease-renewal", daemon=True)
                self.thread.start()

    def forget(self) -> None:
        """In a child process just forked: the parent's leases, renewal thread and its connection are not the
        child's (the connection's descriptor is closed in the child, nothing sent on it)."""
        self.lock = threading.Lock()
        self.held = {}
        self.probes = {}
        self.thread = None
        connection, self.connection = self.connection, None
        if connection is not None and connection.fileno() >= 0:
            os.close(connection.detach())

    def release(self, key: str, lease_id: str, *, probe: bool = False) -> None:
        with self.lock:
            held = self.probes if probe else self.held
            ids = held.get(key)
            if ids is not None:
                ids.discard(lease_id)
                if not ids:
                    del held[key]

    def _run(self) -> None:
        owner = self.owner
        lease_ms = max(1, round(owner.lease * 1000))
        connection: socket.socket | None = None
        while True:
            time.sleep(owner.lease / 3)
            with self.lock:
                if not self.held and not self.probes:
                    self.thread = None
                    break
                keys = [*self.held, *self.probes]
                args: list[str | int] = [lease_ms, len(self.held)]
                for ids in (*self.held.values(), *self.probes.values()):
                    args += [len(ids), *ids]
            try:
                if connection is None:
                    connection = self.connection = owner._connect_blocking()
                self.round_trips += 1
                reply = blocking_request(connection, "EVALSHA", _sha1(_RENEW), len(keys), *keys, *args)
                if reply.startswith(b"-NOSCRIPT"):
                    blocking_request(connection, "EVAL", _RENEW, len(keys), *keys, *args)
            except OSError:
                # Redis unreachable: the leases run out by themselves; tried again at the next renewal.
                self.connection = None
                if connection is not None:
                    connection.close()
                connection = None
        self.connection = None
        if connection is not None:
            connection.close()


# Every RedisCoordination of this process, so that a forked child starts each afresh.
_LIVE: weakref.WeakSet[RedisCoordination] = weakref.WeakSet()
# Every connection of this process's event loops not yet closed, so that a forked child lets go of each.
_OPEN: weakref.WeakSet[Connection] = weakref.WeakSet()
# In a forked child, the connections inherited from the parent (kept, so that no finalizer of theirs runs).
_DISOWNED: list[Connection] = []


def _after_fork() -> None:
    for coordination in list(_LIVE):
        coordination._forget()
    _disown(list(_OPEN))


def _disown(connections: list[Connection]) -> None:
    """In a child process just forked: each of the parent's ``connections`` has its descriptor pointed at
    /dev/null, so that the child neither holds the parent's socket (Redis sees it closed when the parent closes
    it) nor writes to it. Nothing is sent, and the parent's event loop (whose selector the child shares) is not
    touched; the objects are kept for the child's life, their finalizers never run (they would warn or close)."""
    _OPEN.clear()
    if not connections:
        return
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for connection in connections:
            raw = connection.stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
            descriptor = raw.fileno() if raw is not None else -1
            if descriptor >= 0:
                os.dup2(null, descriptor, inheritable=False)
            _DISOWNED.append(connection)
    finally:
        os.close(null)


os.register_at_fork(after_in_child=_after_fork)


# How often an event loop's closer looks whether its coordination is gone, in seconds.
_CLOSER_POLL = 30.0
# The closers' asyncio tasks, kept until they end (asyncio holds its tasks only weakly).
_closers: set[Any] = set()


def _closer(owner: weakref.ref[RedisCoordination], loop: object, link: _Link) -> Callable[[], Awaitable[None]]:
    """What closes ``link``'s idle connections when its event loop ends (or its coordination is gone)."""

    async def close() -> None:
        try:
            while owner() is not None:  # noqa: ASYNC110 (a collected object sets no Event)
                await anyio.sleep(_CLOSER_POLL)
        finally:
            coordination = owner()
            if coordination is not None and link.stray:
                # What a cancelled batch writer left unsent (slots to give back): sent before the loop ends.
                stray, link.stray = link.stray, []
                with anyio.CancelScope(shield=True), anyio.move_on_after(coordination.connect_timeout):
                    await coordination._exchange(link, stray)
            if coordination is not None and coordination._links.get(loop) is link:
                del coordination._links[loop]
            idle, link.idle = link.idle, []
            await _discard(*idle)

    return close


def _until_loop_ends(body: Callable[[], Awaitable[None]]) -> None:
    """Starts ``body()`` on the current event loop in a task of no caller's (an asyncio task, a trio system task):
    it is cancelled when the loop's run ends (``anyio.run``, ``asyncio.run``, ``trio.run``), while the loop can
    still close sockets."""
    context = contextvars.Context()
    if sniffio.current_async_library() == "trio":
        import trio

        trio.lowlevel.spawn_system_task(body, context=context)
        return
    import asyncio

    async def run() -> None:
        await body()

    task = asyncio.get_running_loop().create_task(run(), context=context)
    _closers.add(task)
    task.add_done_callback(_closers.discard)


# The errors that end a round trip as Redis lost or not Redis.
_LOST = (
    OSError,
    TimeoutError,
    CoordinationError,
    anyio.EndOfStream,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
)


async def _discard(*connections: Connection) -> None:
    """Closes ``connections``, each of them whatever is raised meanwhile (a pending cancellation, an asyncio task
    cancelled natively through its shield: each stream's socket is closed before its close awaits); the first
    such cancellation is raised once all are closed."""
    raised: BaseException | None = None
    for connection in connections:
        _OPEN.discard(connection)
        try:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_REPLY_TIMEOUT):
                await connection.stream.aclose()
        except Exception:
            logger.debug("closing a connection to Redis failed", exc_info=True)
        except BaseException as exc:
            raised = raised or exc
    if raised is not None:
        raise raised


# A command's reply not read (its round trip failed before it came).
_UNREAD: Any = object()


def _fallback(request: _Request) -> bytes:
    assert request.fallback is not None
    return request.fallback()


def _noscript(reply: ReplyError) -> bool:
    return str(reply).startswith("NOSCRIPT")


def _failed(batch: list[_Request], error: str) -> None:
    for request in batch:
        request.error = error
        if request.done is not None:
            request.done.set()


def _admission_reply(reply: Any) -> bool:
    """Whether ``reply`` has the admission script's shape (four integers)."""
    return isinstance(reply, list) and len(reply) == 4 and all(type(part) is int for part in reply)


@dataclass(frozen=True, slots=True)
class _Commands:
    """The parts of a tool's admission and settlement commands that do not change from call to call
    (internal): the start of each command (up to its per-call arguments) and its end, encoded."""

    admit: bytes
    admit_tail: bytes
    admit_keys: tuple[str, str, str]
    admit_args: tuple[int, ...]
    settle: bytes
    settle_tail: bytes
    settle_args: tuple[int, ...]


@functools.lru_cache(maxsize=256)
def _commands(
    namespace: str, lease_ms: int, name: str, rate: RateLimit | None, circuit: CircuitBreaker | None, cap: int | None
) -> _Commands:
    base = f"{namespace}:{{{name}}}"
    keys = (f"{base}:circuit", f"{base}:slots", f"{base}:rate")
    interval = tolerance = 0
    if rate is not None:
        interval = min(_MOST_INTERVAL_US, max(1, round(rate.per / rate.calls * 1_000_000)))
        tolerance = (rate.size - 1) * interval
    failures = 0 if circuit is None else circuit.failures
    cooldown = 0 if circuit is None else round(circuit.cooldown * 1000)
    admit_args = (failures, cooldown, max(lease_ms, cooldown), cap or 0, lease_ms, interval, tolerance, _FRESH_US)
    settle_args = (failures, cooldown)
    return _Commands(
        b"*16\r\n" + b"".join(bulk(part) for part in ("EVALSHA", _sha1(_ADMIT), 3, *keys)),
        b"".join(bulk(part) for part in admit_args),
        keys,
        admit_args,
        b"*10\r\n" + b"".join(bulk(part) for part in ("EVALSHA", _sha1(_SETTLE), 2, *keys[:2])),
        b"".join(bulk(part) for part in settle_args),
        settle_args,
    )


# One label of a host name: letters, digits, hyphens (not first nor last) and underscores (taken by resolvers of
# private networks), at most 63 characters.
_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


def _ascii_host(name: str) -> str | None:
    """The host name as it is looked up (an internationalized one in IDNA 2008, as anyio encodes it, so that the
    event loops and the renewal thread reach the same host), or None when no host has that name (a name past 253
    characters, a label that is empty, past 63 characters or with a character no host name has)."""
    if any(c.isspace() or not c.isprintable() for c in name):
        return None
    try:
        ipaddress.ip_address(name)
    except ValueError:
        pass
    else:
        return name
    if not name.isascii():
        try:
            name = idna.encode(name, uts46=True).decode("ascii")
        except UnicodeError:  # idna.IDNAError is one
            return None
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.removesuffix(".").split(".")):
        return None
    return name


def _without_password(url: str) -> str:
    """``url`` as an error message shows it: its password, if any, replaced by ``***``."""
    return re.sub(r"(//[^/@]*?:)[^/]*@", r"\1***@", url)


class RedisCoordination:
    """Shares every tool's ``rate_limit``, ``circuit`` and ``max_concurrency`` through one Redis server.

    ``url``: ``redis://[[user]:password@]host[:port][/db]`` (TLS is not supported). Processes with the
    same server and ``namespace`` share their tools' limits, by tool name. ``lease`` is how long a
    concurrency slot (or a circuit's probe) outlives a worker that died holding it, in seconds;
    a process renews all the slots it holds in one round trip every third of it (from 0.1 s to a year).
    ``on_unavailable``: ``"local"`` falls back to per-process limits while Redis cannot be reached
    (refuses connections, or does not answer within ``connect_timeout`` seconds, or is not Redis),
    ``"refuse"`` answers calls ``unavailable``. A connection Redis closed while idle (a restart) is
    replaced at once. A forked child shares no connection or lease with its parent.
    Bad options raise ``OptionError``.
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "toolsched",
        on_unavailable: Literal["local", "refuse"] = "local",
        lease: float = 10.0,
        connect_timeout: float = 1.0,
    ) -> None:
        if not isinstance(url, str):
            raise OptionError(f"RedisCoordination(url=...) must be a redis:// URL string, got {url!r}")
        named = _without_password(url)
        try:
            parts = urlsplit(url)
        except ValueError as exc:
            raise OptionError(f"RedisCoordination(url=...) is not a URL ({exc}): {named!r}") from None
        if parts.scheme != "redis" or not parts.hostname:
            raise OptionError(f"RedisCoordination(url=...) must be redis://host[:port][/db], got {named!r}")
        host = _ascii_host(parts.hostname)
        if host is None:
            raise OptionError(f"RedisCoordination(url=...) has a bad host name: {named!r}")
        try:
            port = parts.port
        except ValueError:
            port = 0
        if port == 0:
            raise OptionError(f"RedisCoordination(url=...) has a bad port: {named!r}")
        if parts.query or parts.fragment:
            # Options in the query (``?db=1``) would be ignored, the fleet sharing another database's limits.
            raise OptionError(
                f"RedisCoordination(url=...) takes no ?query or #fragment (the database is the path: /1): {named!r}"
            )
        if parts.username and parts.password is None:
            raise OptionError(f"RedisCoordination(url=...) names a user without a password: {named!r}")
        path = parts.path.strip("/")
        if path and not (path.isascii() and path.isdigit() and int(path) < 2**31):
            raise OptionError(f"RedisCoordination(url=...) database must be a number, got {path!r}")
        if (
            not isinstance(namespace, str)
            or not namespace
            or any(c.isspace() or c in "{}" for c in namespace)
            or not namespace.isprintable()
        ):
            # Braces would change the keys' hash tag (``namespace:{tool}:...``): a tool's keys must share one.
            raise OptionError(
                f"RedisCoordination(namespace=...) must be a non-empty word without braces, got {namespace!r}"
            )
        if on_unavailable not in ("local", "refuse"):
            raise OptionError(
                f"RedisCoordination(on_unavailable=...) must be 'local' or 'refuse', got {on_unavailable!r}"
            )
        fault = numeric_fault(lease, integer=False, least=_LEAST_LEASE, above=False, most=_MOST_SECONDS)
        if fault is not None:
            raise OptionError(
                f"RedisCoordination(lease=...) must be {fault} seconds (it is renewed every third of it),"
                f" got {shown(lease)}"
            )
        fault = numeric_fault(connect_timeout, integer=False, least=0, above=True, most=_MOST_SECONDS)
        if fault is not None:
            raise OptionError(f"RedisCoordination(connect_timeout=...) must be {fault}, got {shown(connect_timeout)}")
        self.url = url
        self.namespace = namespace
        self.on_unavailable: Literal["local", "refuse"] = on_unavailable
        self.lease = float(lease)
        self.connect_timeout = float(connect_timeout)
        self._host = host
        self._port = port or 6379
        # A user's password may be empty (an ACL user with ``nopass``); without a user, an empty one is none.
        given = parts.password or (parts.username and parts.password == "")
        self._password = unquote(parts.password) if given and parts.password is not None else None
        # An ACL user (Redis 6 or later) authenticates with its name and password; without a name, ``default``.
        self._user = unquote(parts.username) if parts.username else None
        self._db = int(path) if path else 0
        self._links: dict[object, _Link] = {}
        # Round trips to Redis made by this process's event loops (read by benches/fleet.py); the renewals'
        # are ``self._renewer.round_trips``.
        self.round_trips = 0
        self._renewer = _Renewer(self)
        _LIVE.add(self)

    def _forget(self) -> None:
        """In a child process just forked: the parent's connections, leases and renewal thread stay the
        parent's (the child opens its own; a connection shared by two processes would mix their replies)."""
        self._links = {}
        self._renewer.forget()

    def __repr__(self) -> str:
        return f"RedisCoordination({self._host}:{self._port}, namespace={self.namespace!r})"

    # -- the connection ----------------------------------------------------------

    def _link(self) -> _Link:
        loop = anyio.lowlevel.current_token().native_token
        link = self._links.get(loop)
        if link is None:
            link = self._links[loop] = _Link()
            _until_loop_ends(_closer(weakref.ref(self), loop, link))
        return link

    async def _connect(self) -> Connection:
        stream = None
        try:
            with anyio.fail_after(self.connect_timeout):
                stream = await anyio.connect_tcp(self._host, self._port)
                connection = Connection(stream)
                _OPEN.add(connection)
                if self._password is not None:
                    await connection.request("AUTH", *self._credentials())
                if self._db:
                    await connection.request("SELECT", self._db)
        except BaseException:
            if stream is not None:
                with anyio.CancelScope(shield=True):
                    await stream.aclose()
            raise
        return connection

    def _credentials(self) -> tuple[str, ...]:
        """AUTH's arguments: the user's name (when the URL gives one) and the password."""
        assert self._password is not None
        return (self._password,) if self._user is None else (self._user, self._password)

    def _connect_blocking(self) -> socket.socket:
        """A connection for the lease renewals' thread."""
        connection = socket.create_connection((self._host, self._port), timeout=self.connect_timeout)
        try:
            if self._password is not None and blocking_request(connection, "AUTH", *self._credentials()).startswith(
                b"-"
            ):
                raise OSError("Redis refused the password")
            if self._db and blocking_request(connection, "SELECT", self._db).startswith(b"-"):
                raise OSError(f"Redis refused database {self._db}")
        except BaseException:
            connection.close()
            raise
        return connection

    async def _call(self, *parts: str | int | bytes) -> Any:
        """One command and its reply (an error reply raised as ``ReplyError``), in this loop's pipeline."""
        reply = await self._send(_Request(encoded(*parts)))
        if isinstance(reply, ReplyError):
            raise reply
        return reply

    async def _send(self, request: _Request, *, wait: bool = True, release: bool = False) -> Any:
        """Sends one command in this event loop's pipeline and returns its reply (an error reply as a
        ``ReplyError``).

        The commands issued in one turn of the loop (and while their batch waits for a free connection)
        are written together on one connection and their replies read in order: one round trip for all.
        The first command of a batch has its caller write and read the batch, shielded from its own
        cancellation (the others' replies ride on it; ``_REPLY_TIMEOUT`` bounds it). A caller cancelled
        while waiting loses its command if the batch is not written yet; if it is, the command's
        ``undo`` (an admission's: give back the slot or probe it took) is sent once its reply is in.
        ``wait=False``: return at once when another caller writes the batch (a release nobody waits for).
        ``release=True``: sent even when Redis stopped answering a moment ago on a connection it had answered on
        (a slot the fleet gave is given back if Redis takes it; new admissions wait for ``_RETRY_CONNECT``); not
        when it could not be reached at all (the slot's lease runs out by itself).
        """
        link = self._link()
        if link.down_until != -math.inf and anyio.current_time() < link.down_until and not (release and link.stalled):
            raise CoordinationError(f"{link.outage} (a moment ago)")
        batch = link.open
        if batch is None:
            batch = link.open = [request]
            if link.stray:
                batch[:0], link.stray = link.stray, []
            try:
                with anyio.CancelScope(shield=True):
                    await self._flush(link, batch, request)
            except BaseException:
                # Cancelled through the shield (natively, on asyncio: a task's cancel, the loop's end): what this
                # command and those of callers gone may have taken is given back at once, within
                # ``connect_timeout`` (the loop may be ending).
                if request.undo is not None and request.error is None and request.written:
                    undo = request.undo(request.reply if request.received else None)
                    if undo is not None:
                        link.stray.append(undo)
                if link.stray:
                    stray, link.stray = link.stray, []
                    with anyio.CancelScope(shield=True), anyio.move_on_after(self.connect_timeout):
                        await self._exchange(link, stray)
                    if link not in self._links.values():
                        # The loop's closer has run meanwhile: it closed what was idle then, this closes the rest.
                        idle, link.idle = link.idle, []
                        await _discard(*idle)
                raise
        else:
            batch.append(request)
            if len(batch) >= _MAX_BATCH:
                link.open = None
            if not wait:
                return None
            done = request.done = anyio.Event()
            try:
                await done.wait()
            except BaseException:
                request.abandoned = True
                if done.is_set() and request.error is None and request.undo is not None:
                    # The reply came in as the caller was cancelled: give back what the command took.
                    undo = request.undo(request.reply)
                    if undo is not None:
                        with anyio.CancelScope(shield=True):
                            try:
                                await self._send(undo, wait=False)
                            except CoordinationError:
                                pass  # the lease runs out by itself
                raise
            if request.again:
                # Its batch's writer was cancelled before the reply was read: sent again (an admission asking
                # again with its lease id takes no second slot or probe).
                request.again = False
                request.done = None
                return await self._send(request, wait=wait, release=release)
        if request.error is not None:
            raise CoordinationError(request.error)
        return request.reply

    async def _flush(self, link: _Link, batch: list[_Request], leader: _Request) -> None:
        """Writes ``batch`` after one turn of the loop (its other callers add their commands), at once when no
        round trip of the loop is in flight, otherwise once it is back (the batch takes commands until then),
        and hands each command its reply."""
        try:
            # The other callers of this turn of the loop add their commands.
            await anyio.lowlevel.checkpoint()
            try:
                link.gate.acquire_nowait()
            except anyio.WouldBlock:
                await link.gate.acquire()
            try:
                if link.open is batch:
                    link.open = None
                await self._exchange(link, batch)
            except Exception as exc:
                # Anything unforeseen: the commands not answered are answered with it, none is left waiting.
                _failed([r for r in batch if not r.received], f"Redis at {self._host}:{self._port}: {exc!r}")
                raise
            finally:
                link.gate.release()
        finally:
            if link.open is batch:
                link.open = None
            for request in batch:
                if not request.received and request.error is None:
                    # The writer was cancelled before this reply was read (natively, on asyncio): a caller still
                    # waiting sends its command again; a bare release (nobody waits) or the undo of a command
                    # whose caller left goes with the loop's next batch.
                    if request.abandoned:
                        undo = request.undo(None) if request.undo is not None and request.written else None
                        if undo is not None:
                            link.stray.append(undo)
                    elif request.done is not None:
                        request.again = True
                    elif request is not leader:
                        link.stray.append(request)
                if request.done is not None:
                    request.done.set()

    async def _exchange(self, link: _Link, batch: list[_Request]) -> None:
        """One round trip for the commands of ``batch`` its callers still wait for (a ``NOSCRIPT`` reply's
        script is sent again by its text, in a second one), then the undos of those abandoned meanwhile.

        Each reply is awaited at most ``connect_timeout`` (and ``_REPLY_TIMEOUT``), the whole batch at most
        ``_REPLY_TIMEOUT``: past that, or on a reply Redis would not send, Redis counts as unreachable. A kept
        connection closed before any byte of the replies came (Redis restarted, or dropped it while idle) is
        replaced and the whole batch written again once (an admission asked again by the same attempt takes no
        second slot or probe). When the batch fails after it was written, the slots its admissions may have
        taken are given back by their lease ids."""
        batch = [request for request in batch if not request.abandoned]
        if not batch:
            return
        data = b"".join(request.data for request in batch)
        for request in batch:
            request.written = True
        per_reply = min(self.connect_timeout, _REPLY_TIMEOUT)
        while True:
            reused = bool(link.idle)
            try:
                connection = link.idle.pop() if link.idle else await self._connect()
            except (OSError, TimeoutError, ReplyError, CoordinationError) as exc:
                link.down_until = anyio.current_time() + _RETRY_CONNECT
                link.stalled = False
                link.outage = f"cannot reach Redis at {self._host}:{self._port}: {_said(exc)}"
                _failed(batch, link.outage)
                return
            replies: list[Any] = [_UNREAD] * len(batch)
            sent = [anyio.current_time()] * len(batch)
            # The exchange under way on the connection (its ``replies`` are that one's): none yet, the batch's,
            # or the second one, of the commands sent again by their script's text (``NOSCRIPT``), ``again``.
            phase: Literal["none", "batch", "again"] = "none"
            again: list[int] = []
            try:
                with anyio.fail_after(_REPLY_TIMEOUT):
                    self.round_trips += 1
                    phase = "batch"
                    replies[:] = await connection.exchange(data, len(batch), per_reply)
                    again = [
                        index
                        for index, reply in enumerate(replies)
                        if isinstance(reply, ReplyError) and batch[index].fallback is not None and _noscript(reply)
                    ]
                    if again:
                        self.round_trips += 1
                        more = b"".join(_fallback(batch[index]) for index in again)
                        for index in again:
                            sent[index] = anyio.current_time()
                        phase = "again"
                        for index, reply in zip(
                            again, await connection.exchange(more, len(again), per_reply), strict=True
                        ):
                            replies[index] = reply
            except BaseException as exc:
                # Whatever ends the round trip leaves the connection's replies out of step: it is closed.
                await _discard(connection)
                if not isinstance(exc, _LOST):
                    # Cancelled mid-round-trip (the releases' bound, an asyncio task cancelled natively through its
                    # shield, the loop's end), or anything unforeseen.
                    raise
                if reused and not connection.heard and not isinstance(exc, (TimeoutError, CoordinationError)):
                    continue  # a kept connection Redis closed before answering: the batch again, on a new one
                if isinstance(exc, TimeoutError):
                    error = f"Redis at {self._host}:{self._port} did not answer within {per_reply:g} s"
                elif isinstance(exc, CoordinationError):
                    error = f"Redis at {self._host}:{self._port}: {_said(exc)}"
                else:
                    error = f"lost the connection to Redis at {self._host}:{self._port}: {_said(exc)}"
                # The replies read before it failed are their commands' answers; the others' commands failed.
                read = connection.replies if phase != "none" else []
                if isinstance(exc, (TimeoutError, CoordinationError)) or not connection.heard:
                    # Not answering, or not Redis: tried again a moment later, not at every call.
                    link.down_until = anyio.current_time() + _RETRY_CONNECT
                    link.stalled = isinstance(exc, TimeoutError) and (phase == "again" or bool(read))
                    link.outage = error
                if phase == "again":
                    for index, reply in zip(again, read, strict=False):
                        replies[index] = reply
                    for index in again[len(read) :]:
                        replies[index] = _UNREAD
                else:
                    replies[: len(read)] = [
                        # A script the server did not have never ran: its command is not answered.
                        _UNREAD
                        if isinstance(reply, ReplyError) and request.fallback is not None and _noscript(reply)
                        else reply
                        for request, reply in zip(batch, read, strict=False)
                    ]
                unread = [request for request, reply in zip(batch, replies, strict=True) if reply is _UNREAD]
                _failed(unread, error)
                releases = [undo for request in unread if request.undo is not None if (undo := request.undo(None))]
                releases += self._hand_out(batch, replies, sent)
                if releases:
                    with anyio.move_on_after(self.connect_timeout):
                        await self._exchange(link, releases)
                return
            break
        link.idle.append(connection)
        link.down_until = -math.inf
        link.stalled = False
        if link.warned:
            link.warned = False
            logger.info("Redis at %s:%s is reachable again: fleet-wide limits resumed", self._host, self._port)
        undos = self._hand_out(batch, replies, sent)
        if undos:
            await self._exchange(link, undos)

    @staticmethod
    def _hand_out(batch: list[_Request], replies: list[Any], sent: list[float]) -> list[_Request]:
        """Hands each command of ``batch`` whose reply was read its reply (those ``_UNREAD`` are left as they
        are); returns the undos of the commands whose callers left meanwhile (to give back what they took)."""
        undos: list[_Request] = []
        received = anyio.current_time()
        for request, reply, written in zip(batch, replies, sent, strict=True):
            if reply is _UNREAD:
                continue
            request.reply = reply
            request.received = received
            request.sent = written
            if request.abandoned and request.undo is not None and not isinstance(reply, ReplyError):
                undo = request.undo(reply)
                if undo is not None:
                    undos.append(undo)
            elif request.done is not None:
                request.done.set()
        return undos

    def _unavailable(self, exc: CoordinationError, emit: Callable[[Any], object] | None) -> None:
        """Reports an outage once (a warning and a ``CoordinationUnavailable`` event)."""
        link = self._link()
        if link.warned:
            return
        link.warned = True
        fallback = "per-process limits" if self.on_unavailable == "local" else "calls answered unavailable"
        warnings.warn(f"fleet-wide limits unavailable ({exc}): {fallback}", RuntimeWarning, stacklevel=2)
        if emit is not None:
            from toolsched._values.events import CoordinationUnavailable

            emit(CoordinationUnavailable(str(exc), self.on_unavailable))

    # -- one attempt --------------------------------------------------------------

    def _commands(self, tool: Tool, slotless: bool = False) -> _Commands:
        """The tool's commands; ``slotless``: an admission that takes no slot (the tool's cap left out)."""
        return _commands(
            self.namespace,
            max(1, round(self.lease * 1000)),
            tool.name,
            tool.rate_limit,
            tool.circuit,
            None if slotless else tool.max_concurrency,
        )

    async def _admit(
        self, tool: Tool, lease_id: str, reserved: int | None, slotless: bool = False
    ) -> tuple[int, int, int, int]:
        commands = self._commands(tool, slotless)
        head = bulk(lease_id) + (b"$0\r\n\r\n" if reserved is None else bulk(reserved))
        request = _Request(
            commands.admit + head + commands.admit_tail,
            functools.partial(
                encoded,
                "EVAL",
                _ADMIT,
                3,
                *commands.admit_keys,
                lease_id,
                "" if reserved is None else reserved,
                *commands.admit_args,
            ),
            functools.partial(self._undo_admission, tool, lease_id),
        )
        reply = await self._send(request)
        if isinstance(reply, ReplyError):
            raise CoordinationError(f"Redis refused a script: {reply}")
        if not _admission_reply(reply):
            raise CoordinationError(f"the server answered the admission with {str(reply)[:80]}: it is not Redis")
        code, amount = int(reply[0]), int(reply[1])
        if code == 2:
            # A reservation: the wait left, counted from when the admission was written (the server ran it
            # later: an attempt that asks a little early is told the rest; a reply read late, its loop busy,
            # does not make it ask late), and rounded up to the loop's next ``_WAKE_GRID`` so that the calls of
            # the process due in the same few ms wake together and ask again in one round trip.
            # A long one ends early by a little more than the sleep may overshoot, and asks for the rest.
            wait = amount / 1_000_000
            lead = min(_LEAD_MOST, wait * _LEAD_SHARE) if wait >= 1 else 0.0
            wake = math.ceil((request.sent + wait - lead) / _WAKE_GRID) * _WAKE_GRID
            amount = max(0, round((wake - anyio.current_time()) * 1_000_000))
        return code, amount, int(reply[2]), int(reply[3])

    def _undo_admission(self, tool: Tool, attempt: str, reply: Any) -> _Request | None:
        """The command giving back what an admission took (its slot, its probe), from its reply; with no
        reply (its batch failed after it was written), the slot and the probe it may have taken, by the attempt's
        id (the probe only if this attempt holds it)."""
        if reply is None:
            if tool.max_concurrency is None and tool.circuit is None:
                return None
            return self._settle_request(tool, attempt, "none", tool.circuit is not None)
        if not _admission_reply(reply):
            return None
        code = int(reply[0])
        if code not in (0, 1) or (code == 0 and tool.max_concurrency is None):
            return None
        return self._settle_request(tool, attempt, "none", code == 1)

    async def run_attempt(
        self,
        tool: Tool,
        retry_on: Any,
        invoke: Callable[[], Awaitable[Any]],
        emit: Callable[[Any], object] | None,
        local: Resilience | None,
        limiter: Callable[[], anyio.CapacityLimiter] | None = None,
        admitted: Callable[[], Awaitable[None]] | None = None,
        cut_short: Callable[[], str | None] | None = None,
        opened: Callable[[], None] | None = None,
        wait: Pause = _awaited,
    ) -> Any:
        """Runs one attempt of ``tool`` under the fleet's limits (or the fallback when Redis is unreachable).

        A rate reservation is waited out before the concurrency slot is taken, and the slot only when it
        is free at the reserved time (otherwise the reservation is given up and the attempt waits for a
        slot, then for a new reservation): a waiting attempt holds no slot, none starts before its
        reserved time, and one that asks too late after it takes a new reservation. ``limiter`` is the
        per-process cap, taken by the fallback's attempts and by those the fleet admitted (so the fallback counts
        them); ``admitted`` is awaited once the attempt has its slot (or its start time when the tool has no
        cap), before its body runs (a durable run journals the attempt started then). ``cut_short`` says what
        stopped the call while the body ran, if anything (``"timeout"`` or ``"cancelled"``): a body that caught
        that and returned is recorded as the stop, not as a success (``returned``). ``opened`` is called when the
        attempt failed and the tool's circuit is open after it (its call's retries stop there). ``wait`` awaits
        each wait for the rate limit (a reservation, or the fallback's token): the caller's, which may end it early
        by raising (an interrupted run's call starts no attempt).

        An attempt made inside a call of the same tool that holds a slot (a nested run in its body) runs on that
        slot: it takes none in the fleet nor in the fallback's cap (its rate limit and circuit still apply).
        """
        circuit_key, slots_key, _ = self._commands(tool).admit_keys
        capped = tool.max_concurrency is not None
        held = (os.getpid(), slots_key)
        nested = capped and held in _holding.get()
        lease_id = secrets.token_hex(8) if capped and not nested else ""
        # The attempt's id in Redis: its slot's lease id, and the holder of the circuit's probe it may take.
        attempt = lease_id or (secrets.token_hex(8) if tool.circuit is not None else "-")
        if nested:
            limiter = None
        elif capped:
            body = invoke

            async def invoke() -> Any:
                # Run holding the slot: the calls of this tool made inside it run on it.
                token = _holding.set(_holding.get() | {held})
                try:
                    return await body()
                finally:
                    _holding.reset(token)

        # Known to the renewal thread before Redis is asked: a slot or probe is renewed from the moment Redis
        # grants it, even while this event loop is stalled before it reads the reply (renewing a slot or a probe
        # not held does nothing).
        if lease_id:
            self._renewer.hold(slots_key, lease_id)
        if tool.circuit is not None:
            self._renewer.hold(circuit_key, attempt, probe=True)
        try:
            return await self._attempt(
                tool,
                lease_id,
                attempt,
                retry_on,
                invoke,
                emit,
                local,
                limiter,
                admitted,
                cut_short,
                opened,
                wait,
                nested,
            )
        finally:
            if lease_id:
                self._renewer.release(slots_key, lease_id)
            if tool.circuit is not None:
                self._renewer.release(circuit_key, attempt, probe=True)

    async def _attempt(
        self,
        tool: Tool,
        lease_id: str,
        attempt: str,
        retry_on: Any,
        invoke: Callable[[], Awaitable[Any]],
        emit: Callable[[Any], object] | None,
        local: Resilience | None,
        limiter: Callable[[], anyio.CapacityLimiter] | None,
        admitted: Callable[[], Awaitable[None]] | None,
        cut_short: Callable[[], str | None] | None,
        opened: Callable[[], None] | None,
        wait: Pause,
        slotless: bool = False,
    ) -> Any:
        """``run_attempt`` once the renewal thread knows the attempt's slot and probe (``slotless``: it takes
        no slot, running on its ancestor's)."""
        reserved: int | None = None
        while True:
            try:
                code, amount, failures, start = await self._admit(tool, attempt, reserved, slotless)
            except CoordinationError as exc:
                self._unavailable(exc, emit)
                if self.on_unavailable == "refuse":
                    raise FleetUnavailable(
                        f"`{tool.name}` is unavailable: its fleet-wide limits cannot be checked ({exc})"
                    ) from None
                return await _local_attempt(tool, retry_on, invoke, local, limiter, admitted, cut_short, opened, wait)
            if code == -1:
                circuit = tool.circuit
                assert circuit is not None
                raise CircuitOpen(
                    f"`{tool.name}` is unavailable: {circuit.failures} calls in a row failed transiently, so its "
                    f"calls are refused for {amount / 1000:.1f} more seconds"
                )
            if code == 2:
                # A reservation: waited out holding no slot, then the slot is asked for.
                reserved = start
                await wait(anyio.sleep(amount / 1_000_000))
                continue
            if code != -2:
                break
            # No slot free in the fleet: one call of this process at a time asks again (the others queue
            # behind it, in order), so a process polls Redis once per wait however many calls wait.
            reserved = None
            pollers = self._link().pollers
            queue = pollers.get(tool.name)
            if queue is None:
                queue = pollers[tool.name] = anyio.Lock()
            async with queue:
                poll = _SLOT_POLL[0]
                while True:
                    try:
                        code, amount, failures, start = await self._admit(tool, attempt, None, slotless)
                    except CoordinationError:
                        break  # answered on the next turn of the outer loop
                    if code != -2:
                        break
                    await anyio.sleep(poll * (0.5 + random.random()))
                    poll = min(_SLOT_POLL[1], poll * 2)
            if code == -2:
                continue
            if code == 2:
                reserved = start
                await wait(anyio.sleep(amount / 1_000_000))
                continue
            if code != -1:
                break
        probe = code == 1
        outcome = "none"
        circuit_key, slots_key, _ = self._commands(tool).admit_keys
        try:
            # A slot of the process's cap too (free unless the fallback's calls hold them): with Redis unreachable,
            # the fallback counts this call against the process's own limit.
            async with slot_of(limiter() if limiter is not None and lease_id else None):
                if admitted is not None:
                    await admitted()
                try:
                    output = await invoke()
                except Exception as exc:
                    outcome = "transient" if is_transient(exc, retry_on) else "other"
                    raise
                outcome = returned(cut_short)
                return output
        except anyio.get_cancelled_exc_class():
            # Stopped as it ran: its own timeout is a transient failure for the circuit; a cancellation (the call's,
            # or its run's from outside) settles nothing.
            if outcome == "none" and cut_short is not None and cut_short() == "timeout":
                outcome = "transient"
            raise
        finally:
            if lease_id:
                self._renewer.release(slots_key, lease_id)
            if tool.circuit is not None:
                self._renewer.release(circuit_key, attempt, probe=True)
            if lease_id or (tool.circuit is not None and (probe or failures > 0 or outcome == "transient")):
                with anyio.CancelScope(shield=True):
                    opens = await self._settle(tool, attempt, outcome, probe)
                if opens and opened is not None:
                    opened()

    async def _settle(self, tool: Tool, lease_id: str, outcome: str, probe: bool) -> bool:
        """Gives the slot back and records the outcome for the circuit; returns whether the attempt's transient
        failure left the circuit open. A bare release (no circuit) is not waited for when another caller writes
        its batch."""
        request = self._settle_request(tool, lease_id, outcome, probe)
        reply: Any = None
        try:
            with anyio.move_on_after(self.connect_timeout):
                reply = await self._send(request, wait=tool.circuit is not None, release=True)
                if isinstance(reply, ReplyError):
                    logger.warning("Redis refused a script: %s", reply)
        except CoordinationError:
            # The slot's lease expires by itself; the outcome is lost to the circuit.
            return False
        circuit = tool.circuit
        return circuit is not None and outcome == "transient" and type(reply) is int and reply >= circuit.failures

    def _settle_request(self, tool: Tool, lease_id: str, outcome: str, probe: bool) -> _Request:
        commands = self._commands(tool)
        flag = "1" if probe else "0"
        return _Request(
            commands.settle + bulk(lease_id) + bulk(outcome) + bulk(flag) + commands.settle_tail,
            functools.partial(
                encoded, "EVAL", _SETTLE, 2, *commands.admit_keys[:2], lease_id, outcome, flag, *commands.settle_args
            ),
        )


async def _local_attempt(
    tool: Tool,
    retry_on: Any,
    invoke: Callable[[], Awaitable[Any]],
    local: Resilience | None,
    limiter: Callable[[], anyio.CapacityLimiter] | None,
    admitted: Callable[[], Awaitable[None]] | None,
    cut_short: Callable[[], str | None] | None = None,
    opened: Callable[[], None] | None = None,
    wait: Pause = _awaited,
) -> Any:
    """One attempt under this process's own rate limit, circuit and concurrency cap (the fallback while Redis
    is unreachable): the rate wait comes before the slot, as in the fleet; ``opened`` and ``wait`` as in
    ``run_attempt``."""
    probe = local.admit() if local is not None else False
    if probe is None:
        raise CircuitOpen(f"`{tool.name}` is unavailable: its circuit is open in this process")
    ran = False
    try:
        if local is not None and not local.paced():
            await wait(local.pace())
        # The process's cap, counting the calls the fleet admitted that still run; a call made inside a call of the
        # same tool runs on that call's slot (``_policy.slots``).
        async with slot_of(limiter() if limiter is not None else None):
            if admitted is not None:
                await admitted()
            ran = True
            output, settled = await _recorded(invoke, retry_on, local, probe, cut_short)
        # A probe whose call was cancelled as it ran settled nothing: it is given back below.
        probe = probe and not settled
        return output
    except _Recorded as recorded:
        probe = False
        if opened is not None and local is not None and local.refuses():
            opened()
        raise recorded.error from None
    except anyio.get_cancelled_exc_class():
        # Stopped as its body ran: its own timeout is a transient failure for the circuit; a cancellation (the
        # call's, or its run's from outside) settles nothing.
        if ran and local is not None and cut_short is not None and cut_short() == "timeout":
            local.record("transient", probe)
            probe = False
        raise
    finally:
        if probe and local is not None:
            local.release_probe()


class _Recorded(Exception):
    """A body's failure already recorded for the circuit (internal)."""

    def __init__(self, error: Exception) -> None:
        self.error = error


async def _recorded(
    invoke: Callable[[], Awaitable[Any]],
    retry_on: Any,
    local: Resilience | None,
    probe: bool,
    cut_short: Callable[[], str | None] | None,
) -> tuple[Any, bool]:
    """Runs the body, recording its outcome for the process's circuit: what it returned, and whether an
    outcome was recorded (a body that returned though its call was cancelled records none)."""
    try:
        output = await invoke()
    except Exception as exc:
        if local is not None:
            local.record("transient" if is_transient(exc, retry_on) else "other", probe)
        raise _Recorded(exc) from None
    outcome = returned(cut_short)
    if outcome == "none":
        return output, False
    if local is not None:
        local.record(outcome, probe)
    return output, True


def returned(cut_short: Callable[[], str | None] | None) -> Literal["success", "transient", "none"]:
    """The circuit's outcome of a body that returned: a success, unless its call was stopped while it ran and
    it caught that (the call is answered as stopped): a timeout is a transient failure, a cancellation none."""
    stopped = cut_short() if cut_short is not None else None
    if stopped is None:
        return "success"
    return "transient" if stopped == "timeout" else "none"


def guarded(
    coordination: RedisCoordination,
    tool: Tool,
    facts: ToolFacts,
    invoke: Callable[[Any, Any], Awaitable[Any]],
    emit: Callable[[Any], object] | None,
    admitted: Callable[[], Awaitable[None]] | None = None,
    cut_short: Callable[[], str | None] | None = None,
    opened: Callable[[], None] | None = None,
    wait: Pause = _awaited,
) -> Callable[[Any, Any], Awaitable[Any]]:
    """``invoke`` with each attempt under the fleet's limits for ``tool`` (the executor's hook, internal).

    The fleet's slots are the tool's concurrency cap: the caller takes no per-process slot around it (each
    attempt takes one, in the fleet or in the fallback); ``admitted`` is awaited when an attempt gets its slots;
    ``cut_short`` says what stopped the call as its body ran; ``opened`` is called when an attempt's failure left
    the circuit open; ``wait`` awaits each wait for the rate limit (``RedisCoordination.run_attempt``).
    """
    retry_on = tool.retry
    local = facts.resilience() if facts.policies is not None else None
    limiter = facts.limiter if tool.max_concurrency is not None else None

    async def invoke_guarded(args: Any, ctx: Any) -> Any:
        return await coordination.run_attempt(
            tool, retry_on, lambda: invoke(args, ctx), emit, local, limiter, admitted, cut_short, opened, wait
        )

    return invoke_guarded


def now_ms() -> float:
    """Wall-clock milliseconds (for tests and benches that compare with the server's clock)."""
    return time.time() * 1000
