"""Finishing a journaled run after a crash: each call picks up from its last journaled transition.

A call that started and did not finish is in doubt. A tool with ``reconcile`` is
asked about it first: ``Done(output)`` answers the call with that output (it never
runs), ``NotDone()`` runs it now; ``None``, or a ``reconcile`` that fails, leaves
the call to what recover does without one (an idempotent tool runs it again, any
other answers it ``interrupted``). A call of an external tool that was handed out
waits on for its answer (``toolsched._executor.external``).
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.to_thread

from toolsched._executor.admit import denied_now, not_approved
from toolsched._executor.call import deliver
from toolsched._executor.durable import journaled_child, journaled_handout
from toolsched._executor.external import wait_again
from toolsched._executor.repair import stored_job, user_repair
from toolsched._executor.settings import format_error
from toolsched._executor.turn import Handout, Held, Job, Plan, Turn
from toolsched._policy.permissions import allow_rule_matches
from toolsched._policy.runstate import CallRecord, ChildRecord
from toolsched._policy.standing import Standing
from toolsched._values.calls import args_copy
from toolsched._values.digest import args_digest
from toolsched._values.effects import Done, NotDone, Reconciled
from toolsched._values.results import new_result
from toolsched.journal import JournaledCall, RunRecord

logger = logging.getLogger("toolsched")

__all__ = ["RECONCILE_TIMEOUT", "recovered_jobs"]


def unknown_outcome(tool_name: str, doubt: str | None = None) -> str:
    if doubt is not None:
        return (
            "the outcome of this call is unknown: it started before the run was interrupted, "
            f"{doubt}, and `{tool_name}` is not idempotent, so it was not run again"
        )
    return (
        "the outcome of this call is unknown: it started before the run was interrupted and "
        f"`{tool_name}` is not idempotent, so it was not run again"
    )


#: How long ``reconcile`` may take for a tool without a ``timeout`` of its own (seconds).
RECONCILE_TIMEOUT = 60.0


async def reconciled(job: Job, turn: Turn) -> tuple[Reconciled, str | None]:
    """Asks the tool's ``reconcile`` about a call in doubt, within the tool's ``timeout`` (``RECONCILE_TIMEOUT``
    for a tool without one): its answer, and why it gave none (it returned None, failed, did not answer in
    time, or returned something else).

    ``reconcile`` gets a copy of the arguments: what it does to them never reaches the call's run. A plain
    (not ``async``) function runs in a worker thread, let go if it outlasts the timeout, so that a blocking
    lookup neither stalls the event loop nor escapes the timeout.
    """
    tool = job.tool
    timeout = tool.timeout if tool.timeout is not None and not math.isinf(tool.timeout) else RECONCILE_TIMEOUT
    settle = tool.reconcile
    args = args_copy(job.args)
    context = turn.context_for(job)
    try:
        with anyio.fail_after(timeout):
            if inspect.iscoroutinefunction(settle):
                answer: Any = await settle(args, context)
            else:
                answer = await anyio.to_thread.run_sync(settle, args, context, abandon_on_cancel=True)
                if inspect.isawaitable(answer):
                    answer = await answer
    except TimeoutError:
        return None, f"its reconcile did not answer within {timeout:g} seconds"
    except Exception as exc:
        logger.warning("reconcile of %s failed on call %s", tool.name, job.call.id, exc_info=True)
        return None, f"its reconcile failed ({format_error(exc, job.call)})"
    if answer is None:
        return None, "its reconcile could not tell whether it took effect"
    if not isinstance(answer, Done | NotDone):
        logger.warning("reconcile of %s returned %r on call %s", tool.name, answer, job.call.id)
        return None, f"its reconcile returned {answer!r}, not ts.Done, ts.NotDone or None"
    return answer, None


def attempts_spent(tool_name: str, starts: int, allowed: int) -> str:
    spent = (
        f"all {starts} attempts its retry policy allows"
        if starts == allowed
        else f"{starts} attempts (its retry policy allows {allowed})"
    )
    return (
        f"the outcome of this call is unknown: {spent} had started before the run was interrupted, "
        f"so `{tool_name}` was not run again"
    )


def unchecked_arguments(turn: Turn, job: Job) -> str | None:
    """Checks the arguments the journal holds for a call against its tool's input schema: they replace the
    call's own (validated when planned) and run without admission. Returns why they may not run, or None
    (``job.args`` then holds them as checked)."""
    checked, message = turn.view.table.check(job.index, job.args, turn.settings.limits)
    if message is not None:
        return (
            f"the arguments the journal holds for this call do not pass the input schema of `{job.tool.name}`, "
            f"so it was not run: {message}"
        )
    job.args = checked  # built anew by the check: no one else holds it
    return None


def _standing_approves(standing: Standing, turn: Turn, job: Job, fingerprint: str, digest: str) -> bool:
    permissions = turn.settings.permissions
    root = permissions.root if permissions is not None else None
    settled = standing.decide(
        job.tool.name, fingerprint, digest, lambda rule: allow_rule_matches(rule, job.tool, job.args, root)
    )
    return settled is not None and settled[0] == "approved"


def _from_person(entry: JournaledCall) -> bool:
    """Whether a journaled call's decision holds a person's own arguments: approved with them (``edited``), or held
    again after such an approval with the arguments it was admitted from (``input``)."""
    if (entry.decision or {}).get("edited") is True:
        return True
    given = _journaled_input(entry)
    return given is not None and given[1]


def _journaled_input(entry: JournaledCall) -> tuple[Any, bool] | None:
    """The input a journaled hold or approval says the call was admitted from when it was not the model's
    (``input``): the arguments, and whether they are a person's (else a repair's); None when there is none."""
    given = (entry.decision or {}).get("input")
    if (
        entry.state in ("pending", "approved")
        and isinstance(given, dict)
        and isinstance(given.get("args"), dict)
        and given.get("digest") == args_digest(given["args"])
    ):
        return given["args"], given.get("edited") is True
    return None


def _approved_for(decision: Mapping[str, Any]) -> str | None:
    """The fingerprint of the tool a journaled approval was given for (None when the journal does not say)."""
    fingerprint = decision.get("fingerprint")
    return fingerprint if isinstance(fingerprint, str) else None


def _asked_again(turn: Turn, job: Job, entry: JournaledCall, child: ChildRecord | None) -> CallRecord | str:
    """Makes ready to be admitted again, as ``resume`` admits it, a call approved before the crash for a tool
    that changed since (or for a tool the journal does not name): the approval as ``resume`` finds it in a
    state, to tell the person why it is asked again; or why the arguments approved cannot run.

    The call is admitted with the arguments ``resume`` plans it with: the person's own when they edited them
    (checked against the schema here), else those the model sent, or those it was repaired to.
    """
    decision = entry.decision or {}
    call = job.call
    if decision.get("edited") is True or _from_person(entry):
        # Approved with the person's arguments, or as shown after being admitted from them: admitted from those.
        given = _journaled_input(entry)
        job.args = given[0] if given is not None and decision.get("edited") is not True else decision.get("args")
        refusal = unchecked_arguments(turn, job)
        if refusal is not None:
            return refusal
    # A call whose nested run waits had started (the starts journaled); any other had not.
    job.prior_attempts = entry.starts
    job.attempts = entry.starts + 1
    digest = decision.get("digest")
    return CallRecord(
        call.id,
        call.name,
        call.args,
        "approved" if child is None else "nested",
        tool=job.tool.name,
        fingerprint=_approved_for(decision),
        request_args=decision.get("args"),
        digest=digest if isinstance(digest, str) else None,
        child=child,
    )


async def recovered_jobs(
    turn: Turn, plan: Plan, record: RunRecord, standing: Standing | None = None
) -> tuple[list[Job], list[Job], list[Held], dict[str, CallRecord], dict[str, CallRecord]]:
    """Sorts a journaled run's calls by where each was left: ``(fresh, ready, held, nested, approvals)``.

    Finished calls are answered from the journal and never run again. Fresh
    calls (never admitted) go through admission; ready ones (approved, or
    started by an idempotent tool) run as they are; held ones still wait for a
    person, and calls whose nested runs wait go to ``turn.parked``. ``nested``
    holds the ready calls whose nested runs resume, as ``resume`` finds them. A
    call that started on a tool that is not idempotent, or that is gone, is
    answered ``interrupted``: its outcome is unknown. A call whose journaled
    arguments fail its tool's schema is answered ``invalid_input`` and not run, and
    one a deny rule in force now names ``permission_denied``. Every result counts the
    attempts its journal holds as started (``ToolResult.attempts``), a call run again
    one more. A held call that a standing approval of the run (``standing``, journaled with another call's
    approval) covers is approved and runs; a deny rule in force still wins.

    An approval holds for the tool it was given for (its fingerprint, journaled with it), as on ``resume``:
    a call approved for a tool that changed since goes to ``fresh`` to be admitted again, as ``resume``
    admits it, with its approval in ``approvals`` (by call ID) so that admission says why it asks again.
    So does a call approved with a person's own arguments: admission (validation, hooks, rules, the tool's
    check) judges them before they run, and the approval answers the ask when they pass unchanged.
    A rejection stands whatever the tool is now.
    """
    view = turn.view
    entries = {entry.call_id: entry for entry in record.calls}
    # Read before anything is answered: a damaged nested run is refused with the journal untouched.
    children = {
        entry.call_id: child
        for entry in record.calls
        if entry.state in ("pending", "approved")
        and (child := journaled_child(record.run_id, entry.call_id, entry.decision)) is not None
    }
    # Calls a person approved with arguments of their own: they run with those, and their results say so. So do
    # calls held again after such an approval, admitted from the person's arguments (``input``).
    edited = frozenset(entry.call_id for entry in record.calls if _from_person(entry))
    if edited:
        turn.edited = edited
    fresh: list[Job] = []
    ready: list[Job] = []
    held: list[Held] = []
    nested: dict[str, CallRecord] = {}
    approvals: dict[str, CallRecord] = {}
    for slot in range(len(plan)):
        call = plan.calls[slot]
        entry = entries[call.id]
        if entry.result is not None:
            turn.carry(slot, entry.result)
            continue
        handout = journaled_handout(record.run_id, call.id, entry.run_with) if entry.state == "started" else None
        if handout is not None:
            # An external call handed out before the crash: it waits on for its answer (or is past its deadline).
            await wait_again(turn, slot, call, _handout(turn, plan, slot, entry, handout))
            continue
        refused = plan.refused.get(slot)
        job: Job | None = None
        if refused is not None:
            # Arguments repaired when the run began: the call goes on with what the journal holds for it (what it
            # was held, approved or started with), never repaired again; one that never got that far is
            # repaired as a new call would be.
            if entry.state == "planned":
                job = await user_repair(turn, plan, slot)
            else:
                stored = (entry.run_with if entry.state == "started" else entry.decision) or {}
                # A call held or approved is admitted from what it was admitted from before hooks rewrote it.
                given = _journaled_input(entry)
                job = stored_job(turn, plan, slot, slot, given[0] if given is not None else stored.get("args"))
            refused = plan.refused.get(slot) if job is None else None
        if refused is not None:
            if entry.state == "started":
                # Started with a tool that is gone now: whether it is idempotent cannot be known.
                await turn.answer(
                    slot, call, call.name, "interrupted", unknown_outcome(call.name), attempts=entry.starts
                )
            else:
                # The tool set changed since the crash: the call is answered as it would be now.
                await turn.answer(slot, call, plan.tool_name(view, slot), refused[0], refused[1], attempts=entry.starts)
            continue
        if job is None:
            job = plan.job(view, slot)
        tool = job.tool
        decision = entry.decision or {}
        if entry.state == "planned":
            fresh.append(job)
            continue
        if entry.state == "rejected":
            await turn.answer(
                slot,
                call,
                tool.name,
                "permission_denied",
                not_approved(tool.name, decision.get("message")),
                attempts=entry.starts,
            )
            continue
        if entry.state == "approved" and (
            _approved_for(decision) != view.fingerprint(job.index)
            or (decision.get("edited") is True and call.id not in children)
        ):
            # Approved for another tool than the one that has the name now: asked again, as on ``resume``. Or
            # approved with a person's own arguments, which no hook, check or rule had judged before the crash
            # (``resume`` journals the approval before it admits them): admitted as ``resume`` admits them,
            # where the approval answers the ask if they come through unchanged.
            child = children.get(call.id)
            again = _asked_again(turn, job, entry, child)
            if isinstance(again, str):
                await turn.answer(slot, call, tool.name, "invalid_input", again, attempts=entry.starts)
                continue
            approvals[call.id] = again
            if child is not None:
                # Admitted as it is, the call resumes its nested run as ``resume`` would.
                nested[call.id] = again
            fresh.append(job)
            continue
        # Why a call in doubt stays in doubt after its tool's ``reconcile`` was asked (None: not asked).
        doubt = None
        settled: Reconciled = None
        if entry.state == "started" and job.facts.reconciles:
            # Asked with the arguments the call started with, checked against the schema first.
            job.args = (entry.run_with or {}).get("args", job.args)
            refusal = unchecked_arguments(turn, job)
            if refusal is not None:
                await turn.answer(slot, call, tool.name, "invalid_input", refusal, attempts=entry.starts)
                continue
            settled, doubt = await reconciled(job, turn)
            if isinstance(settled, Done):
                # The effect happened: the call is answered with what it gave, and never runs again.
                found = new_result(
                    call.id, tool.name, settled.output, None, None, False, 0.0, False, None, False, None, entry.starts
                )
                await deliver(turn, slot, call, tool, found)
                continue
        if entry.state in ("pending", "approved"):
            job.args = decision.get("args", job.args)
            # A call whose nested run waits had started (the starts journaled); any other had not.
            job.prior_attempts = entry.starts
            job.attempts = entry.starts + 1
        elif isinstance(settled, NotDone):
            # The effect did not happen: the call runs now, as the next of its attempts.
            job.prior_attempts = entry.starts
            job.attempts = entry.starts + 1
        elif tool.idempotent:
            retry = tool.retry
            if retry is not None and entry.starts >= retry.attempts:
                # Every attempt its policy allows had started: running it again would exceed the policy.
                spent = attempts_spent(tool.name, entry.starts, retry.attempts)
                await turn.answer(slot, call, tool.name, "interrupted", spent, attempts=entry.starts)
                continue
            job.args = (entry.run_with or {}).get("args", job.args)
            # The runs journaled before the crash count: the run it gets now is the next one.
            job.prior_attempts = entry.starts
            job.attempts = entry.starts + 1
        else:
            message = unknown_outcome(tool.name, doubt)
            await turn.answer(slot, call, tool.name, "interrupted", message, attempts=entry.starts)
            continue
        refusal = unchecked_arguments(turn, job)
        if refusal is not None:
            await turn.answer(slot, call, tool.name, "invalid_input", refusal, attempts=entry.starts)
            continue
        denied = denied_now(job, turn)
        if denied is not None:
            # Approved, held or started before the crash, and denied by the rules in force now: a deny still wins.
            await turn.answer(slot, call, tool.name, "permission_denied", denied, attempts=entry.starts)
            continue
        child = children.get(call.id)
        fingerprint = str(decision.get("fingerprint", view.fingerprint(job.index)))
        if entry.state == "pending" and child is not None:
            if turn.parked is None:
                turn.parked = []
            turn.parked.append((job, child))
        elif entry.state == "pending":
            digest = args_digest(job.args)
            current = view.fingerprint(job.index)
            if standing and _standing_approves(standing, turn, job, current, digest):
                # A standing approval given on another call of the run (journaled with it) covers this one, if
                # it was given for the tool as it is now (as on ``resume``).
                assert turn.durable is not None
                await turn.durable.decided(call.id, "allow", job.args, None, current, None)
                ready.append(job)
            else:
                given = _journaled_input(entry)
                held.append(
                    Held(job, str(decision.get("reason", "")), digest, fingerprint, given[0] if given else None)
                )
        else:
            if child is not None:
                # Approved to resume its nested run: it runs with the nested run's record as decided.
                nested[call.id] = CallRecord(
                    call.id,
                    call.name,
                    call.args,
                    "nested",
                    tool=tool.name,
                    fingerprint=fingerprint,
                    request_args=job.args,
                    digest=args_digest(job.args),
                    child=child,
                )
            ready.append(job)
    return fresh, ready, held, nested, approvals


def _handout(turn: Turn, plan: Plan, slot: int, entry: JournaledCall, handout: tuple[float, float | None]) -> Handout:
    """The hand-out of an external call as the journal holds it (its tool as planned now, if it still is one)."""
    view = turn.view
    index = plan.tools[slot]
    fingerprint = view.fingerprint(index) if index >= 0 else ""
    args = (entry.run_with or {}).get("args", plan.calls[slot].args)
    return Handout(slot, plan.tool_name(view, slot), fingerprint, args, handout[0], handout[1])
