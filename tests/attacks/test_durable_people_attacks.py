"""Attacks on journaled runs that wait for people, on SQLite and PostgreSQL: a process killed after a person's
decision is journaled, recovered in another; one ``Limits`` carried across a run stopped midway and its
recovery."""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from journal_child import Store, store_in
from people_child import executor, ran

import toolsched as ts

pytestmark = pytest.mark.anyio

CHILD = Path(__file__).resolve().parent.parent / "support" / "people_child.py"


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_in(request.param, tmp_path, "people_attacks")


async def killed_while_the_edit_is_judged(store: Store, anyio_backend: str, tmp_path: Path, run_id: str) -> None:
    """Runs ``deploy`` (it asks), approves it with the person's arguments, and resumes the state in another
    process that is killed while a hook judges them: the journal holds the edited approval and nothing more."""
    world = str(tmp_path)
    async with store.open() as journal:
        outcome = await executor(journal).run(
            [ts.ToolCall("d1", "deploy", {"target": "staging"})], run_id=run_id, context=world
        )
    state = outcome.state
    assert state is not None
    state.approve("d1", args={"target": "prod-secret"})
    saved = tmp_path / "state.json"
    saved.write_text(state.to_json(), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*sys.path, os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, str(CHILD), store.spec(), anyio_backend, str(saved), world]
    with anyio.fail_after(120):
        done = await anyio.run_process(command, env=env, check=False)
    assert done.returncode == -signal.SIGKILL, done.stdout.decode() + done.stderr.decode()
    async with store.open() as journal:
        entry = (await journal.load(run_id)).call("d1")
    assert entry.state == "approved" and (entry.decision or {}).get("edited") is True
    assert ran(world) == []


def no_secrets(event: ts.HookEvent) -> ts.Decision | None:
    return ts.Decision.deny("secret targets are not deployed") if "secret" in event.args["target"] else None


def public_only(event: ts.HookEvent) -> ts.Rewrite | None:
    target = event.args["target"]
    return ts.Rewrite({"target": target.replace("-secret", "")}) if "secret" in target else None


async def test_an_edited_approval_recovered_after_a_kill_is_judged_by_the_hooks_before_it_runs(
    store: Store, anyio_backend: str, tmp_path: Path
) -> None:
    # The person's arguments are checked as the model's would be, pre_tool_use hooks included; the process
    # that resumed them died before a hook had judged them, so recover judges them: the hook blocks them.
    await killed_while_the_edit_is_judged(store, anyio_backend, tmp_path, "blocked")
    async with store.open() as journal:
        hooks = ts.Hooks().pre_tool_use("deploy", no_secrets)
        recovered = await executor(journal, hooks=hooks).recover("blocked", context=str(tmp_path))
        again = await executor(journal).recover("blocked", context=str(tmp_path))
    assert [(r.call_id, r.error_kind, r.edited) for r in recovered.results] == [("d1", "hook_blocked", True)]
    assert again.results == recovered.results and ran(tmp_path) == []


async def test_an_edited_approval_a_hook_rewrites_on_recover_goes_back_to_the_person(
    store: Store, anyio_backend: str, tmp_path: Path
) -> None:
    # A hook that rewrites the person's arguments sends the call back to the person (the approval is bound to
    # what they approved), after a kill as on resume: neither the rewrite nor the edit runs unapproved.
    await killed_while_the_edit_is_judged(store, anyio_backend, tmp_path, "rewritten")
    async with store.open() as journal:
        hooks = ts.Hooks().pre_tool_use("deploy", public_only)
        recovered = await executor(journal, hooks=hooks).recover("rewritten", context=str(tmp_path))
        assert recovered.results == [] and ran(tmp_path) == []
        (request,) = recovered.pending
        assert isinstance(request, ts.ApprovalRequest) and dict(request.args) == {"target": "prod"}
        state = recovered.state
        assert state is not None
        state.approve("d1", args={"target": "prod-eu"})
        resumed = await executor(journal, hooks=hooks).resume(state, context=str(tmp_path))
    assert [(r.call_id, r.output, r.edited) for r in resumed.results] == [("d1", "deployed prod-eu", True)]
    assert ran(tmp_path) == ["prod-eu"]


async def test_an_edited_approval_recovered_after_a_kill_runs_the_edit_once(
    store: Store, anyio_backend: str, tmp_path: Path
) -> None:
    await killed_while_the_edit_is_judged(store, anyio_backend, tmp_path, "runs")
    async with store.open() as journal:
        recovered = await executor(journal).recover("runs", context=str(tmp_path))
        again = await executor(journal).recover("runs", context=str(tmp_path))
    assert [(r.call_id, r.output, r.edited) for r in recovered.results] == [("d1", "deployed prod-secret", True)]
    assert again.results == recovered.results and ran(tmp_path) == ["prod-secret"]


async def test_an_edited_approval_recovered_after_a_kill_counts_as_an_approved_call(
    store: Store, anyio_backend: str, tmp_path: Path
) -> None:
    # Admitted again to judge the person's arguments, the call is still one approved before the crash: it runs
    # whatever the caps say now, and counts once.
    await killed_while_the_edit_is_judged(store, anyio_backend, tmp_path, "capped")
    limits = ts.Limits(max_calls=0)
    async with store.open() as journal:
        recovered = await executor(journal).recover("capped", context=str(tmp_path), limits=limits)
    assert [(r.call_id, r.output, r.edited) for r in recovered.results] == [("d1", "deployed prod-secret", True)]
    assert ran(tmp_path) == ["prod-secret"] and limits.calls == 1


async def test_a_call_counted_before_its_run_stopped_is_not_counted_again_by_its_recovery(store: Store) -> None:
    # One Limits for the agent run: its call was counted when admitted, the run stopped while a hook judged it
    # (the journal holds it planned), and recover with the same Limits finds it counted already: it runs, as the
    # one call the run made, instead of being refused by its own count.
    ran_with: list[str] = []

    @ts.tool(idempotent=True)
    async def fetch(key: str) -> str:
        """Fetches a key."""
        ran_with.append(key)
        return f"got {key}"

    judged = anyio.Event()

    async def stall(event: ts.HookEvent) -> None:
        judged.set()
        await anyio.sleep_forever()

    limits = ts.Limits(max_calls=1, max_repeats=1)
    calls = [ts.ToolCall("c1", "fetch", {"key": "a"})]
    async with store.open() as journal:
        stalling = ts.Executor([fetch], journal=journal, hooks=ts.Hooks().pre_tool_use("fetch", stall))
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as group:
                group.start_soon(functools.partial(stalling.run, calls, run_id="counted", limits=limits))
                await judged.wait()
                scope.cancel()
        assert (await journal.load("counted")).call("c1").state == "planned" and limits.calls == 1
        recovered = await ts.Executor([fetch], journal=journal).recover("counted", limits=limits)
    assert [(r.call_id, r.error_kind, r.output) for r in recovered.results] == [("c1", None, "got a")]
    assert ran_with == ["a"] and limits.calls == 1 and limits.calls_of("fetch") == 1
