"""Attacks on who holds a journaled run (docs/concepts/durability.md): "Only the process that holds the run
decides (another's `recover` is refused with `ts.RunClaimedError` meanwhile)", and "In this process, a run
in progress cannot be recovered or resumed a second time (`RunClaimedError`)". Against SQLite and PostgreSQL.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import anyio
import psycopg
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from crashes import child_env
from journal_child import Store, store_in

import toolsched as ts

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_in(request.param, tmp_path, "concurrency_attack")


# A pre-forking server: the journal is built (and with ``open``, opened) in the parent, which forks a worker
# that runs a turn and, once that turn's one call started, a second worker that is asked to recover it.
FORKED_WORKERS = """
import json, os, pathlib, time
import anyio
import toolsched as ts
from journal_child import Store

workdir = pathlib.Path({workdir!r})
journal = Store.from_spec({spec!r}).open()
if {opened!r}:
    anyio.run(journal.open)


@ts.tool
async def charge(order: str) -> str:
    with open(workdir / "effects", "a") as effects:
        effects.write(order + "\\n")
    (workdir / "started").touch()
    while not (workdir / "go").exists():
        await anyio.sleep(0.01)
    return f"charged {{order}}"


async def work(job: str) -> str:
    executor = ts.Executor([charge], journal=journal)
    try:
        if job == "run":
            outcome = await executor.run([ts.ToolCall("c1", "charge", {{"order": "A-1"}})], run_id="turn-1")
        else:
            outcome = await executor.recover("turn-1")
    except ts.RunClaimedError as exc:
        return f"{{type(exc).__name__}} {{exc.owner}}"
    except ts.JournalError as exc:
        return type(exc).__name__
    return json.dumps([result.output if not result.is_error else result.error_kind for result in outcome.results])


def fork(job: str) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            (workdir / job).write_text(anyio.run(work, job))
        finally:
            os._exit(0)
    return pid


first = fork("run")
while not (workdir / "started").exists():
    time.sleep(0.01)
os.waitpid(fork("recover"), 0)
(workdir / "go").touch()
os.waitpid(first, 0)
print(json.dumps({{"first": first, "run": (workdir / "run").read_text(), "recover": (workdir / "recover").read_text(),
                  "effects": (workdir / "effects").read_text()}}))
"""


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("opened", [False, True], ids=["built", "opened"])
async def test_a_worker_forked_from_the_same_journal_cannot_take_a_run_its_sibling_is_running(
    store: Store, tmp_path: Path, opened: bool
) -> None:
    """Workers forked from a parent that built the journal (gunicorn's ``--preload``, a multiprocessing pool)
    named themselves with the parent's owner string, so each let itself claim its siblings' runs: the second
    worker's ``recover`` took a run the first was in the middle of and answered its call ``interrupted``, and the
    first worker's run then failed (``LeaseLostError``), losing the result of a call that ran."""
    script = FORKED_WORKERS.format(workdir=str(tmp_path), spec=store.spec(), opened=opened)
    done = await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, "-c", textwrap.dedent(script)],
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    refusal, holder = report["recover"].split(" ", 1)
    assert refusal == "RunClaimedError"
    assert f":{report['first']}:" in holder  # named for the worker that holds the run, not for their parent
    assert report["run"] == json.dumps(["charged A-1"])
    assert report["effects"] == "A-1\n"


async def test_a_copy_of_a_journal_cannot_recover_a_run_in_progress_on_the_original(store: Store) -> None:
    """``copy.copy`` of a journal made another object with the same owner: a ``recover`` through it took over a
    run in progress on the original in this process, answered its call ``interrupted`` while it ran, and the
    run itself then failed with ``LeaseLostError``; ``copy.deepcopy`` raised a bare ``TypeError``."""
    started = anyio.Event()
    go = anyio.Event()
    effects: list[str] = []

    @ts.tool
    async def charge(order: str) -> str:
        effects.append(order)
        started.set()
        await go.wait()
        return f"charged {order}"

    async with store.open() as journal:
        outcomes: list[ts.Outcome] = []

        async def run() -> None:
            executor = ts.Executor([charge], journal=journal)
            outcomes.append(await executor.run([ts.ToolCall("c1", "charge", {"order": "A-1"})], run_id="turn-1"))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run)
            await started.wait()
            with pytest.raises(ts.RunClaimedError):
                await ts.Executor([charge], journal=copy.copy(journal)).recover("turn-1")
            go.set()
        assert copy.deepcopy({"journal": journal})["journal"] is journal
    assert [result.output for result in outcomes[0].results] == ["charged A-1"]
    assert effects == ["A-1"]


@pytest.mark.parametrize("call_id", ["\ud800", "c\x001"], ids=["lone-surrogate", "nul"])
async def test_a_transition_for_a_call_id_no_journal_can_store_is_a_journal_error(store: Store, call_id: str) -> None:
    """``record`` with a call ID holding a lone surrogate raised sqlite3's bare ``UnicodeEncodeError`` (failing
    every transition written in the same batch with it), and PostgreSQL refused a NUL in its own words."""
    async with store.open() as journal:
        await journal.begin_run("r", [ts.ToolCall("c1", "echo", {})])
        with pytest.raises(ts.JournalError, match="call_id"):
            await journal.record("r", call_id, "started")
        await journal.record("r", "c1", "started")
        assert (await journal.load("r")).call("c1").state == "started"


def connections_of(store: Store, journal: ts.Journal, *, settled: bool = False) -> int:
    """How many connections the journal holds open: descriptors of its file in this process (SQLite), sessions
    named for its owner on the server (PostgreSQL; with ``settled``, once those its client closed are gone)."""
    if store.kind == "sqlite":
        assert store.path is not None
        target = os.path.realpath(store.path)
        return sum(os.path.realpath(f"/proc/self/fd/{fd}") == target for fd in os.listdir("/proc/self/fd"))
    assert store.dsn is not None
    name = f"toolsched-journal {journal.owner}"[:63]
    with psycopg.connect(store.dsn, autocommit=True) as conn:
        for _ in range(500):
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)).fetchone()
            assert row is not None
            if row[0] == 0 or not settled:
                break
            # A session the client closed leaves the server's list once its backend has exited.
            time.sleep(0.01)
    return int(row[0])


async def test_a_journal_left_by_a_cancellation_is_closed(store: Store) -> None:
    """``async with journal:`` left by a cancellation (a timeout, a task group cancelled) and ``close()`` called
    in a cancelled scope closed nothing: the connections stayed open (a PostgreSQL session held for the life of
    the process) and the journal went on taking writes."""
    with anyio.move_on_after(0.2):
        async with store.open() as journal:
            await journal.begin_run("r", [ts.ToolCall("c1", "echo", {})])
            assert connections_of(store, journal) == 1
            await anyio.sleep(30)
    assert connections_of(store, journal, settled=True) == 0
    with pytest.raises(ts.JournalError, match="closed"):
        await journal.load("r")

    second = store.open()
    await second.load("r")
    with anyio.CancelScope() as scope:
        scope.cancel()
        await second.close()
    assert connections_of(store, second, settled=True) == 0
    with pytest.raises(ts.JournalError, match="closed"):
        await second.load("r")


@pytest.fixture
def postgres_store(tmp_path: Path) -> Iterator[Store]:
    yield from store_in("postgres", tmp_path, "concurrency_attack")


async def test_a_postgres_server_that_stops_answering_fails_the_run_instead_of_hanging_it(
    postgres_store: Store,
) -> None:
    """A server that stops answering (its backend stopped here with SIGSTOP, as a hung server or a network that
    drops everything looks to the client) held the journal's statement for good: the write was shielded, so
    neither the lost lease nor a timeout around the run ended it, and the run hung until the server came back
    (30 s here, when the test continues it). A statement with no answer within the lease (at least
    ``connect_timeout``) now has its connection closed: the run fails with ``JournalError`` while the server is
    still stopped, and the journal connects afresh for what comes next."""
    dsn = postgres_store.dsn
    assert dsn is not None
    stopped: list[int] = []
    continued = threading.Event()

    def resume_server() -> None:
        continued.set()
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)

    async with postgres_store.open(lease=1, connect_timeout=1) as journal:
        name = f"toolsched-journal {journal.owner}"[:63]

        @ts.tool
        async def stop_the_server() -> str:
            with psycopg.connect(dsn, autocommit=True) as conn:
                rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,))
                stopped.extend(int(row[0]) for row in rows.fetchall())
            assert stopped
            for pid in stopped:
                os.kill(pid, signal.SIGSTOP)
            return "stopped"

        guard = threading.Timer(30, resume_server)
        guard.start()
        try:
            with pytest.raises(ts.JournalError):
                await ts.Executor([stop_the_server], journal=journal).run([ts.ToolCall("s", "stop_the_server")])
            assert not continued.is_set()
        finally:
            guard.cancel()
            resume_server()
        # The connections severed are replaced: the journal answers again.
        assert await journal.prune(older_than=timedelta(days=1)) == 0


@pytest.mark.parametrize("force", ["false", "no", 0.0, None], ids=repr)
async def test_force_that_is_not_a_bool_is_refused_before_a_live_holder_loses_its_run(
    store: Store, force: object
) -> None:
    """``force`` was read for its truth: ``recover(run_id, force="false")`` took a run from its live holder and ran
    its planned call here, what the holder's lease is there to prevent (and ``force=0.0``/``None`` passed as
    False). A ``force`` that is not True or False is now refused, naming it, before anything is claimed."""
    ran: list[str] = []

    @ts.tool
    async def charge(order: str) -> str:
        ran.append(order)
        return f"charged {order}"

    async with store.open(lease=600) as holder, store.open() as other:
        await holder.begin_run("turn-1", [ts.ToolCall("c1", "charge", {"order": "A-1"})])
        with pytest.raises(ts.OptionError, match="force must be True or False"):
            await ts.Executor([charge], journal=other).recover("turn-1", force=force)  # type: ignore[arg-type]
        with pytest.raises(ts.JournalError, match="force must be True or False"):
            await other.claim("turn-1", force=force)  # type: ignore[arg-type]
        assert (await other.load("turn-1")).owner == holder.owner
    assert ran == []


async def test_the_lease_of_a_journal_that_keeps_leases_cannot_change(store: Store) -> None:
    """The lease keeper renews every quarter of the lease it started with: a lease shortened afterwards
    (``journal.lease = 0.1`` once runs had been held) was taken without a word, and a run renewed every
    quarter of the old lease could expire between renewals and be taken by another process while it ran.
    Such a change is ``JournalError``; before any run was held, and to the same value, it is taken."""

    @ts.tool
    async def ping() -> str:
        return "pong"

    journal = store.open(lease=30)
    journal.lease = timedelta(seconds=20)  # nothing held yet: taken
    assert journal.lease == timedelta(seconds=20)
    with pytest.raises(ts.JournalError, match="lease"):
        journal.lease = 0  # checked as when the journal is made
    async with journal:
        outcome = await ts.Executor([ping], journal=journal).run([ts.ToolCall("c1", "ping", {})], run_id="r1")
        assert outcome.results[0].output == "pong"
        with pytest.raises(ts.JournalError, match="cannot change"):
            journal.lease = 0.5
        journal.lease = timedelta(seconds=20)
        assert journal.lease == timedelta(seconds=20)


def test_a_child_forked_while_a_thread_marks_a_run_can_still_run_durably(tmp_path: Path) -> None:
    """The lock around the runs in progress in this process was the parent's in a forked child: a child forked
    while another thread held it (a run starting or ending there) waited on it for good at its first durable
    run. A forked child takes a lock of its own."""
    from toolsched._executor import durable

    journal = ts.SqliteJournal(tmp_path / "runs.db")
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            durable._let_go(journal, "run")

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    stuck = 0
    try:
        for _ in range(20):
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                os._exit(0 if durable._live_lock.acquire(timeout=0.5) else 1)
            _, status = os.waitpid(pid, 0)
            stuck += os.waitstatus_to_exitcode(status) == 1
    finally:
        stop.set()
        worker.join()
    assert stuck == 0


# A recoverer of a run whose holder was killed: says ``ready``, waits for a line (so that two start together),
# then recovers the run (never forced: the holder's death is what lets it) and says ``won`` with the results, or
# ``lost`` with the holder named in the refusal.
RECOVERER = """
import json, sys
import anyio
import durable_child
from journal_child import Store
import toolsched as ts


async def main() -> None:
    async with Store.from_spec(sys.argv[1]).open() as journal:
        print("ready", flush=True)
        sys.stdin.readline()
        try:
            outcome = await durable_child.executor(journal).recover(sys.argv[2], context=sys.argv[3])
        except ts.RunClaimedError as exc:
            print("lost", json.dumps(exc.owner), flush=True)
            return
        results = [[result.call_id, result.error_kind] for result in outcome.results]
        print("won", json.dumps(journal.owner), json.dumps(results), flush=True)


anyio.run(main)
"""


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("point", ["inside c0", "finished c0", "inside c1", "before c3"])
async def test_two_processes_recovering_the_run_of_a_killed_holder_at_once_run_nothing_twice(
    store: Store, tmp_path: Path, point: str
) -> None:
    """The holder is killed (SIGKILL) at a step of its run (``inside c0``: ``started`` journaled, ``finished``
    not); two processes then recover the run at the same moment, each let in by the holder's death alone. One
    recovers it; the other is refused with ``RunClaimedError`` naming the first (or, once the first has ended,
    recovers the same answers from the journal); no call that is not idempotent runs twice (``c0``'s start is
    answered ``interrupted``, ``c3`` runs once)."""
    from crashes import kill_at
    from durable_child import CHILD, executor

    log = tmp_path / "executions.log"
    log.touch()
    await kill_at([sys.executable, str(CHILD), store.spec(), "asyncio", "turn", str(log), point], point)
    recoverers = [
        await anyio.open_process(
            [sys.executable, "-c", RECOVERER, store.spec(), "turn", str(log)], env=child_env(), stderr=None
        )
        for _ in range(2)
    ]
    said: list[str] = []
    try:
        with anyio.fail_after(60):
            streams = [BufferedByteReceiveStream(process.stdout) for process in recoverers]  # type: ignore[arg-type]
            for stream in streams:
                assert (await stream.receive_until(b"\n", 65536)) == b"ready"
            for process in recoverers:
                assert process.stdin is not None
                await process.stdin.send(b"go\n")
            for stream in streams:
                said.append((await stream.receive_until(b"\n", 1 << 20)).decode())
            for process in recoverers:
                assert await process.wait() == 0
    finally:
        for process in recoverers:
            if process.returncode is None:
                process.kill()
            await process.aclose()
    won = [line.split(" ", 2) for line in said if line.startswith("won ")]
    lost = [line.split(" ", 1) for line in said if line.startswith("lost ")]
    if lost:
        assert len(won) == 1 and len(lost) == 1, said
        assert json.loads(lost[0][1]) == json.loads(won[0][1])
    else:
        # The first recovery ended (the run released, waiting for ``c2``'s approval) before the second claimed:
        # the second recovered the same answers from the journal.
        assert len(won) == 2 and won[0][2] == won[1][2], said
    results = dict(json.loads(won[0][2]))
    ran = log.read_text().splitlines()
    assert ran.count("c0") == 1 and ran.count("c3") == 1, ran
    assert results["c0"] == ("interrupted" if point == "inside c0" else None)
    # What the winner recovered is settled: recovering it once more runs nothing.
    async with store.open() as journal:
        again = await executor(journal).recover("turn", context=str(log))
    assert log.read_text().splitlines() == ran
    assert [result.call_id for result in again.results] == [call_id for call_id, _ in json.loads(won[0][2])]


async def test_prune_while_a_run_is_live_leaves_it_whole(store: Store) -> None:
    """``prune(older_than=0)`` from another journal, again and again while a run is under way (its one call
    waits until ten prunes have passed, each after the run's last write): the live lease keeps the run whole, so
    the call's result is journaled and the run reads back complete; once the run has ended and let go of it, the
    next prune takes it."""
    pruned: list[int] = []
    pruner = store.open(owner="pruner")

    @ts.tool
    async def wait_for_prunes() -> str:
        while len(pruned) < 10:
            pruned.append(await pruner.prune(older_than=timedelta(0)))
        return "outlived"

    async with pruner, store.open(lease=2) as journal:
        outcome = await ts.Executor([wait_for_prunes], journal=journal).run(
            [ts.ToolCall("w1", "wait_for_prunes", {})], run_id="live"
        )
        assert [result.output for result in outcome.results] == ["outlived"]
        assert pruned == [0] * 10
        assert (await journal.load("live")).complete
        assert await pruner.prune(older_than=timedelta(0)) == 1
