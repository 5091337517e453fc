"""Semantic validation and permission for the calls of a turn: ``validate_input``, then hooks, rules, mode and
approvals.

Admission runs in model order, one call after another, so its result never
depends on timing. Denied calls are answered here; calls that wait for a
person are held; the rest go on to scheduling with their final input.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from typing import Any

from toolsched._backends.workers import own_failure
from toolsched._executor.settings import format_error
from toolsched._executor.turn import Held, Job, Plan, Turn, judge
from toolsched._executor.view import Policy
from toolsched._policy.hooks import HookTimeout, new_hook_event
from toolsched._policy.limits import Limits, ModelRetry
from toolsched._policy.permissions import allow_rule_matches, resolve_permission
from toolsched._policy.runstate import ApprovalRequest, CallRecord, RunState, records_by_id, standing_for
from toolsched._policy.tool_rules import UNDECIDED, Verdict
from toolsched._values.calls import args_copy
from toolsched._values.decisions import Behavior, Decision, Rewrite
from toolsched._values.digest import args_digest
from toolsched._values.results import ErrorKind
from toolsched.errors import SemanticError

__all__ = ["admit", "check_semantics", "not_approved"]

logger = logging.getLogger("toolsched")

# A call's admission: (allow | deny | ask, the error kind of a denial, the reason).
Admission = tuple[Behavior, ErrorKind | None, str | None]


def not_approved(tool_name: str, message: str | None) -> str:
    text = f"the call to `{tool_name}` was not approved"
    return f"{text}: {message}" if message else text


async def check_semantics(jobs: list[Job], turn: Turn) -> list[Job]:
    """Semantic validation: each tool's ``validate_input`` (shown a copy of the arguments, as every check of a
    call is: what it changes in them never reaches the call); a refusal answers the call."""
    if not turn.view.checks_input:
        return jobs
    passed = []
    for job in jobs:
        if job.facts.validates_input and job.cancel_reason is None and turn.halt is None:
            # (A call cancelled, or a run interrupted, meanwhile is not checked: it is answered without running.)
            try:
                checked = job.tool.validate_input(args_copy(job.args), turn.context_for(job))
                if inspect.isawaitable(checked):
                    # (A plain ``def validate_input`` is taken too: it answers without awaiting.)
                    await checked
            except ModelRetry as exc:
                await turn.answer(job.slot, job.call, job.tool.name, "model_retry", exc.message)
                continue
            except SemanticError as exc:
                await turn.answer(job.slot, job.call, job.tool.name, "semantic_error", str(exc))
                continue
            except BaseException as exc:
                if not own_failure(exc):
                    raise
                message = f"input check of `{job.tool.name}` failed: {format_error(exc, job.call)}"
                await turn.answer(job.slot, job.call, job.tool.name, "semantic_error", message)
                continue
        passed.append(job)
    return passed


async def admit(
    jobs: list[Job],
    turn: Turn,
    held: list[Held],
    prior: RunState | None,
    approvals: Mapping[str, CallRecord] | None = None,
) -> list[Job]:
    """Permission for the whole turn, in model order: hooks, rules, mode, the tool, then the approver.

    Denied calls are answered; calls that wait for a person go to ``held``;
    the admitted calls come back with their final input. The decisions made
    before are those of ``prior``, the state being resumed, or ``approvals``
    (by call ID: the approvals a recovered run's journal holds for tools that
    changed since).
    """
    policies = turn.view.policies
    records = records_by_id(prior) if prior is not None else approvals or {}
    admitted = []
    for job in jobs:
        policy = policies[job.index]
        if not policy.admit or job.cancel_reason is not None or turn.halt is not None:
            # A call cancelled, or a run interrupted, while earlier calls were admitted: no hook or person is
            # asked about it; it is answered without running when its turn to run comes.
            admitted.append(job)
            continue
        record = records.get(job.call.id)
        # The input admission begins from, before any hook rewrites it: a call held for a person is admitted
        # from it again when the run resumes.
        source = job.args
        if policy.pre or job.facts.checks_permissions or policy.refuse_interaction:
            behavior, kind, message = await _decide(job, policy, turn, record)
        else:
            # Nothing to await: rules, mode and approvals decide without a coroutine per call.
            decided, rule = _by_rules(job, policy, turn, None)
            behavior, kind, message = decided or _merge(job, turn, record, rule)
        if behavior == "ask":
            fingerprint = turn.view.fingerprint(job.index)
            asked = _asked_again(message or "", record, fingerprint)
            behavior, message = await _settle(job, asked, prior, held, turn, fingerprint, source)
            kind = "permission_denied"
            if turn.durable is not None:
                if behavior != "ask" and record is not None and record.status in ("approved", "nested"):
                    # The journal holds the call approved (for another tool or input): it is held again before it
                    # is decided anew, as a decision only follows a call planned or held.
                    await turn.durable.decided(job.call.id, "ask", job.args, asked, fingerprint, None)
                reason = held[-1].reason if behavior == "ask" else None
                kept = _held_from(turn, job, source) if behavior == "ask" else None
                await turn.durable.decided(job.call.id, behavior, job.args, reason, fingerprint, message, kept)
        if behavior == "allow":
            admitted.append(job)
        elif behavior == "deny" and kind is not None:
            await turn.answer(job.slot, job.call, job.tool.name, kind, message or "")
    # Every call admitted (each is added once, in order): the list the turn holds already, not a second one
    # kept alive while the calls wait.
    return jobs if len(admitted) == len(jobs) else admitted


async def _decide(job: Job, policy: Policy, turn: Turn, record: CallRecord | None) -> Admission:
    """One call's merged decision: (allow | deny | ask, the error kind of a denial, the reason).

    ``record`` is the call's entry in the state being resumed: an approval
    given for this very tool and final input answers every ask (the tool is
    not asked again), though a deny still wins.
    """
    tool = job.tool
    if policy.refuse_interaction:
        return "deny", "interaction_required", f"`{tool.name}` needs a person present; this run is not interactive"
    hook_allowed = False
    hook_ask: str | None = None
    if policy.pre:
        rewritten = False
        for hook in policy.pre:
            event = new_hook_event(job.call.id, tool.name, args_copy(job.args), None, None, turn.context)
            try:
                answer = await hook.invoke(event)
            except HookTimeout as exc:
                return "deny", "hook_blocked", f"{hook.label} {exc}; the call was blocked"
            except BaseException as exc:
                if not own_failure(exc):
                    raise
                logger.warning("%s failed on call %s", hook.label, job.call.id, exc_info=True)
                detail = format_error(exc, job.call)
                return "deny", "hook_blocked", f"{hook.label} failed ({detail}); the call was blocked"
            if answer is None:
                continue
            if isinstance(answer, Rewrite):
                job.args = answer.args
                rewritten = True
            elif isinstance(answer, Decision):
                if answer.behavior == "deny":
                    return "deny", "hook_blocked", answer.reason or f"blocked by {hook.label}"
                if answer.behavior == "ask":
                    hook_ask = hook_ask or answer.reason or f"{hook.label} asks for approval"
                else:
                    hook_allowed = True
            else:
                return (
                    "deny",
                    "hook_blocked",
                    (f"{hook.label} returned {answer!r}, not None, a Decision or a Rewrite; the call was blocked"),
                )
        if rewritten:
            refusal = await _recheck(job, turn)
            if refusal is not None:
                return "deny", "hook_blocked", refusal
    decided, rule = _by_rules(job, policy, turn, hook_ask)
    if decided is not None:
        return decided
    tool_decision: Decision | None = None
    if job.facts.checks_permissions:
        tool_decision = await _tool_decision(job, turn)
    return _merge(job, turn, record, rule, hook_ask, hook_allowed, tool_decision)


def _by_rules(
    job: Job, policy: Policy, turn: Turn, hook_ask: str | None
) -> tuple[Admission | None, tuple[Behavior, str] | None]:
    """What the rules and the mode settle on their own (a deny rule, an allow rule that waives every ask,
    plan mode refusing a write), or None to go on; with the rule that names the call, for ``_merge``."""
    rule = job.ruling
    if rule is UNDECIDED or job.args is not job.ruled:
        # The engine left the call to ``evaluate``, or judged arguments that have been replaced since.
        rule = policy.rules.evaluate(job.args) if policy.rules is not None else None
    mode = turn.settings.mode
    if rule is not None:
        if rule[0] == "deny":
            return ("deny", "permission_denied", denial(job, rule)), None
        if rule[0] == "allow" and hook_ask is None and mode != "plan" and not job.facts.checks_permissions:
            # An allow rule waives every other ask, and nothing is left that could deny.
            return ("allow", None, None), None
    if mode == "plan" and not _is_read_only(job):
        return ("deny", "permission_denied", f"plan mode: `{job.tool.name}` may change state, so it does not run"), None
    if rule is None:
        if hook_ask is None and policy.unasked:
            # No rule names the call, no hook asks, and neither the mode nor the tool would: allowed.
            return ("allow", None, None), None
        return None, None
    return None, (rule[0], rule[1])


def denial(job: Job, rule: Verdict) -> str:
    """Why a deny rule refuses a call (``rule``: the rules' verdict, a deny)."""
    return rule[2] or f"`{job.tool.name}` with this input is denied by the rule `{rule[1]}`"


def denied_now(job: Job, turn: Turn) -> str | None:
    """Why the rules in force deny a call admitted earlier (its journaled approval, or its start, before a
    crash), or None: a deny still wins."""
    rules = turn.view.policies[job.index].rules
    rule = rules.evaluate(job.args) if rules is not None else None
    return denial(job, rule) if rule is not None and rule[0] == "deny" else None


def _merge(
    job: Job,
    turn: Turn,
    record: CallRecord | None,
    rule: tuple[Behavior, str] | None,
    hook_ask: str | None = None,
    hook_allowed: bool = False,
    tool_decision: Decision | None = None,
) -> Admission:
    """The merged decision once hooks, rules and the tool have spoken (see ``resolve_permission``)."""
    if (
        record is not None
        and record.status in ("approved", "nested")
        and (tool_decision is None or tool_decision.behavior != "deny")
        and record.fingerprint == turn.view.fingerprint(job.index)
        and record.bound_digest == args_digest(job.args)
    ):
        return "allow", None, None
    behavior, reason = resolve_permission(
        job.tool.name,
        mode=turn.settings.mode,
        rule=rule,
        hook_ask=hook_ask,
        hook_allowed=hook_allowed,
        tool_decision=tool_decision,
        is_read_only=lambda: _is_read_only(job),
        needs_approval=lambda: _needs_approval(job),
    )
    if behavior == "deny":
        return "deny", "permission_denied", reason
    return behavior, None, reason


async def _recheck(job: Job, turn: Turn) -> str | None:
    """Validates input rewritten by hooks again (schema, then ``validate_input``); the refusal, if any."""
    checked, message = turn.view.table.check(job.index, job.args, turn.settings.limits)
    if message is not None:
        return f"the input rewritten by a pre_tool_use hook is invalid: {message}"
    job.args = checked  # built anew by the check: no one else holds it
    if job.facts.validates_input:
        try:
            checked = job.tool.validate_input(args_copy(job.args), turn.context_for(job))
            if inspect.isawaitable(checked):
                await checked
        except SemanticError as exc:
            return f"the input rewritten by a pre_tool_use hook was refused: {exc}"
        except BaseException as exc:
            if not own_failure(exc):
                raise
            return f"the input rewritten by a pre_tool_use hook was refused: {format_error(exc, job.call)}"
    return None


def _held_from(turn: Turn, job: Job, source: Any) -> tuple[Any, bool] | None:
    """The input a held call's admission began from when it is not the model's, for the journal to keep with the
    hold: a person's arguments (True) or its repaired ones (False); None when it is the model's."""
    call_id = job.call.id
    if turn.edited is not None and call_id in turn.edited:
        return source, True
    if turn.repaired is not None and call_id in turn.repaired:
        return source, False
    return None


async def _tool_decision(job: Job, turn: Turn) -> Decision:
    """The tool's ``check_permissions``; an error or a wrong answer denies (fail closed)."""
    try:
        decision: Any = job.tool.check_permissions(args_copy(job.args), turn.context_for(job))
        if inspect.isawaitable(decision):
            # (A plain ``def check_permissions`` is taken too: it answers without awaiting.)
            decision = await decision
    except BaseException as exc:
        if not own_failure(exc):
            raise
        logger.warning("check_permissions of %s failed", job.tool.name, exc_info=True)
        return Decision.deny(f"permission check of `{job.tool.name}` failed: {format_error(exc, job.call)}")
    if not isinstance(decision, Decision):
        return Decision.deny(f"permission check of `{job.tool.name}` returned {decision!r}, not a Decision")
    return decision


def _is_read_only(job: Job) -> bool:
    return judge(job, job.facts.static_read_only, job.tool.is_read_only, False, "treating the call as a write")


def _needs_approval(job: Job) -> bool:
    return judge(job, job.facts.static_needs_approval, job.tool.requires_approval, True, "asking for approval")


def _asked_again(reason: str, record: CallRecord | None, fingerprint: str) -> str:
    """Why a call asks, saying so when it was approved before (``record``) and asks again: that approval was
    given for another tool or input."""
    if record is None or record.status not in ("approved", "nested"):
        return reason
    if record.fingerprint is None:
        changed = "the approval does not say which tool it was given for"
    else:
        changed = f"{'the tool' if record.fingerprint != fingerprint else 'the arguments'} changed since the approval"
    return f"{reason} (asked again: {changed})"


async def _settle(
    job: Job, reason: str, prior: RunState | None, held: list[Held], turn: Turn, fingerprint: str, source: Any
) -> tuple[Behavior, str | None]:
    """A call that asks: a standing decision that covers this tool and input, else the approver, else held
    (``source``: the input its admission began from)."""
    tool = job.tool
    digest = args_digest(job.args)
    always = standing_for(prior)
    if always:
        permissions = turn.settings.permissions
        root = permissions.root if permissions is not None else None
        standing = always.decide(
            tool.name, fingerprint, digest, lambda rule: allow_rule_matches(rule, tool, job.args, root)
        )
        if standing is not None:
            if standing[0] == "rejected":
                return "deny", not_approved(tool.name, standing[1])
            return "allow", None
    approver = turn.settings.approver
    if approver is not None:
        request = ApprovalRequest(job.call.id, tool.name, args_copy(job.args), reason)
        try:
            answer: Any = approver(request)
            if inspect.isawaitable(answer):
                answer = await answer
        except BaseException as exc:
            if not own_failure(exc):
                raise
            logger.warning("the approver failed on call %s", job.call.id, exc_info=True)
            return "deny", not_approved(tool.name, f"the approver failed ({format_error(exc, job.call)})")
        if answer is True or (isinstance(answer, Decision) and answer.behavior == "allow"):
            return "allow", None
        if answer is False:
            return "deny", not_approved(tool.name, None)
        if isinstance(answer, Decision) and answer.behavior == "deny":
            return "deny", not_approved(tool.name, answer.reason)
        if not (isinstance(answer, Decision) and answer.behavior == "ask"):
            logger.warning("the approver returned %r for call %s; rejecting it", answer, job.call.id)
            return "deny", not_approved(tool.name, f"the approver returned {answer!r}")
    held.append(Held(job, reason, digest, fingerprint, source))
    return "ask", None


async def limit_jobs(
    jobs: list[Job], turn: Turn, limits: Limits, *, resumed: bool = False, refused: Plan | None = None
) -> list[Job]:
    """Counts the turn's calls against ``limits``, in model order; a refused call is answered, not run.

    The calls to a tool that does not exist among ``refused`` (the engine's refusals, answered after this) count
    too, in their places: one past a cap is to be answered ``limit_exceeded`` instead (``limit_unknown``)."""
    unknown = [] if refused is None else [slot for slot in refused.refused if _counted_unknown(refused, slot, turn)]
    order: list[tuple[int, Job | None]] = [(job.slot, job) for job in jobs]
    if unknown:
        order = sorted([*order, *((slot, None) for slot in unknown)], key=lambda entry: entry[0])
    passed = []
    for slot, job in order:
        if job is None:
            assert refused is not None
            limit_unknown(refused, slot, turn, limits)
            continue
        refusal = limits.admit(
            job.call.id, job.tool.name, job.args, job.tool.max_model_retries, resumed=resumed, run=turn.run_identity()
        )
        if refusal is None:
            passed.append(job)
        else:
            kind, message = refusal
            await turn.answer(job.slot, job.call, job.tool.name, kind, message)  # type: ignore[arg-type]
    return passed


def _counted_unknown(plan: Plan, slot: int, turn: Turn) -> bool:
    """Whether the engine refused ``slot`` as a call to a tool that does not exist, answered (not raised)."""
    return plan.refused[slot][0] == "unknown_tool" and turn.settings.unknown_tool != "raise"


def limit_unknown(plan: Plan, slot: int, turn: Turn, limits: Limits) -> None:
    """Counts the call of ``slot`` to a tool that does not exist against ``limits`` (the calls of the run, the
    repeats): past a cap, the slot is to be answered ``limit_exceeded`` instead. Counted once by its run and ID."""
    if not _counted_unknown(plan, slot, turn):
        return
    call = plan.calls[slot]
    refusal = limits.admit(call.id, call.name, call.args, 0, resumed=True, run=turn.run_identity())
    if refusal is not None:
        plan.refused[slot] = refusal  # type: ignore[assignment]
