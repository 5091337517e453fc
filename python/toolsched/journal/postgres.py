"""``PostgresJournal``: the journal for fleets, in PostgreSQL through psycopg 3.

Several processes on several machines can share one database: runs are held by
one owner at a time (row locks decide a race between claimers), and leases use
the server's clock, so the machines' clocks need not agree.

psycopg's async connection only runs on asyncio; this journal drives its
blocking connection from a worker thread instead (like ``SqliteJournal``), so
it works the same on asyncio and trio. Each transition is one statement, one
round trip.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from toolsched._values.numeric_options import numeric_fault, shown
from toolsched.journal._deadlines import DEADLINES, sever_socket
from toolsched.journal._leases import Renewal
from toolsched.journal._liveness import holder_is_dead
from toolsched.journal._records import ALLOWED_FROM, RunRecord
from toolsched.journal._rows import (
    build_record,
    check_text,
    stored,
    stored_lease,
    stored_or_none,
    stored_owner,
    stored_stamps,
)
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

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresJournal"]

_TABLES = ("toolsched_meta", "toolsched_runs", "toolsched_calls", "toolsched_transitions")

# Each entry moves the schema up by one version; entry i creates version i + 1.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE TABLE toolsched_meta (key text PRIMARY KEY, value text NOT NULL)",
        """CREATE TABLE toolsched_runs (
            run_id text PRIMARY KEY,
            owner text,
            lease_until timestamptz,
            created_at timestamptz NOT NULL,
            updated_at timestamptz NOT NULL
        )""",
        "CREATE INDEX toolsched_runs_updated ON toolsched_runs (updated_at)",
        """CREATE TABLE toolsched_calls (
            run_id text NOT NULL,
            position integer NOT NULL,
            call_id text NOT NULL,
            tool_name text NOT NULL,
            args text NOT NULL,
            args_form text NOT NULL,
            args_digest text NOT NULL,
            PRIMARY KEY (run_id, position)
        )""",
        "CREATE INDEX toolsched_calls_id ON toolsched_calls (run_id, call_id)",
        """CREATE TABLE toolsched_transitions (
            seq bigserial PRIMARY KEY,
            run_id text NOT NULL,
            call_id text NOT NULL,
            kind text NOT NULL,
            payload text,
            recorded_at timestamptz NOT NULL
        )""",
        "CREATE INDEX toolsched_transitions_call ON toolsched_transitions (run_id, call_id, seq)",
    ),
)
assert len(_MIGRATIONS) == SCHEMA_VERSION

_LEASE = "clock_timestamp() + make_interval(secs => %(lease)s)"

# One statement: renew the holder's lease, read the call's state, append the
# transition when both allow it. No row back means the write was refused.
_RECORD = f"""
WITH held AS (
    UPDATE toolsched_runs SET updated_at = clock_timestamp(), lease_until = {_LEASE}
    WHERE run_id = %(run)s AND owner = %(owner)s
    RETURNING run_id
), current AS (
    SELECT COALESCE(
        (SELECT kind FROM toolsched_transitions WHERE run_id = %(run)s AND call_id = %(call)s
         ORDER BY seq DESC LIMIT 1),
        (SELECT 'planned' FROM toolsched_calls WHERE run_id = %(run)s AND call_id = %(call)s LIMIT 1)
    ) AS kind
)
INSERT INTO toolsched_transitions (run_id, call_id, kind, payload, recorded_at)
SELECT %(run)s, %(call)s, %(kind)s, %(payload)s, clock_timestamp() FROM held, current
WHERE current.kind = ANY(%(allowed)s)
RETURNING seq
"""

# One statement renews every lease the owner holds among the runs listed. A run row locked meanwhile (one of this
# owner's writes, which extends the lease itself, or another owner's claim under way) is skipped, never waited for.
_RENEW = f"""
WITH mine AS (
    SELECT run_id FROM toolsched_runs WHERE run_id = ANY(%(runs)s) AND owner = %(owner)s FOR UPDATE SKIP LOCKED
)
UPDATE toolsched_runs AS runs SET lease_until = {_LEASE}
FROM mine WHERE runs.run_id = mine.run_id
RETURNING runs.run_id
"""

_RENEW_LOCKED = f"""
UPDATE toolsched_runs SET lease_until = {_LEASE} WHERE run_id = ANY(%(runs)s) AND owner = %(owner)s RETURNING run_id
"""

_STATE = """
SELECT COALESCE(
    (SELECT kind FROM toolsched_transitions WHERE run_id = %(run)s AND call_id = %(call)s ORDER BY seq DESC LIMIT 1),
    (SELECT 'planned' FROM toolsched_calls WHERE run_id = %(run)s AND call_id = %(call)s LIMIT 1)
)
"""

_PRUNE = """
WITH stale AS (
    SELECT run_id FROM toolsched_runs
    WHERE updated_at < clock_timestamp() - make_interval(secs => %(age)s)
      AND (owner IS NULL OR lease_until IS NULL OR lease_until <= clock_timestamp())
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
), gone_transitions AS (
    DELETE FROM toolsched_transitions WHERE run_id IN (SELECT run_id FROM stale)
), gone_calls AS (
    DELETE FROM toolsched_calls WHERE run_id IN (SELECT run_id FROM stale)
)
DELETE FROM toolsched_runs WHERE run_id IN (SELECT run_id FROM stale) RETURNING run_id
"""


# The most bytes of a name PostgreSQL keeps (NAMEDATALEN - 1 as built by default).
_MAX_NAME = 63

# How many runs one statement of ``prune`` deletes, with their calls and transitions.
_PRUNE_BATCH = 200


def _timestamp(run_id: str, column: str, found: object) -> datetime:
    """A stored time in UTC, refused as damage unless the driver read a datetime (as its column type promises)."""
    return stored(f"run {run_id!r}", f"toolsched_runs.{column}", found, datetime).astimezone(UTC)


def _without_password(text: str) -> str:
    """``text`` (libpq's words, which may quote the connection string) with any password in it shown as ``***``."""
    text = re.sub(r"(://[^/@\s\"]*?:)[^/\s\"]*@", r"\1***@", text)
    return re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S+)", r"\1***", text)


def _cancel_on_server(conn: psycopg.Connection[Any], seconds: float) -> None:
    """Asks the server to cancel the statement ``conn`` runs (from another thread than the one waiting for it),
    waiting at most ``seconds`` for the request to be taken; a request that fails or is not taken in time is
    given up, never raised. The server may still finish the statement first."""
    import psycopg

    try:
        if psycopg.capabilities.has_cancel_safe():
            conn.cancel_safe(timeout=seconds)
            return
        # libpq before 17 sends the request blocking, with no bound of its own: from a thread left to it.
        request = conn.pgconn.get_cancel()
    except Exception:  # the connection closed meanwhile, or the server took no request: it is severed all the same
        return
    sender = threading.Thread(target=_send_cancel, args=(request,), name="toolsched journal cancel", daemon=True)
    sender.start()
    sender.join(seconds)


def _send_cancel(request: psycopg.pq.abc.PGcancel) -> None:
    try:
        request.cancel()
    except Exception:  # no server took it: the connection is severed all the same
        return


class _NoPsycopg(Exception):
    """psycopg 3 is not installed (internal)."""


class PostgresJournal(Journal):
    """A journal in a PostgreSQL database (``pip install 'toolsched[postgres]'``).

    - ``dsn``: a libpq connection string or URI (checked when the journal is built).
    - ``schema``: the PostgreSQL schema that holds the tables (created when
      missing), at most 63 bytes; default: the connection's ``search_path``.
    - ``owner`` / ``lease``: see ``Journal`` (default lease 30 seconds).
    - ``connect_timeout``: seconds to wait for the server when connecting. A statement the server has not
      answered within the lease (or ``connect_timeout``, if longer) fails with ``JournalError``: the server
      is asked to cancel it (the request given up after ``connect_timeout``) and its connection is closed
      under it; the journal connects afresh for what comes next.
    """

    # PostgreSQL's largest field, and largest message to the server (a row's values travel in one): 1 GB - 1.
    _max_row = 2**30 - 1

    def __init__(
        self,
        dsn: str,
        *,
        schema: str | None = None,
        owner: str | None = None,
        lease: timedelta | float = 30.0,
        connect_timeout: float = 10.0,
    ) -> None:
        super().__init__(owner=owner, lease=lease)
        if not isinstance(dsn, str):
            raise JournalError(f"dsn must be a connection string, got {type(dsn).__name__}")
        if schema is not None:
            if not isinstance(schema, str) or not schema:
                raise JournalError(f"schema must be a non-empty string, got {schema!r}")
            check_text("schema", schema)
            if len(schema.encode()) > _MAX_NAME:
                # PostgreSQL would cut the name to its first bytes without a word: two journals whose schema
                # names differ only past them would share one journal.
                raise JournalError(
                    f"schema must be at most {_MAX_NAME} bytes (PostgreSQL keeps no more of a name), "
                    f"got {schema!r} ({len(schema.encode())} bytes)"
                )
        # libpq reads the timeout as a C int of seconds.
        fault = numeric_fault(connect_timeout, integer=False, most=2**31 - 1)
        if fault is not None:
            raise JournalError(f"connect_timeout must be seconds, {fault}, got {shown(connect_timeout)}")
        self.dsn = dsn
        self.schema = schema
        self.connect_timeout = connect_timeout
        self._conn: psycopg.Connection[Any] | None = None
        # The lease keeper's own connection (its thread only).
        self._renewal: psycopg.Connection[Any] | None = None
        self._where = "PostgreSQL"
        try:
            self._parse_dsn()
        except _NoPsycopg:
            pass  # said when the journal is opened

    def _parse_dsn(self) -> None:
        """Checks the connection string (``JournalError`` naming what is wrong) and names the server it points at
        for messages (never the password). ``_NoPsycopg`` when psycopg 3 is not installed."""
        try:
            import psycopg
            from psycopg import conninfo
        except ImportError:
            raise _NoPsycopg from None
        if "\x00" in self.dsn:
            raise JournalError("dsn is not a valid connection string: it contains a NUL character")
        try:
            params = conninfo.conninfo_to_dict(self.dsn)
        except psycopg.ProgrammingError as exc:
            raise JournalError(f"dsn is not a valid connection string: {_without_password(str(exc))}") from None
        self._where = f"PostgreSQL at {params.get('host', 'localhost')}:{params.get('port', 5432)}"
        self._where += f"/{params.get('dbname', '')}" if params.get("dbname") else ""

    def __repr__(self) -> str:
        return f"PostgresJournal({self._where!r}, schema={self.schema!r}, owner={self.owner!r})"

    # -- opening ----------------------------------------------------------------------

    def _connect(self) -> None:
        try:
            self._parse_dsn()
        except _NoPsycopg:
            raise JournalError("PostgresJournal needs psycopg 3: pip install 'toolsched[postgres]'") from None
        conn = self._open_connection()
        try:
            with self._translated(), self._answered(conn):
                self._prepare(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _open_connection(self) -> psycopg.Connection[Any]:
        import psycopg

        try:
            conn = psycopg.connect(
                self.dsn,
                autocommit=True,
                connect_timeout=max(1, round(self.connect_timeout)),
                # Names the owner, so an operator can see which process holds a connection.
                application_name=f"toolsched-journal {self.owner}"[:63],
            )
        except psycopg.Error as exc:
            raise JournalError(f"cannot connect to the journal's {self._where}: {exc}") from None
        if self.schema is not None:
            from psycopg import sql

            schema = sql.Identifier(self.schema)
            try:
                with self._answered(conn):
                    try:
                        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
                    except psycopg.errors.UniqueViolation:
                        pass  # another journal created it at the same moment
                    conn.execute(sql.SQL("SET search_path TO {}").format(schema))
            except psycopg.Error as exc:
                conn.close()
                raise JournalError(f"cannot use schema {self.schema!r} on {self._where}: {exc}") from None
        return conn

    @contextmanager
    def _answered(self, conn: psycopg.Connection[Any]) -> Iterator[None]:
        """Runs statements on ``conn`` that the server must answer within the lease (at least ``connect_timeout``):
        past that, the server is asked to cancel them and the connection is closed under them
        (``toolsched.journal._deadlines``), and they fail with ``JournalError``, rather than holding the journal,
        and every run writing to it, until the server answers.
        """
        seconds = max(self.lease.total_seconds(), float(self.connect_timeout))
        watch = None
        try:
            with DEADLINES.within(seconds, lambda: self._abandon(conn)) as watch:
                yield
        except Exception as exc:
            if watch is not None and watch.severed:
                raise JournalError(
                    f"the journal's {self._where} did not answer within {seconds:g} s, so its connection was closed: "
                    f"{exc}"
                ) from None
            raise
        finally:
            if watch is not None and watch.severed:
                conn.close()

    def _abandon(self, conn: psycopg.Connection[Any]) -> None:
        """Severs ``conn`` (past its deadline, from the thread ``_deadlines`` gives it): first asks the server to
        cancel what it runs there, waiting at most ``connect_timeout`` for the request to be taken, then shuts
        down its socket. Closing the socket alone leaves the statement running on the server, which reads its
        client's socket only between statements: one waiting for a lock keeps its place in the queue, and
        commits, once it has the lock, the write the journal reported failed."""
        _cancel_on_server(conn, float(self.connect_timeout))
        sever_socket(lambda: conn.pgconn.socket)

    def _prepare(self, conn: psycopg.Connection[Any]) -> None:
        version = self._version(conn)
        if version is not None and version > SCHEMA_VERSION:
            raise JournalVersionError(
                f"the journal on {self._where} is at schema version {version}, written by a newer toolsched; "
                f"this one reads versions up to {SCHEMA_VERSION} and left it untouched",
                found=version,
                supported=SCHEMA_VERSION,
            )
        if version == SCHEMA_VERSION:
            return
        with conn.transaction():
            # One migrator at a time; the others find the schema ready.
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('toolsched journal schema'))")
            current = self._version(conn) or 0
            if current > SCHEMA_VERSION:
                raise JournalVersionError(
                    f"the journal on {self._where} was moved to schema version {current} by a newer toolsched",
                    found=current,
                    supported=SCHEMA_VERSION,
                )
            for statements in _MIGRATIONS[current:]:
                for statement in statements:
                    conn.execute(statement)
            conn.execute(
                "INSERT INTO toolsched_meta (key, value) VALUES ('schema_version', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(SCHEMA_VERSION),),
            )

    def _version(self, conn: psycopg.Connection[Any]) -> int | None:
        found = {
            row[0]
            for row in conn.execute(
                "SELECT c.relname FROM pg_class c WHERE c.relname = ANY(%s) AND c.relkind IN ('r', 'p') "
                "AND c.relnamespace = current_schema()::regnamespace",
                (list(_TABLES),),
            )
        }
        if "toolsched_meta" not in found:
            if found:
                raise JournalCorruptError(
                    f"the journal on {self._where} is damaged: it has {', '.join(sorted(found))} "
                    "but no toolsched_meta table recording its version"
                )
            return None
        row = conn.execute("SELECT value FROM toolsched_meta WHERE key = 'schema_version'").fetchone()
        if row is None or not str(row[0]).isdigit():
            raise JournalCorruptError(f"the journal on {self._where} is damaged: it records no valid schema version")
        return int(row[0])

    def _disconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _inherited(self) -> list[object]:
        # Each socket is pointed at /dev/null in the child: the parent's sessions see nothing from it, not even
        # the goodbye libpq sends when a connection object is finalized.
        inherited: list[object] = [conn for conn in (self._conn, self._renewal) if conn is not None]
        self._conn = self._renewal = None
        null = os.open(os.devnull, os.O_RDWR)
        try:
            for conn in inherited:
                try:
                    descriptor = -1 if conn.closed else conn.pgconn.socket  # type: ignore[attr-defined]
                except Exception:
                    descriptor = -1  # no socket left to point anywhere (a connection that broke)
                if descriptor >= 0:
                    os.dup2(null, descriptor, inheritable=False)
        finally:
            os.close(null)
        return inherited

    # -- plumbing ---------------------------------------------------------------------

    @contextmanager
    def _translated(self) -> Iterator[None]:
        import psycopg

        try:
            yield
        except psycopg.OperationalError as exc:
            raise JournalError(f"the journal's {self._where} went away: {exc}") from None
        except psycopg.Error as exc:
            raise JournalError(f"the journal's {self._where} failed: {exc}") from None

    def _connection(self) -> psycopg.Connection[Any]:
        """The connection, opened again when the server dropped the previous one (after that failure was raised)."""
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                conn.close()
            self._conn = None
            conn = self._open_connection()
            self._conn = conn
        return conn

    @contextmanager
    def _transaction(self, *, snapshot: bool = False) -> Iterator[psycopg.Connection[Any]]:
        with self._translated():
            conn = self._connection()
            with self._answered(conn), conn.transaction():
                if snapshot:
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                yield conn

    def _refusal(self, conn: psycopg.Connection[Any], run_id: str) -> JournalError:
        row = conn.execute("SELECT owner, lease_until FROM toolsched_runs WHERE run_id = %s", (run_id,)).fetchone()
        if row is None:
            return UnknownRunError(run_id)
        return RunClaimedError(run_id, stored_owner(run_id, row[0]), stored_lease(run_id, row[1], _timestamp))

    # -- operations -------------------------------------------------------------------

    def _begin_run(self, run_id: str, rows: Sequence[tuple[int, str, str, str, str, str]]) -> None:
        with self._transaction() as conn:
            inserted = conn.execute(
                "INSERT INTO toolsched_runs (run_id, owner, lease_until, created_at, updated_at) "
                f"VALUES (%(run)s, %(owner)s, {_LEASE}, clock_timestamp(), clock_timestamp()) "
                "ON CONFLICT (run_id) DO NOTHING RETURNING run_id",
                {"run": run_id, "owner": self.owner, "lease": self.lease.total_seconds()},
            ).fetchone()
            if inserted is None:
                raise RunExistsError(run_id)
            with conn.cursor().copy(
                "COPY toolsched_calls (run_id, position, call_id, tool_name, args, args_form, args_digest) FROM STDIN"
            ) as copy:
                for row in rows:
                    copy.write_row((run_id, *row))

    def _add_calls(self, run_id: str, rows: Sequence[tuple[int, str, str, str, str, str]]) -> None:
        import psycopg

        with self._transaction() as conn:
            held = conn.execute(
                f"UPDATE toolsched_runs SET updated_at = clock_timestamp(), lease_until = {_LEASE} "
                "WHERE run_id = %(run)s AND owner = %(owner)s RETURNING run_id",
                {"run": run_id, "owner": self.owner, "lease": self.lease.total_seconds()},
            ).fetchone()
            if held is None:
                raise self._refusal(conn, run_id)
            try:
                with conn.cursor().copy(
                    "COPY toolsched_calls (run_id, position, call_id, tool_name, args, args_form, args_digest) "
                    "FROM STDIN"
                ) as copy:
                    for row in rows:
                        copy.write_row((run_id, *row))
            except psycopg.errors.UniqueViolation:
                raise JournalError(f"run {run_id!r} already has a call at one of these positions") from None

    def _record_batch(self, writes: Sequence[PendingRecord]) -> None:
        with self._translated():
            conn = self._connection()
            with self._answered(conn):
                if len(writes) == 1:
                    # Autocommit: the one statement is its own transaction, one round trip.
                    self._record(conn, writes[0])
                    return
                with conn.transaction():
                    for write in writes:
                        self._record(conn, write)

    def _record(self, conn: psycopg.Connection[Any], write: PendingRecord) -> None:
        params = {
            "run": write.run_id,
            "call": write.call_id,
            "owner": self.owner,
            "kind": write.transition,
            "payload": write.payload,
            "lease": self.lease.total_seconds(),
            "allowed": sorted(ALLOWED_FROM[write.transition]),
        }
        if conn.execute(_RECORD, params).fetchone() is not None:
            return
        refusal = self._refusal(conn, write.run_id)
        if isinstance(refusal, RunClaimedError) and refusal.owner == self.owner:
            row = conn.execute(_STATE, params).fetchone()
            where = f"run {write.run_id!r}, call {write.call_id!r}"
            current = stored_or_none(where, "toolsched_transitions.kind", row[0] if row else None, str)
            refusal = transition_refused(write.run_id, write.call_id, write.transition, current)
        write.error = refusal

    def _read(self, conn: psycopg.Connection[Any], run_id: str) -> RunRecord:
        run = conn.execute(
            "SELECT owner, lease_until, created_at, updated_at FROM toolsched_runs WHERE run_id = %s", (run_id,)
        ).fetchone()
        if run is None:
            raise UnknownRunError(run_id)
        calls = conn.execute(
            "SELECT position, call_id, tool_name, args, args_form, args_digest FROM toolsched_calls "
            "WHERE run_id = %s ORDER BY position",
            (run_id,),
        ).fetchall()
        transitions = conn.execute(
            "SELECT call_id, kind, payload FROM toolsched_transitions WHERE run_id = %s ORDER BY seq", (run_id,)
        ).fetchall()
        return build_record(run_id, stored_stamps(run_id, run, _timestamp), calls, transitions)

    def _load(self, run_id: str) -> RunRecord:
        with self._transaction(snapshot=True) as conn:
            return self._read(conn, run_id)

    def _claim(self, run_id: str, force: bool) -> RunRecord:
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT owner, lease_until, lease_until IS NULL OR lease_until <= clock_timestamp() "
                "FROM toolsched_runs WHERE run_id = %s FOR UPDATE",
                (run_id,),
            ).fetchone()
            if row is None:
                raise UnknownRunError(run_id)
            owner = stored_owner(run_id, row[0])
            lease_until = stored_lease(run_id, row[1], _timestamp)
            expired = row[2]
            if not (owner is None or owner == self.owner or expired or force or holder_is_dead(owner)):
                raise RunClaimedError(run_id, owner, lease_until)
            conn.execute(
                f"UPDATE toolsched_runs SET owner = %(owner)s, lease_until = {_LEASE}, updated_at = clock_timestamp() "
                "WHERE run_id = %(run)s",
                {"run": run_id, "owner": self.owner, "lease": self.lease.total_seconds()},
            )
            return self._read(conn, run_id)

    def _renew(self, run_id: str) -> None:
        with self._transaction() as conn:
            held = conn.execute(
                f"UPDATE toolsched_runs SET lease_until = {_LEASE} WHERE run_id = %(run)s AND owner = %(owner)s",
                {"run": run_id, "owner": self.owner, "lease": self.lease.total_seconds()},
            )
            if held.rowcount == 0:
                raise self._refusal(conn, run_id)

    def _renew_held(self, run_ids: Sequence[str]) -> Renewal:
        with self._translated():
            conn = self._renewal
            if conn is None or conn.closed or conn.broken:
                if conn is not None:
                    conn.close()
                self._renewal = None
                conn = self._renewal = self._open_connection()
                # A renewal never waits long for a row: past this, the run is left for the next round. At most
                # 200 ms, under PostgreSQL's default deadlock_timeout (1 s).
                wait_ms = min(200, max(10, round(self.lease.total_seconds() * 1000 / 8)))
                with self._answered(conn):
                    conn.execute(f"SET lock_timeout = {wait_ms}")
            with self._answered(conn):
                return self._renew_on(conn, run_ids)

    def _renew_on(self, conn: psycopg.Connection[Any], run_ids: Sequence[str]) -> Renewal:
        """``_renew_held``'s statements, on the renewal connection."""
        import psycopg

        params = {"runs": list(run_ids), "owner": self.owner, "lease": self.lease.total_seconds()}
        renewed = {stored("renewal", "toolsched_runs.run_id", row[0], str) for row in conn.execute(_RENEW, params)}
        missing = [run_id for run_id in run_ids if run_id not in renewed]
        if not missing:
            return renewed, {}
        owners = self._owners(conn, missing)
        # Rows still this owner's were locked (by one of its writes, or another owner's claim under way):
        # one more statement renews them, waiting for their rows up to the lock timeout. It may wait for a
        # row while holding others one of this owner's writes waits for: the lock timeout, shorter than the
        # server's deadlock timeout, ends the renewal first, never the write.
        locked = [run_id for run_id in missing if owners.get(run_id) == self.owner]
        if locked:
            try:
                renewed.update(
                    stored("renewal", "toolsched_runs.run_id", row[0], str)
                    for row in conn.execute(_RENEW_LOCKED, {**params, "runs": locked})
                )
            except psycopg.errors.LockNotAvailable:
                pass
        missing = [run_id for run_id in missing if run_id not in renewed]
        owners = self._owners(conn, missing) if missing else {}
        # Still this owner's: its row stayed locked, so it was not renewed this time, but it is not lost.
        return renewed, {run_id: owners.get(run_id) for run_id in missing if owners.get(run_id) != self.owner}

    def _owners(self, conn: psycopg.Connection[Any], run_ids: Sequence[str]) -> dict[str, str | None]:
        """The holder of each run listed that the journal still has."""
        rows = conn.execute("SELECT run_id, owner FROM toolsched_runs WHERE run_id = ANY(%s)", (list(run_ids),))
        return {
            stored("renewal", "toolsched_runs.run_id", run_id, str): stored_owner(run_id, owner)
            for run_id, owner in rows.fetchall()
        }

    def _renewal_disconnect(self) -> None:
        if self._renewal is not None:
            self._renewal.close()
            self._renewal = None

    def _release(self, run_id: str) -> None:
        with self._transaction() as conn:
            held = conn.execute(
                "UPDATE toolsched_runs SET owner = NULL, lease_until = NULL WHERE run_id = %s AND owner = %s",
                (run_id, self.owner),
            )
            if held.rowcount == 0:
                refusal = self._refusal(conn, run_id)
                if not (isinstance(refusal, RunClaimedError) and refusal.owner is None):
                    raise refusal

    def _prune(self, older_than: timedelta) -> int:
        # In batches, each a transaction of its own: every statement must be answered within the lease
        # (``_answered``), and one transaction over every stale run of a journal not pruned for a while could
        # take longer, be cut off each time, and never finish.
        pruned = 0
        while True:
            with self._transaction() as conn:
                batch = len(conn.execute(_PRUNE, {"age": older_than.total_seconds(), "batch": _PRUNE_BATCH}).fetchall())
            pruned += batch
            if batch < _PRUNE_BATCH:
                return pruned
