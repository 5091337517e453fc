"""Stepped calls: a waiting call of a concurrent batch whose task runs the tool's coroutine with nothing of the
executor's suspended around it.

Once a concurrent batch's calls wait, each call left starts in a task of its own (``_Pool.start_each``). A call
that needs none of the rarer parts of a call (a cancel scope, a context, guardrails, a journal, a backend, the
fleet, retries or limits, a concurrency cap, post hooks, an offloaded output) runs with an engine object as its
task's whole coroutine (``_core.stepper``): it steps the tool's coroutine as the task would, and once that ends
the step that ended it records the call's result (``SteppedCalls.end``); the events for async listeners, if
any, are delivered by the task's last steps. Post hooks are left to ``execute``: run from a coroutine of their
own after the tool, they cost more instructions than ``execute``'s one frame saves
(``python benches/instructions.py 10 40 --runs 100 --wait --full``). So no ``execute``
coroutine is suspended while the tool waits, and the stepper is not tracked by the cyclic collector: while
thousands of calls wait, each is a task, the tool's coroutine and the call's job, against a bare task group's
task, coroutine and done callback, and a round of them costs the collector what the task group's costs
(``python benches/gc_generations.py``; the figures are in docs/performance.md). What a call ends with is what
``execute`` gives it for the same end (``tests/executor/test_stepped.py`` compares the two).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable
from types import CoroutineType
from typing import Any

from toolsched._backends.workers import (
    WorkerGroup,
    absorb_cancel,
    being_stopped,
    foreign_cancellation,
    running_task,
)
from toolsched._core import abandon_closed, stepper
from toolsched._executor.call import EXECUTION_FAILURES, SKIPPED, cancelled_from_outside, failed, raised_by_tool
from toolsched._executor.emitter import Emitter
from toolsched._executor.shaping import fits_as_is, shape_now
from toolsched._executor.timed_out import CallTimedOut
from toolsched._executor.turn import DONE, RUNNING, Job, Turn
from toolsched._policy.holds import NestedHold
from toolsched._policy.limits import ModelRetry
from toolsched._tools.tools import ArgumentsRefused
from toolsched._values.events import ToolStarted, new_tool_finished, new_tool_started
from toolsched._values.results import ErrorKind, ToolResult, new_result

__all__ = ["SteppedCalls", "stepped_calls"]


def stepped_calls(turn: Turn, batch: int, group: WorkerGroup) -> SteppedCalls | None:
    """What steps batch ``batch``'s calls, or None when none of them may be stepped: the group's workers are not
    plain asyncio tasks, or the turn has a part a stepped call leaves out (post hooks, guardrails, a journal, a
    backend, the fleet, a batch that aborts on a failure, a streamed turn)."""
    settings = turn.settings
    if (
        not group.plain_tasks()
        or turn.scoped
        or turn.view.post_hooked
        or turn.durable is not None
        or turn.tasked
        or settings.remote
        or settings.coordination is not None
        or settings.input_guardrails is not None
        or settings.output_guardrails is not None
    ):
        return None
    return SteppedCalls(turn, batch, group)


def _abandon_closed_loops(phase: str, info: dict[str, int]) -> None:
    """Before a full collection: a stepped call left waiting on an event loop that is closed will never be stepped
    again, and what its stepper holds the collector cannot see (``_core.stepper``), so its task and the tool's
    coroutine would be kept for ever. Such steppers drop what they hold (``_core.abandon_closed``, which asks only the
    few event loops with live steppers whether they are closed), and the collector takes what was left as it takes
    ``execute``'s coroutines: each tool's coroutine is closed, and asyncio reports each task destroyed while
    pending."""
    if phase == "start" and info.get("generation") == 2:
        abandon_closed()


gc.callbacks.append(_abandon_closed_loops)


class SteppedCalls:
    """A concurrent batch's calls that run with a stepper as their task's whole coroutine (``_core.stepper``):
    it asks ``begin`` on a call's first step and tells ``end`` on its last; what ``end`` hands back (the call's
    events for async listeners) it steps next."""

    __slots__ = ("batch", "group", "turn")

    def __init__(self, turn: Turn, batch: int, group: WorkerGroup) -> None:
        self.turn = turn
        self.batch = batch
        self.group = group

    @staticmethod
    def takes(job: Job) -> bool:
        """Whether ``job`` may be stepped: none of the rarer parts of a call, and an output that needs no file."""
        facts = job.facts
        tool = job.tool
        return not (
            facts.scoped
            or facts.takes_context
            or facts.external
            or facts.policies is not None
            or tool.max_concurrency is not None
            or tool.truncate == "offload"
        )

    def start(self, job: Job) -> None:
        """Starts ``job`` in a task of the batch's group whose whole coroutine is a stepper (``_core.stepper``)."""
        self.group.start(stepper(self, job, self.group.loop))

    def begin(self, job: Job) -> Any:
        """A stepped call's first step: the tool's coroutine, or None when the call does not run (the run is being
        stopped, or the call was cancelled or the run steered away before it started)."""
        group = self.group
        turn = self.turn
        try:
            if group.cancelled():
                # Left to the run's end unstarted, as a worker between two items leaves the next.
                group.ended(None)
                return None
            emit = turn.emit
            if job.cancel_reason is not None or turn.abort is not None or turn.halt is not None:
                # Stopped before it started: answered without running.
                kind: ErrorKind = "cancelled"
                if job.cancel_reason is not None:
                    message = job.cancel_reason
                elif turn.abort is not None:
                    message = f"not run: {turn.abort}"
                else:
                    kind, message = "skipped", turn.halt or SKIPPED
                job.state = DONE
                call = job.call
                result = turn.unrun(call, job.tool.name, kind, message, self.batch, job.prior_attempts)
                if emit is not None:
                    emit(ToolStarted(call.id, job.tool.name, self.batch, ran=False))
                turn.record(job.slot, result)
                if emit is not None and emit.pending:
                    # Its events for async listeners, delivered as the task's last steps (``end`` sees it answered).
                    return emit.flush()
                group.ended(None)
                return None
            job.state = RUNNING
            if emit is not None:
                emit(new_tool_started(job.call.id, job.tool.name, self.batch, True, None))
            coroutine = job.facts.invoke(job.args, None)
            return coroutine if type(coroutine) is CoroutineType else _awaited(coroutine)
        except BaseException as exc:
            # The tool's invoker (or an event listener) raised: ended as the tool raising.
            job.state = RUNNING
            return _raising(exc)

    def end(self, job: Job, output: Any, error: BaseException | None, duration_ms: float) -> Any:
        """A stepped call's last step of its tool: the tool's coroutine returned ``output`` or raised ``error`` after
        running ``duration_ms``. Records the call's result as ``execute`` does, then gives what is left of the call
        (its events for async listeners) as a coroutine for the stepper to step next, or tells the group the
        worker ended and gives None. A cancellation of the run (or an exception that stops the
        process) ends the worker with it, and the call with no result."""
        group = self.group
        if job.state == DONE:
            # Answered without running (``begin``), and what ran was the delivery of its events.
            group.ended(error)
            return None
        try:
            self._record(job, output, error, duration_ms)
            emit = self.turn.emit
            if emit is not None and emit.pending:
                return self._flushed(emit)
        except BaseException as exc:
            group.ended(exc)
            return None
        group.ended(None)
        return None

    async def _flushed(self, emit: Emitter) -> None:
        """What is left of a stepped call once its result is recorded: its events for async listeners; then the
        worker ends, as ``execute``'s does."""
        try:
            task = running_task(self.group.loop)
            if task is not None and task.cancelling() and self.group.cancelled_unasked():
                # The tool cancelled the task it ran in and returned: that cancellation, taken back, is still
                # pending, and is taken here, where it stops nothing (it would stop the listeners).
                await absorb_cancel()
            await emit.flush()
        except BaseException as exc:
            self.group.ended(exc)
            return
        self.group.ended(None)

    def _record(self, job: Job, output: Any, error: BaseException | None, duration_ms: float) -> ToolResult | None:
        """The call's result, recorded (None for a call whose nested run waits: it has none yet); raises what
        ends the worker instead (the run's cancellation, an exception that stops the process)."""
        turn = self.turn
        tool = job.tool
        call = job.call
        kind: ErrorKind | None = None
        message: str | None = None
        cause: BaseException | None = None
        if error is not None:
            if isinstance(error, ArgumentsRefused):
                # The tool's model refused what its schema let through: the input was wrong, the tool did not fail.
                kind, message = "invalid_input", str(error)
            elif isinstance(error, NestedHold):
                # The call's nested run waits for approvals: no result yet, the run ends interrupted.
                job.state = DONE
                if turn.parked is None:
                    turn.parked = []
                turn.parked.append((job, error.record))
                return None
            elif isinstance(error, ModelRetry):
                # The tool asks the model to fix its call: the message is for the model.
                kind, message = "model_retry", error.message
            elif isinstance(error, Exception):
                if being_stopped():
                    # A worker its group is stopping, whose tool turned that into an error: the run's cancellation.
                    job.state = DONE
                    raise asyncio.CancelledError from error
                if isinstance(error, CallTimedOut):
                    # A deadline the tool keeps itself passed: a timeout like its own.
                    kind, message, cause = "timeout", str(error), error
                else:
                    raised = raised_by_tool(error)
                    kind, message, cause = "execution_error", turn.settings.describe_failure(raised, call), raised
            elif foreign_cancellation(error):
                # Something outside the run cancelled what the tool awaited: that call failed, the run goes on.
                kind, message, cause = (
                    "execution_error",
                    cancelled_from_outside(tool.name, error, "something it awaited"),
                    error,
                )
            elif isinstance(error, asyncio.CancelledError) and self.group.cancelled_unasked():
                # The tool cancelled the task it ran in: as a task of a task group that cancels itself, that call
                # fails, not the run.
                kind, message, cause = (
                    "execution_error",
                    cancelled_from_outside(tool.name, error, "the task it ran in"),
                    error,
                )
            else:
                # The run itself is cancelled (or the process is asked to stop): no result, nothing reported after.
                job.state = DONE
                raise error
            if (
                job.cancel_reason is not None
                and kind == "execution_error"
                and isinstance(error, asyncio.CancelledError)
            ):
                kind, message, cause = "cancelled", job.cancel_reason, None
            output = None
        truncated = False
        if kind is None and not fits_as_is(output, tool):
            try:
                output, truncated = shape_now(output, tool)
            except Exception as exc:
                kind, message, cause = "execution_error", f"the output of `{tool.name}` could not be shaped: {exc}", exc
                output = None
        result = new_result(
            call.id,
            tool.name,
            output,
            message,
            kind,
            kind is not None,
            duration_ms,
            True,
            self.batch,
            truncated,
            None,
            job.attempts,
        )
        if turn.repaired is not None or turn.edited is not None:
            result = turn.marked(result)
        job.state = DONE
        turn.completed.append(result)
        turn.slots.append(job.slot)
        if turn.emit is not None:
            turn.emit(new_tool_finished(result, None))
        if kind is not None and kind in EXECUTION_FAILURES:
            failed(job, result, cause, turn)
        return result


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    """An awaitable that is not a coroutine (what some invokers return), as one."""
    return await awaitable


async def _raising(error: BaseException) -> None:
    """What failed as a call began, raised from its first step as the tool's own failure would be."""
    raise error
