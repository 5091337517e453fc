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
import os
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, Self, SupportsIndex, TypeVar

import anyio.to_thread

from toolsched._values.calls import ToolCall
from toolsched._values.numeric_options import numeric_fault, shown
from toolsched._values.results import ToolResult
from toolsched.errors import (
    JournalCorruptError,
    JournalError,
    JournalVersionError,
    LeaseLostError,
    RunClaimedError,
    RunExistsError,
    UnknownRunError,
    UnpicklableError,
    UnstorableOutputError,
)
from toolsched.journal._leases import LeaseKeeper, Renewal
from toolsched.journal._liveness import default_owner
from toolsched.journal._records import ALLOWED_FROM, TRANSITIONS, JournaledCall, RunRecord, Transition
from toolsched.journal._rows import check_run_id, check_text, encode_call, encode_payload

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

SCHEMA_VERSION = 1
"""The version of the tables this release writes. A journal at a higher
version was written by a newer toolsched and is refused, untouched."""

T = TypeVar("T")


# The longest lease taken: the time it runs out must be one both journals store and read back (Python's
# datetime ends with the year 9999), from now and for centuries to come.
MAX_LEASE = timedelta(days=365_000)


# The last position a call can have: PostgreSQL's ``integer``, the narrower of the journals' position columns.
MAX_POSITION = 2**31 - 1


def check_lease(lease: timedelta | float) -> timedelta:
    """A journal's lease: a timedelta or seconds (``numeric_fault``'s rule), positive and at most ``MAX_LEASE``."""
    if isinstance(lease, timedelta):
        if timedelta(0) < lease <= MAX_LEASE:
            return lease
    elif numeric_fault(lease, integer=False, most=MAX_LEASE.total_seconds()) is None:
        checked = timedelta(seconds=lease)
        if checked > timedelta(0):
            return checked
        raise JournalError(
            f"lease must be positive: got {shown(lease)} seconds, which a timedelta rounds to 0 "
            "(its shortest is a microsecond)"
        )
    raise JournalError(
        f"lease must be positive and at most {MAX_LEASE.days:,} days: a timedelta or a finite number of seconds, "
        f"got {shown(lease)}"
    )


# Every journal object of this process, so that a forked child starts each afresh (``Journal._forked``).
_JOURNALS: weakref.WeakSet[Journal] = weakref.WeakSet()
# In a forked child, the connections inherited from the parent: kept, never used or closed here (the parent
# still uses them, and closing one from another process is using it).
_DISOWNED: list[object] = []


def _after_fork() -> None:
    for journal in list(_JOURNALS):
        journal._forked()


os.register_at_fork(after_in_child=_after_fork)


# What a row holds besides its one large column (its other columns, the database's own bytes), in bytes:
# a row is refused before it is sent when its large column leaves less than this of the backend's limit.
_ROW_MARGIN = 4096


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
    connection (``toolsched.journal._leases``); a run that goes three quarters of
    its lease without a renewal landing stops (``LeaseLostError``).

    A copy of a journal object is the object itself; it cannot be pickled
    (``UnpicklableError``). In a process forked from
    this one, the object starts afresh: it opens connections of its own, and
    without an ``owner`` given it names the child, so forked workers never
    take each other's runs for their own.
    """

    owner: str
    _lease: timedelta
    # The most bytes one row may take (a backend's limit): a transition or call that would take more is refused
    # before anything is sent.
    _max_row: int = 1_000_000_000

    def __init__(self, *, owner: str | None, lease: timedelta | float) -> None:
        if owner is not None:
            if not isinstance(owner, str) or not owner:
                raise JournalError(f"owner must be a non-empty string, got {owner!r}")
            check_text("owner", owner)
        # An owner given stays the object's in a forked child; the default one names each process.
        self._owner_given = owner is not None
        self.owner = owner if owner is not None else default_owner()
        self._keeper: LeaseKeeper | None = None
        self.lease = check_lease(lease)
        self._lock = threading.Lock()
        self._queue_lock = threading.Lock()
        self._queue: list[PendingRecord] = []
        self._opened = False
        self._closed = False
        _JOURNALS.add(self)

    @property
    def lease(self) -> timedelta:
        """How long a run stays this journal's without a renewal landing (set when the journal is made)."""
        return self._lease

    @lease.setter
    def lease(self, lease: timedelta | float) -> None:
        checked = check_lease(lease)
        if self._keeper is not None and checked != self._lease:
            # The keeper renews every quarter of the lease it started with: a shorter one would expire between
            # renewals, and another process could take a live run.
            raise JournalError(
                f"the lease of a journal that keeps leases cannot change ({self._lease} to {checked}): "
                "open another journal object with the new lease"
            )
        self._lease = checked

    def __copy__(self) -> Self:
        """The journal itself: a second object with the same owner would hold the same runs, and let a run in
        progress on one be recovered through the other."""
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return self

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        raise UnpicklableError(
            f"a {type(self).__name__} cannot be pickled: it holds its database connections and the leases of "
            "its runs in progress; open one on the same database where it is needed"
        )

    def _forked(self) -> None:
        """In a child process just forked: the parent's connections, locks, queued writes and lease keeper are
        not the child's. It lets go of them (without closing a connection the parent still uses), opens its
        own on first use, and takes an owner of its own unless one was given."""
        self._lock = threading.Lock()
        self._queue_lock = threading.Lock()
        self._queue = []
        self._keeper = None
        _DISOWNED.extend(self._inherited())
        self._opened = False
        if not self._owner_given:
            self.owner = default_owner()

    # -- lifecycle ------------------------------------------------------------------

    async def open(self) -> None:
        """Opens the database now (it opens on first use otherwise), creating or migrating its schema."""
        await self._run(lambda: None)

    async def close(self) -> None:
        """Closes the connection. A closed journal refuses further use.

        Shielded from cancellation: a journal left by a cancelled ``async with`` is closed all the same.
        """
        with anyio.CancelScope(shield=True):
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

    def _check_row(self, size: int, call_id: str, transition: str) -> None:
        """Refuses a row of ``size`` bytes (its large column and its keys) that the database would not store:
        a result as ``UnstorableOutputError`` (the call is then that error), anything else as ``JournalError``."""
        limit = self._max_row - _ROW_MARGIN - len(self.owner.encode())
        if size <= limit:
            return
        if transition == "finished":
            raise UnstorableOutputError(
                f"the output of call {call_id!r} cannot be journaled: it takes {size:,} characters as stored, "
                f"more than the journal holds in one row ({limit:,})"
            )
        what = "the arguments" if transition == "planned" else f"the {transition!r} transition"
        raise JournalError(
            f"{what} of call {call_id!r} would take {size:,} characters as stored, more than the journal holds in one "
            f"row ({limit:,})"
        )

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
        self._check_calls(run_id, rows)
        _, began = await anyio.to_thread.run_sync(self._locked_timed, lambda: self._begin_run(run_id, rows))
        return began

    def _check_calls(self, run_id: str, rows: Sequence[tuple[int, str, str, str, str, str]]) -> None:
        for row in rows:
            self._check_row(len(run_id.encode()) + sum(len(text.encode()) for text in row[1:]), row[1], "planned")

    async def add_calls(self, run_id: str, first_position: int, calls: Sequence[ToolCall]) -> None:
        """Adds calls to a run in progress whose calls arrive over time (a streamed turn), at positions
        ``first_position`` on, each *planned*. Only the run's holder may add (``RunClaimedError``);
        a position already taken raises ``JournalError``.
        """
        run_id = check_run_id(run_id)
        calls = list(calls)
        last = MAX_POSITION - max(len(calls) - 1, 0)
        if type(first_position) is not int or not 0 <= first_position <= last:
            raise JournalError(
                f"first_position must be a whole number from 0 to {last:,} (the positions of {len(calls)} calls end "
                f"by {MAX_POSITION:,}), got {first_position!r}"
            )
        rows = [encode_call(first_position + offset, call) for offset, call in enumerate(calls)]
        self._check_calls(run_id, rows)
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
        check_text("call_id", call_id)
        if transition == "finished" and isinstance(payload, ToolResult) and payload.call_id != call_id:
            raise JournalError(f"the result of call {payload.call_id!r} cannot finish call {call_id!r}")
        stored = encode_payload(transition, call_id, payload)
        if stored is not None:
            self._check_row(len(stored) + len(run_id.encode()) + len(call_id.encode()), call_id, transition)
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
        if not isinstance(force, bool):
            raise JournalError(f"force must be True or False, got {force!r}")
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

    def _inherited(self) -> list[object]:
        """In a forked child: forgets the connections (the journal's and the renewal's), returning them unclosed."""
        return []

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
