"""Approvals journaled before a crash hold for the tool they were given for, on SQLite and PostgreSQL: `recover`
asks again about a call approved for a tool that changed since, exactly as `resume` does, and runs a call
approved for the tool it still is once, without asking."""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from crashes import kill_at
from journal_child import Store, store_in
from nested_crash_child import delete, tidy
from nested_crash_child import executor as nested_executor
from nested_crash_child import turn as nested_turn
from reask_child import CHILD, TURN, deploy, deploy_changed

import toolsched as ts
from toolsched._tools.tools import tool_fingerprint
from toolsched._values.digest import args_digest

pytestmark = pytest.mark.anyio

ASKED_AGAIN = "`deploy` needs approval before it runs (asked again: the tool changed since the approval)"


@ts.tool(name="deploy", needs_approval=True)
async def deploy_renamed_body(target: str, ctx: ts.ToolContext) -> str:
    """Deploy to a target."""
    ctx.context.append(f"renamed {target}")
    return f"deployed {target}"


@ts.tool(read_only=True)
async def status(target: str) -> str:
    """The status of a target."""
    return f"{target} is up"


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_in(request.param, tmp_path, "reask_test")


async def crash_after_approvals(journal: ts.Journal, run_id: str, by: str) -> None:
    """Leaves run ``run_id`` of ``TURN`` as a process that dies once d1's approval is journaled, before d1 starts:
    approved by a person on the run's state (``by="person"``, d2 approved too), or by the executor's approver
    (``by="approver"``, d2 not admitted yet). The process "dies" (its run is cancelled) while d2 is admitted."""
    at_d2 = anyio.Event()

    async def stall_on_d2(event: ts.HookEvent) -> None:
        if event.call_id == "d2":
            at_d2.set()
            await anyio.sleep_forever()

    async def approver(request: ts.ApprovalRequest) -> bool:
        if request.call_id == "d2":
            at_d2.set()
            await anyio.sleep_forever()
        return True

    context: list[str] = []
    if by == "person":
        outcome = await ts.Executor([deploy], journal=journal).run(TURN, run_id=run_id, context=context)
        state = outcome.state
        assert state is not None
        state.approve("d1")
        state.approve("d2")
        hooks = ts.Hooks().pre_tool_use("deploy", stall_on_d2)
        crashing = ts.Executor([deploy], journal=journal, hooks=hooks)
        run = functools.partial(crashing.resume, state, context=context)
    else:
        crashing = ts.Executor([deploy], journal=journal, approver=approver)
        run = functools.partial(crashing.run, TURN, run_id=run_id, context=context)
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await at_d2.wait()
            scope.cancel()
    record = await journal.load(run_id)
    assert record.call("d1").state == "approved"
    assert record.call("d2").state == ("approved" if by == "person" else "planned")
    assert context == []


def asked(outcome: ts.Outcome) -> list[tuple[str, str, dict[str, Any], str | None]]:
    return [(p.call_id, p.tool_name, dict(p.args), p.reason) for p in outcome.pending]


def answers(outcome: ts.Outcome) -> list[tuple[str, Any]]:
    return [(r.call_id, r.error_kind or r.output) for r in outcome.results]


@pytest.mark.parametrize("by", ["person", "approver"])
async def test_an_approval_for_a_tool_changed_since_is_asked_again_as_resume_asks(
    store: Store, anyio_backend: str, by: str
) -> None:
    ran: list[str] = []
    recover_events: list[ts.Event] = []
    async with store.open() as journal:
        await crash_after_approvals(journal, "changed", by)
        executor = ts.Executor([deploy_changed], journal=journal, on_event=recover_events.append)
        recovered = await executor.recover("changed", context=ran, force=True)
        record = await journal.load("changed")
    assert recovered.interrupted and recovered.results == [] and ran == []
    expected = [("d1", "deploy", {"target": "prod"}, ASKED_AGAIN)]
    if by == "person":
        expected.append(("d2", "deploy", {"target": "staging"}, ASKED_AGAIN))
    else:
        expected.append(("d2", "deploy", {"target": "staging"}, "`deploy` needs approval before it runs"))
    assert asked(recovered) == expected
    # The journal holds the calls waiting again, for the tool as it is now.
    assert [record.call(c.id).state for c in TURN] == ["pending", "pending"]
    assert (record.call("d1").decision or {})["fingerprint"] == tool_fingerprint(deploy_changed)

    if by == "person":
        # `resume` of the state the person decided, on the changed tool, asks the same, with the same events.
        resume_events: list[ts.Event] = []
        first = await ts.Executor([deploy]).run(TURN, context=ran)
        state = first.state
        assert state is not None
        state.approve("d1")
        state.approve("d2")
        resumed = await ts.Executor([deploy_changed], on_event=resume_events.append).resume(state, context=ran)
        assert asked(resumed) == asked(recovered) and resumed.results == recovered.results
        assert [type(e) for e in resume_events] == [type(e) for e in recover_events]
        assert ran == []

    # Approved again (for the tool as it is now), the call runs once.
    waiting = recovered.state
    assert waiting is not None
    waiting.approve("d1")
    waiting.reject("d2", "not now")
    async with store.open() as journal:
        done = await ts.Executor([deploy_changed], journal=journal).resume(waiting, context=ran)
        again = await ts.Executor([deploy_changed], journal=journal).recover("changed", context=ran)
    assert answers(done) == [("d1", "deployed prod everywhere"), ("d2", "permission_denied")]
    assert answers(again) == answers(done) and ran == ["changed prod"]


@pytest.mark.parametrize("by", ["person", "approver"])
async def test_an_approval_for_the_tool_unchanged_runs_once_and_is_not_asked_again(
    store: Store, anyio_backend: str, by: str
) -> None:
    ran: list[str] = []
    approver_asked: list[str] = []

    async def approver(request: ts.ApprovalRequest) -> bool:
        approver_asked.append(request.call_id)
        return True

    async with store.open() as journal:
        await crash_after_approvals(journal, "same", by)
        executor = ts.Executor([deploy], journal=journal, approver=approver)
        recovered = await executor.recover("same", context=ran, force=True)
        again = await executor.recover("same", context=ran)
    assert answers(recovered) == [("d1", "deployed prod"), ("d2", "deployed staging")]
    # d1 was approved before the crash: run once, the approver not asked; d2, never admitted by the approver, is.
    assert approver_asked == ([] if by == "person" else ["d2"])
    assert answers(again) == answers(recovered) and ran == ["deploy prod", "deploy staging"]


async def test_an_implementation_moved_to_another_function_is_a_changed_tool(store: Store, anyio_backend: str) -> None:
    """Same name, description and schema, another function: the tool changed (as ``resume`` sees it)."""
    ran: list[str] = []
    async with store.open() as journal:
        await crash_after_approvals(journal, "moved", "approver")
        recovered = await ts.Executor([deploy_renamed_body], journal=journal).recover("moved", context=ran, force=True)
    assert asked(recovered)[0] == ("d1", "deploy", {"target": "prod"}, ASKED_AGAIN) and ran == []


@pytest.mark.parametrize("answer", [True, False])
async def test_a_call_asked_again_goes_to_the_approver_on_recover_and_on_a_journaled_resume(
    store: Store, anyio_backend: str, answer: bool
) -> None:
    """The approver decides a call asked again; the journal holds it held again, then decided (an approval or a
    rejection never follows an approval directly: a journaled resume failed there with `JournalError`)."""
    ran: list[str] = []
    reasons: list[str | None] = []

    async def approver(request: ts.ApprovalRequest) -> bool:
        reasons.append(request.reason)
        return answer

    expected = [("d1", "deployed prod everywhere" if answer else "permission_denied")]
    async with store.open() as journal:
        await crash_after_approvals(journal, "approver", "approver")
        executor = ts.Executor([deploy_changed], journal=journal, approver=approver)
        recovered = await executor.recover("approver", context=ran, force=True)
        assert answers(recovered)[:1] == expected and reasons[0] == ASKED_AGAIN

        first = await ts.Executor([deploy], journal=journal).run(TURN[:1], run_id="resumed", context=ran)
        state = first.state
        assert state is not None
        state.approve("d1")
        resumed = await executor.resume(state, context=ran)
        assert answers(resumed) == expected and reasons[-1] == ASKED_AGAIN
        record = await journal.load("resumed")
    assert record.call("d1").state == "finished"
    assert ran == (["changed prod", "changed staging", "changed prod"] if answer else [])


async def test_an_approval_journaled_without_its_tool_is_asked_again(store: Store, anyio_backend: str) -> None:
    """An approval journaled with no fingerprint (as releases before this one wrote it) cannot be shown to hold for
    the tool as it is: it is asked again, never run on trust."""
    ran: list[str] = []
    async with store.open(owner="crashed") as crashed:
        await crashed.begin_run("legacy", TURN[:1])
        args = {"target": "prod"}
        await crashed.record("legacy", "d1", "pending", {"args": args, "reason": "asks", "digest": args_digest(args)})
        await crashed.record("legacy", "d1", "approved", {"args": args, "digest": args_digest(args)})
    async with store.open() as journal:
        recovered = await ts.Executor([deploy], journal=journal).recover("legacy", context=ran, force=True)
    reason = (
        "`deploy` needs approval before it runs (asked again: the approval does not say which tool it was given for)"
    )
    assert asked(recovered) == [("d1", "deploy", {"target": "prod"}, reason)] and ran == []


async def test_a_standing_approval_for_a_tool_changed_since_approves_nothing_on_recover(
    store: Store, anyio_backend: str
) -> None:
    """d1 approved with a standing approval of its tool, d2 still waiting at the crash: with the tool as it was,
    recover runs both (the standing approval covers d2); with the tool changed since, it asks about both, as
    `resume` would, the standing approval given for what the tool was then covering nothing."""
    ran: list[str] = []
    old = tool_fingerprint(deploy)
    async with store.open(owner="crashed") as crashed:
        for run_id in ("same", "changed"):
            await crashed.begin_run(run_id, TURN)
            for call in TURN:
                held = {"args": dict(call.args), "reason": "asks", "digest": args_digest(call.args), "fingerprint": old}
                await crashed.record(run_id, call.id, "pending", held)
            approval = {"args": {"target": "prod"}, "digest": args_digest({"target": "prod"}), "fingerprint": old}
            await crashed.record(run_id, "d1", "approved", {**approval, "always": "tool", "tool": "deploy"})
    async with store.open() as journal:
        same = await ts.Executor([deploy], journal=journal).recover("same", context=ran, force=True)
        assert answers(same) == [("d1", "deployed prod"), ("d2", "deployed staging")]
        changed = await ts.Executor([deploy_changed], journal=journal).recover("changed", context=ran, force=True)
    reasons = [ASKED_AGAIN, "asks"]
    assert asked(changed) == [(c.id, "deploy", dict(c.args), reason) for c, reason in zip(TURN, reasons, strict=True)]
    assert changed.results == [] and ran == ["deploy prod", "deploy staging"]


async def test_a_rejection_journaled_before_a_crash_stands_whatever_the_tool_is_now(
    store: Store, anyio_backend: str
) -> None:
    """As on `resume`: a rejected call is answered `permission_denied`, the tool changed or not, never asked again."""
    ran: list[str] = []
    async with store.open(owner="crashed") as crashed:
        await crashed.begin_run("rejected", TURN[:1])
        await crashed.record("rejected", "d1", "rejected", {"message": "not prod"})
    async with store.open() as journal:
        recovered = await ts.Executor([deploy_changed], journal=journal).recover("rejected", context=ran, force=True)
    first = await ts.Executor([deploy]).run(TURN[:1], context=ran)
    state = first.state
    assert state is not None
    state.reject("d1", "not prod")
    resumed = await ts.Executor([deploy_changed]).resume(state, context=ran)
    assert answers(recovered) == answers(resumed) == [("d1", "permission_denied")]
    assert recovered.results[0].error == resumed.results[0].error == "the call to `deploy` was not approved: not prod"
    assert not recovered.interrupted and ran == []


async def test_an_approval_for_a_tool_removed_since_is_answered_as_resume_answers_it(
    store: Store, anyio_backend: str
) -> None:
    ran: list[str] = []
    async with store.open() as journal:
        await crash_after_approvals(journal, "removed", "person")
        recovered = await ts.Executor([status], journal=journal).recover("removed", context=ran, force=True)
    first = await ts.Executor([deploy]).run(TURN, context=ran)
    state = first.state
    assert state is not None
    state.approve("d1")
    state.approve("d2")
    resumed = await ts.Executor([status]).resume(state, context=ran)
    assert [(r.call_id, r.error_kind, r.error) for r in recovered.results] == [
        (r.call_id, r.error_kind, r.error) for r in resumed.results
    ]
    assert [r.error_kind for r in recovered.results] == ["unknown_tool", "unknown_tool"]
    assert not recovered.interrupted and ran == []


@pytest.mark.parametrize("changed", [True, False], ids=["changed", "unchanged"])
async def test_two_recoveries_at_once_of_an_approved_call_one_wins(
    store: Store, anyio_backend: str, changed: bool
) -> None:
    """Two processes recover the run together: one holds it and decides (asks again, or runs it once); the other
    is refused while it does."""
    ran: list[str] = []
    refused = anyio.Event()

    async def approver(request: ts.ApprovalRequest) -> ts.Decision:
        # The winner asks only once the other recovery was refused, so that the two overlap.
        await refused.wait()
        return ts.Decision.ask()

    @ts.tool(name="deploy", needs_approval=True)
    async def slow_deploy(target: str, ctx: ts.ToolContext) -> str:
        """Deploy to a target."""
        await refused.wait()
        ctx.context.append(f"deploy {target}")
        return f"deployed {target}"

    tool = deploy_changed if changed else slow_deploy
    async with store.open(owner="crashed") as crashed:
        await crashed.begin_run("shared", TURN[:1])
        args = {"target": "prod"}
        approval = {"args": args, "digest": args_digest(args), "fingerprint": tool_fingerprint(slow_deploy)}
        await crashed.record("shared", "d1", "approved", approval)
        await crashed.release("shared")
    outcomes: dict[str, ts.Outcome] = {}
    refusals: dict[str, ts.RunClaimedError] = {}

    async def recover(owner: str) -> None:
        async with store.open(owner=owner) as journal:
            try:
                executor = ts.Executor([tool], journal=journal, approver=approver)
                outcomes[owner] = await executor.recover("shared", context=ran)
            except ts.RunClaimedError as exc:
                refusals[owner] = exc
                refused.set()

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(recover, "left")
            group.start_soon(recover, "right")
    assert len(outcomes) == 1 and len(refusals) == 1
    (winner, outcome), (_, refusal) = next(iter(outcomes.items())), next(iter(refusals.items()))
    assert refusal.owner == winner
    if changed:
        assert asked(outcome) == [("d1", "deploy", {"target": "prod"}, ASKED_AGAIN)] and ran == []
    else:
        assert answers(outcome) == [("d1", "deployed prod")] and ran == ["deploy prod"]


@pytest.mark.parametrize("changed", [True, False], ids=["changed", "unchanged"])
async def test_a_process_killed_once_an_approval_is_journaled_recovers_it_by_its_tool(
    store: Store, anyio_backend: str, changed: bool
) -> None:
    """SIGKILL once the approver's approval of d1 is journaled, before d1 starts: recovered with the tool changed,
    d1 is asked again; with the tool as it was, it runs once, the approver not asked about it."""
    ran: list[str] = []
    approver_asked: list[str] = []

    def approver(request: ts.ApprovalRequest) -> ts.Decision:
        approver_asked.append(request.call_id)
        return ts.Decision.ask()

    await kill_at([sys.executable, str(CHILD), store.spec(), anyio_backend, "killed"], "approved d1")
    async with store.open() as journal:
        assert [(await journal.load("killed")).call(c.id).state for c in TURN] == ["approved", "planned"]
        tool = deploy_changed if changed else deploy
        recovered = await ts.Executor([tool], journal=journal, approver=approver).recover("killed", context=ran)
    if changed:
        assert asked(recovered)[0] == ("d1", "deploy", {"target": "prod"}, ASKED_AGAIN)
        assert approver_asked == ["d1", "d2"] and recovered.results == [] and ran == []
    else:
        assert answers(recovered) == [("d1", "deployed prod")] and ran == ["deploy prod"]
        assert approver_asked == ["d2"] and [p.call_id for p in recovered.pending] == ["d2"]


async def test_a_nested_run_approved_before_the_crash_is_asked_again_when_its_tool_changed(
    store: Store, anyio_backend: str, tmp_path: Path
) -> None:
    """A call whose nested run was approved to go on, its own tool changed since (and asking now): `recover`
    asks about it again, as `resume` of the state the person decided does; nothing of the nested run runs."""
    log = tmp_path / "ran.log"
    at_t1 = anyio.Event()

    async def stall_on_t1(event: ts.HookEvent) -> None:
        at_t1.set()
        await anyio.sleep_forever()

    @ts.agent_tool(ts.Executor([delete]), name="tidy", needs_approval=True)
    async def tidy_changed(paths: list[str], child: ts.ChildRun) -> str:
        """Deletes each path, asking first."""
        outcome = await child.run([ts.ToolCall("x1", "delete", {"path": paths[0]})])
        return str(outcome.results[0].output)

    def decided(outcome: ts.Outcome) -> ts.RunState:
        assert outcome.state is not None
        outcome.state.approve("t1/x1")
        return outcome.state

    async with store.open() as journal:
        first = await nested_executor(journal).run(nested_turn(["a"])[:1], run_id="nested", context=str(log))
        crashing = ts.Executor([tidy], journal=journal, hooks=ts.Hooks().pre_tool_use("tidy", stall_on_t1))
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as group:
                group.start_soon(functools.partial(crashing.resume, decided(first), context=str(log)))
                await at_t1.wait()
                scope.cancel()
        assert (await journal.load("nested")).call("t1").state == "approved"
        recovered = await ts.Executor([tidy_changed], journal=journal).recover("nested", context=str(log), force=True)
    unjournaled = await ts.Executor([tidy]).run(nested_turn(["a"])[:1], context=str(log))
    resumed = await ts.Executor([tidy_changed]).resume(decided(unjournaled), context=str(log))
    reason = "`tidy` needs approval before it runs (asked again: the tool changed since the approval)"
    assert asked(recovered) == asked(resumed) == [("t1", "tidy", {"paths": ["a"]}, reason)]
    assert recovered.results == resumed.results == [] and not log.exists()
