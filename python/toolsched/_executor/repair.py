"""The executor's own argument repair (``Executor(repair_arguments=callable)``), after the engine's built-in one.

A call the engine refused as ``invalid_input`` (its text did not parse, or its arguments broke the tool's
schema, after the built-in repair) is handed to the repair callable as ``(call, error)``, ``error`` being
the ``ToolResult`` the call would be answered with (the call is a copy: what the callable changes in it reaches
nothing else). What it returns is read as the model's own arguments
would be: text is parsed (and repaired by the built-in repair), a mapping is taken as it is, and either is
validated against the schema; the call then goes through the rules, hooks, approvals and guardrails like
any other. ``None`` leaves the call answered as it was. A plain (not ``async``) callable runs in a worker
thread. A repair that raises, returns anything else, or
outlives the tool's ``timeout`` leaves the call answered as it was, with a note saying so; one whose
arguments are invalid answers the call ``invalid_input`` saying the repair was invalid too.

A call resumed or recovered with arguments a state or a journal holds (approved, held, or started) runs
with those, never repaired again (``stored_job``).
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.to_thread

from toolsched._backends.workers import own_failure
from toolsched._executor.settings import format_error
from toolsched._executor.turn import Job, Plan, Repairing, Turn, plan_calls
from toolsched._values.calls import ToolCall, args_copy
from toolsched._values.results import error_result

__all__ = ["REPAIR_FUNCTION_FIX", "repair_refused", "stored_job", "user_repair"]

logger = logging.getLogger("toolsched")

# The fix a ``ToolArgumentsRepaired`` event names when the repair callable gave the arguments.
REPAIR_FUNCTION_FIX = "repair_function"


def _is_async(function: Any) -> bool:
    """Whether ``function`` is an ``async def`` (or an object whose ``__call__`` is one)."""
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(type(function).__call__)


def _repairable(turn: Turn, plan: Plan, slot: int) -> bool:
    refused = plan.refused.get(slot)
    return refused is not None and refused[0] == "invalid_input" and plan.tools[slot] >= 0


async def user_repair(turn: Turn, plan: Plan, slot: int, turn_slot: int | None = None) -> Job | None:
    """The job of a refused slot the repair callable repaired (placed at ``turn_slot``), else None: the slot
    stays refused in ``plan``, its message noting what went wrong with the repair, if anything did."""
    function = turn.settings.repair_function
    if function is None or not _repairable(turn, plan, slot):
        return None
    kind, message = plan.refused[slot]
    call = plan.calls[slot]
    tool = turn.view.tools[plan.tools[slot]]
    note: str | None = None
    given: Any = None
    timeout = tool.timeout
    scope = anyio.CancelScope(deadline=anyio.current_time() + (math.inf if timeout is None else timeout))
    # While it is repaired, the caller's ``cancel`` of the call and an ``interrupt`` of the run reach it.
    repairing = Repairing(scope, tool.name)
    if turn.repairs is None:
        turn.repairs = {}
    turn.repairs[call.id] = repairing
    try:
        with scope:
            try:
                error = error_result(call.id, tool.name, kind, message)
                # Shown a copy of the call: what the function changes in its arguments reaches neither the
                # caller's call nor what the turn, its state and its journal hold as the model's.
                shown = call if isinstance(call.args, str) else ToolCall(call.id, call.name, args_copy(call.args))
                if _is_async(function):
                    given = function(shown, error)
                else:
                    # A plain function (one that asks a model over the network, say) runs in a worker thread: the
                    # calls of a turn are repaired concurrently, and the timeout bounds it like an async one.
                    # Boxed: trio refuses a worker thread's awaitable result (a lambda around an async function).
                    (given,) = await anyio.to_thread.run_sync(lambda: (function(shown, error),), abandon_on_cancel=True)
                if inspect.isawaitable(given):
                    given = await given
            except BaseException as exc:
                if not own_failure(exc):
                    raise
                logger.warning("repair_arguments raised on call %s", call.id, exc_info=True)
                note = f"repair_arguments raised {format_error(exc, call)}"
    finally:
        turn.repairs.pop(call.id, None)
    if repairing.reason is not None:
        # The caller cancelled the call while it was repaired: it never runs.
        plan.refused[slot] = ("cancelled", repairing.reason)
        return None
    if turn.halt is not None:
        # The run was interrupted while the call was repaired: like every call not started, it is skipped.
        plan.refused[slot] = ("skipped", turn.halt)
        return None
    if scope.cancelled_caught:
        note = f"repair_arguments gave no answer within the {timeout:g} s timeout of `{tool.name}`"
    elif note is None and given is not None and not isinstance(given, (str, Mapping)):
        note = f"repair_arguments returned a {type(given).__name__}, not text, a dict or None"
    if note is not None:
        plan.refused[slot] = (kind, f"{message} ({note})")
        return None
    if given is None:
        return None
    again = plan_calls(turn.settings, turn.view, [ToolCall(call.id, call.name, given)], jobs=True)
    if again.refused:
        why = again.refused[0][1]
        plan.refused[slot] = ("invalid_input", f"{message}; the arguments repair_arguments gave are invalid too: {why}")
        return None
    job = again.jobs[0]
    job.slot = slot if turn_slot is None else turn_slot
    # The call as the model sent it: its text stays what the turn, its state and its journal hold.
    job.call = call
    fixes = (REPAIR_FUNCTION_FIX, *(again.repairs or {}).get(0, ()))
    turn.note_repaired(call, tool.name, fixes)
    return job


async def repair_refused(turn: Turn, plan: Plan, jobs: list[Job]) -> list[Job]:
    """``jobs`` with the jobs of every refused slot the repair callable repaired, in model order; the repaired
    slots leave ``plan.refused``. The callable is asked about every such slot at once."""
    slots = [slot for slot in plan.refused if _repairable(turn, plan, slot)]
    if not slots:
        return jobs
    repaired: dict[int, Job] = {}

    async def repair(slot: int) -> None:
        job = await user_repair(turn, plan, slot)
        if job is not None:
            repaired[slot] = job

    if len(slots) == 1:
        await repair(slots[0])
    else:
        async with anyio.create_task_group() as group:
            for slot in slots:
                group.start_soon(repair, slot)
    if not repaired:
        return jobs
    for slot in repaired:
        del plan.refused[slot]
    return sorted([*jobs, *repaired.values()], key=lambda job: job.slot)


def stored_job(turn: Turn, plan: Plan, slot: int, turn_slot: int, args: Any) -> Job | None:
    """The job of a refused slot run with ``args``, the arguments a state or a journal holds for it (what it was
    approved, held or started with after a repair), when they pass the tool's schema now; else None. Only an
    executor with a repair callable takes them: the built-in repair gives the same arguments every time, so a
    call it cannot repair now was not repaired then (its tool changed since)."""
    if turn.settings.repair_function is None or args is None or not isinstance(args, (str, Mapping)):
        return None
    if not _repairable(turn, plan, slot):
        return None
    call = plan.calls[slot]
    again = plan_calls(turn.settings, turn.view, [ToolCall(call.id, call.name, args)], jobs=True)
    if again.refused:
        return None
    job = again.jobs[0]
    job.slot = turn_slot
    job.call = call
    # Repaired when the run began (the model's own text is refused): its result says so; nothing is repaired now.
    turn.note_repaired(call, plan.tool_name(turn.view, slot), (REPAIR_FUNCTION_FIX,), report=False)
    return job
