"""One admitted call, from its input guardrails to its result: input guardrails, execute, output guardrails,
post hooks, shape.

``execute`` runs one admitted call to its one result: under its cancel scope
(timeout, cancellation, sibling abort) when it has one, its concurrency slot,
its backend, and the journal of a durable run; then records the result and
lets the post hooks observe it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from time import perf_counter
from typing import Any

import anyio
import anyio.lowlevel

from toolsched._backends.threads import watching_call
from toolsched._backends.workers import (
    absorb_cancel,
    being_stopped,
    current_asyncio_task,
    foreign_cancellation,
    observer_failure,
    running_task,
    take_back,
)
from toolsched._executor.durable import JournalFailed
from toolsched._executor.settings import format_error
from toolsched._executor.shaping import fits_as_is, shape_output
from toolsched._executor.timed_out import CallTimedOut
from toolsched._executor.turn import DONE, RUNNING, Handout, Job, Turn
from toolsched._policy.coordination import guarded, returned
from toolsched._policy.guardrails import GuardrailEvent, Guardrails
from toolsched._policy.holds import NestedHold
from toolsched._policy.hooks import new_hook_event
from toolsched._policy.limits import ModelRetry
from toolsched._policy.resilience import CircuitOpen, NotRun, RunHalted, is_transient, retry_after_of
from toolsched._policy.slots import holding, holds
from toolsched._tools.context import ToolContext
from toolsched._tools.tools import ArgumentsRefused, Tool
from toolsched._values.calls import ToolCall, args_copy
from toolsched._values.events import ToolRetrying, ToolStarted, new_tool_finished, new_tool_started
from toolsched._values.exception_text import words_of
from toolsched._values.results import (
    ErrorKind,
    ToolResult,
    new_result,
    shown_output,
    shown_result,
)
from toolsched.errors import GuardrailTripped
from toolsched.journal import UnstorableOutputError

__all__ = [
    "EXECUTION_FAILURES",
    "abort_reason",
    "answer_unstarted",
    "cancelled_from_outside",
    "deliver",
    "execute",
    "failed",
    "hand_out",
    "raised_by_tool",
    "shaped",
]

logger = logging.getLogger("toolsched")

# Failures of the tool itself: they can abort the batch's siblings and end a raising run.
EXECUTION_FAILURES = frozenset({"execution_error", "timeout"})

SKIPPED = "not run: the run was steered away before this call started"


class _Rejected(Exception):
    """A guardrail refused a call (internal)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


async def answer_unstarted(
    jobs: list[Job], turn: Turn, kind: ErrorKind, message: str, batch: int | None = None
) -> None:
    """Answers calls that will not run; one cancelled on its own keeps its own reason."""
    for job in jobs:
        job.state = DONE
        # A recovered call counts the runs its journal holds from before the crash.
        attempts = job.prior_attempts
        if job.cancel_reason is not None:
            await turn.answer(job.slot, job.call, job.tool.name, "cancelled", job.cancel_reason, batch, attempts)
        else:
            await turn.answer(job.slot, job.call, job.tool.name, kind, message, batch, attempts)


async def execute(job: Job, batch: int, concurrent: bool, turn: Turn) -> None:
    """One admitted call to its result: input guardrails, execute, output guardrails, post hooks, shape, record.

    As a task's whole coroutine (its pool's ``start_each``: no coroutine of the pool around it), it is the
    worker: it begins only if the run is not being stopped by then, and its last act is to tell the pool's
    group how it ended (``WorkerGroup.ended``), as ``_Pool.take_one`` does for other work."""
    pool = turn.pool
    worker = concurrent and pool is not None and pool.each
    if worker and pool.group.cancelled():
        # Left to the run's end unstarted, as a worker between two items leaves the next.
        pool.group.ended(None)
        return
    told = False
    try:
        tool = job.tool
        call = job.call
        emit = turn.emit
        settings = turn.settings
        if job.cancel_reason is not None or turn.abort is not None or turn.halt is not None:
            # Stopped before it started: answered without running.
            if turn.abort is not None:
                await answer_unstarted([job], turn, "cancelled", f"not run: {turn.abort}", batch)
            else:
                await answer_unstarted([job], turn, "skipped", turn.halt or SKIPPED, batch)
            if emit is not None:
                await emit.flush()
            return
        if job.facts.external:
            await hand_out(job, batch, turn)
            return
        job.state = RUNNING
        scope = None
        input_guardrails = settings.input_guardrails
        if job.facts.scoped or turn.scoped:
            # ``move_on_after`` builds the backend's scope directly (``CancelScope()``
            # initialises it twice). The deadline waits for the input guardrails and
            # the concurrency slot when there are any.
            deferred = tool.max_concurrency is not None or input_guardrails is not None
            scope = job.scope = anyio.move_on_after(None if deferred else tool.timeout)
            # In the call's own context: a sync body in a thread learns how its cancellation is answered.
            watching_call.set(job)
        ctx = None
        if job.facts.takes_context:
            ctx = job.ctx = turn.context_for(job, job.declare_cancelled)
        if emit is not None:
            emit(new_tool_started(call.id, tool.name, batch, True, None))
        error: str | None = None
        kind: ErrorKind | None = None
        output: Any = None
        cause: BaseException | None = None
        started = perf_counter()
        # The tool's body runs here, or on the backend the tool names.
        remote = settings.remote
        invoke = remote.get(tool, job.facts.invoke) if remote else job.facts.invoke
        fleet = settings.coordination
        if fleet is not None and (job.facts.policies is not None or tool.max_concurrency is not None):
            # Each attempt under the fleet's rate limit, circuit and concurrency slots (``_policy.coordination``);
            # a capped call's timeout starts when its first attempt has its slot, and a durable run journals each
            # attempt started once the fleet admitted it.
            stopped = _stopped_as_it_ran(job)
            admitted = _fleet_admitted(job, scope, turn)
            invoke = guarded(
                fleet,
                tool,
                job.facts,
                invoke,
                turn.emit,
                admitted,
                stopped,
                job.fleet_circuit_opened,
                _paused(turn, job),
            )
        if job.facts.policies is not None:
            invoke = _resilient(job, turn, invoke)
        # What the output guardrails and the post hooks are shown: the arguments the call was judged with, copied
        # before the body runs (a body may change the dict it is handed); only for a call that has either.
        policy = turn.view.policies[job.index] if turn.view.post_hooked else None
        observed = policy is not None and (policy.post_success or policy.post_failure)
        judged = args_copy(job.args) if observed or settings.output_guardrails is not None else None
        try:
            if scope is None:
                if input_guardrails is not None:
                    await _guard(input_guardrails, job, None, turn)
                if tool.max_concurrency is None:
                    if turn.durable is not None and job.facts.policies is None:
                        await turn.durable.started(call.id, job.args)
                    output = await invoke(job.args, ctx)
                else:
                    output = await _invoke_limited(job, invoke, ctx, None, turn)
            else:
                # A scope cancelled before it is entered (say by an event callback
                # on ToolStarted) stops the call at its first checkpoint.
                with scope:
                    if input_guardrails is not None:
                        await _guard(input_guardrails, job, None, turn)
                        if tool.timeout is not None and tool.max_concurrency is None:
                            scope.deadline = anyio.current_time() + tool.timeout
                    if tool.max_concurrency is None:
                        if turn.durable is not None and job.facts.policies is None:
                            await turn.durable.started(call.id, job.args)
                        output = await invoke(job.args, ctx)
                    else:
                        output = await _invoke_limited(job, invoke, ctx, scope, turn)
                job.scope = None
                # Stopped (its deadline passed, or it was cancelled), whether the body let the cancellation out
                # or caught it and returned: the call ends as it was told it would. Only a body in a thread that
                # was waited for after a cancellation keeps its real outcome (``body_outlived_cancel``).
                if (scope.cancelled_caught or scope.cancel_called) and not job.body_outlived_cancel:
                    kind, error, output = *_stopped(job), None
            if kind is None and settings.output_guardrails is not None:
                await _guard(settings.output_guardrails, job, output, turn, judged)
        except _Rejected as exc:
            kind, error, output = "guardrail_rejected", exc.message, None
        except ArgumentsRefused as exc:
            # The tool's model refused what its schema let through: the input was wrong, the tool did not fail.
            kind, error, output = "invalid_input", str(exc), None
        except NestedHold as hold:
            # The call's nested run waits for approvals: no result yet, the run ends interrupted. A durable run
            # journals the wait with the nested run's record, so that each wait is resumed once and recovered.
            if turn.durable is not None:
                try:
                    await turn.durable.nested_hold(call.id, job.args, turn.view.fingerprint(job.index), hold.record)
                except UnstorableOutputError as exc:
                    # The wait cannot be journaled: the call ends failed instead, its nested run abandoned.
                    kind, error = "execution_error", str(exc)
            if kind is None:
                _close(job, ctx)
                if turn.parked is None:
                    turn.parked = []
                turn.parked.append((job, hold.record))
                if emit is not None:
                    await emit.flush()
                return
        except JournalFailed:
            raise
        except NotRun as exc:
            # Answered without running: an open circuit or the fleet's refusal (``unavailable``), an interrupt
            # before the first run (``skipped``). No attempt of it ran here.
            kind, error = exc.kind, str(exc)
            job.attempts = job.prior_attempts
        except ModelRetry as exc:
            # The tool asks the model to fix its call: the message is for the model.
            kind, error, output = "model_retry", exc.message, None
        except Exception as exc:
            if anyio.current_effective_deadline() == -math.inf:
                # The run itself is being cancelled and the tool turned that into
                # an error: this checkpoint raises the run's cancellation instead.
                _close(job, ctx)
                await anyio.lowlevel.checkpoint()
            elif being_stopped():
                # The same for a worker of a pool that is stopping (it has no cancel scope to show it).
                _close(job, ctx)
                raise asyncio.CancelledError from exc
            if scope is not None and scope.cancel_called and not job.body_outlived_cancel:
                # The tool turned its own cancellation into an exception: still a cancellation.
                kind, error = _stopped(job)
            elif isinstance(exc, CallTimedOut):
                # A deadline the tool keeps itself passed (an MCP request's read timeout): a timeout like its own.
                kind, error, cause = "timeout", str(exc), exc
            else:
                raised = raised_by_tool(exc)
                kind, error, cause = "execution_error", settings.describe_failure(raised, call), raised
        except BaseException as exc:
            if foreign_cancellation(exc):
                # Something outside the run cancelled what the tool awaited: that call failed, the run goes on.
                message = cancelled_from_outside(tool.name, exc, "something it awaited")
            elif _task_cancelled(exc, turn):
                # The tool cancelled the task it ran in, a pool worker or a streamed call's own task (no one
                # else holds those): as a task of a task group that cancels itself, that call fails, not the run.
                message = cancelled_from_outside(tool.name, exc, "the task it ran in")
            else:
                # The run itself is cancelled (or the process is asked to stop): no result, nothing reported after this.
                _close(job, ctx)
                raise
            if job.cancel_reason is not None:
                kind, error = "cancelled", job.cancel_reason
            else:
                kind, error, cause = "execution_error", message, exc
        # A tool that cancelled the task it ran in and returned left that cancellation pending: on a task that is
        # the executor's it is taken now, where it stops nothing (later, it would stop the hooks, the journal or
        # the worker's next call). Written out: it is asked after every call that runs while its turn has a pool.
        pool = turn.pool
        if pool is not None:
            task = running_task(pool.group.loop)
            if task is not None and task.cancelling() and pool.group.cancelled_unasked():
                await absorb_cancel()
        elif turn.tasked and _streamed_cancel_left_pending():
            await absorb_cancel()
        duration_ms = (perf_counter() - started) * 1000.0
        if ctx is not None:
            if job.declared:
                kind, error, cause, output = "cancelled", job.cancel_reason, None, None
            ctx.finish(kind is not None and kind != "execution_error")
        truncated = False
        offload_path = None
        if kind is None and not fits_as_is(output, tool):
            try:
                output, truncated, offload_path = await shape_output(output, tool, call.id, settings.offload_dir)
            except Exception as exc:
                kind, error, cause = "execution_error", f"the output of `{tool.name}` could not be shaped: {exc}", exc
                output = None
        result = new_result(
            call.id,
            tool.name,
            output,
            error,
            kind,
            kind is not None,
            duration_ms,
            concurrent,
            batch,
            truncated,
            offload_path,
            job.attempts,
        )
        if turn.repaired is not None or turn.edited is not None:
            result = turn.marked(result)
        if turn.durable is not None:
            result = await turn.durable.finished(result)
            if result.error_kind != kind:
                kind, cause = result.error_kind, None
        job.state = DONE
        # ``turn.record``, written out: this runs once per call.
        turn.completed.append(result)
        turn.slots.append(job.slot)
        if emit is not None:
            emit(new_tool_finished(result, None))
        if kind is not None and kind in EXECUTION_FAILURES:
            failed(job, result, cause, turn)
        if policy is not None:
            # Post hooks: ``post_tool_use`` or ``post_tool_use_failure``; they observe, their errors are logged.
            hooks = policy.post_success if kind is None else policy.post_failure
            if hooks:
                # One view of the result (its output copied once) shared by the call's hooks: what a hook changes
                # in it reaches neither the result nor what the model is sent.
                event = new_hook_event(call.id, tool.name, judged, batch, shown_result(result), turn.context)
                for hook in hooks:
                    try:
                        await hook.invoke(event)
                    except BaseException as exc:
                        # A cancellation that is not the run's (something it awaited, cancelled by someone else) too.
                        if not observer_failure(exc):
                            raise
                        logger.warning("%s failed on call %s", hook.label, call.id, exc_info=True)
        if emit is not None and emit.pending:
            await emit.flush()

    except BaseException as exc:
        if not worker:
            raise
        told = True
        pool.group.ended(exc)
    finally:
        if worker and not told:
            pool.group.ended(None)


async def hand_out(job: Job, batch: int, turn: Turn) -> None:
    """Hands out a call of an external tool: its input guardrails first, then, journaled as started (with when,
    and its deadline) in a durable run, it waits for its answer from outside (``turn.external``); it has no
    result in this run."""
    tool = job.tool
    job.state = RUNNING
    if turn.settings.input_guardrails is not None:
        try:
            await _guard(turn.settings.input_guardrails, job, None, turn)
        except _Rejected as exc:
            job.state = DONE
            job.attempts = 0
            await turn.answer(job.slot, job.call, tool.name, "guardrail_rejected", exc.message, batch)
            return
    handed_out = time.time()
    deadline = None if tool.timeout is None or math.isinf(tool.timeout) else handed_out + tool.timeout
    if turn.durable is not None:
        await turn.durable.handed_out(job.call.id, job.args, handed_out, deadline)
    job.state = DONE
    if turn.external is None:
        turn.external = []
    turn.external.append(Handout(job.slot, tool.name, turn.view.fingerprint(job.index), job.args, handed_out, deadline))


async def shaped(result: ToolResult, tool: Tool | None, settings: Any) -> ToolResult:
    """A result whose output came from outside (an external call's answer, ``reconcile``'s ``Done``), held to its
    tool's budget as any output is; one that cannot be shaped is an ``execution_error`` saying so."""
    if tool is None or result.is_error or fits_as_is(result.output, tool):
        return result
    try:
        output, truncated, offload_path = await shape_output(result.output, tool, result.call_id, settings.offload_dir)
    except Exception as exc:
        message = f"the output of `{tool.name}` could not be shaped: {exc}"
        return replace(result, output=None, error=message, error_kind="execution_error", is_error=True)
    return replace(result, output=output, truncated=truncated, offload_path=offload_path)


async def deliver(turn: Turn, slot: int, call: ToolCall, tool: Tool | None, result: ToolResult) -> None:
    """Answers a call with a result that came from outside the run (shaped first), journaled first in a durable
    run: an external call's answer, or what ``reconcile`` found."""
    result = await shaped(result, tool, turn.settings)
    if turn.durable is not None:
        result = await turn.durable.finished(result)
    if turn.emit is not None:
        turn.emit(ToolStarted(call.id, result.tool_name, None, ran=False))
    turn.record(slot, result)


def _task_cancelled(exc: BaseException, turn: Turn) -> bool:
    """Whether ``exc`` is a cancellation of the task running the call that neither the run nor its pool
    asked for: the task is a pool worker or a streamed call's own (the caller's task is the caller's to
    cancel). The cancellation is taken back if so."""
    if not isinstance(exc, asyncio.CancelledError):
        return False
    if turn.pool is not None:
        return bool(turn.pool.group.cancelled_unasked())
    if turn.tasked:
        task = asyncio.current_task()
        if task is not None:
            take_back(task)
        return True
    return False


def _streamed_cancel_left_pending() -> bool:
    """Whether the streamed call's own task has a cancellation pending (only its tool can have asked: the
    turn's scopes around it are shielded). Its requests are taken back if so; what is left pending is for
    ``absorb_cancel``."""
    task = current_asyncio_task()
    if task is None or not task.cancelling():
        return False
    take_back(task)
    return True


def cancelled_from_outside(tool_name: str, exc: BaseException, what: str) -> str:
    words = words_of(exc)
    detail = f": {words}" if words else ""
    return f"`{tool_name}` failed: {what} was cancelled from outside this run (CancelledError{detail})"


def raised_by_tool(exc: Exception) -> Exception:
    """What the tool raised: a ``StopIteration`` cannot leave a coroutine, and Python makes it a ``RuntimeError``
    ("coroutine raised StopIteration", PEP 479) whose cause is the tool's own exception, described instead."""
    cause = exc.__cause__
    if type(exc) is RuntimeError and isinstance(cause, StopIteration) and str(exc).endswith("raised StopIteration"):
        return cause
    return exc


def failed(job: Job, result: ToolResult, cause: BaseException | None, turn: Turn) -> None:
    """A call failed: note it if it ends the run, and abort its batch if that is the policy."""
    tool = job.tool
    settings = turn.settings
    if (result.error_kind == "execution_error" and settings.on_error == "raise") or (
        result.error_kind == "timeout" and tool.timeout_behavior == "raise"
    ):
        if turn.failures is None:
            turn.failures = []
        turn.failures.append((job.slot, result, cause))
    aborts = settings.abort_siblings_on_error or tool.abort_siblings_on_error
    if aborts and turn.abort is None and len(turn.batch) > 1:
        turn.abort = abort_reason(job)
        for sibling in turn.batch:
            if sibling.state == RUNNING:
                sibling.cancel(f"`{sibling.tool.name}` was cancelled: {turn.abort}")


def abort_reason(job: Job) -> str:
    """Why a failed call's siblings are cancelled (``abort_siblings_on_error``)."""
    return f"call {job.call.id} (`{job.tool.name}`) failed and cancelled the rest of its batch"


def _close(job: Job, ctx: ToolContext | None) -> None:
    """A call ends here without a result of its own (its run is cancelled, or it waits in a nested run)."""
    job.state = DONE
    if ctx is not None:
        ctx.finish(True)


def _stopped(job: Job) -> tuple[ErrorKind, str]:
    """Why a call's scope stopped it: a cancellation (which wins) or its deadline."""
    if job.cancel_reason is not None and not job.timed_out:
        return "cancelled", job.cancel_reason
    return "timeout", f"`{job.tool.name}` did not finish within {job.tool.timeout} seconds"


async def _invoke_limited(
    job: Job,
    invoke: Callable[[Any, ToolContext | None], Awaitable[Any]],
    ctx: ToolContext | None,
    scope: anyio.CancelScope | None,
    turn: Turn,
) -> Any:
    """Calls the tool under its concurrency cap; its timeout counts from when it gets a slot, and a durable
    run journals it *started* once it has one (a call still waiting for a slot has not started)."""
    timeout = job.tool.timeout
    if turn.settings.coordination is not None:
        # The fleet's slots cap the calls (``guarded``: each attempt takes one after its rate wait, and is
        # journaled started once it has it).
        return await invoke(job.args, ctx)
    limiter = job.facts.limiter()
    if holds(limiter):
        # Made inside a call of the same tool (a nested run in its body, its slot taken by this cap or by the
        # fleet's local fallback): it runs on that call's slot, which only waits for it (``_policy.slots``).
        if scope is not None and timeout is not None:
            scope.deadline = anyio.current_time() + timeout
        if turn.durable is not None and job.facts.policies is None:
            await turn.durable.started(job.call.id, job.args)
        return await invoke(job.args, ctx)
    async with limiter:
        with holding(limiter):
            if scope is not None and timeout is not None:
                scope.deadline = anyio.current_time() + timeout
            if turn.durable is not None and job.facts.policies is None:
                await turn.durable.started(job.call.id, job.args)
            return await invoke(job.args, ctx)


def _fleet_admitted(job: Job, scope: anyio.CancelScope | None, turn: Turn) -> Callable[[], Awaitable[None]] | None:
    """What an attempt the fleet admitted does before its body runs (None when nothing): a capped call's timeout
    starts (at its first attempt), and a durable run journals the attempt started (one still waiting for the fleet
    has not started)."""
    timeout = job.tool.timeout
    if scope is None or job.tool.max_concurrency is None:
        timeout = None
    durable = turn.durable
    if timeout is None and durable is None:
        return None

    async def admitted() -> None:
        if scope is not None and timeout is not None and scope.deadline == math.inf:
            scope.deadline = anyio.current_time() + timeout
        if durable is not None:
            await durable.started(job.call.id, job.args)

    return admitted


def _stopped_as_it_ran(job: Job) -> Callable[[], ErrorKind | None]:
    """What stopped the call's running attempt (``_cut_short``), asked once its body returned: None for a body
    in a thread waited for after a cancellation, which reports what it really did."""
    return lambda: None if job.body_outlived_cancel else _cut_short(job)


def _resilient(
    job: Job, turn: Turn, invoke: Callable[[Any, ToolContext | None], Awaitable[Any]]
) -> Callable[[Any, ToolContext | None], Awaitable[Any]]:
    """``invoke`` under the tool's circuit, rate limit and retries (``toolsched._policy.resilience``).

    The circuit admits every attempt: an open one refuses the call before it runs (``CircuitOpen``:
    ``unavailable``) and ends a retrying call with its last failure. Each attempt waits for a token
    of the rate limit; a transient failure runs the call again after the policy's backoff while the
    retry budget and the call's deadline allow, each retry a ``ToolRetrying`` event. Every wait is
    inside the call's scope (a timeout or a cancellation stops it at once) and ends at once when the
    run is interrupted: an attempt not started by then never starts (a call whose body never ran is
    ``skipped``, ``RunHalted``; one that ran is answered with its last failure). ``job.attempts``
    counts the runs of the body; a timeout during one is a transient failure for the circuit.
    """
    # With fleet-wide limits, the rate limit and circuit are the fleet's (``guarded``): only retries stay here.
    state = job.facts.resilience() if turn.settings.coordination is None else job.facts.retries_only()
    retry = state.retry
    tool_name = job.tool.name

    def circuit_open() -> CircuitOpen:
        circuit = state.circuit
        assert circuit is not None
        return CircuitOpen(
            f"`{tool_name}` is unavailable: {circuit.failures} calls in a row failed transiently, so its "
            f"calls are refused for {state.open_for():.1f} more seconds"
        )

    async def invoke_resilient(args: Any, ctx: ToolContext | None) -> Any:
        # The runs of the body so far: none here yet (a recovered call counts the journal's).
        job.attempts = job.prior_attempts
        probe = state.admit()
        if probe is None:
            raise circuit_open()
        attempt = job.prior_attempts + 1
        # The last attempt's failure, once an attempt failed and the call goes on.
        failure: Exception | None = None
        try:
            while True:
                if turn.halt is None and not state.paced():
                    # Waiting for a token is not working: the call lends its slot meanwhile.
                    await _waiting(turn, job, state.pace())
                if turn.halt is not None:
                    raise RunHalted(turn.halt) if failure is None else failure
                if not probe:
                    # The circuit may have opened since the last attempt, or while this one waited.
                    probe = state.admit()
                    if probe is None:
                        raise circuit_open() if failure is None else failure
                if failure is None:
                    state.first_attempt()
                if turn.durable is not None and turn.settings.coordination is None:
                    # Every attempt is journaled as it starts (after its token, once the circuit admitted it),
                    # so that ``recover`` never exceeds the policy nor counts an attempt that never ran. Under the
                    # fleet's limits, once the fleet admitted it (``_fleet_admitted``).
                    await turn.durable.started(job.call.id, args)
                job.attempts = attempt
                try:
                    # Each attempt gets its own copy of the validated arguments: one that changed its copy
                    # and failed does not hand the change to the next.
                    output = await invoke(args if retry is None else args_copy(args), ctx)
                except NotRun:
                    # The fleet refused the attempt before it ran (its circuit open, or Redis unreachable with
                    # ``on_unavailable="refuse"``), or the run was interrupted while it waited for the fleet's rate
                    # limit: a retrying call ends with its last failure, counting only the attempts that ran.
                    if failure is None:
                        raise
                    job.attempts = attempt - 1
                    raise failure from None
                except anyio.get_cancelled_exc_class():
                    if _cut_short(job) == "timeout":
                        state.record("transient", probe, job.body_left)
                        probe = False
                    raise
                except Exception as exc:
                    # A call its scope stopped (the tool turned that into an error) is not run again.
                    cut_short = _cut_short(job)
                    transient = is_transient(exc, retry) if cut_short is None else cut_short == "timeout"
                    if cut_short != "cancelled":
                        state.record("transient" if transient else "other", probe)
                        probe = False
                    if cut_short is not None or retry is None or not transient or attempt >= retry.attempts:
                        raise
                    delay = retry.delay(attempt, retry_after_of(exc), state.draw)
                    if (
                        anyio.current_time() + delay >= anyio.current_effective_deadline()
                        or turn.halt is not None
                        or state.refuses()
                        or job.circuit_open
                        or not state.may_retry()
                    ):
                        raise  # no time left within the call's timeout, an interrupt, an open circuit, or no budget
                    if turn.emit is not None:
                        detail = format_error(exc, job.call)
                        turn.emit(ToolRetrying(job.call.id, tool_name, attempt, delay, detail))
                    failure = exc
                    await _waiting(turn, job, anyio.sleep(delay))
                    attempt += 1
                    continue
                # A tool that caught its scope's cancellation and returned ends as it was stopped (``execute``):
                # a timeout is a transient failure for the circuit, a cancellation settles nothing.
                outcome = returned(_stopped_as_it_ran(job))
                if outcome != "none":
                    state.record(outcome, probe)
                    probe = False
                return output
        finally:
            if probe:
                state.release_probe(job.body_left)

    return invoke_resilient


def _cut_short(job: Job) -> ErrorKind | None:
    """What stopped the running attempt when the call's scope did: its ``timeout``, or a cancellation."""
    scope = job.scope
    if scope is None or not scope.cancel_called:
        return None
    return _stopped(job)[0]


async def _waiting(turn: Turn, job: Job, wait: Awaitable[None]) -> None:
    """Awaits ``wait`` with the call's pool slot lent to other calls, then waits for a slot again.

    An interrupt ends the wait at once (``Executor.interrupt`` cancels ``job.pause``); the call then
    works no more and takes no slot again. A call of a tool with ``max_concurrency`` keeps its slot: it holds
    its tool's slot through every attempt, and the calls waiting for that one, given the slot it lent, could
    take every slot of the batch and leave it none to work again in.
    """
    lends = job.tool.max_concurrency is None or turn.settings.coordination is not None
    if lends:
        turn.lend()
    try:
        with anyio.CancelScope() as job.pause:
            await wait
    except BaseException:
        if lends:
            turn.give_back()
        raise
    finally:
        job.pause = None
    if not lends:
        return
    if turn.halt is not None:
        turn.give_back()
    else:
        await turn.reclaim()


def _paused(turn: Turn, job: Job) -> Callable[[Coroutine[Any, Any, None]], Awaitable[None]]:
    """How a call under the fleet's limits waits for their rate limit: an interrupt ends the wait (it cancels
    ``job.pause``), and an interrupted call starts no attempt (``RunHalted``). The call keeps its slot of the batch
    meanwhile: lent, it could get it back only after its reservation's start, and take a new reservation then."""

    async def paused(wait: Coroutine[Any, Any, None]) -> None:
        if turn.halt is None:
            try:
                with anyio.CancelScope() as job.pause:
                    await wait
            finally:
                job.pause = None
        else:
            wait.close()
        if turn.halt is not None:
            raise RunHalted(turn.halt)

    return paused


async def _guard(guardrails: Guardrails, job: Job, output: Any, turn: Turn, judged: Any = None) -> None:
    """Runs input (``output`` None) or output guardrails (shown ``judged``, the arguments as they were before
    the body ran); raises ``_Rejected`` with the refusal."""
    stage = guardrails.stage
    args = args_copy(job.args) if judged is None else judged
    # An output guardrail checks the output: what it changes in it reaches neither the result nor the model.
    shown = None if output is None else shown_output(output)
    event = GuardrailEvent(stage, job.call.id, job.tool.name, args, shown, turn.context)
    try:
        refusal = await guardrails.refusal(event)
    except GuardrailTripped as exc:
        if turn.tripped is None:
            turn.tripped = exc
        if stage == "input":
            job.attempts = job.prior_attempts  # refused before the tool ran (again)
        raise _Rejected(exc.message) from None
    if refusal is not None:
        if stage == "input":
            job.attempts = job.prior_attempts
        raise _Rejected(refusal)
