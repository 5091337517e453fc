"""The executor: runs a turn's plan on anyio and answers every call exactly once."""

from __future__ import annotations

import inspect
import logging
import math
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, cast

import anyio
import anyio.from_thread
import anyio.lowlevel

from toolsched import _core
from toolsched.context import ToolContext
from toolsched.errors import OptionError, SemanticError, ToolCallFailed, ToolTimeoutError, UnknownToolError
from toolsched.events import BatchFinished, BatchStarted, Event, RunFinished, ToolFinished, ToolProgress, ToolStarted
from toolsched.outcome import Outcome
from toolsched.pool import run_pool
from toolsched.registry import ToolRegistry
from toolsched.results import Duplicate, ErrorKind, ToolCall, ToolResult
from toolsched.shaping import shape_output
from toolsched.strategies import Partitioned, Strategy, resolve_cap
from toolsched.tools import Tool, ToolFacts

__all__ = ["Executor"]

logger = logging.getLogger("toolsched")

Steering = Callable[[], Sequence[Any] | Awaitable[Sequence[Any] | None] | None]
EventCallback = Callable[[Event], Any]
ErrorFormatter = Callable[[BaseException, ToolCall], str]

# Failures of the tool itself: they can abort the batch's siblings and end a raising run.
_EXECUTION_FAILURES = frozenset({"execution_error", "timeout"})

# The life of a job: waiting for a worker, running, answered.
_PENDING, _RUNNING, _DONE = 0, 1, 2


def format_error(exc: BaseException, call: ToolCall) -> str:
    """The default message for a tool that raised: the exception's type and text."""
    try:
        text = str(exc)
    except Exception:
        text = ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Emitter:
    """Delivers a run's events to plain and async callbacks, in order.

    Plain callbacks run at once; async ones are awaited at the executor's next
    checkpoint, so emitting never needs a task. Events from worker threads
    hop back to the event loop first.
    """

    __slots__ = ("_async_sinks", "_loop_thread", "_pending", "_plain_sinks")

    def __init__(self, sinks: Iterable[Callable[[Event], Any]]) -> None:
        self._plain_sinks: list[Callable[[Event], Any]] = []
        self._async_sinks: list[Callable[[Event], Awaitable[Any]]] = []
        for sink in sinks:
            (self._async_sinks if inspect.iscoroutinefunction(sink) else self._plain_sinks).append(sink)
        self._pending: list[Event] = []
        self._loop_thread = threading.get_ident()

    def __call__(self, event: Event) -> None:
        if threading.get_ident() != self._loop_thread:
            anyio.from_thread.run_sync(self._deliver, event)
        else:
            self._deliver(event)

    def _deliver(self, event: Event) -> None:
        for sink in self._plain_sinks:
            try:
                sink(event)
            except Exception:
                logger.exception("event callback %r failed on %r", sink, event)
        if self._async_sinks:
            self._pending.append(event)

    async def flush(self) -> None:
        while self._pending:
            event = self._pending.pop(0)
            for sink in self._async_sinks:
                try:
                    await sink(event)
                except Exception:
                    logger.exception("event callback %r failed on %r", sink, event)


class _Job:
    """One runnable call of a turn (internal, mutable while the turn runs)."""

    __slots__ = ("args", "call", "cancel_reason", "ctx", "declared", "facts", "scope", "slot", "state", "tool")

    def __init__(self, slot: int, call: ToolCall, tool: Tool, facts: ToolFacts, args: Any) -> None:
        self.slot = slot
        self.call = call
        self.tool = tool
        self.facts = facts
        self.args = args
        self.state = _PENDING
        self.scope: anyio.CancelScope | None = None
        self.cancel_reason: str | None = None
        self.ctx: ToolContext | None = None
        # Set when the tool cancelled its own call (``ctx.cancel``): it ends cancelled whatever follows.
        self.declared = False

    def cancel(self, message: str) -> bool:
        """Asks the call to stop with a ``cancelled`` result carrying ``message``.

        Returns whether it will: a call not started yet never starts, and a
        running call in a cancel scope is stopped. A running call without one
        can only be asked (``ctx.cancelled`` turns true) and keeps its own result.
        """
        if self.state == _DONE:
            return False
        if self.ctx is not None:
            self.ctx._cancelled = True
        if self.state == _PENDING or self.scope is not None:
            if self.cancel_reason is None:
                self.cancel_reason = message
            if self.scope is not None:
                self.scope.cancel()
            return True
        return False

    def declare_cancelled(self, message: str) -> None:
        """The tool cancelled its own call: its result is ``cancelled``, and a scope stops it now."""
        if self.state == _DONE:
            return
        if self.cancel_reason is None:
            self.cancel_reason = message
        self.declared = True
        if self.scope is not None:
            self.scope.cancel()


class _Turn:
    """Results of one run as they complete, and what the run's calls can see."""

    __slots__ = (
        "abort",
        "batch",
        "completed",
        "context",
        "count",
        "emit",
        "failures",
        "halt",
        "interactive",
        "jobs",
        "scoped",
        "slots",
    )

    def __init__(self, count: int, context: Any, interactive: bool, emit: _Emitter | None) -> None:
        self.count = count
        self.context = context
        self.interactive = interactive
        self.emit = emit
        self.completed: list[ToolResult] = []
        self.slots: list[int] = []
        # The calls that reach execution, and the batch running now.
        self.jobs: Sequence[_Job] = ()
        self.batch: Sequence[_Job] = ()
        # Whether every call of the running batch gets a cancel scope (its siblings may abort it).
        self.scoped = False
        # Set when a failure aborts the running batch: why its other calls are cancelled.
        self.abort: str | None = None
        # Set by an interrupt: why the calls not started yet are skipped.
        self.halt: str | None = None
        # Failures that end the run once their batch settles: (slot, result, exception).
        self.failures: list[tuple[int, ToolResult, BaseException | None]] | None = None

    def record(self, slot: int, result: ToolResult) -> None:
        self.completed.append(result)
        self.slots.append(slot)
        if self.emit is not None:
            self.emit(ToolFinished(result))

    def answer(
        self, slot: int, call: ToolCall, tool_name: str, kind: ErrorKind, message: str, batch: int | None = None
    ) -> None:
        """Answers a call that does not run with an error result."""
        if self.emit is not None:
            self.emit(ToolStarted(call.id, tool_name, batch, ran=False))
        self.record(slot, ToolResult(call.id, tool_name, None, message, kind, True, 0.0, False, batch, False, None))

    def ordered_partial(self) -> list[ToolResult]:
        """The results recorded so far, in model order."""
        return [result for _, result in sorted(zip(self.slots, self.completed, strict=True), key=lambda p: p[0])]

    def ordered(self) -> list[ToolResult]:
        if self.count == len(self.completed) == 1:
            return list(self.completed)
        ordered: list[ToolResult] = _core.assemble(self.count, self.slots, self.completed)
        return ordered


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class Executor:
    """Runs the tool calls of a turn.

    ``tools`` is a ``ToolRegistry`` or anything it accepts. Options:

    - ``strategy``: how calls are scheduled (default ``Partitioned()``);
    - ``on_event`` / ``on_progress``: callbacks (plain or async) for every event,
      or for progress only;
    - ``on_error``: ``"result"`` (a failed tool becomes an ``execution_error``
      result) or ``"raise"`` (``ToolCallFailed`` once the failing batch settles);
    - ``abort_siblings_on_error``: a failure cancels the rest of its batch, for
      every tool (each tool can also ask for it with its own flag);
    - ``unknown_tool``: ``"result"`` or ``"raise"`` (``UnknownToolError``);
    - ``max_input_bytes`` / ``max_input_depth`` / ``max_schema_errors``: argument limits;
    - ``interactive``: whether a person is present (``ToolContext.interactive``);
    - ``offload_dir``: where ``truncate="offload"`` writes full outputs;
    - ``error_formatter``: ``(exception, call) -> message`` for failed tools
      (if it fails, the default message is used).
    """

    def __init__(
        self,
        tools: ToolRegistry | Iterable[Tool | Callable[..., Any]],
        *,
        strategy: Strategy | None = None,
        on_event: EventCallback | None = None,
        on_progress: EventCallback | None = None,
        on_error: Literal["result", "raise"] = "result",
        abort_siblings_on_error: bool = False,
        unknown_tool: Literal["result", "raise"] = "result",
        max_input_bytes: int = 16 * 1024 * 1024,
        max_input_depth: int = 64,
        max_schema_errors: int = 10,
        interactive: bool = False,
        offload_dir: str | Path | None = None,
        error_formatter: ErrorFormatter = format_error,
    ) -> None:
        self.registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self.strategy: Strategy = Partitioned() if strategy is None else strategy
        if not hasattr(self.strategy, "kind"):
            raise OptionError(f"strategy must be a toolsched strategy, got {self.strategy!r}")
        if on_error not in ("result", "raise"):
            raise OptionError(f"on_error must be 'result' or 'raise', got {on_error!r}")
        if unknown_tool not in ("result", "raise"):
            raise OptionError(f"unknown_tool must be 'result' or 'raise', got {unknown_tool!r}")
        if not isinstance(abort_siblings_on_error, bool):
            raise OptionError(f"abort_siblings_on_error must be True or False, got {abort_siblings_on_error!r}")
        if not callable(error_formatter):
            raise OptionError(f"error_formatter must be a callable (exception, call) -> str, got {error_formatter!r}")
        for label, value in (
            ("max_input_bytes", max_input_bytes),
            ("max_input_depth", max_input_depth),
            ("max_schema_errors", max_schema_errors),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise OptionError(f"{label} must be a positive integer, got {value!r}")
        self.on_event = on_event
        self.on_progress = on_progress
        self.on_error = on_error
        self.abort_siblings_on_error = abort_siblings_on_error
        self.unknown_tool = unknown_tool
        self.interactive = interactive
        self.error_formatter = error_formatter
        self.offload_dir = Path(offload_dir) if offload_dir is not None else Path(tempfile.gettempdir()) / "toolsched"
        self._limits = {
            "max_input_bytes": max_input_bytes,
            "max_input_depth": max_input_depth,
            "max_errors": max_schema_errors,
        }
        self._tools = tuple(self.registry)
        self._facts = tuple(member._facts() for member in self._tools)
        # Runs executing on this executor now, for ``interrupt`` and ``cancel``.
        self._runs: set[_Turn] = set()

    # -- public API -------------------------------------------------------------

    async def run(
        self,
        calls: Iterable[ToolCall],
        *,
        steering: Steering | None = None,
        context: Any = None,
    ) -> Outcome:
        """Runs a turn's calls; returns one result per unique call ID, in model order."""
        return await self._run(calls, steering, context, None)

    async def stream(
        self,
        calls: Iterable[ToolCall],
        *,
        steering: Steering | None = None,
        context: Any = None,
    ) -> AsyncIterator[Event]:
        """Runs a turn, yielding its events as they happen; the last is ``RunFinished``.

        Leaving the loop early cancels the run (wrap in ``contextlib.aclosing``
        to make that prompt).
        """
        send, receive = anyio.create_memory_object_stream[Event](max_buffer_size=math.inf)
        failure: list[BaseException] = []

        async def drive() -> None:
            async with send:
                try:
                    outcome = await self._run(calls, steering, context, send.send_nowait)
                except Exception as exc:
                    failure.append(exc)
                else:
                    send.send_nowait(RunFinished(outcome))

        async with anyio.create_task_group() as group:
            group.start_soon(drive)
            try:
                async with receive:
                    async for event in receive:
                        yield event
            except GeneratorExit:
                # The consumer left: stop the run and let the task group settle.
                group.cancel_scope.cancel()
                return
        if failure:
            raise failure[0]

    def interrupt(self, reason: str | None = None) -> int:
        """A user message arrived: stops every run in progress on this executor.

        Running calls of tools with ``interrupt_behavior="cancel"`` are cancelled
        (``cancelled`` results); ``"block"`` tools finish; calls not started yet
        get ``skipped`` results. ``reason`` is added to those results' messages.
        Returns how many runs it reached. Call it from the event loop's thread.
        """
        suffix = f" ({reason})" if reason else ""
        for turn in self._runs:
            if turn.halt is None:
                turn.halt = f"not run: the user interrupted the run{suffix}"
            for job in turn.jobs:
                if job.state == _RUNNING and job.tool.interrupt_behavior == "cancel":
                    job.cancel(f"`{job.tool.name}` was cancelled because the user interrupted the run{suffix}")
        return len(self._runs)

    def cancel(self, call_id: str, reason: str | None = None) -> bool:
        """Cancels one call of the runs in progress on this executor; it gets a ``cancelled`` result.

        A call that has not started never runs. A running call is stopped if it
        runs in a cancel scope: its tool has a ``timeout``,
        ``interrupt_behavior="cancel"`` or ``isolation="process"``, or its batch
        can be aborted by a failure. Any other running call is only asked to stop
        (``ctx.cancelled`` turns true; the tool may end its call with
        ``ctx.cancel()``) and otherwise keeps its own result. Returns whether a
        call will end cancelled. Call it from the event loop's thread.
        """
        suffix = f": {reason}" if reason else ""
        stopped = False
        for turn in self._runs:
            for job in turn.jobs:
                if job.call.id == call_id and job.state != _DONE:
                    stopped = job.cancel(f"`{job.tool.name}` was cancelled by the caller{suffix}") or stopped
        return stopped

    # -- the pipeline -------------------------------------------------------------

    def _emitter(self, extra: Callable[[Event], Any] | None) -> _Emitter | None:
        sinks: list[Callable[[Event], Any]] = []
        if self.on_event is not None:
            sinks.append(self.on_event)
        if self.on_progress is not None:
            on_progress = self.on_progress
            if inspect.iscoroutinefunction(on_progress):

                async def progress_only_async(event: Event) -> None:
                    if isinstance(event, ToolProgress):
                        await on_progress(event)

                sinks.append(progress_only_async)
            else:

                def progress_only(event: Event) -> None:
                    if isinstance(event, ToolProgress):
                        on_progress(event)

                sinks.append(progress_only)
        if extra is not None:
            sinks.append(extra)
        return _Emitter(sinks) if sinks else None

    async def _run(
        self,
        calls: Iterable[ToolCall],
        steering: Steering | None,
        context: Any,
        extra_sink: Callable[[Event], Any] | None,
    ) -> Outcome:
        calls = calls if isinstance(calls, list) else list(calls)
        for position, call in enumerate(calls):
            if not isinstance(call, ToolCall):
                raise TypeError(f"calls[{position}] must be a ToolCall, got {type(call).__name__}")
        cap = resolve_cap(self.strategy)
        planned, duplicate_rows = self.registry._table.prepare(calls, self.registry.disabled_mask(), **self._limits)
        emit = self._emitter(extra_sink)
        turn = _Turn(len(planned), context, self.interactive, emit)
        jobs: list[_Job] = []
        for slot, (index, tool_index, args, error_kind, message) in enumerate(planned):
            call = calls[index]
            if error_kind is None:
                jobs.append(_Job(slot, call, self._tools[tool_index], self._facts[tool_index], args))
                continue
            text = str(message)
            if error_kind == "unknown_tool" and self.unknown_tool == "raise":
                raise UnknownToolError(text, call_id=call.id, tool_name=call.name)
            name = self._tools[tool_index].name if tool_index >= 0 else call.name
            turn.answer(slot, call, name, cast(ErrorKind, error_kind), text)
        duplicates = [Duplicate(calls[i].id, i, first, differ) for i, first, differ in duplicate_rows]

        jobs = await self._check_semantics(jobs, turn)
        steering_messages = await self._run_batches(jobs, turn, cap, steering)
        if emit is not None:
            await emit.flush()
        return Outcome(turn.ordered(), duplicates, steering_messages)

    def _context(self, job: _Job, turn: _Turn) -> ToolContext:
        return ToolContext(job.call.id, job.tool.name, turn.context, turn.interactive, turn.emit)

    async def _check_semantics(self, jobs: list[_Job], turn: _Turn) -> list[_Job]:
        """Phase 3: each tool's ``validate_input``; a refusal answers the call."""
        if not any(job.facts.validates_input for job in jobs):
            return jobs
        passed = []
        for job in jobs:
            if job.facts.validates_input:
                try:
                    await job.tool.validate_input(job.args, self._context(job, turn))
                except SemanticError as exc:
                    turn.answer(job.slot, job.call, job.tool.name, "semantic_error", str(exc))
                    continue
                except Exception as exc:
                    message = f"input check of `{job.tool.name}` failed: {format_error(exc, job.call)}"
                    turn.answer(job.slot, job.call, job.tool.name, "semantic_error", message)
                    continue
            passed.append(job)
        return passed

    def _batches(self, jobs: list[_Job], cap: int) -> list[tuple[int, int, int]]:
        strategy = self.strategy
        if len(jobs) <= 1:
            return [(0, len(jobs), 1)] if jobs else []
        safe = [self._is_safe(job) for job in jobs] if strategy.kind == "partitioned" else [False] * len(jobs)
        size = getattr(strategy, "size", 1)
        batches: list[tuple[int, int, int]] = _core.plan_batches(strategy.kind, safe, max_concurrency=cap, size=size)
        return batches

    @staticmethod
    def _is_safe(job: _Job) -> bool:
        static = job.facts.static_safe
        if static is not None:
            return static
        try:
            return bool(job.tool.is_concurrency_safe(job.args))
        except Exception:
            logger.warning("is_concurrency_safe of %s raised; running the call alone", job.tool.name, exc_info=True)
            return False

    async def _run_batches(
        self, jobs: list[_Job], turn: _Turn, cap: int, steering: Steering | None
    ) -> list[Any]:
        """Runs the batches in order; while they run, the run can be interrupted and its calls cancelled."""
        turn.jobs = jobs
        self._runs.add(turn)
        try:
            for number, (start, end, concurrency) in enumerate(self._batches(jobs, cap)):
                if turn.halt is not None:
                    self._answer_unstarted(jobs[start:], turn, "skipped", turn.halt)
                    return []
                if number and steering is not None:
                    messages = await _maybe_await(steering())
                    if messages:
                        self._answer_unstarted(jobs[start:], turn, "skipped", _SKIPPED)
                        return list(messages)
                batch = jobs[start:end]
                concurrent = concurrency > 1 and len(batch) > 1
                turn.batch = batch
                turn.scoped = concurrent and (
                    self.abort_siblings_on_error or any(job.tool.abort_siblings_on_error for job in batch)
                )
                if turn.emit is not None:
                    turn.emit(BatchStarted(number, tuple(job.call.id for job in batch), concurrent))
                if concurrent:
                    await self._run_pool(batch, concurrency, number, turn)
                else:
                    for job in batch:
                        await self._execute(job, number, False, turn)
                turn.abort = None
                turn.scoped = False
                if turn.emit is not None:
                    turn.emit(BatchFinished(number, tuple(job.call.id for job in batch)))
                    await turn.emit.flush()
                if turn.failures is not None:
                    await self._raise_failure(jobs[end:], turn, turn.failures)
            return []
        finally:
            self._runs.discard(turn)

    def _answer_unstarted(
        self, jobs: list[_Job], turn: _Turn, kind: ErrorKind, message: str, batch: int | None = None
    ) -> None:
        """Answers calls that will not run; one cancelled on its own keeps its own reason."""
        for job in jobs:
            job.state = _DONE
            if job.cancel_reason is not None:
                turn.answer(job.slot, job.call, job.tool.name, "cancelled", job.cancel_reason, batch)
            else:
                turn.answer(job.slot, job.call, job.tool.name, kind, message, batch)

    async def _raise_failure(
        self, rest: list[_Job], turn: _Turn, failures: list[tuple[int, ToolResult, BaseException | None]]
    ) -> None:
        """Ends a run whose batch had a raising failure: the first in model order is raised.

        The calls after the batch are answered as skipped first, so the error
        carries a result for every call.
        """
        failures = sorted(failures, key=lambda failure: failure[0])
        _, first, cause = failures[0]
        self._answer_unstarted(rest, turn, "skipped", f"not run: call {first.call_id} (`{first.tool_name}`) failed")
        if turn.emit is not None:
            await turn.emit.flush()
        error = ToolTimeoutError if first.error_kind == "timeout" else ToolCallFailed
        raise error(first, [failure[1] for failure in failures[1:]], turn.ordered_partial()) from cause

    async def _run_pool(self, batch: list[_Job], concurrency: int, number: int, turn: _Turn) -> None:
        """Runs a concurrent batch on a pool that grows only when calls wait."""
        await run_pool(batch, concurrency, lambda job: self._execute(job, number, True, turn))

    async def _execute(self, job: _Job, batch: int, concurrent: bool, turn: _Turn) -> None:
        """Phases 6 to 9 for one call: execute, shape, record."""
        tool = job.tool
        call = job.call
        emit = turn.emit
        if job.cancel_reason is not None or turn.abort is not None or turn.halt is not None:
            # Stopped before it started: answered without running.
            if turn.abort is not None:
                self._answer_unstarted([job], turn, "cancelled", f"not run: {turn.abort}", batch)
            else:
                self._answer_unstarted([job], turn, "skipped", turn.halt or _SKIPPED, batch)
            if emit is not None:
                await emit.flush()
            return
        job.state = _RUNNING
        scope = None
        if job.facts.scoped or turn.scoped:
            # ``move_on_after`` builds the backend's scope directly (``CancelScope()``
            # initialises it twice). With a concurrency cap the deadline is set once
            # the call gets its slot.
            scope = job.scope = anyio.move_on_after(None if tool.max_concurrency is not None else tool.timeout)
        ctx = None
        if job.facts.takes_context:
            ctx = job.ctx = ToolContext(call.id, tool.name, turn.context, turn.interactive, emit, job.declare_cancelled)
        if emit is not None:
            emit(ToolStarted(call.id, tool.name, batch))
        error: str | None = None
        kind: ErrorKind | None = None
        output: Any = None
        cause: BaseException | None = None
        started = time.perf_counter()
        try:
            if scope is None:
                if tool.max_concurrency is None:
                    output = await job.facts.invoke(job.args, ctx)
                else:
                    output = await self._invoke_limited(job, ctx, None)
            else:
                # A scope cancelled before it is entered (say by an event callback
                # on ToolStarted) stops the call at its first checkpoint.
                with scope:
                    if tool.max_concurrency is None:
                        output = await job.facts.invoke(job.args, ctx)
                    else:
                        output = await self._invoke_limited(job, ctx, scope)
                job.scope = None
                if scope.cancelled_caught:
                    kind, error = self._stopped(job)
        except Exception as exc:
            if anyio.current_effective_deadline() == -math.inf:
                # The run itself is being cancelled and the tool turned that into
                # an error: this checkpoint raises the run's cancellation instead.
                self._close(job, ctx)
                await anyio.lowlevel.checkpoint()
            if scope is not None and scope.cancel_called:
                # The tool turned its own cancellation into an exception: still a cancellation.
                kind, error = self._stopped(job)
            else:
                kind, error, cause = "execution_error", self._describe_failure(exc, call), exc
        except BaseException:
            # The run itself is cancelled: no result, and nothing reported after this.
            self._close(job, ctx)
            raise
        duration_ms = (time.perf_counter() - started) * 1000.0
        if ctx is not None:
            if job.declared:
                kind, error, cause, output = "cancelled", job.cancel_reason, None, None
            ctx._finish(kind is not None and kind != "execution_error")
        truncated = False
        offload_path = None
        if kind is None:
            try:
                output, truncated, offload_path = await shape_output(output, tool, call.id, self.offload_dir)
            except Exception as exc:
                kind, error, cause = "execution_error", f"the output of `{tool.name}` could not be shaped: {exc}", exc
                output = None
        result = ToolResult(
            call.id, tool.name, output, error, kind, kind is not None, duration_ms, concurrent, batch, truncated,
            offload_path,
        )
        job.state = _DONE
        turn.record(job.slot, result)
        if kind is not None and kind in _EXECUTION_FAILURES:
            self._failed(job, result, cause, turn)
        if emit is not None:
            await emit.flush()

    def _failed(self, job: _Job, result: ToolResult, cause: BaseException | None, turn: _Turn) -> None:
        """A call failed: note it if it ends the run, and abort its batch if that is the policy."""
        tool = job.tool
        if (result.error_kind == "execution_error" and self.on_error == "raise") or (
            result.error_kind == "timeout" and tool.timeout_behavior == "raise"
        ):
            if turn.failures is None:
                turn.failures = []
            turn.failures.append((job.slot, result, cause))
        aborts = self.abort_siblings_on_error or tool.abort_siblings_on_error
        if aborts and turn.abort is None and len(turn.batch) > 1:
            turn.abort = f"call {job.call.id} (`{tool.name}`) failed and cancelled the rest of its batch"
            for sibling in turn.batch:
                if sibling.state == _RUNNING:
                    sibling.cancel(f"`{sibling.tool.name}` was cancelled: {turn.abort}")

    @staticmethod
    def _close(job: _Job, ctx: ToolContext | None) -> None:
        """A call ends without a result because its run is cancelled."""
        job.state = _DONE
        if ctx is not None:
            ctx._finish(True)

    @staticmethod
    def _stopped(job: _Job) -> tuple[ErrorKind, str]:
        """Why a call's scope stopped it: a cancellation (which wins) or its deadline."""
        if job.cancel_reason is not None:
            return "cancelled", job.cancel_reason
        return "timeout", f"`{job.tool.name}` did not finish within {job.tool.timeout} seconds"

    def _describe_failure(self, exc: Exception, call: ToolCall) -> str:
        """The message of an ``execution_error``: the formatter's, or the default if it fails."""
        try:
            message = self.error_formatter(exc, call)
            if not isinstance(message, str):
                raise TypeError(f"error_formatter returned {type(message).__name__}, not str")
        except Exception:
            logger.exception("error_formatter %r failed for call %s", self.error_formatter, call.id)
            return format_error(exc, call)
        return message

    async def _invoke_limited(self, job: _Job, ctx: ToolContext | None, scope: anyio.CancelScope | None) -> Any:
        """Calls the tool under its concurrency cap; its timeout counts from when it gets a slot."""
        timeout = job.tool.timeout
        async with job.facts.limiter():
            if scope is not None and timeout is not None:
                scope.deadline = anyio.current_time() + timeout
            return await job.facts.invoke(job.args, ctx)


_SKIPPED = "not run: the run was steered away before this call started"
