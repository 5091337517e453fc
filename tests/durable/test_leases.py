"""Leases of journaled runs: renewed together and apart from the journal's writes, and what a run does once
its lease is lost (taken over, or run out unrenewed): it stops before doing more, and no call of it starts
in two live processes.

Against SQLite and the throwaway PostgreSQL server of ``make test`` (TOOLSCHED_TEST_POSTGRES_DSN). Nothing
here asserts a duration: each test waits for the state it checks, under a generous ``fail_after`` that only
keeps a broken build from hanging.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import psycopg
import pytest
from journal_child import Store, store_in
from psycopg import sql

import toolsched as ts
from toolsched.journal._leases import Renewal

pytestmark = pytest.mark.anyio

DSN_VARIABLE = "TOOLSCHED_TEST_POSTGRES_DSN"
# Only keeps a broken build from hanging: every wait below ends as soon as what it waits for happens.
HANG = 60


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_in(request.param, tmp_path, "leases")


def lease_ends(store: Store) -> dict[str, float]:
    """Every run's ``lease_until`` as the database holds it (seconds since the epoch), read behind the journal."""
    if store.kind == "sqlite":
        assert store.path is not None
        conn = sqlite3.connect(store.path, timeout=30)
        try:
            return {run: until for run, until in conn.execute("SELECT run_id, lease_until FROM toolsched_runs")}
        finally:
            conn.close()
    assert store.dsn is not None and store.schema is not None
    with psycopg.connect(store.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(store.schema)))
        rows = conn.execute("SELECT run_id, extract(epoch FROM lease_until)::float8 FROM toolsched_runs").fetchall()
        return {run: until for run, until in rows}


def lease_left(store: Store, run_id: str) -> float:
    """How long the database says the run's lease has left (negative: run out), by the database's clock."""
    if store.kind == "sqlite":
        assert store.path is not None
        conn = sqlite3.connect(store.path, timeout=30)
        try:
            row = conn.execute(
                "SELECT lease_until - (julianday('now') - 2440587.5) * 86400.0 FROM toolsched_runs WHERE run_id = ?",
                (run_id,),
            ).fetchone()
        finally:
            conn.close()
        return float(row[0])
    assert store.dsn is not None and store.schema is not None
    with psycopg.connect(store.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(store.schema)))
        row = conn.execute(
            "SELECT extract(epoch FROM lease_until - clock_timestamp())::float8 FROM toolsched_runs WHERE run_id = %s",
            (run_id,),
        ).fetchone()
        assert row is not None
        return float(row[0])


def spy_on_renewals(journal: ts.Journal) -> list[list[str]]:
    """Records the runs of every renewal statement the journal's lease keeper sends."""
    sent: list[list[str]] = []
    renew = journal._renew_held  # type: ignore[attr-defined]

    def recorded(run_ids: Sequence[str]) -> Renewal:
        sent.append(list(run_ids))
        result: Renewal = renew(run_ids)
        return result

    journal._renew_held = recorded  # type: ignore[attr-defined]
    return sent


def replace_renewals(journal: ts.Journal, renew: Callable[[Sequence[str]], Renewal]) -> None:
    journal._renew_held = renew  # type: ignore[attr-defined]


class Outcomes:
    """What each run in the background ended with: its outcome, or the exception it raised."""

    def __init__(self) -> None:
        self.ended: dict[str, ts.Outcome | BaseException] = {}
        self.done: dict[str, anyio.Event] = {}

    def start(self, group: Any, run_id: str, run: Callable[[], Any]) -> None:
        self.done[run_id] = anyio.Event()

        async def background() -> None:
            try:
                self.ended[run_id] = await run()
            except Exception as exc:
                self.ended[run_id] = exc
            finally:
                self.done[run_id].set()

        group.start_soon(background)


# -- renewals ------------------------------------------------------------------------------


async def test_renewals_land_in_one_statement_while_every_journal_write_waits(store: Store) -> None:
    # Many runs in progress on one journal, each in a call; then the journal's connection is taken away
    # from its writes (its lock held), as when writes queue behind a slow database. The leases must still
    # move on: renewals have their own connection and thread, and renew every run in one statement.
    runs = 40
    entered = 0
    all_in = anyio.Event()
    go = anyio.Event()

    @ts.tool(idempotent=True)
    async def wait(n: int) -> int:
        nonlocal entered
        entered += 1
        if entered == runs:
            all_in.set()
        await go.wait()
        return n

    async with store.open(lease=2.0) as journal:
        sent = spy_on_renewals(journal)
        executor = ts.Executor([wait], journal=journal)
        outcomes = Outcomes()
        with anyio.fail_after(HANG):
            async with anyio.create_task_group() as group:
                for n in range(runs):
                    outcomes.start(
                        group,
                        f"r{n}",
                        lambda n=n: executor.run([ts.ToolCall("c", "wait", {"n": n})], run_id=f"r{n}"),
                    )
                await all_in.wait()
                taken = threading.Event()
                give_back = threading.Event()

                def hold_the_connection() -> None:
                    with journal._lock:  # type: ignore[attr-defined]
                        taken.set()
                        give_back.wait()

                holder = threading.Thread(target=hold_the_connection)
                holder.start()
                try:
                    await anyio.to_thread.run_sync(taken.wait)
                    before = await anyio.to_thread.run_sync(lease_ends, store)
                    renewals_before = len(sent)
                    # Two rounds of renewals land while no write can (each moves every lease on).
                    while True:
                        now = await anyio.to_thread.run_sync(lease_ends, store)
                        if all(now[f"r{n}"] > before[f"r{n}"] for n in range(runs)) and len(sent) >= (
                            renewals_before + 2
                        ):
                            break
                        await anyio.sleep(0.02)
                finally:
                    give_back.set()
                    await anyio.to_thread.run_sync(holder.join)
                go.set()
    assert all(isinstance(outcomes.ended[f"r{n}"], ts.Outcome) for n in range(runs))
    # Every renewal carried every run in progress: one statement for all of them.
    assert sorted(sent[renewals_before]) == sorted(f"r{n}" for n in range(runs))


# -- a lease lost while the run lives ------------------------------------------------------


class Stepped:
    """``first`` (idempotent, ``interrupt_behavior="block"``, a timeout so a streamed turn can stop it) waits
    until it is cancelled; ``second`` runs after it. Both log what happens to them.

    ``first`` returns if ``give_up`` is set: ``ended`` sets it when the run went on for ``HANG`` seconds
    after its lease was lost (the failure being tested), so that a build without the behaviour fails the
    test instead of hanging it (a streamed turn's calls are shielded from the test's own cancellation).
    """

    def __init__(self) -> None:
        self.log: list[str] = []
        self.entered = anyio.Event()
        self.give_up = anyio.Event()

        @ts.tool(idempotent=True, timeout=600)
        async def first() -> str:
            self.log.append("first started")
            self.entered.set()
            try:
                await self.give_up.wait()
            except anyio.get_cancelled_exc_class():
                self.log.append("first cancelled")
                raise
            self.log.append("first gave up")
            return "first"

        @ts.tool
        async def second() -> str:
            self.log.append("second started")
            return "second"

        self.first = first
        self.second = second

    async def ended(self, done: anyio.Event) -> None:
        """Waits for the run to end; fails the test (letting ``first`` return) when it does not."""
        with anyio.move_on_after(HANG):
            await done.wait()
        if not done.is_set():
            self.give_up.set()
            with anyio.fail_after(HANG):
                await done.wait()
            pytest.fail(f"the run went on after its lease was lost: {self.log}")


CALLS = [ts.ToolCall("a", "first"), ts.ToolCall("b", "second")]


async def run_list(executor: ts.Executor, run_id: str) -> ts.Outcome:
    return await executor.run(CALLS, run_id=run_id)


async def run_streamed(executor: ts.Executor, run_id: str) -> ts.Outcome:
    async with executor.turn(run_id=run_id) as turn:
        for call in CALLS:
            turn.submit(call)
        turn.close()
        return await turn.outcome()


@pytest.mark.parametrize("shape", [run_list, run_streamed], ids=["list", "streamed"])
async def test_a_run_taken_over_stops_its_call_in_flight_and_starts_no_other(
    store: Store, shape: Callable[[ts.Executor, str], Any]
) -> None:
    tools = Stepped()
    # A lease long enough that a loaded machine never lets it run out first: the takeover is what stops the run
    # (found by its next renewal, within a quarter of the lease).
    async with store.open(owner="worker", lease=4.0) as journal, store.open(owner="rescuer", lease=30) as rescuer:
        executor = ts.Executor([tools.first, tools.second], journal=journal, strategy=ts.Sequential())
        outcomes = Outcomes()
        async with anyio.create_task_group() as group:
            outcomes.start(group, "r", lambda: shape(executor, "r"))
            with anyio.fail_after(HANG):
                await tools.entered.wait()
                # Another process takes the run from its live holder (force=True, as an operator might).
                taken = await rescuer.claim("r", force=True)
            await tools.ended(outcomes.done["r"])
        ended = outcomes.ended["r"]
        if isinstance(ended, ts.StreamFailed):
            ended = ended.__cause__ or ended
        assert isinstance(ended, ts.LeaseLostError), ended
        assert isinstance(ended, ts.RunClaimedError)
        assert ended.owner == "rescuer" and not ended.expired
        assert "held by 'rescuer'" in str(ended)
        assert tools.log == ["first started", "first cancelled"]
        record = await rescuer.load("r")
        # Nothing more was written by the worker: the rescuer holds the run as it found it (a streamed turn's
        # second call may not have been submitted, so planned, yet when the run was taken).
        assert record.owner == "rescuer"
        assert [entry.state for entry in record.calls] == [entry.state for entry in taken.calls]
        assert [entry.state for entry in record.calls][:1] == ["started"]


async def test_a_run_whose_renewals_fail_stops_before_its_lease_runs_out(store: Store) -> None:
    # The journal cannot renew (unreachable for renewals); the run must stop, its call in flight
    # cancelled, while its lease in the database still has time left: before anyone may take it over.
    tools = Stepped()
    left_at_stop: list[float] = []

    @ts.tool(name="first", idempotent=True)
    async def watched() -> str:
        tools.log.append("first started")
        try:
            await tools.give_up.wait()
        except anyio.get_cancelled_exc_class():
            # Read at once, synchronously: nothing else of this process runs before it.
            left_at_stop.append(lease_left(store, "r"))
            tools.log.append("first cancelled")
            raise
        return "first"

    def unreachable(run_ids: Sequence[str]) -> Renewal:
        raise ts.JournalError("the journal's server went away (for renewals)")

    async with store.open(owner="worker", lease=2.0) as journal:
        replace_renewals(journal, unreachable)
        executor = ts.Executor([watched, tools.second], journal=journal, strategy=ts.Sequential())
        outcomes = Outcomes()
        async with anyio.create_task_group() as group:
            outcomes.start(group, "r", lambda: run_list(executor, "r"))
            await tools.ended(outcomes.done["r"])
    lost = outcomes.ended["r"]
    assert isinstance(lost, ts.LeaseLostError), lost
    assert lost.expired and lost.owner is None
    assert "no renewal" in str(lost)
    assert tools.log == ["first started", "first cancelled"]
    # A quarter of the 2 s lease is the margin the run had left to stop in.
    assert left_at_stop[0] > 0
    # It let go as it stopped: another process recovers it at once.
    async with store.open(owner="rescuer") as rescuer:
        record = await rescuer.load("r")
        assert record.owner is None
        assert [entry.state for entry in record.calls] == ["started", "planned"]


async def test_a_process_paused_past_its_lease_stops_before_doing_more(store: Store) -> None:
    # A paused process: neither its event loop nor its lease keeper runs while the lease runs out and
    # another process takes the run over. When it wakes, the run must notice before it does anything more:
    # its call in flight is cancelled and the next call never starts there.
    tools = Stepped()
    paused = threading.Event()
    woken = threading.Event()

    async with store.open(owner="worker", lease=0.8) as journal:
        renew = journal._renew_held  # type: ignore[attr-defined]

        def pausable(run_ids: Sequence[str]) -> Renewal:
            if paused.is_set():
                woken.wait()
            result: Renewal = renew(run_ids)
            return result

        replace_renewals(journal, pausable)
        executor = ts.Executor([tools.first, tools.second], journal=journal, strategy=ts.Sequential())
        outcomes = Outcomes()
        async with anyio.create_task_group() as group:
            outcomes.start(group, "r", lambda: run_list(executor, "r"))
            with anyio.fail_after(HANG):
                await tools.entered.wait()
            paused.set()

            async def take_over() -> None:
                async with store.open(owner="rescuer", lease=30) as rescuer:
                    with anyio.fail_after(HANG):
                        while True:
                            try:
                                await rescuer.claim("r")
                                return
                            except ts.RunClaimedError:
                                await anyio.sleep(0.02)

            # The event loop stops here (a blocking join), while another thread takes the run over
            # once its lease has run out: this process is paused.
            rescuing = threading.Thread(target=anyio.run, args=(take_over,))
            rescuing.start()
            rescuing.join()
            woken.set()
            await tools.ended(outcomes.done["r"])
        ended = outcomes.ended["r"]
        assert isinstance(ended, ts.LeaseLostError), ended
        assert tools.log == ["first started", "first cancelled"]

    async with store.open(owner="rescuer", lease=30) as rescuer:
        record = await rescuer.load("r")
        assert record.owner == "rescuer"
        assert [entry.state for entry in record.calls] == ["started", "planned"]
        # The rescuer finishes the run: the idempotent call runs again, the next call runs once, there.
        log: list[str] = []

        @ts.tool(name="first", idempotent=True)
        async def quick_first() -> str:
            log.append("first started")
            return "first"

        @ts.tool
        async def second() -> str:
            log.append("second started")
            return "second"

        outcome = await ts.Executor([quick_first, second], journal=rescuer).recover("r")
        assert [result.output for result in outcome.results] == ["first", "second"]
        assert log == ["first started", "second started"]


async def test_a_run_that_lost_its_lease_writes_nothing_more(store: Store) -> None:
    # The loss noticed by a write rather than by a renewal: the run was taken while its call finished.
    release_first = anyio.Event()
    entered = anyio.Event()
    log: list[str] = []

    @ts.tool(idempotent=True)
    async def first() -> str:
        log.append("first started")
        entered.set()
        await release_first.wait()
        log.append("first returned")
        return "first"

    @ts.tool
    async def second() -> str:
        log.append("second started")
        return "second"

    async with store.open(owner="worker", lease=30) as journal, store.open(owner="rescuer", lease=30) as rescuer:
        executor = ts.Executor([first, second], journal=journal, strategy=ts.Sequential())
        outcomes = Outcomes()
        with anyio.fail_after(HANG):
            async with anyio.create_task_group() as group:
                outcomes.start(group, "r", lambda: run_list(executor, "r"))
                await entered.wait()
                await rescuer.claim("r", force=True)
                release_first.set()
                await outcomes.done["r"].wait()
        ended = outcomes.ended["r"]
        assert isinstance(ended, ts.LeaseLostError) and ended.owner == "rescuer"
        assert log == ["first started", "first returned"]
        record = await rescuer.load("r")
        assert record.owner == "rescuer"
        assert [entry.state for entry in record.calls] == ["started", "planned"]


async def test_closing_the_journal_stops_its_lease_keeper_and_its_runs(store: Store) -> None:
    # Closing a journal stops its lease keeper (and closes its connection) even while it keeps runs; those
    # runs stop as their leases are no longer renewed.
    entered = anyio.Event()

    @ts.tool(idempotent=True)
    async def wait() -> str:
        entered.set()
        await anyio.sleep_forever()
        return "unreachable"

    journal = store.open(owner="worker", lease=0.4)
    await journal.open()
    keeper = journal.leases
    executor = ts.Executor([wait], journal=journal)
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as group:
            outcomes = Outcomes()
            outcomes.start(group, "r", lambda: executor.run([ts.ToolCall("w", "wait")], run_id="r"))
            await entered.wait()
            await journal.close()
            await outcomes.done["r"].wait()
    assert isinstance(outcomes.ended["r"], ts.JournalError)
    assert keeper._thread is None or not keeper._thread.is_alive()  # type: ignore[attr-defined]


async def test_renewals_that_fail_twice_in_a_row_are_tried_again_before_the_run_must_stop(store: Store) -> None:
    # A blip of the journal: two renewals in a row fail. A failed renewal is tried again sooner than the next
    # round, so the run keeps its lease and completes; the call ends once renewals land again.
    attempts: list[str] = []
    landed = threading.Event()

    async with store.open(owner="worker", lease=2.0) as journal:
        renew = journal._renew_held  # type: ignore[attr-defined]

        def blip(run_ids: Sequence[str]) -> Renewal:
            if len(attempts) < 2:
                attempts.append("failed")
                raise ts.JournalError("the journal's server restarted")
            result: Renewal = renew(run_ids)
            attempts.append("landed")
            if attempts.count("landed") >= 2:
                landed.set()
            return result

        replace_renewals(journal, blip)

        @ts.tool(idempotent=True)
        async def wait() -> str:
            await anyio.to_thread.run_sync(landed.wait, abandon_on_cancel=True)
            return "done"

        with anyio.fail_after(HANG):
            outcome = await ts.Executor([wait], journal=journal).run([ts.ToolCall("w", "wait")], run_id="r")
    assert outcome.results[0].output == "done"
    assert attempts[:4] == ["failed", "failed", "landed", "landed"]


async def test_an_sqlite_write_that_waited_for_the_lock_still_leaves_its_lease_ahead(tmp_path: Path) -> None:
    # Another connection holds the file's write lock for longer than the lease while a transition waits for it.
    # The lease the transition writes must count from when it was written: otherwise it is already over when
    # it commits, and another process may take the run at once while this one goes on with it.
    store = Store("sqlite", path=str(tmp_path / "journal.db"))
    async with store.open(owner="worker", lease=0.5) as journal:
        await journal.begin_run("r", [ts.ToolCall("c", "echo")])
        assert store.path is not None
        blocker = sqlite3.connect(store.path, timeout=30, isolation_level=None, check_same_thread=False)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(journal.record, "r", "c", "started")
                # Held for twice the lease while the write waits for it (the test's setup, not a measurement).
                await anyio.sleep(1.0)
                blocker.execute("ROLLBACK")
        finally:
            blocker.close()
        assert lease_left(store, "r") > 0


async def test_a_call_whose_started_write_outlasted_the_lease_does_not_start(tmp_path: Path) -> None:
    # The file's write lock is taken by another connection just before the call's ``started`` transition, and
    # held past three quarters of the lease: neither that write nor a renewal lands in time. When the write
    # finally lands, the run can no longer vouch for its lease: the tool's body must not begin, not even up to
    # its first await.
    store = Store("sqlite", path=str(tmp_path / "journal.db"))
    assert store.path is not None
    log: list[str] = []
    holding: list[threading.Thread] = []

    def hold_the_file(event: ts.HookEvent) -> None:
        taken = threading.Event()

        def hold() -> None:
            blocker = sqlite3.connect(str(store.path), timeout=30, isolation_level=None)
            blocker.execute("BEGIN IMMEDIATE")
            taken.set()
            # Twice the lease (the test's setup, not a measurement).
            time.sleep(0.8)
            blocker.execute("ROLLBACK")
            blocker.close()

        thread = threading.Thread(target=hold)
        thread.start()
        holding.append(thread)
        taken.wait()

    @ts.tool(idempotent=True)
    async def first() -> str:
        log.append("first started")
        await anyio.lowlevel.checkpoint()
        log.append("first went on")
        return "first"

    async with store.open(owner="worker", lease=0.4) as journal:
        executor = ts.Executor([first], journal=journal, hooks=ts.Hooks().pre_tool_use("first", hold_the_file))
        with anyio.fail_after(HANG), pytest.raises(ts.LeaseLostError) as lost:
            await executor.run([ts.ToolCall("a", "first")], run_id="r")
        for thread in holding:
            await anyio.to_thread.run_sync(thread.join)
    assert lost.value.expired
    assert log == []


async def test_a_live_run_keeps_its_lease_while_other_processes_keep_trying_to_claim_it(store: Store) -> None:
    # Recovers racing a live run: other processes try to claim it over and over (each try locks the run's row
    # for a moment on PostgreSQL). Its renewals must still land: every claim is refused, and the run completes.
    landed = threading.Event()
    refused = 0
    taken = 0

    # A 2 s lease: its renewals (every third of it) have room on two busy cores, where a 0.8 s lease lapsed
    # under the four claimers' tight loop on SQLite in a fresh-clone make test.
    async with store.open(owner="worker", lease=2.0) as journal:
        renew = journal._renew_held  # type: ignore[attr-defined]
        rounds: list[int] = []

        def counted(run_ids: Sequence[str]) -> Renewal:
            result: Renewal = renew(run_ids)
            if "r" in result[0]:
                rounds.append(1)
                # Three rounds landing amid the claims show they do not hold renewals off; renewals that could
                # not land would let the lease lapse while the claimers keep trying, and the run end LeaseLostError.
                if len(rounds) >= 3:
                    landed.set()
            return result

        replace_renewals(journal, counted)
        entered = anyio.Event()

        outcomes = Outcomes()
        claimers = 4
        stopped: list[str] = []
        all_stopped = anyio.Event()

        @ts.tool(idempotent=True)
        async def wait() -> str:
            entered.set()
            await anyio.to_thread.run_sync(landed.wait, abandon_on_cancel=True)
            # The run ends (and lets go) only once nobody tries any more: a claim after that would be fair.
            await all_stopped.wait()
            return "done"

        async def keep_claiming(owner: str) -> None:
            nonlocal refused, taken
            async with store.open(owner=owner, lease=30) as other:
                while not landed.is_set() and not outcomes.done["r"].is_set():
                    try:
                        await other.claim("r")
                        taken += 1
                    except ts.RunClaimedError:
                        refused += 1
                    # Tries a few hundred times a second between them: with no pause, on two cores shared with
                    # another test process, the four could keep a renewal waiting on SQLite's lock past the lease.
                    await anyio.sleep(0.01)
            stopped.append(owner)
            if len(stopped) == claimers:
                all_stopped.set()

        with anyio.fail_after(HANG):
            async with anyio.create_task_group() as group:
                outcomes.start(
                    group, "r", lambda: ts.Executor([wait], journal=journal).run([ts.ToolCall("w", "wait")], run_id="r")
                )
                await entered.wait()
                for n in range(claimers):
                    group.start_soon(keep_claiming, f"rescuer-{n}")
    assert isinstance(outcomes.ended["r"], ts.Outcome), outcomes.ended["r"]
    assert taken == 0 and refused > 0
