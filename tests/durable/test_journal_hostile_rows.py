"""A SQLite journal whose rows were altered behind its back, and runs held from another PID namespace.

A row holding what the journal never writes (text where a time belongs, bytes
where text belongs) is refused as ``JournalCorruptError`` naming the run, the
column and what was found, and nothing is overwritten. A holder whose pid
means nothing here (another PID namespace or boot, or an owner written before
those were recorded) keeps its run until its lease runs out.
"""

from __future__ import annotations

import os
import re
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio

PID_NAMESPACE = Path("/proc/self/ns/pid")
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
TABLES = ("toolsched_runs", "toolsched_calls", "toolsched_transitions")


@ts.tool
async def echo(text: str) -> str:
    """Returns its text."""
    return text


TURN = [ts.ToolCall("c0", "echo", {"text": "zero"}), ts.ToolCall("c1", "echo", {"text": "one"})]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "journal.db"


def alter(path: Path, statement: str) -> list[tuple[Any, ...]]:
    """Runs SQL on the journal file behind the journal's back, as an operator or a stray script would."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(statement).fetchall()
        conn.commit()
        return rows
    finally:
        conn.close()


def contents(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the journal's tables, read without decoding text (so damaged text reads too)."""
    conn = sqlite3.connect(path)
    conn.text_factory = bytes
    try:
        return {table: conn.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall() for table in TABLES}
    finally:
        conn.close()


async def finished_run(path: Path) -> None:
    """Run ``r``, its two calls finished and the run released."""
    async with ts.SqliteJournal(path) as journal:
        outcome = await ts.Executor([echo], journal=journal).run(TURN, run_id="r")
    assert [result.output for result in outcome.results] == ["zero", "one"]


# -- damaged rows ------------------------------------------------------------------------------

# Each alteration, and what the refusal names: the column and the value found there.
DAMAGE = {
    "lease as text": (
        "UPDATE toolsched_runs SET lease_until = 'abc', owner = 'someone-else'",
        "run 'r': toolsched_runs.lease_until holds 'abc' (str)",
    ),
    "lease out of any date's range": (
        "UPDATE toolsched_runs SET lease_until = 1e300, owner = 'someone-else'",
        "run 'r': toolsched_runs.lease_until holds 1e+300 (float)",
    ),
    "created_at as text": (
        "UPDATE toolsched_runs SET created_at = 'yesterday'",
        "run 'r': toolsched_runs.created_at holds 'yesterday' (str)",
    ),
    "owner as bytes": (
        "UPDATE toolsched_runs SET owner = X'6F6E65'",
        "run 'r': toolsched_runs.owner holds b'one' (bytes)",
    ),
    "position as text": (
        "UPDATE toolsched_calls SET position = 'first' WHERE position = 0",
        "run 'r': toolsched_calls.position holds 'first' (str)",
    ),
    "tool name as bytes": (
        "UPDATE toolsched_calls SET tool_name = X'6563686F' WHERE position = 1",
        "run 'r', call at position 1: toolsched_calls.tool_name holds b'echo' (bytes)",
    ),
    "transition's call as bytes": (
        "UPDATE toolsched_transitions SET call_id = X'6330' WHERE call_id = 'c0'",
        "run 'r': toolsched_transitions.call_id holds b'c0' (bytes)",
    ),
    "transition kind as bytes": (
        "UPDATE toolsched_transitions SET kind = X'00' WHERE call_id = 'c1' AND kind = 'started'",
        "run 'r', call 'c1': toolsched_transitions.kind holds b'\\x00' (bytes)",
    ),
    "result as bytes": (
        "UPDATE toolsched_transitions SET payload = X'7B7D' WHERE call_id = 'c1' AND kind = 'finished'",
        "run 'r', call 'c1': toolsched_transitions.payload holds b'{}' (bytes)",
    ),
    "owner not UTF-8": (
        "UPDATE toolsched_runs SET owner = CAST(X'FF' AS TEXT)",
        "Could not decode to UTF-8 column 'owner'",
    ),
    # JSON nested deeper than any value the journal writes: decoding it raised a bare RecursionError.
    "arguments nested 100,000 deep": (
        "UPDATE toolsched_calls SET args = '" + '{"a":' * 100_000 + "1" + "}" * 100_000 + "' WHERE position = 0",
        "run 'r', call 'c0': the stored arguments are not JSON",
    ),
    "result nested 100,000 deep": (
        "UPDATE toolsched_transitions SET payload = '" + "[" * 100_000 + "]" * 100_000 + "' "
        "WHERE call_id = 'c1' AND kind = 'finished'",
        "run 'r', call 'c1': the stored result is not JSON",
    ),
    "start nested 100,000 deep": (
        "UPDATE toolsched_transitions SET payload = '" + "[" * 100_000 + "]" * 100_000 + "' "
        "WHERE call_id = 'c1' AND kind = 'started'",
        "run 'r', call 'c1': the payload of 'started' is not JSON",
    ),
}


@pytest.mark.parametrize(("statement", "named"), DAMAGE.values(), ids=DAMAGE.keys())
async def test_a_damaged_row_is_refused_naming_run_column_and_value(path: Path, statement: str, named: str) -> None:
    await finished_run(path)
    alter(path, statement)
    damaged = contents(path)
    async with ts.SqliteJournal(path, owner="recoverer") as journal:
        executor = ts.Executor([echo], journal=journal)
        attempts: dict[str, Callable[[], Awaitable[Any]]] = {
            "load": lambda: journal.load("r"),
            "claim": lambda: journal.claim("r"),
            "recover": lambda: executor.recover("r"),
            "forced recover": lambda: executor.recover("r", force=True),
        }
        for attempt, operation in attempts.items():
            with pytest.raises(ts.JournalCorruptError) as refused:
                await operation()
            assert named in str(refused.value), attempt
    assert contents(path) == damaged


async def test_a_damaged_last_write_time_is_refused_when_read(path: Path) -> None:
    await finished_run(path)
    alter(path, "UPDATE toolsched_runs SET updated_at = X'00'")
    async with ts.SqliteJournal(path) as journal:
        with pytest.raises(ts.JournalCorruptError, match=r"run 'r': toolsched_runs\.updated_at holds b'\\x00'"):
            await journal.load("r")


async def test_writes_to_a_run_whose_rows_were_damaged_are_refused_as_damage(path: Path) -> None:
    async with ts.SqliteJournal(path, owner="holder") as journal:
        await journal.begin_run("r", TURN)
        await journal.record("r", "c0", "started")

        # The holder no longer finds itself in the row, and what is there is no owner at all.
        alter(path, "UPDATE toolsched_runs SET owner = X'686F6C646572', lease_until = 'soon'")
        owner_damage = re.escape("run 'r': toolsched_runs.owner holds b'holder' (bytes), not text")
        with pytest.raises(ts.JournalCorruptError, match=owner_damage):
            await journal.record("r", "c0", "finished", ts.ToolResult("c0", "echo", "zero"))
        with pytest.raises(ts.JournalCorruptError, match=owner_damage):
            await journal.renew("r")
        with pytest.raises(ts.JournalCorruptError, match=owner_damage):
            await journal.release("r")

        # The row is the holder's again; now the call's latest transition is damaged.
        alter(path, "UPDATE toolsched_runs SET owner = 'holder', lease_until = 4e9")
        alter(path, "UPDATE toolsched_transitions SET kind = X'73746172746564' WHERE call_id = 'c0'")
        with pytest.raises(
            ts.JournalCorruptError, match=r"run 'r', call 'c0': toolsched_transitions\.kind holds b'started'"
        ):
            await journal.record("r", "c0", "finished", ts.ToolResult("c0", "echo", "zero"))


# -- holders in other PID namespaces --------------------------------------------------------

linux_only = pytest.mark.skipif(
    not (PID_NAMESPACE.exists() and BOOT_ID.exists()), reason="PID namespaces and boot IDs are Linux's"
)


@pytest.fixture
def dead_pid() -> int:
    """A pid no process of this namespace has: a child that exited and was reaped."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


@pytest.fixture
def live_pid() -> Iterator[int]:
    """A pid of this namespace whose process lives (not this one), until the test ends."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    yield child.pid
    assert child.stdin is not None
    child.stdin.close()
    child.wait()


def default_owner_parts(path: Path) -> list[str]:
    """This process's default owner, ``host:pid:random:pidns:boot``, split into its fields."""
    return ts.SqliteJournal(path).owner.split(":")


def holder(path: Path, *, pid: int, host: str = "", namespace: str = "", boot: str = "") -> str:
    """An owner as a process with ``pid`` writes it by default; of this host, namespace and boot unless told."""
    this_host, _, random, this_namespace, this_boot = default_owner_parts(path)
    return ":".join((host or this_host, str(pid), random, namespace or this_namespace, boot or this_boot))


async def held_run(path: Path, owner: str) -> None:
    """Run ``r`` begun by ``owner``, whose lease has ten minutes left: only a dead holder gives it up early."""
    async with ts.SqliteJournal(path, owner=owner, lease=600) as journal:
        await journal.begin_run("r", TURN)


@linux_only
def test_the_default_owner_names_the_pid_namespace_and_boot(path: Path) -> None:
    host, pid, _, namespace, boot = default_owner_parts(path)
    assert host == socket.gethostname() and pid == str(os.getpid())
    assert namespace == str(PID_NAMESPACE.stat().st_ino)
    assert boot == BOOT_ID.read_text(encoding="ascii").strip()


OTHER_HOLDERS = {
    "another pid namespace": {"namespace": "4026599999"},
    "another boot": {"boot": "00000000-0000-4000-8000-000000000000"},
    "another host": {"host": "elsewhere.invalid"},
}


@linux_only
@pytest.mark.parametrize("where", OTHER_HOLDERS.values(), ids=OTHER_HOLDERS.keys())
async def test_a_holder_whose_pid_means_nothing_here_keeps_its_run(
    path: Path, dead_pid: int, where: dict[str, str]
) -> None:
    # The pid is free here, but the holder numbers its processes elsewhere: it may well be running.
    owner = holder(path, pid=dead_pid, **where)
    await held_run(path, owner)
    async with ts.SqliteJournal(path) as journal:
        with pytest.raises(ts.RunClaimedError, match="is held by") as refused:
            await ts.Executor([echo], journal=journal).recover("r")
        assert refused.value.owner == owner
        record = await journal.load("r")
    assert record.owner == owner and [entry.state for entry in record.calls] == ["planned", "planned"]


@linux_only
async def test_an_owner_written_without_namespace_and_boot_keeps_its_run_until_its_lease_ends(
    path: Path, dead_pid: int
) -> None:
    # ``host:pid:random``, as journals wrote before: nothing says in which namespace the pid lived.
    owner = f"{socket.gethostname()}:{dead_pid}:0123abcd"
    await held_run(path, owner)
    async with ts.SqliteJournal(path) as journal:
        with pytest.raises(ts.RunClaimedError, match="is held by"):
            await ts.Executor([echo], journal=journal).recover("r")
        alter(path, "UPDATE toolsched_runs SET lease_until = 0")
        outcome = await ts.Executor([echo], journal=journal).recover("r")
    assert [result.output for result in outcome.results] == ["zero", "one"]


@linux_only
async def test_a_live_holder_of_this_namespace_keeps_its_run(path: Path, live_pid: int) -> None:
    owner = holder(path, pid=live_pid)
    await held_run(path, owner)
    async with ts.SqliteJournal(path) as journal:
        with pytest.raises(ts.RunClaimedError, match="is held by"):
            await ts.Executor([echo], journal=journal).recover("r")


@linux_only
async def test_a_dead_holder_of_this_namespace_and_boot_is_taken_over_without_force(path: Path, dead_pid: int) -> None:
    await held_run(path, holder(path, pid=dead_pid))
    async with ts.SqliteJournal(path) as journal:
        outcome = await ts.Executor([echo], journal=journal).recover("r")
        record = await journal.load("r")
    assert [result.output for result in outcome.results] == ["zero", "one"]
    assert record.complete and record.owner is None
