"""Durable runs: an executor with a journal survives a crash, against SQLite and a real PostgreSQL server.

The crash tests run a turn in a child process (tests/support/durable_child.py), kill it
with SIGKILL at a chosen point, and recover the run in this process. The
PostgreSQL server is the one `make test` starts (tests/postgres_server.sh);
without TOOLSCHED_TEST_POSTGRES_DSN those tests fail rather than skip.
"""

from __future__ import annotations

import os
import random
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import anyio
import psycopg
import pytest
from crashes import kill_at
from durable_child import CHILD, IDEMPOTENT, POINTS, TURN, append, executor, expected_output
from journal_child import Store
from psycopg import sql

import toolsched as ts
from toolsched._values.digest import args_digest

pytestmark = pytest.mark.anyio

DSN_VARIABLE = "TOOLSCHED_TEST_POSTGRES_DSN"
UNIQUE_IDS = ["c0", "c1", "c2", "c3", "c4", "c5"]
KILLS_PER_RUN = 3


def postgres_schema() -> Iterator[Store]:
    dsn = os.environ.get(DSN_VARIABLE)
    if not dsn:
        pytest.fail(
            f"{DSN_VARIABLE} is not set, so there is no PostgreSQL server for the durable-run tests: "
            "run them through `make test` (or `tests/postgres_server.sh python -m pytest`)"
        )
    schema = f"durable_test_{uuid4().hex[:12]}"
    yield Store("postgres", dsn=dsn, schema=schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        yield Store("sqlite", path=str(tmp_path / "journal.db"))
    else:
        yield from postgres_schema()


def executions(log: Path) -> Counter[str]:
    return Counter(log.read_text(encoding="utf-8").split()) if log.exists() else Counter()


async def crash_at(store: Store, backend: str, run_id: str, log: Path, point: str, stream: bool = False) -> None:
    """Runs the turn in a child process (``durable_child.py``), streamed with ``stream``, and kills it with
    SIGKILL once it reaches ``point``."""
    extra = ["stream"] if stream else []
    await kill_at([sys.executable, str(CHILD), store.spec(), backend, run_id, str(log), point, *extra], point)


def check_recovered(outcome: ts.Outcome, log: Path) -> None:
    """The invariants after a recovery: every call answered once, in model order, nothing run twice."""
    ran = executions(log)
    by_id = {result.call_id: result for result in outcome.results}
    assert len(by_id) == len(outcome.results)
    # c2 waits for a person: it is pending, never answered and never run.
    assert outcome.interrupted
    assert [request.call_id for request in outcome.pending] == ["c2"]
    assert [result.call_id for result in outcome.results] == [i for i in UNIQUE_IDS if i != "c2"]
    assert ran["c2"] == 0
    first = {call.id: call for call in reversed(TURN)}
    for call in first.values():
        result = by_id.get(call.id)
        if result is None or call.name == "missing":
            continue
        if call.name in IDEMPOTENT:
            assert not result.is_error and result.output == expected_output(call)
            assert ran[call.id] >= 1
        elif result.error_kind == "interrupted":
            assert "not idempotent" in (result.error or "")
            assert ran[call.id] <= 1
        else:
            assert not result.is_error and result.output == expected_output(call)
            assert ran[call.id] == 1
    assert by_id["c5"].error_kind == "unknown_tool"


async def test_a_run_killed_at_any_point_recovers(store: Store, anyio_backend: str, tmp_path: Path) -> None:
    # A seeded shuffle of every kill point, dealt out so that the four runs of this test
    # (two journals, two event loops) cover each point once.
    shuffled = random.Random(9).sample(POINTS, len(POINTS))
    deal = ["sqlite/asyncio", "sqlite/trio", "postgres/asyncio", "postgres/trio"].index(f"{store.kind}/{anyio_backend}")
    points = shuffled[deal * KILLS_PER_RUN : (deal + 1) * KILLS_PER_RUN]
    runs = {point: (f"run-{index}", tmp_path / f"executions-{index}.log") for index, point in enumerate(points)}
    # The crashed runs share the journal, and crash at once.
    async with anyio.create_task_group() as group:
        for point, (run_id, log) in runs.items():
            group.start_soon(crash_at, store, anyio_backend, run_id, log, point)
    async with store.open() as journal:
        for point, (run_id, log) in runs.items():
            before = executions(log)
            outcome = await executor(journal).recover(run_id, context=str(log), force=True)
            assert outcome.run_id == run_id, point
            check_recovered(outcome, log)
            ran_by_recovery = executions(log) - before
            assert set(ran_by_recovery) <= {"c0", "c1", "c3", "c4"}, point
            # The pending approval is still pending: approving it runs it, once, and completes the run.
            state = outcome.state
            assert state is not None
            state.approve("c2")
            finished = await executor(journal).resume(state, context=str(log))
            assert not finished.interrupted and finished.run_id == run_id
            assert [result.call_id for result in finished.results] == UNIQUE_IDS
            assert finished.results[2].output == "deployed to prod"
            assert executions(log)["c2"] == 1
            # A finished run recovers from the journal alone: nothing runs again.
            settled = executions(log)
            again = await executor(journal).recover(run_id, context=str(log))
            assert again.results == finished.results
            assert executions(log) == settled
            record = await journal.load(run_id)
            assert record.complete


async def test_a_durable_run_journals_every_answer(store: Store, tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    async with store.open() as journal:
        outcome = await executor(journal).run(TURN, run_id="turn-1", context=str(log))
        assert outcome.run_id == "turn-1" and outcome.interrupted
        record = await journal.load("turn-1")
        assert record.owner is None  # released when the run ended
        states = {entry.call_id: entry.state for entry in record.calls}
        assert states == {
            "c0": "finished",
            "c1": "finished",
            "c2": "pending",
            "c3": "finished",
            "c4": "finished",
            "c5": "finished",
        }
        assert record.results == outcome.results
        assert record.call("c2").decision is not None
        assert record.call("c2").decision["reason"] == "`deploy` needs approval before it runs"
        with pytest.raises(ts.RunExistsError, match="turn-1"):
            await executor(journal).run(TURN, run_id="turn-1", context=str(log))
        generated = await executor(journal).run(TURN[:2], context=str(log))
        assert generated.run_id is not None and len(generated.run_id) == 32
        assert (await journal.load(generated.run_id)).complete


async def test_a_rejection_is_journaled_and_recovered(store: Store, tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    async with store.open() as journal:
        outcome = await executor(journal).run(TURN[2:3], run_id="asks", context=str(log))
        assert outcome.state is not None
        # The state names its run, also after a trip through JSON (to another process).
        state = ts.RunState.from_json(outcome.state.to_json())
        state.reject("c2", "not today")
        rejected = await executor(journal).resume(state, context=str(log))
        assert rejected.results[0].error_kind == "permission_denied"
        assert "not today" in (rejected.results[0].error or "")
        assert (await journal.load("asks")).call("c2").state == "finished"
        assert (await executor(journal).recover("asks")).results == rejected.results
    assert executions(log)["c2"] == 0


async def test_without_a_journal_nothing_is_journaled(tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    plain = ts.Executor([append], strategy=ts.Sequential())
    outcome = await plain.run(TURN[:1], context=str(log))
    assert outcome.run_id is None
    named = await plain.run([ts.ToolCall("x", "append", {"text": "y"})], run_id="mine", context=str(log))
    assert named.run_id == "mine"
    with pytest.raises(ts.OptionError, match="journal"):
        await plain.recover("mine")
    with pytest.raises(ts.OptionError, match="journal"):
        ts.Executor([], journal="journal.db")  # type: ignore[arg-type]


async def test_recovering_an_unknown_run_is_refused(store: Store) -> None:
    async with store.open() as journal:
        with pytest.raises(ts.UnknownRunError, match="no-such-run"):
            await executor(journal).recover("no-such-run")


async def test_two_recoveries_at_once_one_wins(store: Store) -> None:
    gate = anyio.Event()
    runs: list[str] = []

    @ts.tool(idempotent=True)
    async def slow(key: str) -> str:
        """Waits until the other recovery was refused."""
        runs.append(key)
        await gate.wait()
        return key

    calls = [ts.ToolCall("s1", "slow", {"key": "a"})]
    async with store.open(owner="crashed") as first:
        await first.begin_run("shared", calls)
        await first.release("shared")
    outcomes: dict[str, ts.Outcome] = {}
    refusals: dict[str, ts.RunClaimedError] = {}

    async def recover(owner: str) -> None:
        async with store.open(owner=owner) as journal:
            try:
                outcomes[owner] = await ts.Executor([slow], journal=journal).recover("shared")
            except ts.RunClaimedError as exc:
                refusals[owner] = exc
                gate.set()

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(recover, "left")
            group.start_soon(recover, "right")
    assert len(outcomes) == 1 and len(refusals) == 1
    (winner, outcome), (loser, refusal) = next(iter(outcomes.items())), next(iter(refusals.items()))
    assert refusal.owner == winner and winner in str(refusal) and loser != winner
    assert [result.output for result in outcome.results] == ["a"]
    assert runs == ["a"]


async def cut_off(store: Store, journal: ts.Journal) -> None:
    """Takes the database away from the journal: closes it (SQLite) or kills its server connection (PostgreSQL)."""
    if store.kind == "sqlite":
        await journal.close()
        return
    assert store.dsn is not None
    with psycopg.connect(store.dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (f"toolsched-journal {journal.owner}"[:63],),
        )


@pytest.mark.parametrize("strategy", [ts.Sequential(), ts.Parallel()], ids=["sequential", "parallel"])
async def test_the_database_going_away_fails_the_run_loudly(
    store: Store, strategy: ts.Sequential | ts.Parallel
) -> None:
    ran: list[str] = []
    reported: list[str] = []
    journal = store.open(owner="doomed")

    @ts.tool
    async def step(n: int) -> int:
        """Runs; the second call takes the database away while it runs."""
        ran.append(f"s{n}")
        if n == 1:
            await cut_off(store, journal)
        return n

    def on_event(event: ts.Event) -> None:
        if isinstance(event, ts.ToolFinished):
            reported.append(event.result.call_id)

    calls = [ts.ToolCall(f"s{n}", "step", {"n": n}) for n in range(3)]
    doomed = ts.Executor([step], strategy=strategy, journal=journal, on_event=on_event)
    try:
        with pytest.raises(ts.JournalError):
            await doomed.run(calls, run_id="cut")
    finally:
        await journal.close()
    async with store.open() as reopened:
        record = await reopened.load("cut")
        journaled = [entry.call_id for entry in record.calls if entry.state == "finished"]
        # Nothing was reported done that is not journaled.
        assert sorted(reported) == journaled
        if isinstance(strategy, ts.Sequential):
            # Nothing ran past the failure.
            assert ran == ["s0", "s1"] and journaled == ["s0"]
            assert record.call("s1").state == "started"
        recovered = await ts.Executor([step], journal=reopened).recover("cut", force=True)
    assert [result.call_id for result in recovered.results] == ["s0", "s1", "s2"]
    for entry, result in zip(record.calls, recovered.results, strict=True):
        if entry.result is not None:
            assert result == entry.result
        elif entry.state == "started":
            assert result.error_kind == "interrupted"
        else:
            assert result.output == int(entry.call_id[1:])
    # No call ran twice.
    assert sorted(ran) == sorted(set(ran))


async def test_a_streamed_turn_killed_at_any_point_recovers_what_it_journaled(store: Store, tmp_path: Path) -> None:
    # The calls arrive 10 ms apart; each is journaled as it arrives, before anything else happens to it.
    points = ["inside c0", "finished c1", "before c3", "inside c4"]
    runs = {point: (f"streamed-{index}", tmp_path / f"streamed-{index}.log") for index, point in enumerate(points)}
    async with anyio.create_task_group() as group:
        for point, (run_id, log) in runs.items():
            group.start_soon(crash_at, store, "asyncio", run_id, log, point, True)
    first = {call.id: call for call in reversed(TURN)}
    async with store.open() as journal:
        for point, (run_id, log) in runs.items():
            journaled = [call.id for call in (await journal.load(run_id)).turn]
            # What was journaled is the turn's beginning, in model order.
            assert journaled == [call.id for call in TURN[: len(journaled)]], point
            before = executions(log)
            outcome = await executor(journal).recover(run_id, context=str(log), force=True)
            ran = executions(log)
            unique = list(dict.fromkeys(journaled))
            answered = [result.call_id for result in outcome.results] + [r.call_id for r in outcome.pending]
            assert sorted(answered) == sorted(unique), point
            for result in outcome.results:
                call = first[result.call_id]
                if call.name == "missing":
                    assert result.error_kind == "unknown_tool"
                elif call.name in IDEMPOTENT:
                    assert result.output == expected_output(call), point
                elif result.error_kind == "interrupted":
                    assert ran[call.id] <= 1 and before[call.id] == ran[call.id], point
                else:
                    assert result.output == expected_output(call) and ran[call.id] == 1, point
            # The unjournaled rest of the turn never ran.
            assert not set(ran) - set(unique), point


async def test_a_streamed_run_is_durable_too(store: Store, tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    async with store.open() as journal:
        events = [event async for event in executor(journal).stream(TURN[:2], context=str(log))]
        final = events[-1]
        assert isinstance(final, ts.RunFinished) and final.outcome.run_id is not None
        record = await journal.load(final.outcome.run_id)
        assert record.complete and record.results == final.outcome.results


async def test_a_started_call_whose_tool_is_gone_is_interrupted(store: Store) -> None:
    async with store.open(owner="crashed") as crashed:
        await crashed.begin_run("gone", [ts.ToolCall("g1", "retired", {"x": 1}), ts.ToolCall("g2", "append", {})])
        await crashed.record("gone", "g1", "started", {"args": {"x": 1}})
    async with store.open() as journal:
        outcome = await executor(journal).recover("gone", force=True)
    assert [result.error_kind for result in outcome.results] == ["interrupted", "invalid_input"]
    assert "`retired` is not idempotent" in (outcome.results[0].error or "")


def retrying_fetch(ran: list[str]) -> ts.FunctionTool:
    @ts.tool(idempotent=True, retry=ts.Retry(attempts=3, backoff=0.001, max_backoff=0.002))
    async def fetch(key: str) -> str:
        ran.append(key)
        if len(ran) == 1:
            raise ts.Transient("busy")
        return f"{key}: done"

    return fetch


async def test_every_attempt_is_journaled_and_recover_goes_on_from_the_attempts_spent(store: Store) -> None:
    ran: list[str] = []
    async with store.open() as journal:
        outcome = await ts.Executor([retrying_fetch(ran)], journal=journal).run(
            [ts.ToolCall("f1", "fetch", {"key": "a"})], run_id="retried"
        )
        assert outcome.results[0].attempts == 2
        record = await journal.load("retried")
        assert record.calls[0].starts == 2
    # A run that crashed after two attempts started: recover runs the one attempt left, counted as the third.
    async with store.open(owner="crashed") as crashed:
        await crashed.begin_run("two-spent", [ts.ToolCall("f1", "fetch", {"key": "b"})])
        await crashed.record("two-spent", "f1", "started", {"args": {"key": "b"}})
        await crashed.record("two-spent", "f1", "started", {"args": {"key": "b"}})
    ran.clear()
    ran.append("spent")  # the next run of the body succeeds
    async with store.open() as journal:
        recovered = await ts.Executor([retrying_fetch(ran)], journal=journal).recover("two-spent", force=True)
    assert (recovered.results[0].output, recovered.results[0].attempts) == ("b: done", 3)


async def test_recover_never_exceeds_the_attempts_of_the_retry_policy(store: Store) -> None:
    async with store.open(owner="crashed") as crashed:
        await crashed.begin_run("all-spent", [ts.ToolCall("f1", "fetch", {"key": "c"})])
        for _ in range(3):
            await crashed.record("all-spent", "f1", "started", {"args": {"key": "c"}})
    ran: list[str] = []
    async with store.open() as journal:
        recovered = await ts.Executor([retrying_fetch(ran)], journal=journal).recover("all-spent", force=True)
    result = recovered.results[0]
    assert result.error_kind == "interrupted" and ran == []
    assert "all 3 attempts" in (result.error or "")


@pytest.mark.parametrize("left", ["approved", "pending", "started"])
async def test_recover_refuses_a_call_a_deny_rule_in_force_names(store: Store, left: str) -> None:
    """Approved, held for a person or started before the crash, then denied by a rule added since: a deny
    still wins, as it does on `resume` (recover ran an approved call without asking the rules)."""
    ran: list[str] = []

    @ts.tool(name="read", rule_subject="path", read_only=True, idempotent=True)
    async def read(path: str) -> str:
        ran.append(path)
        return path

    calls = [ts.ToolCall("denied", "read", {"path": "secret/x"}), ts.ToolCall("fine", "read", {"path": "src/a"})]
    async with store.open(owner="crashed") as crashed:
        await crashed.begin_run("incident", calls)
        for call in calls:
            if left == "started":
                await crashed.record("incident", call.id, "started", {"args": dict(call.args)})
            elif left == "approved":
                await crashed.record("incident", call.id, "approved", {"args": dict(call.args)})
            else:
                payload = {"args": dict(call.args), "reason": "asked", "digest": args_digest(call.args)}
                await crashed.record("incident", call.id, "pending", payload)
    rules = ts.Permissions(root="/repo", deny=["read(secret/**)"])
    async with store.open() as journal:
        executor = ts.Executor([read], journal=journal, permissions=rules)
        recovered = await executor.recover("incident", force=True)
    assert recovered.results[0].error_kind == "permission_denied"
    assert "denied by the rule `read(secret/**)`" in (recovered.results[0].error or "")
    assert "secret/x" not in ran
    if left != "pending":
        assert recovered.results[1].output == "src/a" and ran == ["src/a"]
