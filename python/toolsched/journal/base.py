"""The journal interface: what a durable run writes, and what recovery reads back.

A run is recorded as the turn's calls (the *planned* transition, written when
the run begins) followed by one row per transition of a call: ``pending``
(held for a person's decision), ``approved`` / ``rejected``, ``started`` and
``finished`` (with the call's result). A call whose nested run (``toolsched._executor.nested``)
waits for a person goes from ``started`` to ``pending`` with the nested run's record in
its payload, and is resumed through ``approved`` again. Every write is a committed transaction
before the awaiting caller continues, and rows are never rewritten: a call's
state is its latest transition.

A run is held by one owner at a time (the process that runs or recovers it).
Only the holder may write its transitions; ``claim`` hands a run to another
owner once the holder released it or its lease ran out, so two processes never
drive the same run.
"""

from __future__ import annotations

import copy
import json
import os
import secrets
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Literal, Self, TypeVar, cast

import anyio.to_thread

from toolsched._values.calls import ToolCall
from toolsched._values.codec import RESULT_FIELD_TYPES, encode_output
from toolsched._values.digest import args_digest
from toolsched._values.numeric_options import numeric_fault, shown
from toolsched._values.results import ERROR_KINDS, ToolResult
from toolsched.errors import (
    JournalCorruptError,
    JournalError,
    JournalVersionError,
    LeaseLostError,
    RunClaimedError,
    RunExistsError,
    UnknownRunError,
    UnstorableOutputError,
)
from toolsched.journal.leases import LeaseKeeper, Renewal

__all__ = [
    "SCHEMA_VERSION",
    "TRANSITIONS",
    "Journal",
    "JournalCorruptError",
    "JournalError",
    "JournalVersionError",
    "JournaledCall",
    "LeaseLostError",
    "RunClaimedError",
    "RunExistsError",
    "RunRecord",
    "Transition",
    "UnknownRunError",
]

#: The version of the tables this release writes. A journal at a higher
#: version was written by a newer toolsched and is refused, untouched.
SCHEMA_VERSION = 1

Transition = Literal["planned", "pending", "approved", "rejected", "started", "finished"]
TRANSITIONS: tuple[Transition, ...] = ("planned", "pending", "approved", "rejected", "started", "finished")

# The states a call may be in for each transition to be written. A finished
# call is final; a started call can only start again (an idempotent call re-run
# by recovery, another attempt of a retry policy), finish, or wait for a person
# when its nested run does; a call waiting for a person cannot start (its
# decision, ``approved``, comes first, and only once per wait).
ALLOWED_FROM: dict[str, frozenset[str]] = {
    "pending": frozenset({"planned", "pending", "approved", "started"}),
    "approved": frozenset({"planned", "pending"}),
    "rejected": frozenset({"planned", "pending"}),
    "started": frozenset({"planned", "approved", "started"}),
    "finished": frozenset({"planned", "pending", "approved", "rejected", "started"}),
}

_DECISIONS = frozenset({"pending", "approved", "rejected"})
_MAX_RUN_ID = 200
_RESULT_SCALARS = ("error", "error_kind", "is_error", "duration_ms", "was_concurrent", "batch", "truncated", "attempts")
_CALL_TEXT_COLUMNS = ("call_id", "tool_name", "args", "args_form", "args_digest")
_TYPE_NAMES: dict[type, str] = {str: "text", int: "an integer", bool: "true or false", datetime: "a timestamp"}
# Where Linux shows this process's PID namespace and the running kernel's boot; absent on other platforms.
_PID_NAMESPACE = "/proc/self/ns/pid"
_BOOT_ID = "/proc/sys/kernel/random/boot_id"

T = TypeVar("T")


# -- records --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JournaledCall:
    """What the journal knows of one call (one per unique call ID).

    ``state`` is the latest transition; ``starts`` how many times the call
    started (more than once only when recovery re-ran an idempotent call);
    ``decision`` the payload of the latest ``pending``/``approved``/``rejected``
    transition; ``run_with`` the payload of the latest ``started`` transition
    (what the call was started with); ``result`` the finished result. ``output_exact`` is False when
    the output was not a value JSON holds exactly and ``result.output`` is the
    form it was stored in (see ``encode_output``).
    """

    call_id: str
    tool_name: str
    position: int
    digest: str
    state: Transition
    starts: int = 0
    decision: Mapping[str, Any] | None = None
    result: ToolResult | None = None
    output_exact: bool = True
    run_with: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run as the journal holds it.

    ``turn`` is every call as it was given to ``begin_run`` (repeated IDs
    included), in model order, so the turn can be planned again; ``calls`` has
    one entry per unique call ID, in order of first appearance.
    """

    run_id: str
    turn: tuple[ToolCall, ...]
    calls: tuple[JournaledCall, ...]
    owner: str | None
    lease_until: datetime | None
    created_at: datetime
    updated_at: datetime

    def call(self, call_id: str) -> JournaledCall:
        """The entry of one call; ``KeyError`` when the run has no such call."""
        for entry in self.calls:
            if entry.call_id == call_id:
                return entry
        raise KeyError(call_id)

    @property
    def results(self) -> list[ToolResult]:
        """The results of the finished calls, in model order."""
        return [entry.result for entry in self.calls if entry.result is not None]

    @property
    def complete(self) -> bool:
        """Whether every call finished."""
        return all(entry.state == "finished" for entry in self.calls)


# -- values as stored ----------------------------------------------------------------


def check_run_id(run_id: object) -> str:
    if not isinstance(run_id, str) or not run_id:
        raise JournalError(f"run_id must be a non-empty string, got {run_id!r}")
    if len(run_id) > _MAX_RUN_ID:
        raise JournalError(f"run_id must be at most {_MAX_RUN_ID} characters, got {len(run_id)}")
    check_text("run_id", run_id)
    return run_id


def check_text(label: str, value: str) -> None:
    """Text a journal stores as a column: no NUL character, valid Unicode (no lone surrogates)."""
    if "\x00" in value:
        raise JournalError(f"{label} {value!r} contains a NUL character, which a journal cannot store")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise JournalError(f"{label} {value!r} is not valid Unicode text (a lone surrogate)") from None


def to_json(value: Any) -> str:
    """Storage form of a JSON value: ASCII only, so any string survives any database."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))


def encode_call(position: int, call: ToolCall) -> tuple[int, str, str, str, str, str]:
    """``(position, call_id, tool_name, args, args_form, digest)`` as stored; refuses what cannot be stored."""
    if not isinstance(call, ToolCall):
        raise JournalError(f"calls[{position}] must be a ToolCall, got {type(call).__name__}")
    check_text(f"calls[{position}].id", call.id)
    check_text(f"calls[{position}].name", call.name)
    if isinstance(call.args, str):
        return position, call.id, call.name, to_json(call.args), "text", args_digest(call.args)
    try:
        args = dict(call.args)
        stored = to_json(args)
        digest = args_digest(args)
    except (TypeError, ValueError) as exc:
        raise JournalError(
            f"the arguments of call {call.id!r} ({call.name}) are not JSON, so a journal cannot store them: {exc}"
        ) from None
    return position, call.id, call.name, stored, "object", digest


def damaged_column(where: str, column: str, found: object, expected: str) -> JournalCorruptError:
    """The error for a column that holds what the journal never writes there (altered behind its back)."""
    shown = repr(found)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return JournalCorruptError(f"{where}: {column} holds {shown} ({type(found).__name__}), not {expected}")


def stored(where: str, column: str, found: object, expected: type[T]) -> T:
    """A value read from a row, refused as damage unless it has the type the journal writes in its column.

    A database that does not enforce column types (SQLite) hands back whatever
    was put there; comparing or converting it unchecked fails with a bare
    ``TypeError`` far from the row.
    """
    # bool is an int to isinstance, but no journal column holds one where an integer belongs.
    if isinstance(found, expected) and (expected is bool or not isinstance(found, bool)):
        return found
    raise damaged_column(where, column, found, _TYPE_NAMES.get(expected, expected.__name__))


def stored_or_none(where: str, column: str, found: object, expected: type[T]) -> T | None:
    """``stored`` for a column that may be NULL."""
    return None if found is None else stored(where, column, found, expected)


# How a backend reads one of its stored times: (run ID, column, what the row holds) -> the time in UTC, or
# ``JournalCorruptError`` when the row holds anything else.
StoredTime = Callable[[str, str, object], datetime]


def stored_owner(run_id: str, found: object) -> str | None:
    """The stored ``owner``: ``None`` when nobody holds the run."""
    return stored_or_none(f"run {run_id!r}", "toolsched_runs.owner", found, str)


def stored_lease(run_id: str, found: object, read_time: StoredTime) -> datetime | None:
    """The stored ``lease_until``: ``None`` when nobody holds the run."""
    return None if found is None else read_time(run_id, "lease_until", found)


def stored_stamps(
    run_id: str, row: Sequence[object], read_time: StoredTime
) -> tuple[str | None, datetime | None, datetime, datetime]:
    """A run row's ``(owner, lease_until, created_at, updated_at)`` as read, each checked (``build_record``'s
    ``run_row``)."""
    owner, lease_until, created_at, updated_at = row
    return (
        stored_owner(run_id, owner),
        stored_lease(run_id, lease_until, read_time),
        read_time(run_id, "created_at", created_at),
        read_time(run_id, "updated_at", updated_at),
    )


def decode_call(run_id: str, position: int, call_id: str, name: str, args: str, form: str, digest: str) -> ToolCall:
    where = f"run {run_id!r}, call {call_id!r}"
    try:
        value = json.loads(args)
    except ValueError:
        raise JournalCorruptError(f"{where}: the stored arguments are not JSON") from None
    if form == "text" and isinstance(value, str):
        restored: Mapping[str, Any] | str = value
    elif form == "object" and isinstance(value, dict):
        restored = value
    else:
        raise JournalCorruptError(f"{where}: the stored arguments do not match their form {form!r}")
    if args_digest(restored) != digest:
        raise JournalCorruptError(f"{where}: the stored arguments do not match their digest (altered?)")
    try:
        return ToolCall(call_id, name, restored)
    except (TypeError, ValueError) as exc:
        raise JournalCorruptError(f"{where}: {exc}") from None


def encode_result(result: ToolResult) -> str:
    if not isinstance(result, ToolResult):
        raise JournalError(f"a finished transition carries a ToolResult, got {type(result).__name__}")
    try:
        output, exact = encode_output(result.output)
    except ValueError as exc:
        raise UnstorableOutputError(f"the output of call {result.call_id!r} cannot be journaled: {exc}") from None
    body = {name: getattr(result, name) for name in _RESULT_SCALARS}
    body["call_id"] = result.call_id
    body["tool_name"] = result.tool_name
    body["offload_path"] = result.offload_path
    body["exact"] = exact
    try:
        scalars = to_json(body)
    except (TypeError, ValueError) as exc:
        raise JournalError(f"the result of call {result.call_id!r} has a field JSON cannot hold: {exc}") from None
    # The output is spliced in as stored text, so it is encoded only once.
    return scalars[:-1] + ',"output":' + output + "}"


# A stored result: the fields of a ToolResult (one table with run states), and whether its output is exact.
_RESULT_TYPES: dict[str, tuple[type, ...]] = {**RESULT_FIELD_TYPES, "exact": (bool,)}


def decode_result(where: str, call_id: str, text: str | None) -> tuple[ToolResult, bool]:
    try:
        body = json.loads(text) if text is not None else None
    except ValueError:
        raise JournalCorruptError(f"{where}: the stored result is not JSON") from None
    if isinstance(body, dict) and "attempts" not in body:
        body["attempts"] = 1  # stored before results counted their attempts
    if not isinstance(body, dict) or set(body) != {*_RESULT_TYPES, "output"}:
        raise JournalCorruptError(f"{where}: the stored result does not hold the fields of a ToolResult")
    for name, types in _RESULT_TYPES.items():
        if type(body[name]) not in types:
            raise JournalCorruptError(f"{where}: the stored result's {name} has the wrong type")
    kind = body["error_kind"]
    if body["call_id"] != call_id or (kind is not None and kind not in ERROR_KINDS):
        raise JournalCorruptError(f"{where}: the stored result does not belong to this call")
    exact = body.pop("exact")
    return ToolResult(**body), exact


def encode_payload(transition: str, call_id: str, payload: Any) -> str | None:
    if transition == "finished":
        return encode_result(payload)
    if payload is None:
        return None
    if not isinstance(payload, Mapping):
        kind = type(payload).__name__
        raise JournalError(f"the payload of a {transition!r} transition must be a mapping, got {kind}")
    try:
        return to_json(dict(payload))
    except (TypeError, ValueError) as exc:
        raise JournalError(f"the payload of {transition!r} for call {call_id!r} is not JSON: {exc}") from None


def build_record(
    run_id: str,
    run_row: tuple[str | None, datetime | None, datetime, datetime],
    call_rows: Sequence[Sequence[object]],
    transition_rows: Sequence[Sequence[object]],
) -> RunRecord:
    """A ``RunRecord`` from the stored rows: calls by position, transitions by sequence.

    ``run_row`` is checked by the backend (its timestamps are its own); the
    call and transition rows come as read, and each column is checked here.
    """
    owner, lease_until, created_at, updated_at = run_row
    turn: list[ToolCall] = []
    first: dict[str, tuple[int, ToolCall, str]] = {}
    for row in call_rows:
        position = stored(f"run {run_id!r}", "toolsched_calls.position", row[0], int)
        where = f"run {run_id!r}, call at position {position}"
        call_id, name, args, form, digest = (
            stored(where, f"toolsched_calls.{column}", found, str)
            for column, found in zip(_CALL_TEXT_COLUMNS, row[1:], strict=True)
        )
        call = decode_call(run_id, position, call_id, name, args, form, digest)
        turn.append(call)
        first.setdefault(call_id, (position, call, digest))
    state: dict[str, Transition] = dict.fromkeys(first, "planned")
    starts: dict[str, int] = dict.fromkeys(first, 0)
    decisions: dict[str, Mapping[str, Any] | None] = {}
    run_with: dict[str, Mapping[str, Any] | None] = {}
    results: dict[str, tuple[ToolResult, bool]] = {}
    for row in transition_rows:
        call_id = stored(f"run {run_id!r}", "toolsched_transitions.call_id", row[0], str)
        where = f"run {run_id!r}, call {call_id!r}"
        kind = stored(where, "toolsched_transitions.kind", row[1], str)
        payload = stored_or_none(where, "toolsched_transitions.payload", row[2], str)
        if call_id not in first:
            raise JournalCorruptError(f"{where}: a transition names a call the run does not have")
        if kind not in ALLOWED_FROM:
            raise JournalCorruptError(f"{where}: unknown transition {kind!r}")
        if state[call_id] not in ALLOWED_FROM[kind]:
            raise JournalCorruptError(f"{where}: transition {kind!r} cannot follow {state[call_id]!r}")
        state[call_id] = cast(Transition, kind)
        if kind == "started":
            starts[call_id] += 1
        elif kind == "finished":
            results[call_id] = decode_result(where, call_id, payload)
        if kind == "started" or kind in _DECISIONS:
            try:
                decoded = json.loads(payload) if payload is not None else None
            except ValueError:
                raise JournalCorruptError(f"{where}: the payload of {kind!r} is not JSON") from None
            if decoded is not None and not isinstance(decoded, dict):
                raise JournalCorruptError(f"{where}: the payload of {kind!r} is not an object")
            if decoded is not None and "args" in decoded and "digest" in decoded:
                check_payload_args(where, kind, decoded)
            (run_with if kind == "started" else decisions)[call_id] = decoded
    calls = []
    for call_id, (position, call, digest) in first.items():
        finished = results.get(call_id)
        calls.append(
            JournaledCall(
                call_id,
                call.name,
                position,
                digest,
                state[call_id],
                starts[call_id],
                decisions.get(call_id),
                finished[0] if finished else None,
                finished[1] if finished else True,
                run_with.get(call_id),
            )
        )
    return RunRecord(run_id, tuple(turn), tuple(calls), owner, lease_until, created_at, updated_at)


def check_payload_args(where: str, kind: str, payload: Mapping[str, Any]) -> None:
    """Refuses as damage a transition whose arguments (what a call was approved or started with) do not match
    the digest written beside them: recovery runs a call with them."""
    if payload["digest"] != args_digest(payload["args"]):
        raise JournalCorruptError(
            f"{where}: the arguments of its {kind!r} transition do not match their digest (altered?)"
        )


def pid_namespace() -> str:
    """The inode of this process's PID namespace, as text; ``""`` where it cannot be read (not Linux)."""
    try:
        return str(os.stat(_PID_NAMESPACE).st_ino)
    except OSError:
        return ""


def boot_id() -> str:
    """The running kernel's boot ID (a UUID, new at every boot); ``""`` where it cannot be read (not Linux)."""
    try:
        with open(_BOOT_ID, encoding="ascii") as source:
            found = source.read().strip()
    except (OSError, ValueError):
        return ""
    # The owner string is split on colons; a boot ID never has one, a stranger file might.
    return found if found and ":" not in found else ""


def holder_is_dead(owner: str | None) -> bool:
    """Whether a run's holder is known to be gone: an owner named the default way
    (``host:pid:random:pidns:boot``) by a process that shares this host, PID namespace and boot,
    whose process no longer exists. Any other holder may be alive, and only its lease decides.

    A pid means something only inside its PID namespace and boot: containers sharing the host's
    network (and so its hostname) number their processes apart, and two machines may share a
    hostname. A holder is judged by its pid only when all three match, and never when this
    process cannot read its own namespace or boot (not Linux): there the pid proves nothing.
    """
    if owner is None:
        return False
    parts = owner.split(":")
    # Owners written before the namespace and boot were recorded (``host:pid:random``) have 3
    # parts and are left to their lease: their pid may belong to another namespace.
    if len(parts) != 5:
        return False
    host, pid_text, _, namespace, boot = parts
    if not pid_text.isdigit() or host != socket.gethostname():
        return False
    if not namespace or namespace != pid_namespace() or not boot or boot != boot_id():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def default_owner() -> str:
    """``host:pid:random:pidns:boot``: unique to this journal object, readable in ``RunClaimedError``.

    The PID namespace and boot ID say where the pid is meaningful (see ``holder_is_dead``); they
    are empty where they cannot be read.
    """
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}:{pid_namespace()}:{boot_id()}"


# The longest lease taken: the time it runs out must be one both journals store and read back (Python's
# datetime ends with the year 9999), from now and for centuries to come.
MAX_LEASE = timedelta(days=365_000)


def check_lease(lease: timedelta | float) -> timedelta:
    """A journal's lease: a timedelta or seconds (``numeric_fault``'s rule), positive and at most ``MAX_LEASE``."""
    if isinstance(lease, timedelta):
        if timedelta(0) < lease <= MAX_LEASE:
            return lease
    elif numeric_fault(lease, integer=False, most=MAX_LEASE.total_seconds()) is None:
        return timedelta(seconds=lease)
    raise JournalError(
        f"lease must be positive and at most {MAX_LEASE.days:,} days: a timedelta or a finite number of seconds, "
        f"got {shown(lease)}"
    )


def check_age(older_than: timedelta) -> timedelta:
    if not isinstance(older_than, timedelta) or older_than < timedelta(0):
        raise JournalError(f"older_than must be a non-negative timedelta, got {older_than!r}")
    return older_than


# -- the interface ----------------------------------------------------------------------


class PendingRecord:
    """One ``record`` waiting to be written; the writer that takes it sets ``error`` or leaves it None."""

    __slots__ = ("call_id", "done", "error", "payload", "run_id", "transition")

    def __init__(self, run_id: str, call_id: str, transition: str, payload: str | None) -> None:
        self.run_id = run_id
        self.call_id = call_id
        self.transition = transition
        self.payload = payload
        self.done = False
        self.error: BaseException | None = None


class Journal(ABC):
    """Where a durable run records its calls' transitions (``SqliteJournal``, ``PostgresJournal``).

    Every method is a committed transaction by the time it returns. The
    database is opened on first use (or by ``open()`` / ``async with``) and
    its schema created or migrated then; a database that is not a journal, is
    damaged, or was written by a newer version is refused without a write.

    ``owner`` names this process in claims (default ``host:pid:random:pidns:boot``);
    ``lease`` is how long a claim lasts after the holder's last write or renewal
    before another process may take the run over.

    The driver is blocking (sqlite3, psycopg), so each operation runs in a
    worker thread, one at a time per journal object: one connection per
    journal, and every event loop (asyncio, trio) works the same way. The runs
    in progress on a journal object have their leases renewed together, in one
    statement every quarter of the lease, from a thread of its own on a second
    connection (``toolsched.journal.leases``); a run that goes three quarters of
    its lease without a renewal landing stops (``LeaseLostError``).
    """

    owner: str
    lease: timedelta

    def __init__(self, *, owner: str | None, lease: timedelta | float) -> None:
        if owner is not None:
            if not isinstance(owner, str) or not owner:
                raise JournalError(f"owner must be a non-empty string, got {owner!r}")
            check_text("owner", owner)
        self.owner = owner if owner is not None else default_owner()
        self.lease = check_lease(lease)
        self._lock = threading.Lock()
        self._queue_lock = threading.Lock()
        self._queue: list[PendingRecord] = []
        self._opened = False
        self._closed = False
        self._keeper: LeaseKeeper | None = None

    # -- lifecycle ------------------------------------------------------------------

    async def open(self) -> None:
        """Opens the database now (it opens on first use otherwise), creating or migrating its schema."""
        await self._run(lambda: None)

    async def close(self) -> None:
        """Closes the connection. A closed journal refuses further use."""
        await anyio.to_thread.run_sync(self._close_locked)

    def _close_locked(self) -> None:
        # Outside the lock: the keeper never takes it, and a renewal under way finishes first.
        keeper = self._keeper
        if keeper is not None:
            keeper.stop()
        with self._lock:
            if not self._closed:
                self._closed = True
                if self._opened:
                    self._disconnect()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _run(self, operation: Callable[[], T]) -> T:
        """Runs ``operation`` in a worker thread, alone on this journal's connection."""
        return await anyio.to_thread.run_sync(self._locked, operation)

    def _locked(self, operation: Callable[[], T]) -> T:
        with self._lock:
            self._ready()
            return operation()

    def _locked_timed(self, operation: Callable[[], T]) -> tuple[T, float]:
        """``_locked``, also returning the ``time.monotonic()`` at which the operation began, once the
        connection was its own: a lease it sets counts from no earlier than then."""
        with self._lock:
            self._ready()
            began = time.monotonic()
            return operation(), began

    def _ready(self) -> None:
        if self._closed:
            raise JournalError("the journal is closed")
        if not self._opened:
            self._connect()
            self._opened = True

    def _write_record(self, write: PendingRecord) -> None:
        """Group commit: whoever holds the connection writes every queued transition in one transaction.

        Each caller still returns only once its own row is committed; a write
        the journal refuses fails alone, a database failure fails the batch.
        """
        with self._queue_lock:
            self._queue.append(write)
        with self._lock:
            if not write.done:
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                try:
                    self._ready()
                    since = time.monotonic()
                    self._record_batch(batch)
                except BaseException as exc:
                    for pending in batch:
                        if pending.error is None:
                            pending.error = exc if pending is write else copy.copy(exc)
                    raise
                finally:
                    for pending in batch:
                        pending.done = True
                keeper = self._keeper
                if keeper is not None:
                    # Each transition written extended its run's lease in the same statement.
                    for pending in batch:
                        if pending.error is None:
                            keeper.extend(pending.run_id, since)
        if write.error is not None:
            raise write.error

    @property
    def leases(self) -> LeaseKeeper:
        """What keeps this journal's leases (internal to the executor: ``hold`` a run begun or claimed here,
        ``drop`` it when it ends)."""
        keeper = self._keeper
        if keeper is None:
            with self._queue_lock:
                keeper = self._keeper
                if keeper is None:
                    keeper = self._keeper = LeaseKeeper(
                        self.owner, self.lease.total_seconds(), self._renew_held_checked, self._renewal_disconnect
                    )
        return keeper

    def _renew_held_checked(self, run_ids: Sequence[str]) -> Renewal:
        if self._closed:
            raise JournalError("the journal is closed")
        return self._renew_held(run_ids)

    # -- operations -----------------------------------------------------------------

    async def begin_run(self, run_id: str, calls: Sequence[ToolCall]) -> None:
        """Records a new run: the turn's calls in model order (each call *planned*), held by this owner.

        ``calls`` is the turn as given (a repeated ID is stored too, so the
        turn can be planned again). Raises ``RunExistsError`` for a run ID
        already in the journal, ``JournalError`` for arguments that are not
        JSON.
        """
        await self._begin_run_at(run_id, calls)

    async def _begin_run_at(self, run_id: str, calls: Sequence[ToolCall]) -> float:
        """``begin_run``, returning the ``time.monotonic()`` at which its statement was sent (the lease it
        sets counts from no earlier)."""
        run_id = check_run_id(run_id)
        rows = [encode_call(position, call) for position, call in enumerate(calls)]
        _, began = await anyio.to_thread.run_sync(self._locked_timed, lambda: self._begin_run(run_id, rows))
        return began

    async def add_calls(self, run_id: str, first_position: int, calls: Sequence[ToolCall]) -> None:
        """Adds calls to a run in progress whose calls arrive over time (a streamed turn), at positions
        ``first_position`` on, each *planned*. Only the run's holder may add (``RunClaimedError``);
        a position already taken raises ``JournalError``.
        """
        run_id = check_run_id(run_id)
        rows = [encode_call(first_position + offset, call) for offset, call in enumerate(calls)]
        await self._run(lambda: self._add_calls(run_id, rows))

    async def record(self, run_id: str, call_id: str, transition: Transition, payload: Any = None) -> None:
        """Records one transition of a call: ``pending``, ``approved``, ``rejected``, ``started`` or ``finished``.

        ``finished`` carries the call's ``ToolResult``; the others may carry a
        JSON mapping (what was asked, who decided). Only the run's holder may
        write (``RunClaimedError`` otherwise); a transition that cannot follow
        the call's current state (anything after ``finished``, ``started``
        while a decision is pending) raises ``JournalError``.
        """
        run_id = check_run_id(run_id)
        if transition not in ALLOWED_FROM:
            allowed = ", ".join(ALLOWED_FROM)
            raise JournalError(f"transition must be one of {allowed}; got {transition!r}")
        if not isinstance(call_id, str):
            raise JournalError(f"call_id must be a string, got {type(call_id).__name__}")
        if transition == "finished" and isinstance(payload, ToolResult) and payload.call_id != call_id:
            raise JournalError(f"the result of call {payload.call_id!r} cannot finish call {call_id!r}")
        stored = encode_payload(transition, call_id, payload)
        await anyio.to_thread.run_sync(self._write_record, PendingRecord(run_id, call_id, transition, stored))

    async def load(self, run_id: str) -> RunRecord:
        """The run as journaled; ``UnknownRunError`` when there is none."""
        run_id = check_run_id(run_id)
        return await self._run(lambda: self._load(run_id))

    async def claim(self, run_id: str, *, force: bool = False) -> RunRecord:
        """Makes this owner the run's holder and returns the run as journaled.

        Succeeds when this owner holds it already, nobody does (released), the
        holder's lease ran out, or the holder is known to be dead (a process of
        this host, PID namespace and boot that no longer exists, as after
        ``kill -9``; see ``holder_is_dead``); otherwise raises
        ``RunClaimedError`` naming the holder. ``force=True`` takes the run from
        a holder you know is dead (a crashed process on a restarted host)
        without waiting for its lease. Of two processes claiming at once,
        exactly one wins.
        """
        record, _ = await self._claim_at(run_id, force=force)
        return record

    async def _claim_at(self, run_id: str, *, force: bool = False) -> tuple[RunRecord, float]:
        """``claim``, also returning the ``time.monotonic()`` at which its statement was sent (the lease it
        sets counts from no earlier)."""
        run_id = check_run_id(run_id)
        return await anyio.to_thread.run_sync(self._locked_timed, lambda: self._claim(run_id, force))

    async def renew(self, run_id: str) -> None:
        """Extends this owner's lease on the run (every write extends it too)."""
        run_id = check_run_id(run_id)
        await self._run(lambda: self._renew(run_id))

    async def release(self, run_id: str) -> None:
        """Lets go of the run so another process can claim it at once (a run ends, or stops for approvals)."""
        run_id = check_run_id(run_id)
        await self._run(lambda: self._release(run_id))

    async def prune(self, *, older_than: timedelta) -> int:
        """Deletes every run whose last write is older than ``older_than`` and that no live lease holds.

        A run's rows go together, in one transaction. Returns how many runs were deleted.
        """
        age = check_age(older_than)
        return await self._run(lambda: self._prune(age))

    # -- what a backend provides (called in a worker thread, under the lock) ---------

    @abstractmethod
    def _connect(self) -> None:
        """Opens the connection, checks the database is a journal, creates or migrates the schema."""

    @abstractmethod
    def _disconnect(self) -> None: ...

    @abstractmethod
    def _begin_run(self, run_id: str, rows: Sequence[tuple[int, str, str, str, str, str]]) -> None: ...

    @abstractmethod
    def _add_calls(self, run_id: str, rows: Sequence[tuple[int, str, str, str, str, str]]) -> None: ...

    @abstractmethod
    def _record_batch(self, writes: Sequence[PendingRecord]) -> None:
        """Writes the transitions in one transaction; sets ``error`` on each one refused."""

    @abstractmethod
    def _load(self, run_id: str) -> RunRecord: ...

    @abstractmethod
    def _claim(self, run_id: str, force: bool) -> RunRecord: ...

    @abstractmethod
    def _renew(self, run_id: str) -> None: ...

    @abstractmethod
    def _release(self, run_id: str) -> None: ...

    @abstractmethod
    def _renew_held(self, run_ids: Sequence[str]) -> Renewal:
        """Renews this owner's leases on ``run_ids`` in one statement, on the renewal connection (opened when
        there is none); called from the lease keeper's thread only, never under the lock. Returns the runs
        renewed and the runs another owner holds now (``None``: gone from the journal)."""

    @abstractmethod
    def _renewal_disconnect(self) -> None:
        """Closes the renewal connection, if open (the lease keeper's thread only)."""

    @abstractmethod
    def _prune(self, older_than: timedelta) -> int: ...


def transition_refused(run_id: str, call_id: str, transition: str, current: str | None) -> JournalError:
    """The error for a transition the call's state does not allow (``current`` None: no such call)."""
    if current is None:
        return JournalError(f"run {run_id!r} has no call {call_id!r}")
    if current == "finished":
        return JournalError(f"call {call_id!r} of run {run_id!r} already finished; its result is final")
    return JournalError(f"call {call_id!r} of run {run_id!r} cannot go from {current!r} to {transition!r}")
