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
    connection (``toolsched.journal._leases``); a run that goes three quarters of
    its lease without a renewal landing stops (``LeaseLostError``).

    A process forked from one that used the journal starts it afresh: the
    parent's connections, runs and lease keeper stay the parent's, the child
    opens its own and keeps its own leases, under an owner name of its own
    (the default one; an ``owner`` given is kept).
    """

    owner: str
    lease: timedelta

    def __init__(self, *, owner: str | None, lease: timedelta | float) -> None:
        if owner is not None:
            if not isinstance(owner, str) or not owner:
                raise JournalError(f"owner must be a non-empty string, got {owner!r}")
            check_text("owner", owner)
        self.owner = owner if owner is not None else default_owner()
        # Whether the owner's name was given (kept by a forked child) or made for this process.
        self._owner_given = owner is not None
        self.lease = check_lease(lease)
        self._lock = threading.Lock()
        self._queue_lock = threading.Lock()
        self._queue: list[PendingRecord] = []
        self._opened = False
        self._closed = False
        self._keeper: LeaseKeeper | None = None
        _JOURNALS.add(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        """The journal itself, as for the ``Executor`` that holds one: a deep copy of what holds it shares it
        (its connections and the leases it keeps cannot be copied)."""
        return self

    def __copy__(self) -> Self:
        copied = object.__new__(type(self))
        copied.__dict__.update(self.__dict__)
        _JOURNALS.add(copied)
        return copied

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        raise UnpicklableError(
            f"a {type(self).__name__} cannot be pickled: it holds its database connections and the leases of "
            "its runs in progress; open one on the same database where it is needed"
        )

    def _forget_parent(self) -> None:
        """In a child process just forked: the parent's connections (kept unclosed, ``_disown``), its runs and
        their lease keeper (whose thread the child does not have), and its locks (a worker thread may have held
        one) are not the child's. The child opens its own connections on first use, under a new default owner."""
        self._lock = threading.Lock()
        self._queue_lock = threading.Lock()
        self._queue = []
        self._keeper = None
        if not self._owner_given:
            self.owner = default_owner()
        _DISOWNED.extend(self._disown())
        self._opened = False

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

    def _disown(self) -> Sequence[object]:
        """In a child process just forked: lets go of the parent's connections (the journal's and the lease
        keeper's) without closing them or sending anything on them, and returns them, to be kept for the
        child's life (a finalizer closing one would end, or disturb, the parent's use of it)."""
        return []


# Every journal of this process, so that a forked child starts each afresh.
_JOURNALS: weakref.WeakSet[Journal] = weakref.WeakSet()
# In a forked child, the connections inherited from the parent (kept, so that no finalizer of theirs runs).
_DISOWNED: list[object] = []


def _after_fork() -> None:
    for journal in list(_JOURNALS):
        journal._forget_parent()


os.register_at_fork(after_in_child=_after_fork)


def transition_refused(run_id: str, call_id: str, transition: str, current: str | None) -> JournalError:
    """The error for a transition the call's state does not allow (``current`` None: no such call)."""
    if current is None:
        return JournalError(f"run {run_id!r} has no call {call_id!r}")
    if current == "finished":
        return JournalError(f"call {call_id!r} of run {run_id!r} already finished; its result is final")
    return JournalError(f"call {call_id!r} of run {run_id!r} cannot go from {current!r} to {transition!r}")
