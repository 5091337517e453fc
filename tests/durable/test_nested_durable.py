"""Journaled runs keep their promises for nested runs, for the state of a journaled run, and against
arguments altered in the journal.

A call whose nested run waits for a person is journaled as waiting, with the nested run's record:
``recover`` keeps its approvals pending, and the journal lets each interruption be resumed once, in
whichever process. The crash tests run the turn in a child process
(tests/durable/nested_crash_child.py) and kill it with SIGKILL at a chosen point.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from crashes import child_env, kill_at
from nested_crash_child import CHILD, executor, ran, turn

import toolsched as ts
from toolsched._tools.tools import tool_fingerprint
from toolsched._values.digest import args_digest
from toolsched.journal import Transition

pytestmark = pytest.mark.anyio


def child_command(backend: str, journal: Path, log: Path, *args: str) -> list[str]:
    return [sys.executable, str(CHILD), backend, str(journal), str(log), *args]


async def crash_at(command: list[str], point: str) -> None:
    """Runs the child process and kills it with SIGKILL once it reaches ``point``."""
    await kill_at(command, point, finished=("done", "interrupted", "refused"))


async def run_child(command: list[str]) -> str:
    """Runs the child process to its end; returns the line it printed last."""
    with anyio.fail_after(120):
        finished = await anyio.run_process(command, check=False, env=child_env())
    assert finished.returncode == 0, finished.stderr.decode()
    return finished.stdout.decode().strip().splitlines()[-1]


# -- nested runs ---------------------------------------------------------------------------------


async def test_an_approved_nested_call_never_runs_twice_when_its_state_is_resumed_again(
    anyio_backend: str, tmp_path: Path
) -> None:
    journal_path, log, saved = tmp_path / "journal.db", tmp_path / "ran.log", tmp_path / "state.json"
    async with ts.SqliteJournal(journal_path) as journal:
        outcome = await executor(journal).run(turn(["a"])[:1], run_id="nested", context=str(log))
    assert [request.call_id for request in outcome.pending] == ["t1/x1"]
    state = outcome.state
    assert state is not None and state.run_id == "nested"
    state.approve("t1/x1")
    saved.write_text(state.to_json(), encoding="utf-8")
    # Process A resumes the state and is killed once the approved nested call has done its work.
    await crash_at(child_command(anyio_backend, journal_path, log, "resume", str(saved), "inside x1"), "inside x1")
    assert ran(log) == ["x1"]
    # Process B resumes the same saved state: refused, the nested call does not run again.
    answer = await run_child(child_command(anyio_backend, journal_path, log, "resume", str(saved)))
    assert answer.startswith("refused"), answer
    assert "t1" in answer
    assert ran(log) == ["x1"]
    # Recovering the run answers the parent call as interrupted (its outcome is unknown, it is not idempotent).
    async with ts.SqliteJournal(journal_path) as journal:
        recovered = await executor(journal).recover("nested", context=str(log))
        assert (await journal.load("nested")).complete
    assert [(result.call_id, result.error_kind) for result in recovered.results] == [("t1", "interrupted")]
    assert ran(log) == ["x1"]


async def test_recover_keeps_a_pending_nested_approval_pending(anyio_backend: str, tmp_path: Path) -> None:
    journal_path, log = tmp_path / "journal.db", tmp_path / "ran.log"
    # The nested run of t1 waits for a person; the process is killed in the next call, h.
    await crash_at(child_command(anyio_backend, journal_path, log, "run", "crashed", "a", "inside h"), "inside h")
    assert ran(log) == ["h"]
    async with ts.SqliteJournal(journal_path) as journal:
        recovered = await executor(journal).recover("crashed", context=str(log))
        assert recovered.interrupted
        assert [request.call_id for request in recovered.pending] == ["t1/x1"]
        assert recovered.pending[0].args == {"path": "a"} and recovered.pending[0].parent_call_id == "t1"
        assert [(result.call_id, result.error_kind) for result in recovered.results] == [("h", "interrupted")]
        assert (await journal.load("crashed")).call("t1").state == "pending"
        # Recovering again keeps it pending too; approving it runs the nested call once.
        again = await executor(journal).recover("crashed", context=str(log))
        assert [request.call_id for request in again.pending] == ["t1/x1"]
        state = again.state
        assert state is not None
        state.approve("t1/x1")
        finished = await executor(journal).resume(state, context=str(log))
        assert not finished.interrupted
        assert [(result.call_id, result.output) for result in finished.results] == [
            ("t1", "deleted a"),
            ("h", None),
        ]
        assert (await journal.load("crashed")).complete
    assert ran(log) == ["h", "x1"]


async def test_a_state_resumed_again_after_its_nested_run_waits_anew_is_refused(
    anyio_backend: str, tmp_path: Path
) -> None:
    # The first resume runs x1 and stops at x2's approval; the call is waiting again, for a new decision.
    journal_path, log, saved = tmp_path / "journal.db", tmp_path / "ran.log", tmp_path / "state.json"
    async with ts.SqliteJournal(journal_path) as journal:
        outcome = await executor(journal).run(turn(["a", "b"])[:1], run_id="twice", context=str(log))
        state = outcome.state
        assert state is not None
        state.approve("t1/x1")
        saved.write_text(state.to_json(), encoding="utf-8")
        second = await executor(journal).resume(state, context=str(log))
        assert [request.call_id for request in second.pending] == ["t1/x2"]
        assert ran(log) == ["x1"]
        # Another process resumes the first state once more: refused, x1 does not run again.
        answer = await run_child(child_command(anyio_backend, journal_path, log, "resume", str(saved)))
        assert answer.startswith("refused StateError"), answer
        assert ran(log) == ["x1"]
        waiting = second.state
        assert waiting is not None
        waiting.approve("t1/x2")
        final = await executor(journal).resume(waiting, context=str(log))
    assert final.results[0].output == "deleted a; deleted b"
    assert ran(log) == ["x1", "x2"]


async def test_recover_resumes_a_nested_run_approved_before_the_crash(anyio_backend: str, tmp_path: Path) -> None:
    journal_path, log, saved = tmp_path / "journal.db", tmp_path / "ran.log", tmp_path / "state.json"
    async with ts.SqliteJournal(journal_path) as journal:
        outcome = await executor(journal).run(turn(["a"])[:1], run_id="approved", context=str(log))
    state = outcome.state
    assert state is not None
    state.approve("t1/x1")
    saved.write_text(state.to_json(), encoding="utf-8")
    # Process A journals the decision and is killed before t1 starts.
    command = child_command(anyio_backend, journal_path, log, "resume", str(saved), "admitting t1")
    await crash_at(command, "admitting t1")
    assert ran(log) == []
    async with ts.SqliteJournal(journal_path) as journal:
        assert (await journal.load("approved")).call("t1").state == "approved"
        # Recovery resumes the nested run with the decision the person made: x1 runs, once.
        recovered = await executor(journal).recover("approved", context=str(log))
        assert [(result.call_id, result.output) for result in recovered.results] == [("t1", "deleted a")]
        assert (await journal.load("approved")).complete
    assert ran(log) == ["x1"]
    answer = await run_child(child_command(anyio_backend, journal_path, log, "resume", str(saved)))
    assert answer.startswith("refused"), answer
    assert ran(log) == ["x1"]


async def test_a_nested_wait_the_journal_cannot_store_fails_that_call(tmp_path: Path) -> None:
    deleted: list[str] = []

    @ts.tool(needs_approval=True)
    async def delete(path: str) -> str:
        deleted.append(path)
        return path

    @ts.agent_tool(ts.Executor([delete]))
    async def odd(path: str, child: ts.ChildRun) -> str:
        await child.step(lambda: {"a set", "has no JSON form"})
        outcome = await child.run([ts.ToolCall("x1", "delete", {"path": path})])
        return str(outcome.results[0].output)

    async with ts.SqliteJournal(tmp_path / "journal.db") as journal:
        outcome = await ts.Executor([odd], journal=journal).run([ts.ToolCall("o", "odd", {"path": "a"})], run_id="o")
        assert not outcome.interrupted
        result = outcome.results[0]
        assert result.error_kind == "execution_error" and "cannot be journaled" in (result.error or "")
        record = await journal.load("o")
        assert record.complete and record.results == outcome.results
    assert deleted == []


# -- the state of a journaled run ----------------------------------------------------------------


@ts.tool(needs_approval=True)
async def pay(amount: int, ctx: ts.ToolContext) -> str:
    """Pays (asks first; not idempotent)."""
    ctx.context.append(amount)
    return f"paid {amount}"


@ts.tool(idempotent=True)
async def fetch(key: str, ctx: ts.ToolContext) -> str:
    """Looks a key up (idempotent)."""
    ctx.context.append(key)
    return key


async def test_the_state_of_a_journaled_run_is_refused_by_an_executor_without_its_journal(tmp_path: Path) -> None:
    paid: list[Any] = []
    async with ts.SqliteJournal(tmp_path / "journal.db") as journal:
        durable = ts.Executor([pay], journal=journal)
        outcome = await durable.run([ts.ToolCall("p", "pay", {"amount": 5})], run_id="pay-run", context=paid)
        state = outcome.state
        assert state is not None
        state.approve("p")
        with pytest.raises(ts.OptionError, match="pay-run") as refused:
            await ts.Executor([pay]).resume(state, context=paid)
        assert "journal" in str(refused.value)
        assert paid == []
        # Refused before anything was taken: the state still resumes on an executor with the journal.
        finished = await durable.resume(state, context=paid)
        assert finished.results[0].output == "paid 5"
        assert (await journal.load("pay-run")).complete
    assert paid == [5]
    # The state of a run that is not journaled has no run ID, and resumes without a journal.
    plain = await ts.Executor([pay]).run([ts.ToolCall("p", "pay", {"amount": 6})], run_id="mine", context=paid)
    unjournaled = plain.state
    assert unjournaled is not None and unjournaled.run_id is None
    unjournaled.approve("p")
    assert (await ts.Executor([pay]).resume(unjournaled, context=paid)).results[0].output == "paid 6"


# -- arguments altered in the journal ------------------------------------------------------------


def alter(path: Path, statement: str, *params: Any) -> None:
    """Runs SQL on the journal file behind the journal's back."""
    conn = sqlite3.connect(path)
    try:
        conn.execute(statement, params)
        conn.commit()
    finally:
        conn.close()


def contents(path: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT * FROM toolsched_transitions ORDER BY seq").fetchall()
    finally:
        conn.close()


async def crashed_after(path: Path, tool: str, args: dict[str, Any], transition: Transition) -> None:
    """Run ``r`` of one call ``c``, left by a crashed process approved (journaled as the executor journals
    an approval) or started."""
    async with ts.SqliteJournal(path, owner="crashed") as crashed:
        await crashed.begin_run("r", [ts.ToolCall("c", tool, args)])
        if transition == "approved":
            await crashed.record("r", "c", "pending", {"args": args, "reason": "asks", "digest": args_digest(args)})
        await crashed.record("r", "c", transition, json.loads(payload(args, args, transition)))


def payload(args: Any, digest_of: Any, transition: Transition) -> str:
    """A transition's payload as the executor writes it: an approval names the tool it was given for (``pay``)."""
    written = {"args": args, "digest": args_digest(digest_of)}
    if transition == "approved":
        written["fingerprint"] = tool_fingerprint(pay)
    return json.dumps(written)


ALTERED = {
    "approved, arguments changed": ("approved", {"amount": 500}, {"amount": 5}),
    "started, arguments changed": ("started", {"key": "../secret"}, {"key": "k"}),
}


@pytest.mark.parametrize(("transition", "args", "digest_of"), ALTERED.values(), ids=ALTERED.keys())
async def test_arguments_altered_behind_the_journal_are_refused_as_damage(
    tmp_path: Path, transition: Transition, args: Any, digest_of: dict[str, Any]
) -> None:
    path = tmp_path / "journal.db"
    await crashed_after(path, "pay" if transition == "approved" else "fetch", digest_of, transition)
    alter(
        path,
        "UPDATE toolsched_transitions SET payload = ? WHERE kind = ?",
        payload(args, digest_of, transition),
        transition,
    )
    damaged = contents(path)
    ran_with: list[Any] = []
    async with ts.SqliteJournal(path) as journal:
        with pytest.raises(ts.JournalCorruptError, match=rf"run 'r', call 'c': .*{transition}.* digest"):
            await ts.Executor([pay, fetch], journal=journal).recover("r", force=True, context=ran_with)
    assert ran_with == []
    assert contents(path) == damaged


UNCHECKED = {
    "approved, against the schema": ("approved", "pay", {"amount": "everything"}, {"amount": 5}),
    "started, against the schema": ("started", "fetch", {"key": "k", "admin": True}, {"key": "k"}),
    "started, not an object": ("started", "fetch", ["k"], {"key": "k"}),
}


@pytest.mark.parametrize(("transition", "tool", "args", "given"), UNCHECKED.values(), ids=UNCHECKED.keys())
async def test_journaled_arguments_that_fail_the_tools_schema_are_never_run(
    tmp_path: Path, transition: Transition, tool: str, args: Any, given: dict[str, Any]
) -> None:
    # The row was rewritten with a digest that matches: nothing but the schema tells it apart.
    path = tmp_path / "journal.db"
    await crashed_after(path, tool, given, transition)
    alter(
        path, "UPDATE toolsched_transitions SET payload = ? WHERE kind = ?", payload(args, args, transition), transition
    )
    ran_with: list[Any] = []
    async with ts.SqliteJournal(path) as journal:
        recovered = await ts.Executor([pay, fetch], journal=journal).recover("r", force=True, context=ran_with)
    result = recovered.results[0]
    assert result.error_kind == "invalid_input", result
    assert "journal" in (result.error or "") and f"`{tool}`" in (result.error or "")
    assert ran_with == []
