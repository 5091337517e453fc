"""The journal of durable runs, against both backends: a SQLite file and a real PostgreSQL server.

The PostgreSQL server is the throwaway one that ``make test`` starts
(tests/postgres_server.sh); its address comes in TOOLSCHED_TEST_POSTGRES_DSN.
Without it the PostgreSQL tests fail rather than skip, so a CI run can never
pass without them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import anyio
import anyio.lowlevel
import psycopg
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from journal_child import CHILD, Store, expected_output, turn
from psycopg import sql
from pydantic import BaseModel

import toolsched as ts

pytestmark = pytest.mark.anyio

DSN_VARIABLE = "TOOLSCHED_TEST_POSTGRES_DSN"


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        yield Store("sqlite", path=str(tmp_path / "journal.db"))
    else:
        yield from postgres_schema()


@pytest.fixture
def postgres_store() -> Iterator[Store]:
    yield from postgres_schema()


def postgres_schema() -> Iterator[Store]:
    """A fresh schema on the test server, dropped afterwards."""
    dsn = os.environ.get(DSN_VARIABLE)
    if not dsn:
        pytest.fail(
            f"{DSN_VARIABLE} is not set, so there is no PostgreSQL server for the journal tests: "
            "run them through `make test`, which starts PostgreSQL "
            "(or `tests/postgres_server.sh python -m pytest`)"
        )
    schema = f"journal_test_{uuid4().hex[:12]}"
    yield Store("postgres", dsn=dsn, schema=schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def raw(store: Store, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Runs SQL on the store behind the journal's back (``?`` placeholders), as an operator would."""
    if store.kind == "sqlite":
        assert store.path is not None
        conn = sqlite3.connect(store.path)
        try:
            rows = conn.execute(statement, params).fetchall()
            conn.commit()
            return rows
        finally:
            conn.close()
    assert store.dsn is not None and store.schema is not None
    with psycopg.connect(store.dsn, autocommit=True) as pg:
        pg.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(store.schema)))
        cursor = pg.execute(statement.replace("?", "%s"), params)
        return cursor.fetchall() if cursor.description else []


def age_run(store: Store, run_id: str, seconds: float) -> None:
    """Moves a run's last write into the past."""
    if store.kind == "sqlite":
        raw(store, "UPDATE toolsched_runs SET updated_at = updated_at - ? WHERE run_id = ?", (seconds, run_id))
    else:
        raw(
            store,
            "UPDATE toolsched_runs SET updated_at = updated_at - make_interval(secs => ?) WHERE run_id = ?",
            (seconds, run_id),
        )


def rows_of(store: Store, run_id: str) -> dict[str, int]:
    return {
        table: raw(store, f"SELECT count(*) FROM {table} WHERE run_id = ?", (run_id,))[0][0]
        for table in ("toolsched_runs", "toolsched_calls", "toolsched_transitions")
    }


def result(call_id: str, output: Any = None, **fields: Any) -> ts.ToolResult:
    return ts.ToolResult(call_id, fields.pop("tool_name", "echo"), output, **fields)


# -- round trips -------------------------------------------------------------------------


async def test_a_run_reads_back_as_written(store: Store) -> None:
    calls = [
        ts.ToolCall("a", "read_file", {"path": "src/x.py", "limit": 10}),
        ts.ToolCall("b", "grep", '{"pattern": "x",  "path": "."}'),
        ts.ToolCall("c", "edit_file", {"path": "y", "nested": {"k": [1, 2.5, None, True]}}),
        ts.ToolCall("a", "read_file", {"path": "other"}),
        ts.ToolCall("d", "bash", "not json at all"),
    ]
    ran = result("a", "contents", tool_name="read_file", duration_ms=3.25, was_concurrent=True, batch=0)
    failed = ts.ToolResult(
        "c", "edit_file", None, "PermissionError: y", "execution_error", True, 1.0, False, 1, False, None
    )
    cut = ts.ToolResult("b", "grep", "x" * 10, None, None, False, 2.0, True, 0, True, "/tmp/offload/b.txt")
    async with store.open() as journal:
        await journal.begin_run("run-1", calls)
        await journal.record("run-1", "a", "started")
        await journal.record("run-1", "b", "started")
        await journal.record("run-1", "c", "pending", {"reason": "edits need approval", "digest": "abc"})
        await journal.record("run-1", "c", "approved", {"by": "ops"})
        await journal.record("run-1", "c", "started")
        await journal.record("run-1", "a", "finished", ran)
        await journal.record("run-1", "c", "finished", failed)
        await journal.record("run-1", "b", "finished", cut)
        await journal.record("run-1", "d", "rejected", {"message": "no shell"})
        record = await journal.load("run-1")

    assert record.run_id == "run-1"
    assert record.turn == tuple(calls)
    assert [entry.call_id for entry in record.calls] == ["a", "b", "c", "d"]
    assert [entry.position for entry in record.calls] == [0, 1, 2, 4]
    assert [entry.state for entry in record.calls] == ["finished", "finished", "finished", "rejected"]
    assert [entry.starts for entry in record.calls] == [1, 1, 1, 0]
    assert record.call("a").result == ran
    assert record.call("b").result == cut
    assert record.call("c").result == failed
    assert record.call("c").decision == {"by": "ops"}
    assert record.call("d").decision == {"message": "no shell"}
    assert record.call("d").result is None
    assert record.results == [ran, cut, failed]
    assert not record.complete
    assert record.call("b").digest == record.call("b").digest == ts.journal.args_digest({"path": ".", "pattern": "x"})
    assert record.created_at <= record.updated_at


class Report(BaseModel):
    title: str
    lines: int


@dataclasses.dataclass
class Point:
    x: int
    y: int


OUTPUTS: list[tuple[Any, Any, bool]] = [
    (42, 42, True),
    (2.5, 2.5, True),
    (None, None, True),
    (True, True, True),
    ("nul \x00 surrogate \udc80 emoji \U0001f600", "nul \x00 surrogate \udc80 emoji \U0001f600", True),
    ({"rows": [{"id": 1, "tags": ["a"]}], "next": None}, {"rows": [{"id": 1, "tags": ["a"]}], "next": None}, True),
    ((1, 2), [1, 2], False),
    ({1: "one"}, {"1": "one"}, False),
    (b"bytes \xff", "bytes \ufffd", False),
    (datetime(2024, 5, 1, 12, 30), "2024-05-01 12:30:00", False),
    (Report(title="t", lines=3), {"title": "t", "lines": 3}, False),
    (Point(1, 2), {"x": 1, "y": 2}, False),
    ({"when": datetime(2024, 5, 1), "ids": {7}}, {"when": "2024-05-01 00:00:00", "ids": [7]}, False),
]


async def test_outputs_come_back_equal_or_in_their_stored_form(store: Store) -> None:
    calls = [ts.ToolCall(f"o{i}", "echo") for i in range(len(OUTPUTS))]
    async with store.open() as journal:
        await journal.begin_run("r", calls)
        for call, (output, _, _) in zip(calls, OUTPUTS, strict=True):
            await journal.record("r", call.id, "finished", result(call.id, output))
        record = await journal.load("r")
    for entry, (output, stored, exact) in zip(record.calls, OUTPUTS, strict=True):
        assert entry.result is not None
        assert (entry.result.output, type(entry.result.output), entry.output_exact) == (stored, type(stored), exact), (
            output
        )


# -- the order of a call's transitions -------------------------------------------------------


async def test_a_finished_call_is_final(store: Store) -> None:
    async with store.open() as journal:
        await journal.begin_run("r", [ts.ToolCall("a", "echo")])
        await journal.record("r", "a", "started")
        await journal.record("r", "a", "finished", result("a", 1))
        for transition in ("started", "finished", "approved", "pending"):
            payload = result("a", 2) if transition == "finished" else None
            with pytest.raises(ts.JournalError, match="already finished; its result is final"):
                await journal.record("r", "a", transition, payload)
        entry = (await journal.load("r")).call("a")
    assert (entry.state, entry.starts, entry.result) == ("finished", 1, result("a", 1))


async def test_transitions_out_of_order_are_refused(store: Store) -> None:
    async with store.open() as journal:
        await journal.begin_run("r", [ts.ToolCall("a", "echo"), ts.ToolCall("b", "echo")])
        await journal.record("r", "a", "pending", {"reason": "asks"})
        with pytest.raises(ts.JournalError, match="cannot go from 'pending' to 'started'"):
            await journal.record("r", "a", "started")
        await journal.record("r", "b", "rejected")
        with pytest.raises(ts.JournalError, match="cannot go from 'rejected' to 'started'"):
            await journal.record("r", "b", "started")
        await journal.record("r", "b", "finished", result("b", None, is_error=True, error_kind="permission_denied"))
        with pytest.raises(ts.JournalError, match="has no call 'zz'"):
            await journal.record("r", "zz", "started")
        with pytest.raises(ts.JournalError, match="transition must be one of"):
            await journal.record("r", "a", "planned")
        with pytest.raises(ts.JournalError, match="cannot finish call 'a'"):
            await journal.record("r", "a", "finished", result("b"))
        with pytest.raises(ts.JournalError, match="carries a ToolResult"):
            await journal.record("r", "a", "finished", {"output": 1})
        with pytest.raises(ts.JournalError, match="is not JSON"):
            await journal.record("r", "a", "approved", {"by": object()})
        record = await journal.load("r")
    assert [(entry.state, entry.starts) for entry in record.calls] == [("pending", 0), ("finished", 0)]


async def test_an_idempotent_call_can_start_again_and_is_counted(store: Store) -> None:
    async with store.open() as journal:
        await journal.begin_run("r", [ts.ToolCall("a", "echo")])
        await journal.record("r", "a", "started")
        await journal.record("r", "a", "started")
        assert (await journal.load("r")).call("a").starts == 2


async def test_arguments_a_journal_cannot_store_refuse_the_run(store: Store) -> None:
    async with store.open() as journal:
        with pytest.raises(ts.JournalError, match=r"arguments of call 'b' \(echo\) are not JSON"):
            await journal.begin_run("r", [ts.ToolCall("a", "echo"), ts.ToolCall("b", "echo", {"when": object()})])
        with pytest.raises(ts.JournalError, match="NUL character"):
            await journal.begin_run("r", [ts.ToolCall("a\x00", "echo")])
        with pytest.raises(ts.JournalError, match=r"calls\[0\] must be a ToolCall"):
            await journal.begin_run("r", [{"id": "a"}])  # type: ignore[list-item]
        for bad in ("", "x" * 201, "nul\x00", 7):
            with pytest.raises(ts.JournalError, match="run_id"):
                await journal.begin_run(bad, [])  # type: ignore[arg-type]
        with pytest.raises(ts.UnknownRunError):
            await journal.load("r")
        await journal.begin_run("r", [ts.ToolCall("a", "echo")])
        with pytest.raises(ts.RunExistsError, match="'r' is already in the journal"):
            await journal.begin_run("r", [ts.ToolCall("other", "echo")])
        assert [entry.call_id for entry in (await journal.load("r")).calls] == ["a"]


def test_options_are_checked_when_the_journal_is_built(tmp_path: Path) -> None:
    with pytest.raises(ts.JournalError, match="lease must be positive"):
        ts.SqliteJournal(tmp_path / "j.db", lease=0)
    with pytest.raises(ts.JournalError, match="owner must be a non-empty string"):
        ts.SqliteJournal(tmp_path / "j.db", owner="")
    with pytest.raises(ts.JournalError, match="busy_timeout"):
        ts.SqliteJournal(tmp_path / "j.db", busy_timeout=-1)
    with pytest.raises(ts.JournalError, match="synchronous"):
        ts.SqliteJournal(tmp_path / "j.db", synchronous="off")  # type: ignore[arg-type]
    with pytest.raises(ts.JournalError, match="schema"):
        ts.PostgresJournal("host=127.0.0.1", schema="")
    assert not (tmp_path / "j.db").exists()


async def test_unknown_runs_are_named(store: Store) -> None:
    async with store.open() as journal:
        for attempt in (
            journal.load("ghost"),
            journal.claim("ghost"),
            journal.record("ghost", "a", "started"),
            journal.renew("ghost"),
            journal.release("ghost"),
        ):
            with pytest.raises(ts.UnknownRunError, match="no run 'ghost'") as caught:
                await attempt
            assert caught.value.run_id == "ghost"
        with pytest.raises(ts.JournalError, match="older_than"):
            await journal.prune(older_than=timedelta(seconds=-1))


async def test_a_closed_journal_refuses_use(store: Store) -> None:
    journal = store.open()
    await journal.begin_run("r", [ts.ToolCall("a", "echo")])
    await journal.close()
    await journal.close()
    with pytest.raises(ts.JournalError, match="closed"):
        await journal.load("r")


# -- durability and concurrency --------------------------------------------------------------


async def read_child(store: Store, run_id: str) -> dict[str, Any]:
    """The run as a separate process sees it."""
    done = await anyio.run_process([sys.executable, str(CHILD), store.spec(), "asyncio", "load", run_id])
    loaded: dict[str, Any] = json.loads(done.stdout)
    return loaded


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_every_write_is_visible_to_another_connection_and_process_once_it_returns(store: Store) -> None:
    calls = turn(3)
    async with store.open(owner="writer") as writer, store.open(owner="reader") as reader:
        await writer.begin_run("r", calls)
        assert [entry.state for entry in (await reader.load("r")).calls] == ["planned"] * 3
        for index, call in enumerate(calls):
            await writer.record("r", call.id, "started")
            assert (await reader.load("r")).call(call.id).state == "started"
            await writer.record("r", call.id, "finished", result(call.id, expected_output(index)))
            seen = (await reader.load("r")).call(call.id)
            assert (seen.state, seen.result) == ("finished", result(call.id, expected_output(index)))
    seen_by_process = await read_child(store, "r")
    assert seen_by_process["owner"] == "writer"
    assert seen_by_process["calls"] == {
        call.id: {"state": "finished", "starts": 1, "output": expected_output(i)} for i, call in enumerate(calls)
    }


async def test_concurrent_runs_on_one_and_on_several_connections(store: Store) -> None:
    runs = 12
    width = 6
    journals = [store.open(owner=f"worker-{i}") for i in range(3)]
    try:
        async with anyio.create_task_group() as group:
            for journal in journals:
                group.start_soon(journal.open)

        async def drive(journal: ts.Journal, run_id: str) -> None:
            calls = [ts.ToolCall(f"{run_id}-{i}", "echo", {"i": i}) for i in range(width)]
            await journal.begin_run(run_id, calls)

            async def one(call: ts.ToolCall) -> None:
                await journal.record(run_id, call.id, "started")
                await anyio.lowlevel.checkpoint()
                await journal.record(run_id, call.id, "finished", result(call.id, call.args))

            async with anyio.create_task_group() as calls_group:
                for call in calls:
                    calls_group.start_soon(one, call)

        async with anyio.create_task_group() as group:
            for number in range(runs):
                group.start_soon(drive, journals[number % len(journals)], f"run-{number}")

        for number in range(runs):
            record = await journals[0].load(f"run-{number}")
            assert record.owner == f"worker-{number % len(journals)}"
            assert [entry.call_id for entry in record.calls] == [f"run-{number}-{i}" for i in range(width)]
            assert record.complete
            assert [r.output for r in record.results] == [{"i": i} for i in range(width)]
            assert all(entry.starts == 1 for entry in record.calls)
    finally:
        for journal in journals:
            await journal.close()


async def test_writes_made_at_once_each_get_their_own_answer(store: Store) -> None:
    calls = turn(8)
    answers: dict[str, str] = {}
    async with store.open() as journal:
        await journal.begin_run("r", calls)
        await journal.record("r", "c3", "finished", result("c3"))

        async def start(call_id: str) -> None:
            try:
                await journal.record("r", call_id, "started")
            except ts.JournalError as exc:
                answers[call_id] = str(exc)
            else:
                answers[call_id] = "written"

        async with anyio.create_task_group() as group:
            for call in calls:
                group.start_soon(start, call.id)
        record = await journal.load("r")
    assert answers.pop("c3") == "call 'c3' of run 'r' already finished; its result is final"
    assert set(answers.values()) == {"written"} and len(answers) == 7
    assert [(entry.state, entry.starts) for entry in record.calls] == [
        ("finished", 0) if entry.call_id == "c3" else ("started", 1) for entry in record.calls
    ]


# -- claims ----------------------------------------------------------------------------------


async def test_one_holder_at_a_time(store: Store) -> None:
    async with store.open(owner="first") as first, store.open(owner="second") as second:
        await first.begin_run("r", turn(2))
        with pytest.raises(ts.RunClaimedError, match="held by 'first'") as caught:
            await second.claim("r")
        assert caught.value.owner == "first" and caught.value.lease_until is not None
        with pytest.raises(ts.RunClaimedError, match="held by 'first'"):
            await second.record("r", "c0", "started")
        await first.record("r", "c0", "started")
        await first.claim("r")

        await first.release("r")
        await first.release("r")
        with pytest.raises(ts.RunClaimedError, match="not held by this process") as unheld:
            await first.record("r", "c0", "finished", result("c0"))
        assert unheld.value.owner is None

        record = await second.claim("r")
        assert record.owner == "second" and record.call("c0").state == "started"
        with pytest.raises(ts.RunClaimedError, match="held by 'second'"):
            await first.record("r", "c0", "finished", result("c0"))
        with pytest.raises(ts.RunClaimedError, match="held by 'second'"):
            await first.release("r")
        await second.record("r", "c0", "finished", result("c0", "recovered"))
        assert (await first.load("r")).call("c0").result == result("c0", "recovered")


async def test_an_expired_or_forced_claim_fences_off_the_old_holder(store: Store) -> None:
    async with (
        store.open(owner="short", lease=0.1) as short,
        store.open(owner="long") as long,
        store.open(owner="rescuer") as rescuer,
    ):
        await short.begin_run("expires", turn(1))
        await short.record("expires", "c0", "started")
        await anyio.sleep(0.15)
        assert (await rescuer.claim("expires")).owner == "rescuer"
        with pytest.raises(ts.RunClaimedError, match="held by 'rescuer'"):
            await short.record("expires", "c0", "finished", result("c0"))

        await long.begin_run("forced", turn(1))
        with pytest.raises(ts.RunClaimedError, match="held by 'long'"):
            await rescuer.claim("forced")
        assert (await rescuer.claim("forced", force=True)).owner == "rescuer"
        with pytest.raises(ts.RunClaimedError, match="held by 'rescuer'"):
            await long.renew("forced")
        await rescuer.renew("forced")


async def start_child(store: Store, backend: str, *args: str) -> Process:
    return await anyio.open_process(
        [sys.executable, str(CHILD), store.spec(), backend, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=None,
    )


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_two_processes_claiming_at_once_one_wins_and_the_other_is_told(store: Store) -> None:
    async with store.open(owner="crashed") as journal:
        await journal.begin_run("contested", turn(2))
        await journal.release("contested")
    owners = {"alpha": "asyncio", "beta": "trio"}
    children = {
        owner: await start_child(store, backend, "claim", "contested", owner) for owner, backend in owners.items()
    }
    try:
        readers = {}
        for owner, child in children.items():
            assert child.stdout is not None
            readers[owner] = BufferedByteReceiveStream(child.stdout)
        for owner in owners:
            assert await readers[owner].receive_until(b"\n", 1000) == b"ready"
        for child in children.values():
            assert child.stdin is not None
            await child.stdin.send(b"go\n")
        said = {owner: (await readers[owner].receive_until(b"\n", 1000)).decode() for owner in owners}
    finally:
        for child in children.values():
            await child.aclose()
    winners = [owner for owner, line in said.items() if line == "won"]
    assert len(winners) == 1, said
    loser = next(owner for owner in owners if owner != winners[0])
    assert said[loser] == f"lost {winners[0]}"
    async with store.open() as journal:
        assert (await journal.load("contested")).owner == winners[0]


# -- a writer killed for real ----------------------------------------------------------------


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_killed_writer_loses_nothing_it_reported_and_its_run_can_be_taken_over(store: Store) -> None:
    count = 6
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    for round_number in range(3):
        run_id = f"killed-{round_number}"
        kill_after = rng.randrange(0, 2 * count + 2)
        child = await start_child(store, ("asyncio", "trio")[round_number % 2], "write", run_id, str(count))
        reported: list[str] = []
        try:
            assert child.stdout is not None
            lines = BufferedByteReceiveStream(child.stdout)
            while len(reported) < kill_after and (not reported or reported[-1] != "done"):
                reported.append((await lines.receive_until(b"\n", 1000)).decode())
            child.send_signal(signal.SIGKILL)
            await child.wait()
        finally:
            await child.aclose()
        context = f"seed {seed}, round {round_number}, killed after {reported}"
        assert child.returncode in (-signal.SIGKILL, 0), context

        async with store.open(owner="recoverer") as journal:
            try:
                record = await journal.load(run_id)
            except ts.UnknownRunError:
                assert "begun" not in reported, context
                continue
            states = {entry.call_id: entry for entry in record.calls}
            assert list(states) == [f"c{i}" for i in range(count)], context
            for line in reported[1:]:
                transition, call_id = line.split()[0], line.split()[-1]
                if transition == "started":
                    assert states[call_id].state in ("started", "finished"), context
                elif transition == "finished":
                    assert states[call_id].state == "finished", context
            for index, entry in enumerate(record.calls):
                assert entry.starts <= 1, context
                if entry.state == "finished":
                    assert entry.starts == 1, context
                    assert entry.result == result(entry.call_id, expected_output(index), duration_ms=0.5), context

            # The dead writer's lease is still running, but its process is gone from this host:
            # the run is taken over at once, without force=True, and what is left is answered.
            taken = await journal.claim(run_id)
            for entry in taken.calls:
                if entry.state == "started":
                    answer = result(entry.call_id, None, is_error=True, error_kind="interrupted", error="unknown")
                    await journal.record(run_id, entry.call_id, "finished", answer)
                elif entry.state == "planned":
                    await journal.record(run_id, entry.call_id, "started")
                    answer = result(entry.call_id, expected_output(int(entry.call_id[1:])))
                    await journal.record(run_id, entry.call_id, "finished", answer)
            assert (await journal.load(run_id)).complete, context


# -- the database going away ---------------------------------------------------------------


async def test_a_deleted_sqlite_file_fails_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    async with ts.SqliteJournal(path) as journal:
        await journal.begin_run("r", turn(2))
        await journal.record("r", "c0", "started")
        path.unlink()
        with pytest.raises(ts.JournalError, match="was deleted while open"):
            await journal.record("r", "c0", "finished", result("c0", expected_output(0)))
        with pytest.raises(ts.JournalError, match="was deleted while open"):
            await journal.load("r")


async def test_a_sqlite_file_locked_past_the_busy_timeout_fails_the_write(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    async with ts.SqliteJournal(path, busy_timeout=0.1) as journal:
        await journal.begin_run("r", turn(1))
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN EXCLUSIVE")
            with pytest.raises(ts.JournalError, match="stayed locked by another connection"):
                await journal.record("r", "c0", "started")
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert (await journal.load("r")).call("c0").state == "planned"
        await journal.record("r", "c0", "started")
        assert (await journal.load("r")).call("c0").state == "started"


async def test_a_dropped_postgres_connection_fails_the_write_and_nothing_is_recorded(postgres_store: Store) -> None:
    store = postgres_store
    owner = f"doomed-{uuid4().hex[:8]}"
    async with store.open(owner=owner) as journal:
        await journal.begin_run("r", turn(2))
        await journal.record("r", "c0", "started")
        terminated = raw(
            store,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = ?",
            (f"toolsched-journal {owner}",),
        )
        assert terminated == [(True,)]
        with pytest.raises(ts.JournalError, match="went away"):
            await journal.record("r", "c0", "finished", result("c0", expected_output(0)))
        # The next operation connects again; the failed write is not there.
        record = await journal.load("r")
        assert record.call("c0").state == "started"
        await journal.record("r", "c0", "finished", result("c0", expected_output(0)))
        assert (await journal.load("r")).call("c0").state == "finished"


async def test_an_unreachable_postgres_server_is_a_journal_error() -> None:
    with socket.socket() as closed:
        # Bound but not listening: connections to it are refused.
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        journal = ts.PostgresJournal(f"host=127.0.0.1 port={port} user=nobody password=secret", connect_timeout=2)
        message = f"cannot connect to the journal's PostgreSQL at 127.0.0.1:{port}"
        with pytest.raises(ts.JournalError, match=message) as caught:
            await journal.open()
    assert "secret" not in str(caught.value)


# -- retention -------------------------------------------------------------------------------


async def test_prune_removes_old_unheld_runs_whole(store: Store) -> None:
    async with store.open(owner="pruner") as journal:
        for run_id in ("old-done", "old-held", "recent"):
            await journal.begin_run(run_id, turn(3))
            for call in turn(3):
                await journal.record(run_id, call.id, "started")
            await journal.record(run_id, "c0", "finished", result("c0"))
        await journal.release("old-done")
        await journal.release("recent")
        age_run(store, "old-done", 3 * 86400)
        age_run(store, "old-held", 3 * 86400)
        before = rows_of(store, "old-done")
        assert before == {"toolsched_runs": 1, "toolsched_calls": 3, "toolsched_transitions": 4}

        assert await journal.prune(older_than=timedelta(days=2)) == 1
        assert rows_of(store, "old-done") == {"toolsched_runs": 0, "toolsched_calls": 0, "toolsched_transitions": 0}
        with pytest.raises(ts.UnknownRunError):
            await journal.load("old-done")
        assert rows_of(store, "old-held")["toolsched_transitions"] == 4
        assert rows_of(store, "recent")["toolsched_transitions"] == 4
        assert await journal.prune(older_than=timedelta(days=2)) == 0

        await journal.release("old-held")
        assert await journal.prune(older_than=timedelta(days=2)) == 1
        assert await journal.prune(older_than=timedelta(0)) == 1
        with pytest.raises(ts.UnknownRunError):
            await journal.load("recent")


async def test_prune_removes_every_stale_run_however_many(store: Store) -> None:
    """PostgreSQL prunes in batches (each statement answered within the lease, where one transaction over every
    stale run of a journal not pruned for a while was cut off by the statement deadline each time, and never
    finished): every stale run goes in one call, a whole number of batches as well."""
    async with store.open(owner="pruner") as journal:
        for number in range(400):
            await journal.begin_run(f"r{number}", turn(1))
            await journal.release(f"r{number}")
        assert await journal.prune(older_than=timedelta(0)) == 400
        assert await journal.prune(older_than=timedelta(0)) == 0


# -- journals that must not be touched -------------------------------------------------------


def wal_exists(path: Path) -> bool:
    return Path(f"{path}-wal").exists()


async def make_journal_file(path: Path) -> None:
    async with ts.SqliteJournal(path) as journal:
        await journal.begin_run("r", turn(12))
        for call in turn(12):
            await journal.record("r", call.id, "finished", result(call.id, "x" * 2000))
    assert not wal_exists(path)


async def test_a_sqlite_journal_of_a_newer_version_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    await make_journal_file(path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE toolsched_meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    for _ in range(2):
        with pytest.raises(ts.JournalVersionError, match="schema version 99, written by a newer toolsched") as caught:
            await ts.SqliteJournal(path).load("r")
        assert (caught.value.found, caught.value.supported) == (99, ts.journal.SCHEMA_VERSION)
    assert path.read_bytes() == before


async def test_a_postgres_journal_of_a_newer_version_is_refused_untouched(postgres_store: Store) -> None:
    store = postgres_store
    async with store.open() as journal:
        await journal.begin_run("r", turn(3))
    raw(store, "UPDATE toolsched_meta SET value = '7' WHERE key = 'schema_version'")
    before = [raw(store, f"SELECT * FROM {table} ORDER BY 1, 2") for table in ("toolsched_meta", "toolsched_calls")]
    with pytest.raises(ts.JournalVersionError, match="schema version 7, written by a newer toolsched"):
        await store.open().load("r")
    after = [raw(store, f"SELECT * FROM {table} ORDER BY 1, 2") for table in ("toolsched_meta", "toolsched_calls")]
    assert after == before


def random_bytes(size: int) -> bytes:
    return random.Random(size).randbytes(size)


@pytest.mark.parametrize("damage", ["random bytes", "text", "cut in the header", "cut in half", "not a journal"])
async def test_a_damaged_or_foreign_sqlite_file_is_refused_and_not_overwritten(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "journal.db"
    if damage == "random bytes":
        path.write_bytes(random_bytes(8192))
    elif damage == "text":
        path.write_text("these are my notes, not a database\n")
    elif damage == "not a journal":
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('keep me')")
        conn.commit()
        conn.close()
    else:
        await make_journal_file(path)
        whole = path.read_bytes()
        path.write_bytes(whole[:60] if damage == "cut in the header" else whole[: len(whole) // 2])
    before = path.read_bytes()
    journal = ts.SqliteJournal(path)
    with pytest.raises(ts.JournalCorruptError) as caught:
        await journal.begin_run("new", turn(1))
    assert str(path) in str(caught.value)
    assert path.read_bytes() == before
    assert not wal_exists(path)


async def test_a_sqlite_path_that_cannot_hold_a_journal_is_named(tmp_path: Path) -> None:
    with pytest.raises(ts.JournalError, match="is a directory"):
        await ts.SqliteJournal(tmp_path).open()
    missing = tmp_path / "no such dir" / "journal.db"
    with pytest.raises(ts.JournalError, match=r"cannot open the journal .*no such dir"):
        await ts.SqliteJournal(missing).open()


async def test_an_empty_file_becomes_a_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    path.touch()
    async with ts.SqliteJournal(path) as journal:
        await journal.begin_run("r", turn(1))
        assert (await journal.load("r")).call("c0").state == "planned"


async def test_altered_rows_are_reported_as_damage(store: Store) -> None:
    async with store.open() as journal:
        await journal.begin_run("r", turn(2))
        await journal.record("r", "c0", "finished", result("c0", 1))
    raw(store, "UPDATE toolsched_calls SET args = ? WHERE call_id = 'c1'", ('{"index": 99}',))
    async with store.open() as journal:
        with pytest.raises(ts.JournalCorruptError, match="do not match their digest"):
            await journal.load("r")
    raw(store, "UPDATE toolsched_calls SET args = ? WHERE call_id = 'c1'", (json.dumps(turn(2)[1].args),))
    raw(store, "UPDATE toolsched_transitions SET payload = ? WHERE call_id = 'c0'", ('{"output": 1',))
    async with store.open() as journal:
        with pytest.raises(ts.JournalCorruptError, match="the stored result is not JSON"):
            await journal.load("r")


async def test_a_postgres_schema_with_journal_tables_but_no_version_is_refused(postgres_store: Store) -> None:
    store = postgres_store
    async with store.open() as journal:
        await journal.begin_run("r", turn(1))
    raw(store, "DROP TABLE toolsched_meta")
    with pytest.raises(ts.JournalCorruptError, match="no toolsched_meta table"):
        await store.open().load("r")
    assert raw(store, "SELECT count(*) FROM toolsched_calls") == [(1,)]


async def test_journals_opened_at_once_on_a_fresh_store_agree_on_the_schema(store: Store) -> None:
    journals = [store.open() for _ in range(4)]
    try:
        async with anyio.create_task_group() as group:
            for journal in journals:
                group.start_soon(journal.open)
        await journals[0].begin_run("r", turn(1))
        assert (await journals[3].load("r")).call("c0").state == "planned"
    finally:
        for journal in journals:
            await journal.close()
    assert raw(store, "SELECT value FROM toolsched_meta WHERE key = 'schema_version'") == [
        (str(ts.journal.SCHEMA_VERSION),)
    ]


@pytest.mark.parametrize("first_position", [1.5, "1", True, -1, 2**31], ids=repr)
async def test_a_position_no_call_can_have_is_refused_and_the_run_stays_readable(
    store: Store, first_position: Any
) -> None:
    """``add_calls`` took any ``first_position``: 1.5 was stored in SQLite's position column, after which every
    ``load`` and ``recover`` of the run was ``JournalCorruptError``; "1" and 2**31 raised a bare TypeError or
    OverflowError; True and -1 were stored (a call at -1 comes before the turn's first). A position that is not
    a whole number from 0 to 2**31 - 1 (PostgreSQL's integer) is ``JournalError`` naming it, nothing written."""
    async with store.open() as journal:
        await journal.begin_run("r", [ts.ToolCall("c0", "echo", {})])
        with pytest.raises(ts.JournalError, match="first_position"):
            await journal.add_calls("r", first_position, [ts.ToolCall("c1", "echo", {})])
        assert [entry.call_id for entry in (await journal.load("r")).calls] == ["c0"]


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"attempts": None}, "attempts"),
        ({"is_error": 1}, "is_error"),
        ({"batch": "x"}, "batch"),
        ({"error_kind": "weird"}, "error_kind"),
        ({"tool_name": None}, "tool_name"),
    ],
    ids=["attempts-none", "is_error-int", "batch-text", "unknown-error-kind", "tool_name-none"],
)
async def test_a_result_the_journal_could_not_read_back_is_refused_when_recorded(
    store: Store, fields: dict[str, Any], named: str
) -> None:
    """``record(..., "finished", result)`` stored a ``ToolResult`` whose fields have types a result never has
    (``is_error=1``, ``attempts=None``) or an unknown ``error_kind``, and from then on every ``load`` and
    ``recover`` of the run was ``JournalCorruptError``: a finished call is final, so the run could not be mended.
    Such a result is ``JournalError`` naming the field, nothing written; the call can still finish."""
    async with store.open() as journal:
        await journal.begin_run("r", [ts.ToolCall("c1", "echo", {})])
        with pytest.raises(ts.JournalError, match=named):
            await journal.record("r", "c1", "finished", result("c1", "out", **fields))
        assert (await journal.load("r")).call("c1").state == "planned"
        await journal.record("r", "c1", "finished", result("c1", "out"))
        assert (await journal.load("r")).call("c1").result == result("c1", "out")


@pytest.mark.parametrize("transition", ["pending", "approved", "started"])
async def test_arguments_that_do_not_match_their_digest_are_refused_when_recorded(
    store: Store, transition: ts.journal.Transition
) -> None:
    """A transition whose ``args`` do not match the ``digest`` beside them was stored, and from then on every
    ``load`` and ``recover`` of the run took it for damage (``JournalCorruptError``), with no way to mend it.
    It is ``JournalError`` when recorded, nothing written; with the right digest the same transition is kept."""
    args = {"text": "one"}
    async with store.open() as journal:
        await journal.begin_run("r", [ts.ToolCall("c1", "echo", args)])
        with pytest.raises(ts.JournalError, match="digest"):
            await journal.record("r", "c1", transition, {"args": args, "digest": "not the digest"})
        assert (await journal.load("r")).call("c1").state == "planned"
        await journal.record("r", "c1", transition, {"args": args, "digest": ts.journal.args_digest(args)})
        assert (await journal.load("r")).call("c1").state == transition
