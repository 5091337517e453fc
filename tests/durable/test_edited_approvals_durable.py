"""Edited and standing approvals of journaled runs, on SQLite and PostgreSQL: the journal keeps what the model
asked for and what the person approved; an edited call runs once, whichever copy of the state is resumed and
in whichever process; recover runs the approved arguments, never the model's."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from approvals_child import executor, ran, stalled, summary
from journal_child import Store, store_in

import toolsched as ts
from toolsched._values.digest import args_digest

pytestmark = pytest.mark.anyio

CHILD = Path(__file__).resolve().parent.parent / "support" / "approvals_child.py"
TURN = [ts.ToolCall("d1", "deploy", {"target": "prod"}), ts.ToolCall("d2", "deploy", {"target": "prod"})]


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_in(request.param, tmp_path, "edited_test")


async def in_child(store: Store, backend: str, *args: str) -> str:
    """Runs approvals_child with ``args`` in another process; its last line of output."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*sys.path, os.environ.get("PYTHONPATH", "")])}
    with anyio.fail_after(120):
        done = await anyio.run_process([sys.executable, str(CHILD), store.spec(), backend, *args], env=env, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().splitlines()[-1]


async def test_the_journal_keeps_the_models_arguments_and_the_approved_ones(store: Store, tmp_path: Path) -> None:
    world = str(tmp_path)
    async with store.open() as journal:
        outcome = await executor(journal).run(TURN[:1], run_id="edit", context=world)
        state = outcome.state
        assert state is not None
        state.approve("d1", args={"target": "staging"}, always="call")
        resumed = await executor(journal).resume(state, context=world)
        record = await journal.load("edit")
        recovered = await executor(journal).recover("edit", context=world)
    assert summary(resumed) == [["d1", "deployed staging", True]]
    entry = record.call("d1")
    decision = dict(entry.decision or {})
    assert (decision.pop("tool"), len(decision.pop("fingerprint"))) == ("deploy", 64)
    assert decision == {
        "args": {"target": "staging"},
        "digest": args_digest({"target": "staging"}),
        "edited": True,
        "requested": {"args": {"target": "prod"}, "digest": args_digest({"target": "prod"})},
        "always": "call",
    }
    assert entry.run_with is not None and entry.run_with["args"] == {"target": "staging"}
    assert entry.result is not None and entry.result.edited
    # The model's call stays as the model sent it; recover answers from the journal, running nothing again.
    assert [call.args for call in record.turn] == [{"target": "prod"}]
    assert recovered.results == resumed.results and ran(world) == ["staging"]


async def test_a_state_resumed_from_two_copies_in_two_processes_runs_the_edited_call_once(
    store: Store, anyio_backend: str, tmp_path: Path
) -> None:
    world = str(tmp_path)
    async with store.open() as journal:
        outcome = await executor(journal).run(TURN[:1], run_id="twice", context=world)
    state = outcome.state
    assert state is not None
    state.approve("d1", args={"target": "canary"})
    saved = tmp_path / "state.json"
    saved.write_text(state.to_json(), encoding="utf-8")
    first = await in_child(store, anyio_backend, "resume", str(saved), world)
    second = await in_child(store, anyio_backend, "resume", str(saved), world)
    assert json.loads(first) == [["d1", "deployed canary", True]]
    assert second.startswith("refused StateError") and ran(world) == ["canary"]
    # This process's own copy is refused as well, and nothing runs a third time.
    async with store.open() as journal:
        with pytest.raises(ts.StateError):
            await executor(journal).resume(ts.RunState.from_json(saved.read_text(encoding="utf-8")), context=world)
    assert ran(world) == ["canary"]


async def test_recover_after_a_crash_runs_the_approved_arguments_never_the_models(
    store: Store, anyio_backend: str, tmp_path: Path
) -> None:
    world = str(tmp_path)
    stall = tmp_path / "stall"
    async with store.open() as journal:
        outcome = await executor(journal).run(TURN[:1], run_id="crash", context=world)
        state = outcome.state
        assert state is not None
        state.approve("d1", args={"target": "canary"})
        stall.touch()
        stall_reached = anyio.Event()
        stalled.append(stall_reached.set)
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as group:
                group.start_soon(functools.partial(executor(journal).resume, state, context=world))
                await stall_reached.wait()
                scope.cancel()  # the process "dies" mid-call: the call is journaled started, not finished
        assert (await journal.load("crash")).call("d1").state == "started"
    stall.unlink()
    stalled.clear()
    line = await in_child(store, anyio_backend, "recover", "crash", world)
    # Run again (the tool is idempotent) with the arguments the person approved, and said to be edited.
    assert json.loads(line) == [["d1", "deployed canary", True]]
    assert ran(world) == ["canary", "canary"]


async def test_a_deny_rule_in_force_at_recover_wins_over_an_edited_approval(store: Store, tmp_path: Path) -> None:
    world = str(tmp_path)
    async with store.open() as journal:
        outcome = await executor(journal).run(TURN[:1], run_id="deny", context=world)
        state = outcome.state
        assert state is not None
        state.approve("d1", args={"target": "prod-eu"})
        denied = ts.Permissions(deny=["deploy(prod-*)"])
        resumed = await executor(journal, permissions=denied).resume(state, context=world)
    assert [(r.error_kind, r.edited) for r in resumed.results] == [("permission_denied", True)]
    assert ran(world) == []


async def test_a_standing_approval_is_journaled_and_recover_keeps_it_in_force(store: Store, tmp_path: Path) -> None:
    world = str(tmp_path)
    calls = [
        ts.ToolCall("d1", "deploy", {"target": "prod"}),
        ts.ToolCall("d2", "deploy", {"target": "prod-eu"}),
        ts.ToolCall("d3", "deploy", {"target": "staging"}),
    ]
    stalled_at_d2 = anyio.Event()

    async def stall_on_d2(event: ts.HookEvent) -> None:
        if event.call_id == "d2":
            stalled_at_d2.set()
            await anyio.sleep_forever()

    async with store.open() as journal:
        outcome = await executor(journal).run(calls, run_id="standing", context=world)
        state = outcome.state
        assert state is not None
        state.approve("d1", always="deploy(prod*)")
        hooks = ts.Hooks().pre_tool_use("deploy", stall_on_d2)
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as group:
                group.start_soon(functools.partial(executor(journal, hooks=hooks).resume, state, context=world))
                await stalled_at_d2.wait()
                scope.cancel()  # the process dies while d2 is admitted: d1 is journaled approved, d2 still waits
        record = await journal.load("standing")
        assert [record.call(c.id).state for c in calls] == ["approved", "pending", "pending"]
        assert (record.call("d1").decision or {}).get("always") == "deploy(prod*)"
        recovered = await executor(journal).recover("standing", context=world, force=True)
    # The rule approved by the person covers d2 after the crash too; d3 (not matched) still waits.
    assert [(r.call_id, r.output) for r in recovered.results] == [("d1", "deployed prod"), ("d2", "deployed prod-eu")]
    assert [p.call_id for p in recovered.pending] == ["d3"] and ran(world) == ["prod", "prod-eu"]
    waiting = recovered.state
    assert waiting is not None and json.loads(waiting.to_json())["always_rules"] == ["deploy(prod*)"]


async def test_an_external_call_approved_with_edits_and_completed_through_the_journal_says_so(store: Store) -> None:
    @ts.tool(external=True, needs_approval=True)
    async def sign(document: str) -> str:
        """Have a person sign a document."""
        raise AssertionError("an external tool never runs here")

    async with store.open() as journal:
        executor = ts.Executor([sign], journal=journal)
        outcome = await executor.run([ts.ToolCall("s1", "sign", {"document": "draft"})], run_id="sign")
        state = outcome.state
        assert state is not None
        state.approve("s1", args={"document": "final"})
        handed = await executor.resume(state)
        assert [p.args for p in handed.pending] == [{"document": "final"}]
        run_with = (await journal.load("sign")).call("s1").run_with
        assert run_with is not None and run_with["args"] == {"document": "final"}
        await executor.complete("sign", "s1", output="signed")
        recovered = await executor.recover("sign")
    assert [(r.output, r.edited) for r in recovered.results] == [("signed", True)]
