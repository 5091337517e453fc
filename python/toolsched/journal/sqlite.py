"""``SqliteJournal``: the embedded journal, one file, the standard library's sqlite3.

The file is in WAL mode with ``synchronous=FULL``, so a committed transition
survives the process being killed and the machine losing power. Each journal
object holds one connection; its operations take turns on it, and other
processes writing the same file wait for each other up to the busy timeout.
"""

from __future__ import annotations

import json
import os
import sqlite3
import struct
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from toolsched._values.numeric_options import numeric_fault, shown
from toolsched.journal._leases import Renewal
from toolsched.journal._liveness import holder_is_dead
from toolsched.journal._records import ALLOWED_FROM, RunRecord
from toolsched.journal._rows import build_record, damaged_column, stored, stored_lease, stored_owner, stored_stamps
from toolsched.journal.base import (
    SCHEMA_VERSION,
    Journal,
    JournalCorruptError,
    JournalError,
    JournalVersionError,
    PendingRecord,
    RunClaimedError,
    RunExistsError,
    UnknownRunError,
    transition_refused,
)

__all__ = ["SqliteJournal"]

_HEADER = b"SQLite format 3\x00"
# How often, and how far apart, opening asks again while another connection is creating the file.
_SETTLE_ATTEMPTS = 20
_SETTLE_PAUSE = 0.025
# How long a renewal waits between its tries for the write lock.
_RENEWAL_RETRY = 0.001

# Each entry moves the schema up by one version; entry i creates version i + 1.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE TABLE toolsched_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        """CREATE TABLE toolsched_runs (
            run_id TEXT PRIMARY KEY,
            owner TEXT,
            lease_until REAL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        )""",
        "CREATE INDEX toolsched_runs_updated ON toolsched_runs (updated_at)",
        """CREATE TABLE toolsched_calls (
            run_id TEXT NOT NULL,
            position INTEGER NOT NULL,
            call_id TEXT NOT NULL,
            tool_name TEXT NOT NULL,
            args TEXT NOT NULL,
            args_form TEXT NOT NULL,
            args_digest TEXT NOT NULL,
            PRIMARY KEY (run_id, position)
        )""",
        "CREATE INDEX toolsched_calls_id ON toolsched_calls (run_id, call_id)",
        """CREATE TABLE toolsched_transitions (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL,
            call_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            payload TEXT,
            recorded_at REAL NOT NULL
        )""",
        "CREATE INDEX toolsched_transitions_call ON toolsched_transitions (run_id, call_id, seq)",
    ),
)
assert len(_MIGRATIONS) == SCHEMA_VERSION


def _timestamp(run_id: str, column: str, found: object) -> datetime:
    """A time as stored (seconds since the epoch), refused as damage unless it is a number a datetime holds.

    SQLite keeps whatever was put in a REAL column: text, a blob, or a number out of any date's range.
    """
    if isinstance(found, (int, float)) and not isinstance(found, bool):
        try:
            return datetime.fromtimestamp(found, UTC)
        except (OverflowError, ValueError, OSError):
            pass
    raise damaged_column(f"run {run_id!r}", f"toolsched_runs.{column}", found, "a time in seconds since the epoch")


# The longest busy timeout, in seconds: SQLite takes it as a C int of milliseconds (Python's sqlite3 turns a
# longer one into no wait at all).
_MAX_BUSY_TIMEOUT = (2**31 - 1) / 1000


class SqliteJournal(Journal):
    """A journal in one SQLite file (created when missing).

    - ``path``: the file; its directory must exist.
    - ``owner`` / ``lease``: see ``Journal`` (default lease 30 seconds).
    - ``busy_timeout``: seconds to wait for another process's write before
      failing with ``JournalError`` (default 10).
    - ``synchronous``: ``"full"`` (default; a commit survives power loss) or
      ``"normal"`` (survives the process being killed, may lose the last
      commits on power loss; several times cheaper per transition).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        owner: str | None = None,
        lease: timedelta | float = 30.0,
        busy_timeout: float = 10.0,
        synchronous: Literal["full", "normal"] = "full",
    ) -> None:
        super().__init__(owner=owner, lease=lease)
        fault = numeric_fault(busy_timeout, integer=False, above=False, most=_MAX_BUSY_TIMEOUT)
        if fault is not None:
            raise JournalError(f"busy_timeout must be seconds to wait, {fault}, got {shown(busy_timeout)}")
        if synchronous not in ("full", "normal"):
            raise JournalError(f"synchronous must be 'full' or 'normal', got {synchronous!r}")
        if not isinstance(path, (str, os.PathLike)):
            raise JournalError(f"path must be a file path (str or os.PathLike), got {type(path).__name__}")
        try:
            self.path = Path(path)
        except TypeError as exc:
            raise JournalError(f"path must be a file path: {exc}") from None
        if not str(path):
            raise JournalError("path must name a file, got ''")
        if "\x00" in str(self.path):
            raise JournalError(f"path {str(self.path)!r} contains a NUL character, which no file's name holds")
        try:
            os.fsencode(self.path)
        except UnicodeEncodeError:
            raise JournalError(
                f"path {str(self.path)!r} cannot name a file: the file system's encoding has no bytes for one of "
                "its characters (a lone surrogate)"
            ) from None
        self.busy_timeout = float(busy_timeout)
        self.synchronous = synchronous
        self._conn: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None
        # The lease keeper's own connection (its thread only).
        self._renewal: sqlite3.Connection | None = None

    def __repr__(self) -> str:
        return f"SqliteJournal({str(self.path)!r}, owner={self.owner!r})"

    # -- opening ----------------------------------------------------------------------

    def _connect(self) -> None:
        path = self.path
        if path.is_dir():
            raise JournalError(f"the journal path {path} is a directory")
        existing = path.exists() and path.stat().st_size > 0
        if existing:
            self._check_header_settled(path)
        try:
            conn = sqlite3.connect(path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise JournalError(f"cannot open the journal {path}: {exc}") from None
        try:
            with self._translated():
                self._prepare_waiting(conn, existing)
            stat = path.stat()
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._identity = (stat.st_dev, stat.st_ino)
        # This SQLite's longest string, blob or row (a build may set another than the usual 10**9 bytes).
        self._max_row = conn.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)

    def _prepare_waiting(self, conn: sqlite3.Connection, existing: bool) -> None:
        """``_prepare``, asked again while another connection holds a new file for a moment.

        A connection reading a database that another one is switching to WAL gets
        "database is locked" at once, without SQLite's busy timeout: it retries
        until the busy timeout is spent.
        """
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                self._prepare(conn, existing)
                return
            except sqlite3.OperationalError as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(_SETTLE_PAUSE)

    def _check_header_settled(self, path: Path) -> None:
        """Checks the header, allowing a moment for another connection that is creating the file.

        While a writer is busy (its ``-wal`` or ``-journal`` file is there), the header can be read
        half-written or ahead of the file's size; a damaged file stays damaged when asked again.
        """
        for attempt in range(_SETTLE_ATTEMPTS):
            try:
                self._check_header(path)
                return
            except JournalCorruptError:
                busy = any(path.with_name(path.name + suffix).exists() for suffix in ("-wal", "-journal"))
                if not busy or attempt == _SETTLE_ATTEMPTS - 1:
                    raise
                time.sleep(_SETTLE_PAUSE)

    def _check_header(self, path: Path) -> None:
        """Refuses, before SQLite touches it, a file that is not an SQLite database or was cut short."""
        with path.open("rb") as handle:
            header = handle.read(100)
        size = path.stat().st_size
        if not header.startswith(_HEADER):
            raise JournalCorruptError(f"{path} is not a toolsched journal: it is not an SQLite database")
        if len(header) < 100:
            raise JournalCorruptError(f"{path} is damaged: it ends inside the SQLite header")
        (page_size,) = struct.unpack(">H", header[16:18])
        page_size = 65536 if page_size == 1 else page_size
        change_counter, pages = struct.unpack(">II", header[24:32])
        (valid_for,) = struct.unpack(">I", header[92:96])
        if valid_for == change_counter and pages * page_size > size:
            raise JournalCorruptError(
                f"{path} is damaged: its header counts {pages * page_size} bytes but the file has {size} (truncated?)"
            )

    def _prepare(self, conn: sqlite3.Connection, existing: bool) -> None:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        version = self._version(conn, tables)
        if version is None and existing and tables:
            names = ", ".join(sorted(tables))
            raise JournalCorruptError(
                f"{self.path} is an SQLite database but not a toolsched journal (tables: {names})"
            )
        if version is not None and version > SCHEMA_VERSION:
            raise JournalVersionError(
                f"{self.path} is a journal of schema version {version}, written by a newer toolsched; "
                f"this one reads versions up to {SCHEMA_VERSION} and left the file untouched",
                found=version,
                supported=SCHEMA_VERSION,
            )
        # The checks passed: from here on the file may be written.
        # Another connection switching the same new file to WAL holds it for a moment; SQLite then
        # answers with the old mode instead of waiting, so ask again before giving up.
        for _ in range(_SETTLE_ATTEMPTS):
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() == "wal":
                break
            time.sleep(_SETTLE_PAUSE)
        if str(mode).lower() != "wal":
            raise JournalError(f"{self.path} cannot be put in WAL mode (journal_mode is {mode!r})")
        conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
        if version == SCHEMA_VERSION:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Another process may have created or migrated the schema meanwhile.
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            current = self._version(conn, tables) or 0
            if current > SCHEMA_VERSION:
                raise JournalVersionError(
                    f"{self.path} was moved to schema version {current} by a newer toolsched",
                    found=current,
                    supported=SCHEMA_VERSION,
                )
            for statements in _MIGRATIONS[current:]:
                for statement in statements:
                    conn.execute(statement)
            conn.execute(
                "INSERT INTO toolsched_meta (key, value) VALUES ('schema_version', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(SCHEMA_VERSION),),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _version(self, conn: sqlite3.Connection, tables: set[str]) -> int | None:
        if "toolsched_meta" not in tables:
            return None
        row = conn.execute("SELECT value FROM toolsched_meta WHERE key = 'schema_version'").fetchone()
        if row is None or not str(row[0]).isdigit():
            raise JournalCorruptError(f"{self.path} is a damaged journal: it records no valid schema version")
        return int(row[0])

    def _disconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _inherited(self) -> list[object]:
        inherited: list[object] = [conn for conn in (self._conn, self._renewal) if conn is not None]
        self._conn = self._renewal = None
        self._identity = None
        return inherited

    # -- plumbing ---------------------------------------------------------------------

    @contextmanager
    def _translated(self) -> Iterator[None]:
        """Turns sqlite3's errors into the journal's."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            text = str(exc)
            if "Could not decode" in text:
                # A text column holding bytes that are not UTF-8: written behind the journal's back.
                raise JournalCorruptError(f"the journal {self.path} is damaged: {text}") from None
            if "locked" in text or "busy" in text:
                raise JournalError(
                    f"the journal {self.path} stayed locked by another connection past the busy timeout "
                    f"({self.busy_timeout:g} s): {text}"
                ) from None
            raise JournalError(f"the journal {self.path} failed: {text}") from None
        except sqlite3.DataError as exc:
            # A value past one of SQLite's limits ("string or blob too big"): the file is fine.
            raise JournalError(f"the journal {self.path} refused a value: {exc}") from None
        except sqlite3.DatabaseError as exc:
            raise JournalCorruptError(f"the journal {self.path} is damaged: {exc}") from None
        except sqlite3.Error as exc:
            raise JournalError(f"the journal {self.path} failed: {exc}") from None

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        conn = self._conn
        if conn is None:
            raise JournalError("the journal is not open")
        self._check_file()
        with self._translated():
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _check_file(self) -> None:
        """Refuses to go on when the file was deleted or replaced: writes to it would be lost."""
        try:
            stat = self.path.stat()
        except OSError:
            raise JournalError(
                f"the journal file {self.path} was deleted while open; nothing more can be recorded"
            ) from None
        if (stat.st_dev, stat.st_ino) != self._identity:
            raise JournalError(f"the journal file {self.path} was replaced while open; nothing more can be recorded")

    def _refusal(self, conn: sqlite3.Connection, run_id: str) -> JournalError:
        """Why this owner may not write the run: unknown, or held by someone else."""
        row = conn.execute("SELECT owner, lease_until FROM toolsched_runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            return UnknownRunError(run_id)
        return RunClaimedError(run_id, stored_owner(run_id, row[0]), stored_lease(run_id, row[1], _timestamp))

    # -- operations -------------------------------------------------------------------

    def _begin_run(self, run_id: str, rows: Sequence[tuple[int, str, str, str, str, str]]) -> None:
        with self._transaction(write=True) as conn:
            # Read once the write lock is held: a lease written counts from the write, not from the wait for it.
            now = time.time()
            try:
                conn.execute(
                    "INSERT INTO toolsched_runs (run_id, owner, lease_until, created_at, updated_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (run_id, self.owner, now + self.lease.total_seconds(), now, now),
                )
            except sqlite3.IntegrityError:
                raise RunExistsError(run_id) from None
            conn.executemany(
                "INSERT INTO toolsched_calls (run_id, position, call_id, tool_name, args, args_form, args_digest) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(run_id, *row) for row in rows],
            )

    def _add_calls(self, run_id: str, rows: Sequence[tuple[int, str, str, str, str, str]]) -> None:
        with self._transaction(write=True) as conn:
            # Read once the write lock is held: a lease written counts from the write, not from the wait for it.
            now = time.time()
            held = conn.execute(
                "UPDATE toolsched_runs SET updated_at = ?, lease_until = ? WHERE run_id = ? AND owner = ?",
                (now, now + self.lease.total_seconds(), run_id, self.owner),
            )
            if held.rowcount == 0:
                raise self._refusal(conn, run_id)
            try:
                conn.executemany(
                    "INSERT INTO toolsched_calls (run_id, position, call_id, tool_name, args, args_form, args_digest) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(run_id, *row) for row in rows],
                )
            except sqlite3.IntegrityError:
                raise JournalError(f"run {run_id!r} already has a call at one of these positions") from None

    def _record_batch(self, writes: Sequence[PendingRecord]) -> None:
        with self._transaction(write=True) as conn:
            # Read once the write lock is held: a lease written counts from the write, not from the wait for it.
            now = time.time()
            for write in writes:
                try:
                    self._record(conn, now, write)
                except JournalError as refused:
                    # Only the checks raise here, before this write changed anything but its own lease.
                    write.error = refused

    def _record(self, conn: sqlite3.Connection, now: float, write: PendingRecord) -> None:
        run_id, call_id, transition = write.run_id, write.call_id, write.transition
        held = conn.execute(
            "UPDATE toolsched_runs SET updated_at = ?, lease_until = ? WHERE run_id = ? AND owner = ?",
            (now, now + self.lease.total_seconds(), run_id, self.owner),
        )
        if held.rowcount == 0:
            raise self._refusal(conn, run_id)
        current = self._state(conn, run_id, call_id)
        if current not in ALLOWED_FROM[transition]:
            raise transition_refused(run_id, call_id, transition, current)
        conn.execute(
            "INSERT INTO toolsched_transitions (run_id, call_id, kind, payload, recorded_at) VALUES (?, ?, ?, ?, ?)",
            (run_id, call_id, transition, write.payload, now),
        )

    @staticmethod
    def _state(conn: sqlite3.Connection, run_id: str, call_id: str) -> str | None:
        row = conn.execute(
            "SELECT kind FROM toolsched_transitions WHERE run_id = ? AND call_id = ? ORDER BY seq DESC LIMIT 1",
            (run_id, call_id),
        ).fetchone()
        if row is not None:
            return stored(f"run {run_id!r}, call {call_id!r}", "toolsched_transitions.kind", row[0], str)
        exists = conn.execute(
            "SELECT 1 FROM toolsched_calls WHERE run_id = ? AND call_id = ? LIMIT 1", (run_id, call_id)
        ).fetchone()
        return "planned" if exists else None

    def _read(self, conn: sqlite3.Connection, run_id: str) -> RunRecord:
        run = conn.execute(
            "SELECT owner, lease_until, created_at, updated_at FROM toolsched_runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        if run is None:
            raise UnknownRunError(run_id)
        calls = conn.execute(
            "SELECT position, call_id, tool_name, args, args_form, args_digest FROM toolsched_calls "
            "WHERE run_id = ? ORDER BY position",
            (run_id,),
        ).fetchall()
        transitions = conn.execute(
            "SELECT call_id, kind, payload FROM toolsched_transitions WHERE run_id = ? ORDER BY seq", (run_id,)
        ).fetchall()
        return build_record(run_id, stored_stamps(run_id, run, _timestamp), calls, transitions)

    def _load(self, run_id: str) -> RunRecord:
        with self._transaction(write=False) as conn:
            return self._read(conn, run_id)

    def _claim(self, run_id: str, force: bool) -> RunRecord:
        with self._transaction(write=True) as conn:
            # Read once the write lock is held: a lease written counts from the write, not from the wait for it.
            now = time.time()
            row = conn.execute("SELECT owner, lease_until FROM toolsched_runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                raise UnknownRunError(run_id)
            owner = stored_owner(run_id, row[0])
            lease_until = stored_lease(run_id, row[1], _timestamp)
            free = (
                owner is None
                or owner == self.owner
                or lease_until is None
                or lease_until.timestamp() <= now
                or holder_is_dead(owner)
            )
            if not (free or force):
                raise RunClaimedError(run_id, owner, lease_until)
            conn.execute(
                "UPDATE toolsched_runs SET owner = ?, lease_until = ?, updated_at = ? WHERE run_id = ?",
                (self.owner, now + self.lease.total_seconds(), now, run_id),
            )
            return self._read(conn, run_id)

    def _renew(self, run_id: str) -> None:
        with self._transaction(write=True) as conn:
            # Read once the write lock is held: a lease written counts from the write, not from the wait for it.
            now = time.time()
            held = conn.execute(
                "UPDATE toolsched_runs SET lease_until = ? WHERE run_id = ? AND owner = ?",
                (now + self.lease.total_seconds(), run_id, self.owner),
            )
            if held.rowcount == 0:
                raise self._refusal(conn, run_id)

    def _renew_held(self, run_ids: Sequence[str]) -> Renewal:
        conn = self._renewal
        if conn is None:
            try:
                # No busy timeout: ``_begin_renewal`` asks for the write lock itself.
                conn = sqlite3.connect(self.path, timeout=0, isolation_level=None, check_same_thread=False)
            except sqlite3.Error as exc:
                raise JournalError(f"cannot open the journal {self.path}: {exc}") from None
            self._renewal = conn
            with self._translated():
                conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
        if self._identity is not None:
            self._check_file()
        listed = json.dumps(list(run_ids))
        with self._translated():
            self._begin_renewal(conn)
            try:
                # Timed once the write lock is held: the lease counts from the renewal, not from the wait for it.
                until = time.time() + self.lease.total_seconds()
                renewed = {
                    stored("renewal", "toolsched_runs.run_id", row[0], str)
                    for row in conn.execute(
                        "UPDATE toolsched_runs SET lease_until = ? "
                        "WHERE owner = ? AND run_id IN (SELECT value FROM json_each(?)) RETURNING run_id",
                        (until, self.owner, listed),
                    )
                }
                taken: dict[str, str | None] = {}
                missing = [run_id for run_id in run_ids if run_id not in renewed]
                if missing:
                    found = dict(
                        conn.execute(
                            "SELECT run_id, owner FROM toolsched_runs WHERE run_id IN (SELECT value FROM json_each(?))",
                            (json.dumps(missing),),
                        ).fetchall()
                    )
                    taken = {run_id: stored_owner(run_id, found.get(run_id)) for run_id in missing}
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        return renewed, taken

    def _begin_renewal(self, conn: sqlite3.Connection) -> None:
        """Takes the write lock for a renewal, asking again every millisecond up to the busy timeout.

        SQLite's own busy handler waits longer and longer between its tries (up to 100 ms), and under a
        stream of short write transactions (this process's own among them) a waiter can go unserved for
        hundreds of milliseconds: a renewal late by that much may cost a short lease.
        """
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                text = str(exc)
                if ("locked" not in text and "busy" not in text) or time.monotonic() >= deadline:
                    raise
            time.sleep(_RENEWAL_RETRY)

    def _renewal_disconnect(self) -> None:
        if self._renewal is not None:
            self._renewal.close()
            self._renewal = None

    def _release(self, run_id: str) -> None:
        with self._transaction(write=True) as conn:
            held = conn.execute(
                "UPDATE toolsched_runs SET owner = NULL, lease_until = NULL WHERE run_id = ? AND owner = ?",
                (run_id, self.owner),
            )
            if held.rowcount == 0:
                refusal = self._refusal(conn, run_id)
                if not (isinstance(refusal, RunClaimedError) and refusal.owner is None):
                    raise refusal

    def _prune(self, older_than: timedelta) -> int:
        now = time.time()
        cutoff = now - older_than.total_seconds()
        stale = (
            "SELECT run_id FROM toolsched_runs WHERE updated_at < ? "
            "AND (owner IS NULL OR lease_until IS NULL OR lease_until <= ?)"
        )
        with self._transaction(write=True) as conn:
            conn.execute(f"DELETE FROM toolsched_transitions WHERE run_id IN ({stale})", (cutoff, now))
            conn.execute(f"DELETE FROM toolsched_calls WHERE run_id IN ({stale})", (cutoff, now))
            deleted = conn.execute(f"DELETE FROM toolsched_runs WHERE run_id IN ({stale})", (cutoff, now))
            return deleted.rowcount
