"""Finishing a journaled run after a crash: each call picks up from its last journaled transition."""

from __future__ import annotations

from toolsched.executor.admit import not_approved
from toolsched.executor.turn import Held, Job, Plan, Turn
from toolsched.journal import RunRecord
from toolsched.results import args_digest

__all__ = ["recovered_jobs"]


def unknown_outcome(tool_name: str) -> str:
    return (
        "the outcome of this call is unknown: it started before the run was interrupted and "
        f"`{tool_name}` is not idempotent, so it was not run again"
    )


def attempts_spent(tool_name: str, starts: int) -> str:
    return (
        f"the outcome of this call is unknown: all {starts} attempts its retry policy allows had started "
        f"before the run was interrupted, so `{tool_name}` was not run again"
    )


async def recovered_jobs(turn: Turn, plan: Plan, record: RunRecord) -> tuple[list[Job], list[Job], list[Held]]:
    """Sorts a journaled run's calls by where each was left: ``(fresh, ready, held)``.

    Finished calls are answered from the journal and never run again. Fresh
    calls (never admitted) go through admission; ready ones (approved, or
    started by an idempotent tool) run as they are; held ones still wait for a
    person. A call that started on a tool that is not idempotent, or that is
    gone, is answered ``interrupted``: its outcome is unknown.
    """
    view = turn.view
    entries = {entry.call_id: entry for entry in record.calls}
    fresh: list[Job] = []
    ready: list[Job] = []
    held: list[Held] = []
    for slot in range(len(plan)):
        call = plan.calls[slot]
        entry = entries[call.id]
        if entry.result is not None:
            turn.carry(slot, entry.result)
            continue
        refused = plan.refused.get(slot)
        if refused is not None:
            if entry.state == "started":
                # Started with a tool that is gone now: whether it is idempotent cannot be known.
                await turn.answer(slot, call, call.name, "interrupted", unknown_outcome(call.name))
            else:
                # The tool set changed since the crash: the call is answered as it would be now.
                await turn.answer(slot, call, plan.tool_name(view, slot), refused[0], refused[1])
            continue
        job = plan.job(view, slot)
        tool = job.tool
        decision = entry.decision or {}
        if entry.state == "planned":
            fresh.append(job)
        elif entry.state == "rejected":
            await turn.answer(
                slot, call, tool.name, "permission_denied", not_approved(tool.name, decision.get("message"))
            )
        elif entry.state == "pending":
            job.args = decision.get("args", job.args)
            fingerprint = str(decision.get("fingerprint", view.fingerprint(job.index)))
            digest = str(decision.get("digest", args_digest(job.args)))
            held.append(Held(job, str(decision.get("reason", "")), digest, fingerprint))
        elif entry.state == "approved":
            job.args = decision.get("args", job.args)
            ready.append(job)
        elif tool.idempotent:
            retry = tool.retry
            if retry is not None and entry.starts >= retry.attempts:
                # Every attempt its policy allows had started: running it again would exceed the policy.
                await turn.answer(slot, call, tool.name, "interrupted", attempts_spent(tool.name, entry.starts))
                continue
            run_with = entry.run_with or {}
            job.args = run_with.get("args", job.args)
            job.prior_attempts = entry.starts if retry is not None else 0
            ready.append(job)
        else:
            await turn.answer(slot, call, tool.name, "interrupted", unknown_outcome(tool.name))
    return fresh, ready, held
