"""The executor: runs a turn's calls on anyio and answers every call exactly once.

The rooms of a run, in the order a call meets them:

- ``settings``: the executor's options, checked once;
- ``view``: what is worked out once per tool set (facts, admission policies);
- ``turn``: the Turn — calls in (one decoded plan), results out in model order, one way to finish;
- ``admit``: semantic validation and permission (``validate_input``, hooks, rules, mode, approvals);
- ``schedule``: the strategies, on one worker pool that grows only when calls wait;
- ``call``: one admitted call from its input guardrails to its shaped result (guardrails, limits, timeout,
  cancellation, backend, post hooks, shaping);
- ``durable`` and ``recovery``: a durable run's journal writes, and finishing a run after a crash;
- ``external``: the calls of external tools once handed out, answered on resume, on recover, or through a journal.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import uuid
from asyncio.events import _get_running_loop as _running_loop
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from threading import get_ident
from typing import Any, Literal, NamedTuple, SupportsIndex

import anyio

from toolsched._backends.backends import Backend
from toolsched._backends.threads import watching_call
from toolsched._executor.admit import admit, check_semantics, limit_jobs, not_approved
from toolsched._executor.detached import start_detached
from toolsched._executor.durable import RunJournal, journaled_standing
from toolsched._executor.external import answer_through_journal, check_answers, resume_external
from toolsched._executor.pool import raise_stopping
from toolsched._executor.recovery import recovered_jobs
from toolsched._executor.repair import repair_refused, stored_job
from toolsched._executor.schedule import run_jobs
from toolsched._executor.settings import (
    ErrorFormatter,
    EventCallback,
    RepairFunction,
    Settings,
    Steering,
    format_error,
)
from toolsched._executor.strategies import Strategy
from toolsched._executor.streaming import StreamingTurn, streaming_refusal, unread_outcome
from toolsched._executor.turn import DONE, Held, Job, Plan, Turn, new_turn, plan_calls
from toolsched._executor.view import View
from toolsched._policy.coordination import RedisCoordination
from toolsched._policy.guardrails import Guardrail
from toolsched._policy.holds import resuming
from toolsched._policy.hooks import Hooks
from toolsched._policy.limits import Limits, active_limits, bare_limits, limits_in_force
from toolsched._policy.permissions import Permissions
from toolsched._policy.runstate import (
    EXTERNAL_STATUSES,
    Approver,
    CallRecord,
    RunState,
    claim,
    run_identity,
    unclaim,
    waiting_children,
)
from toolsched._policy.standing import standing_in_force
from toolsched._tools.registry import ToolRegistry
from toolsched._tools.resources import RunResources, current_resources
from toolsched._tools.tools import Tool
from toolsched._values.calls import Duplicate, ToolCall, call_list, plain_calls
from toolsched._values.event_loops import hand_to_loop, loop_handle
from toolsched._values.events import Event, RunFinished, ToolsChanged, ToolsRefreshFailed
from toolsched._values.exception_text import described
from toolsched._values.outcome import Outcome, new_outcome
from toolsched.errors import OptionError, StreamFailed, UnpicklableError
from toolsched.journal import Journal

__all__ = ["ErrorFormatter", "EventCallback", "Executor", "Steering", "format_error"]

logger = logging.getLogger("toolsched")


class RunRequest(NamedTuple):
    """What one entry into a run carries from the public method to the room that plans or resumes it.

    ``calls`` for a new turn or ``state`` for a resumed one; ``sink`` receives the run's events too;
    ``parent`` is the parent call of a nested run; ``durable`` the run's journal handle, if any;
    ``identity`` the identity a nested run's turn takes from its parent call (its calls' idempotency keys).
    """

    calls: Iterable[ToolCall] | None = None
    state: RunState | None = None
    steering: Steering | None = None
    context: Any = None
    sink: Callable[[Event], Any] | None = None
    parent: str | None = None
    durable: RunJournal | None = None
    run_id: str | None = None
    identity: str | None = None


class Executor:
    """Runs the tool calls of a turn.

    ``tools`` is a ``ToolRegistry`` or anything it accepts. Options:

    - ``strategy``: how calls are scheduled (default ``Partitioned()``);
    - ``on_event`` / ``on_progress``: callbacks (plain or async) for every event,
      or for progress only; ``on_event`` may be a list of callbacks, each called in turn;
    - ``on_error``: ``"result"`` (a failed tool becomes an ``execution_error``
      result) or ``"raise"`` (``ToolCallFailed`` once the failing batch settles);
    - ``abort_siblings_on_error``: a failure cancels the rest of its batch, for
      every tool (each tool can also ask for it with its own flag);
    - ``unknown_tool``: ``"result"`` or ``"raise"`` (``UnknownToolError``);
    - ``max_input_bytes`` / ``max_input_depth`` / ``max_schema_errors``: argument limits. Depth counts
      arrays and objects: the arguments object is level 1, each array or object inside one level more,
      and a scalar none (``{"a": [1]}`` is 2 deep, ``{}`` and ``{"a": 1}`` 1); arguments given as JSON
      text and as a mapping are held to it alike. Default 64, at most 128;
    - ``repair_arguments``: ``True`` repairs arguments that fail to parse or to validate where one fix is
      unambiguous (a code fence, trailing commas, single quotes, a number sent as a string, ...; see the
      argument repair page of the docs), then validates them like any others; valid arguments are never
      changed. Text that was cut off is refused saying so. An async callable ``(call, error) -> str | dict |
      None`` turns the built-in repair on and is tried after it on each call still refused ``invalid_input``
      (``error`` is that answer's ``ToolResult``): its text or dict is validated and goes through rules,
      hooks and approvals like any other arguments; None, a failure or no answer within the tool's timeout
      leaves the call answered as it was. A repaired call's result has ``repaired=True`` and a
      ``ToolArgumentsRepaired`` event names the fixes. Default ``False``;
    - ``interactive``: whether a person is present (``ToolContext.interactive``);
    - ``offload_dir``: where ``truncate="offload"`` writes full outputs;
    - ``error_formatter``: ``(exception, call) -> message`` for failed tools
      (if it fails, the default message is used);
    - ``permissions``: a ``Permissions`` (rules and mode) deciding which calls run;
    - ``hooks``: a ``Hooks`` registry (pre/post call, pre/post batch);
    - ``approver``: ``async (ApprovalRequest) -> bool | Decision`` for calls that
      ask; without one such calls are held and the run ends ``interrupted``;
    - ``input_guardrails`` / ``output_guardrails``: checks just before a call
      runs and on its output (see ``toolsched._policy.guardrails``);
    - ``backends`` / ``default_backend``: where tool bodies run besides this
      process, by name (``{"ray": RayBackend()}``), and the backend of tools
      that name none (default ``"local"``);
    - ``journal``: a ``Journal`` (``SqliteJournal``, ``PostgresJournal``) that makes
      runs durable: each call's transitions are written before the run goes on,
      and ``recover(run_id)`` finishes a run after a crash.

    Each run uses the registry's tool set as it is when the run starts; a
    registry with ``refresh_tools`` is refreshed after each run's results are
    complete (``ToolsChanged`` / ``ToolsRefreshFailed`` events), so the next
    run sees the new set. Tools with per-run resources (``toolsched._tools.resources``)
    have them opened by the run on first use and closed when it ends; agent
    tools (``toolsched._executor.nested``) run child executors inside their calls.
    """

    def __init__(
        self,
        tools: ToolRegistry | Iterable[Tool | Callable[..., Any]],
        *,
        strategy: Strategy | None = None,
        on_event: EventCallback | Sequence[EventCallback] | None = None,
        on_progress: EventCallback | None = None,
        on_error: Literal["result", "raise"] = "result",
        abort_siblings_on_error: bool = False,
        unknown_tool: Literal["result", "raise"] = "result",
        max_input_bytes: int = 16 * 1024 * 1024,
        max_input_depth: int = 64,
        max_schema_errors: int = 10,
        repair_arguments: bool | RepairFunction = False,
        interactive: bool = False,
        offload_dir: str | Path | None = None,
        error_formatter: ErrorFormatter = format_error,
        permissions: Permissions | None = None,
        hooks: Hooks | None = None,
        approver: Approver | None = None,
        input_guardrails: Iterable[Guardrail] = (),
        output_guardrails: Iterable[Guardrail] = (),
        backends: Mapping[str, Backend] | None = None,
        default_backend: str | None = None,
        journal: Journal | None = None,
        coordination: RedisCoordination | None = None,
    ) -> None:
        self.registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self._settings = Settings(
            self.registry,
            strategy=strategy,
            on_event=on_event,
            on_progress=on_progress,
            on_error=on_error,
            abort_siblings_on_error=abort_siblings_on_error,
            unknown_tool=unknown_tool,
            max_input_bytes=max_input_bytes,
            max_input_depth=max_input_depth,
            max_schema_errors=max_schema_errors,
            repair_arguments=repair_arguments,
            interactive=interactive,
            offload_dir=offload_dir,
            error_formatter=error_formatter,
            permissions=permissions,
            hooks=hooks,
            approver=approver,
            input_guardrails=input_guardrails,
            output_guardrails=output_guardrails,
            backends=backends,
            default_backend=default_backend,
            journal=journal,
            coordination=coordination,
        )
        self._view = View(self._settings, self.registry.toolset, None, self.registry.refreshes)
        # Runs executing their calls on this executor now, for ``interrupt`` and ``cancel``.
        self._runs: set[Turn] = set()

    # -- options --------------------------------------------------------------------

    @property
    def strategy(self) -> Strategy:
        return self._settings.strategy

    @property
    def journal(self) -> Journal | None:
        return self._settings.journal

    @property
    def permissions(self) -> Permissions | None:
        return self._settings.permissions

    @property
    def hooks(self) -> Hooks | None:
        return self._settings.hooks

    @property
    def approver(self) -> Approver | None:
        return self._settings.approver

    @property
    def on_error(self) -> Literal["result", "raise"]:
        return self._settings.on_error

    @property
    def interactive(self) -> bool:
        return self._settings.interactive

    @property
    def on_event(self) -> EventCallback | tuple[EventCallback, ...] | None:
        """The event callbacks; assigning replaces them for the runs that start afterwards."""
        return self._settings.on_event

    @on_event.setter
    def on_event(self, value: EventCallback | Sequence[EventCallback] | None) -> None:
        if isinstance(value, (list, tuple)):
            value = tuple(value)
            if not all(callable(sink) for sink in value):
                raise OptionError(f"on_event must be a callable or a list of callables, got {value!r}")
        elif value is not None and not callable(value):
            raise OptionError(f"on_event must be a callable or a list of callables, got {value!r}")
        self._settings.on_event = value

    def __deepcopy__(self, memo: dict[int, Any]) -> Executor:
        """The executor itself: a deep copy of what holds one (an Agents SDK agent and the run items that
        name it) shares it, as it shares the tools, hooks and journal the executor holds."""
        return self

    def __copy__(self) -> Executor:
        copied = object.__new__(type(self))
        copied.__dict__.update(self.__dict__)
        return copied

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        raise UnpicklableError(
            "an Executor cannot be pickled: it holds its runs in progress and its tools' compiled schemas; "
            "build one where it is needed (a worker process builds its own from the same tools)"
        )

    def _current_view(self) -> View:
        """The view of the registry's tool set as it is now (rebuilt only when the set changed)."""
        view = self._view
        toolset = self.registry.toolset
        if view.toolset is not toolset:
            view = self._view = View(self._settings, toolset, view, self.registry.refreshes)
        return view

    # -- running ----------------------------------------------------------------------

    async def run(
        self,
        calls: Iterable[ToolCall] | AsyncIterable[ToolCall],
        *,
        steering: Steering | None = None,
        context: Any = None,
        run_id: str | None = None,
        limits: Limits | None = None,
    ) -> Outcome:
        """Runs a turn's calls; returns one result per unique call ID, in model order.

        ``calls`` is a list (any iterable) or an async iterable: then each call
        starts the moment the schedule lets it, while later calls are still
        coming (``turn``); if the iterable raises, ``StreamFailed`` carries the
        results of the calls it gave.

        The turn uses the registry's tool set as it is when the turn starts.
        With a registry that has ``refresh_tools``, the set is refreshed once
        the results are complete, before this returns.

        With a journal, the run is journaled under ``run_id`` (a new one when
        not given; ``Outcome.run_id``): ``RunExistsError`` for an ID already in
        the journal, and a ``JournalError`` raised when the journal fails mid-run.

        ``limits``: the agent run's ``Limits`` (the same object on every turn of the run): calls past its
        caps are answered ``limit_exceeded``, and it counts this turn's calls and answers. Without it, the
        limits in force where this is called (a loop's ``limits=``) apply.
        """
        if limits is None:
            limits = active_limits()
            if limits is None:
                return await self._run_turn(calls, steering, context, run_id)
        with limits_in_force(limits):
            return await self._run_turn(calls, steering, context, run_id)

    def _run_turn(
        self,
        calls: Iterable[ToolCall] | AsyncIterable[ToolCall],
        steering: Steering | None,
        context: Any,
        run_id: str | None,
    ) -> Coroutine[Any, Any, Outcome]:
        """``run``'s turn, planned when it can be: the coroutine that runs it, for ``run`` to await (no frame of
        this function is left in the chain a waiting run keeps)."""
        if run_id is not None:
            _check_run_id(run_id)
        if steering is not None:
            _check_steering(steering)
        # A list is told by its type first: an isinstance check against an ABC costs more.
        if type(calls) is not list and isinstance(calls, AsyncIterable):
            return self._run_streamed(calls, steering, context, run_id)
        if self._settings.journal is not None:
            return self._run_journaled(calls, steering, context, run_id)
        view = self._view
        if view.toolset is not self.registry.toolset:
            view = self._current_view()
        if view.plain and active_limits() is None:
            turn = self._planned(calls, view, steering=steering, context=context, run_id=run_id)
        else:
            # Read as a list now: a request without calls is a resumed turn's.
            request = RunRequest(call_list(calls), steering=steering, context=context, run_id=run_id)
            turn = self._start(request)
        return turn if run_id is None else _with_run_id(turn, run_id)

    async def _run_journaled(
        self, calls: Iterable[ToolCall], steering: Steering | None, context: Any, run_id: str | None
    ) -> Outcome:
        """``run`` with a journal (apart, so that ``run`` itself holds no closure's cells)."""
        journal = self._settings.journal
        assert journal is not None
        calls = call_list(calls)
        durable = RunJournal(journal, uuid.uuid4().hex if run_id is None else run_id)
        request = RunRequest(call_list(calls), steering=steering, context=context, durable=durable)
        return await self._journaled(durable, lambda: self._start(request))

    @property
    def streams(self) -> bool:
        """Whether turns can take calls over time (``turn``): not with batch hooks."""
        return streaming_refusal(self._settings) is None

    def turn(
        self, *, steering: Steering | None = None, context: Any = None, run_id: str | None = None
    ) -> StreamingTurn:
        """A turn whose calls arrive over time, for ``async with``: ``submit`` each call as the model
        streams it, ``close`` at the end, ``results()`` / ``outcome()`` for the results (see ``StreamingTurn``).

        Calls are scheduled as ``run`` schedules them, each starting as soon as
        it may; the options are ``run``'s.
        """
        return self._streaming_turn(steering, context, run_id, None)

    def _streaming_turn(
        self, steering: Steering | None, context: Any, run_id: str | None, sink: Callable[[Event], Any] | None
    ) -> StreamingTurn:
        if run_id is not None:
            _check_run_id(run_id)
        if steering is not None:
            _check_steering(steering)
        refresh = (lambda: self._refresh(sink, None)) if self.registry.refreshes else None
        return StreamingTurn(
            self._settings,
            self._current_view(),
            self._runs,
            refresh,
            steering=steering,
            context=context,
            run_id=run_id,
            sink=sink,
        )

    async def _run_streamed(
        self,
        calls: AsyncIterable[ToolCall],
        steering: Steering | None,
        context: Any,
        run_id: str | None,
        sink: Callable[[Event], Any] | None = None,
    ) -> Outcome:
        if not self.streams:
            # Batch hooks see whole batches: read the calls first.
            listed: list[ToolCall] = []
            try:
                async for call in calls:
                    listed.append(call)
            except Exception as error:
                view = self._current_view()
                outcome = await unread_outcome(
                    self._settings, view, listed, error, context=context, run_id=run_id, sink=sink
                )
                raise StreamFailed(outcome, error) from error
            if sink is None:
                return await self.run(listed, steering=steering, context=context, run_id=run_id)
            outcome = await self._start(
                RunRequest(listed, steering=steering, context=context, sink=sink, run_id=run_id)
            )
            return outcome if run_id is None else replace(outcome, run_id=run_id)
        turn = self._streaming_turn(steering, context, run_id, sink)
        async with turn:
            async for call in calls:
                turn.submit(call)
            turn.close()
            return await turn.outcome()

    async def recover(
        self,
        run_id: str,
        *,
        steering: Steering | None = None,
        context: Any = None,
        force: bool = False,
        limits: Limits | None = None,
    ) -> Outcome:
        """Finishes a journaled run after a crash and returns its outcome, in model order.

        Calls that finished are answered from the journal and never run again.
        A call that started but did not finish runs again only if its tool is
        ``idempotent``; otherwise it gets an ``interrupted`` error result (its
        outcome is unknown). Calls approved or still waiting for a person keep
        that decision, an approval for the tool it was given for only: a call
        approved for a tool that changed since is asked again, as ``resume``
        asks. Calls that never started run as they would have.

        Raises ``UnknownRunError`` for a run the journal does not have and
        ``RunClaimedError`` while another process holds the run (``force=True``
        takes it from a holder known to be dead).

        ``limits``: the run's ``Limits``; the calls the journal holds as answered count in it, and the calls
        still to run are held to its caps. Without one, the run's own answers still count against each
        tool's ``max_model_retries``.
        """
        journal = self._settings.journal
        if journal is None:
            raise OptionError("recover() needs an executor built with journal=")
        if not isinstance(force, bool):
            # Read for its truth, a "false" would take the run from a live holder.
            raise OptionError(f"force must be True or False, got {force!r}")
        if steering is not None:
            _check_steering(steering)
        if limits is None:
            limits = active_limits() or bare_limits()
        durable = RunJournal(journal, run_id)
        request = RunRequest(steering=steering, context=context, durable=durable)
        with limits_in_force(limits):
            return await self._journaled(durable, lambda: self._recover(request, force))

    async def _journaled(self, durable: RunJournal, body: Callable[[], Awaitable[Outcome]]) -> Outcome:
        """Runs a durable run's ``body`` (its lease watched meanwhile: a lost lease cancels the body at once),
        then releases the run; a journal failure, a lost lease among them, is raised as itself."""
        failure: Exception | None = None
        outcome: Outcome | None = None
        try:
            try:
                async with anyio.create_task_group() as group:
                    scope = group.cancel_scope
                    group.start_soon(durable.watch, lambda _: scope.cancel())
                    try:
                        outcome = await body()
                    except Exception as exc:
                        # Raised after the task group, which would wrap it.
                        failure = exc
                    finally:
                        group.cancel_scope.cancel()
            except BaseExceptionGroup as failures:
                # A KeyboardInterrupt (or the like) from a tool: raised as itself, as without a journal.
                raise_stopping(failures)
        finally:
            await durable.release()
        if failure is not None:
            if durable.failure is not None:
                raise durable.failure from None
            raise failure
        if durable.failure is not None:
            # Also a body cancelled because the run's lease was lost: it has no outcome.
            raise durable.failure
        assert outcome is not None
        return replace(outcome, run_id=durable.run_id)

    async def stream(
        self,
        calls: Iterable[ToolCall] | AsyncIterable[ToolCall],
        *,
        steering: Steering | None = None,
        context: Any = None,
        run_id: str | None = None,
        limits: Limits | None = None,
    ) -> AsyncIterator[Event]:
        """Runs a turn, yielding its events as they happen; the last is ``RunFinished``.

        Leaving the loop early (``break``) cancels the run, as soon as the
        generator is closed: at once under ``contextlib.aclosing``, otherwise
        when the interpreter finalises it (right after the loop on CPython).
        The run is driven by a task of its own, so the generator may be closed
        from any task. With a journal the run is durable, as with ``run`` (its
        ID is ``RunFinished.outcome.run_id``). ``limits`` as for ``run``.
        """
        if run_id is not None:
            _check_run_id(run_id)
        if limits is None:
            limits = active_limits()
        elif not isinstance(limits, Limits):
            raise OptionError(f"limits= takes a ts.Limits or None, got {type(limits).__name__}")
        if not isinstance(calls, AsyncIterable):
            calls = call_list(calls)
        if steering is not None:
            _check_steering(steering)
        send, receive = anyio.create_memory_object_stream[Event](max_buffer_size=math.inf)
        failure: list[BaseException] = []
        journal = self._settings.journal
        # The run's own scope: leaving the loop early cancels it, from whichever task closes this generator.
        scope = anyio.CancelScope()
        cancelled = anyio.get_cancelled_exc_class()

        def deliver(event: Event) -> None:
            try:
                send.send_nowait(event)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                # The consumer left (a "block" call of a streamed turn still finishing): nobody reads its events.
                pass

        async def drive() -> None:
            with send, limits_in_force(limits):
                try:
                    with scope:
                        if isinstance(calls, AsyncIterable):
                            outcome = await self._run_streamed(calls, steering, context, run_id, deliver)
                        elif journal is not None:
                            durable = RunJournal(journal, uuid.uuid4().hex if run_id is None else run_id)
                            request = RunRequest(
                                calls, steering=steering, context=context, sink=deliver, durable=durable
                            )
                            outcome = await self._journaled(durable, lambda: self._start(request))
                        else:
                            outcome = await self._start(
                                RunRequest(calls, steering=steering, context=context, sink=deliver, run_id=run_id)
                            )
                            if run_id is not None:
                                outcome = replace(outcome, run_id=run_id)
                        send.send_nowait(RunFinished(outcome))
                except cancelled:
                    # The run was stopped from outside (the loop is shutting down): nothing is left to report.
                    return
                except BaseException as exc:
                    # Handed to the consumer: nothing awaits this task.
                    failure.append(exc)

        start_detached(drive)
        try:
            with receive:
                async for event in receive:
                    yield event
        finally:
            # Whether the consumer left early, was cancelled or read to the end: the run stops (if it still runs).
            scope.cancel()
        if failure:
            raise failure[0]

    def interrupt(self, reason: str | None = None, *, run_id: str | None = None) -> int:
        """A user message arrived: stops every run in progress on this executor (or only the run ``run_id``).

        Running calls of tools with ``interrupt_behavior="cancel"`` are cancelled
        (``cancelled`` results); ``"block"`` tools finish, except that a call
        waiting without working (a rate-limit token, a retry's backoff) runs no
        more attempts (its last failure, or ``skipped`` if it never ran); calls
        not started yet get ``skipped`` results. ``reason`` is added to those results' messages.
        Returns how many runs it reached (runs that are executing their calls).

        Callable from any thread: a run on another thread's event loop (an executor shared by threads
        that each run a loop) is stopped on its own loop, as soon as that loop runs the request.
        """
        suffix = f" ({reason})" if reason else ""
        reached = 0
        here = threading.get_ident()
        for turn in tuple(self._runs):
            if run_id is not None and turn.run_id != run_id:
                continue
            if turn.thread == here or turn.loop is None:
                _interrupt_turn(turn, suffix)
            elif not hand_to_loop(turn.loop, _interrupt_turn, turn, suffix):
                continue  # its loop has ended: so has the run
            reached += 1
        return reached

    def cancel(self, call_id: str, reason: str | None = None, *, run_id: str | None = None) -> bool:
        """Cancels one call of the runs in progress on this executor; it gets a ``cancelled`` result.

        Call IDs are unique only within a conversation: on an executor shared by
        many, name the run (``run_id``, as given to ``run``/``stream`` or made by
        a journal) so that only its call is reached; without ``run_id`` every run
        in progress with a call of that ID is.

        A call that has not started never runs. A running call is stopped if it
        runs in a cancel scope: its tool has a ``timeout``,
        ``interrupt_behavior="cancel"`` or ``isolation="process"``, or its batch
        can be aborted by a failure. Any other running call is only asked to stop
        (``ctx.cancelled`` turns true; the tool may end its call with
        ``ctx.cancel()``) and otherwise keeps its own result. Returns whether a
        call will end cancelled.

        Callable from any thread: a call of a run on another thread's event loop is cancelled on its own
        loop, as soon as that loop runs the request, and the answer is what the call's state says when
        asked (a call that ends before its loop runs the request keeps its result).
        """
        suffix = f": {reason}" if reason else ""
        stopped = False
        here = threading.get_ident()
        for turn in tuple(self._runs):
            if run_id is not None and turn.run_id != run_id:
                continue
            if turn.thread == here or turn.loop is None:
                stopped = _cancel_in_turn(turn, call_id, suffix) or stopped
            elif _stoppable_in_turn(turn, call_id) and hand_to_loop(turn.loop, _cancel_in_turn, turn, call_id, suffix):
                stopped = True
        return stopped

    async def resume(
        self,
        state: RunState,
        *,
        steering: Steering | None = None,
        context: Any = None,
        limits: Limits | None = None,
    ) -> Outcome:
        """Continues an interrupted run from its ``RunState``; returns every result, in model order.

        Calls that completed are never run again; rejected calls are answered
        ``permission_denied``; every other call is checked again against the
        current tools, rules and hooks before it runs. An approval holds only
        for the same tool and the same final arguments: otherwise the call is
        asked again. A state resumes once (``StateError`` after that). The state
        of a journaled run (``state.run_id``) resumes only on an executor with a
        journal (``OptionError`` otherwise), the one that holds the run.

        ``limits`` as for ``run``; without one (and none in force), the answers the state carries count
        against each tool's ``max_model_retries`` for the calls still to run: the run's budget holds across
        its resume.
        """
        if not isinstance(state, RunState):
            raise TypeError(f"resume() takes the RunState of an interrupted run, got {type(state).__name__}")
        if steering is not None:
            _check_steering(steering)
        if limits is None:
            # Without the agent run's ``Limits``, the run's own answers still count (``bare_limits``).
            limits = active_limits() or bare_limits()
        with limits_in_force(limits):
            return await self._resume_state(state, steering, context)

    async def complete(self, run_id: str, call_id: str, *, output: Any = None) -> None:
        """Answers the external call ``call_id`` of the journaled run ``run_id`` with ``output``, from any process
        (a webhook, say): the journal keeps the answer, and ``recover(run_id)`` (or a resume of the run's state)
        delivers it in model order.

        ``StateError`` for a call the run does not have, that is not an external call waiting for its answer,
        or that was answered already; ``RunClaimedError`` while a process holds the run (it is still running:
        answer once it has stopped); ``OptionError`` without a journal.
        """
        await answer_through_journal(self._settings, self._current_view(), run_id, call_id, output, None, "complete")

    async def fail(self, run_id: str, call_id: str, *, error: str) -> None:
        """Answers the external call ``call_id`` of the journaled run ``run_id`` with a failure (an
        ``execution_error`` carrying ``error``, a message for the model); refused as ``complete`` is."""
        if not isinstance(error, str):
            raise TypeError(f"fail(error=...) must be a string, got {type(error).__name__}")
        await answer_through_journal(self._settings, self._current_view(), run_id, call_id, None, error, "fail")

    async def _resume_state(self, state: RunState, steering: Steering | None, context: Any) -> Outcome:
        journal = self._settings.journal
        if state.run_id is not None:
            if journal is None:
                # Refused before the state is taken: it still resumes on an executor with the journal.
                raise OptionError(
                    f"the state is of the journaled run {state.run_id!r}: resume it on an executor built with "
                    "journal= (the journal that holds the run), so that its calls are journaled and none runs twice"
                )
            durable = RunJournal(journal, state.run_id)
            request = RunRequest(state=state, steering=steering, context=context, durable=durable)
            return await self._journaled(durable, lambda: self._start(request))
        return await self._start(RunRequest(state=state, steering=steering, context=context))

    async def run_nested(
        self,
        calls: Iterable[ToolCall] | None,
        state: RunState | None,
        *,
        steering: Steering | None,
        context: Any,
        sink: Callable[[Event], Any] | None,
        parent_call_id: str,
        identity: str | None = None,
    ) -> Outcome:
        """Runs (``calls``) or resumes (``state``) a child turn inside the call ``parent_call_id``.

        For nested runs (``toolsched._executor.nested``): the child's events go to ``sink``
        as well, stamped with the parent call. The parent's ``Limits`` do not count the child's calls.
        ``identity`` is the child turn's identity (its calls' idempotency keys derive from it).
        """
        if steering is not None:
            _check_steering(steering)
        with limits_in_force(None):
            request = RunRequest(calls, state, steering, context, sink, parent_call_id, identity=identity)
            return await self._start(request)

    # -- the entry paths --------------------------------------------------------------

    async def _start(self, request: RunRequest) -> Outcome:
        """Runs a turn (``request.calls``) or resumes one (``request.state``) with what surrounds it.

        Around: the run's per-run resources, and the nested runs it resumes.
        After: the registry's refresh, once the results are complete.
        """
        view = self._current_view()
        state = request.state
        children = waiting_children(state) if state is not None else None
        try:
            if view.resourceful or children:
                outcome = await self._scoped(request, view, children)
            else:
                outcome = await self._begin(request, view)
        except Exception:
            # A run that raises (on_error="raise", a tripped guardrail) has its results too: refresh all the same.
            if self.registry.refreshes:
                await self._refresh(request.sink, request.parent)
            raise
        if self.registry.refreshes:
            await self._refresh(request.sink, request.parent)
        return outcome

    async def _begin(self, request: RunRequest, view: View) -> Outcome:
        if request.state is None:
            return await self._run(request, view)
        return await self._resume(request, request.state, view)

    async def _scoped(self, request: RunRequest, view: View, children: dict[str, CallRecord] | None) -> Outcome:
        """A run with per-run resources (opened on first use, closed when it ends) or nested runs to resume."""
        resumed = resuming.set(children) if children else None
        try:
            if not view.resourceful:
                return await self._begin(request, view)
            failure: Exception | None = None
            outcome: Outcome | None = None
            try:
                async with anyio.create_task_group() as group:
                    resources = RunResources(group, request.context)
                    token = current_resources.set(resources)
                    try:
                        outcome = await self._begin(request, view)
                    except Exception as exc:
                        # Raised after the task group, which would wrap it: the resources close first.
                        failure = resources.error = exc
                    except BaseException as exc:
                        resources.error = exc
                        raise
                    finally:
                        current_resources.reset(token)
                        resources.close()
            except BaseExceptionGroup as failures:
                # A KeyboardInterrupt (or the like) from a tool: raised as itself, as in a run without resources.
                raise_stopping(failures)
            if failure is not None:
                raise failure
            assert outcome is not None
            return outcome
        finally:
            if resumed is not None:
                resuming.reset(resumed)

    async def _refresh(self, sink: Callable[[Event], Any] | None, parent: str | None) -> None:
        """Refreshes the registry after a run; a failure keeps the previous set and is reported, never raised."""
        before = {member.name for member in self.registry}
        try:
            changed = await self.registry.refresh()
        except Exception as exc:
            detail = described(exc)
            logger.warning("refreshing the tool set failed; the previous set stays", exc_info=True)
            event: Event = ToolsRefreshFailed(detail)
        else:
            if not changed:
                return
            after = {member.name for member in self.registry}
            event = ToolsChanged(tuple(sorted(after - before)), tuple(sorted(before - after)))
        emit = self._settings.emitter(sink, parent)
        if emit is not None:
            emit(event)
            await emit.flush()

    async def _run(self, request: RunRequest, view: View) -> Outcome:
        """A new turn: plan its calls, answer what the engine refused, run the rest."""
        if request.durable is not None:
            assert request.calls is not None
            calls = self._checked(request.calls)
            await request.durable.begin(calls)
            request = request._replace(calls=calls)
        assert request.calls is not None
        return await self._planned(
            request.calls,
            view,
            steering=request.steering,
            context=request.context,
            sink=request.sink,
            parent=request.parent,
            durable=request.durable,
            run_id=request.run_id,
            identity=request.identity,
        )

    @staticmethod
    def _checked(calls: Iterable[ToolCall]) -> list[ToolCall]:
        """The calls of a journaled turn, each read once (``plain_calls``): journaled as they are answered."""
        return plain_calls(call_list(calls))

    def _planned(
        self,
        calls: Iterable[ToolCall],
        view: View,
        *,
        steering: Steering | None,
        context: Any,
        sink: Callable[[Event], Any] | None = None,
        parent: str | None = None,
        durable: RunJournal | None = None,
        run_id: str | None = None,
        identity: str | None = None,
    ) -> Coroutine[Any, Any, Outcome]:
        """A new turn of ``calls``, planned (one crossing into the engine) and ready to drive: ``_drive``'s
        coroutine, not awaited. Nothing has run yet. The plan goes on only when the engine refused a call
        (to answer it), its jobs and calls on their own: what only planning needed is let go while the
        calls run (fewer live objects per waiting turn for the cyclic collector to walk)."""
        settings = self._settings
        calls = call_list(calls)
        # ``plan_calls`` reads each call once (a TypeError names the first that is not a ToolCall).
        plan = plan_calls(settings, view, calls, jobs=True)
        # The emitter's own test written out: most turns have no listener.
        listens = sink is not None or settings.on_event is not None or settings.on_progress is not None
        emit = settings.emitter(sink, parent) if listens else None
        if run_id is None and durable is not None:
            run_id = durable.run_id
        # ``loop_handle()``, asyncio's loop read directly (one C call per run).
        loop = _running_loop()
        turn = new_turn(
            settings,
            view,
            len(plan.tools),
            context,
            settings.interactive,
            emit,
            self._runs,
            loop if loop is not None else loop_handle(),
            get_ident(),
            durable,
            run_id,
            [],
            [],
        )
        if identity is not None:
            turn.identity = identity
        if plan.repairs:
            turn.note_plan(plan)
        refused = plan if plan.refused else None
        return self._drive(
            turn,
            refused=refused,
            fresh=plan.jobs,
            slot_calls=plan.calls,
            duplicates=plan.duplicates or None,
            steering=steering,
        )

    async def _resume(self, request: RunRequest, state: RunState, view: View) -> Outcome:
        """An interrupted turn from its state: completed calls carried over, the rest planned again."""
        durable = request.durable
        records = claim(state)
        journaled = None
        if durable is not None:
            try:
                journaled = await durable.resuming(records)
                check_answers(journaled, records)
            except BaseException:
                # Refused by the journal (another process holds the run, say) before anything was written or
                # ran: the state and its copies keep the person's decisions for a resume that is let through.
                unclaim(state)
                raise
            await durable.resumed(records)
        settings = self._settings
        emit = settings.emitter(request.sink, request.parent)
        turn = Turn(settings, view, len(records), request.context, emit, self._runs, durable)
        turn.identity = run_identity(state)
        slot_calls = [ToolCall(record.call_id, record.name, record.args) for record in records]
        # Calls approved with a person's own arguments (and external calls handed out with them): their answers
        # say so (``ToolResult.edited``).
        edited_ids = {record.call_id for record in records if _edited(record)}
        if edited_ids:
            turn.edited = frozenset(edited_ids)
        todo: list[int] = []
        for slot, record in enumerate(records):
            if record.status == "done":
                assert record.result is not None
                turn.carry(slot, record.result)
            elif record.status == "rejected":
                name = record.tool or record.name
                await turn.answer(slot, slot_calls[slot], name, "permission_denied", not_approved(name, record.message))
            elif record.status in EXTERNAL_STATUSES:
                await resume_external(turn, slot, slot_calls[slot], record, journaled)
            else:
                todo.append(slot)
        # A call approved with a person's arguments is planned with them: checked against the schema and judged
        # by the rules as they are. So is one asked about again after such an approval, approved as shown: it is
        # admitted from the person's arguments, and the hooks give again what the person was shown.
        edited = {slot for slot in todo if _person_input(records[slot]) is not None}
        planned = [
            ToolCall(records[slot].call_id, records[slot].name, _person_input(records[slot]))
            if slot in edited
            else slot_calls[slot]
            for slot in todo
        ]
        # A state's call IDs are unique, so the plan has one slot per call, in order.
        plan = plan_calls(settings, view, planned)
        if plan.repairs:
            turn.note_plan(plan)
        jobs: list[Job] = []
        for slot, turn_slot in enumerate(todo):
            if slot in plan.refused:
                kind, message = plan.refused[slot]
                if turn_slot in edited:
                    # The person's own arguments are never repaired: refused, the call does not run.
                    if kind == "invalid_input":
                        message = f"the arguments approved for this call are invalid, so it did not run: {message}"
                    await turn.answer(turn_slot, plan.calls[slot], plan.tool_name(view, slot), kind, message)
                    continue
                # Repaired when the run began: it is admitted from the arguments the state holds (those it was
                # admitted from, before hooks rewrote them; a state saved without them, those it was held with),
                # never repaired again.
                record = records[turn_slot]
                given = record.input_args if record.input_args is not None else record.request_args
                stored = stored_job(turn, plan, slot, turn_slot, given)
                if stored is None:
                    await turn.answer_refused(plan, slot, turn_slot)
                    continue
                jobs.append(stored)
            else:
                job = plan.job(view, slot, turn_slot)
                if journaled is not None and records[turn_slot].child is not None:
                    # A call whose nested run waited had started: it counts the starts its journal holds.
                    job.prior_attempts = journaled.call(job.call.id).starts
                    job.attempts = job.prior_attempts + 1
                jobs.append(job)
        carried = _carry_into(active_limits(), turn, slot_calls)
        return await self._drive(
            turn,
            fresh=jobs,
            held=[],
            slot_calls=slot_calls,
            duplicates=state.duplicates,
            steering=request.steering,
            prior=state,
            carried=carried,
        )

    async def _recover(self, request: RunRequest, force: bool) -> Outcome:
        """Finishes a journaled run from where its calls were left (see ``recover``)."""
        durable = request.durable
        assert durable is not None
        record = await durable.claim(force)
        view = self._current_view()
        settings = self._settings
        plan = plan_calls(settings, view, list(record.turn))
        turn = Turn(settings, view, len(plan), request.context, settings.emitter(None, None), self._runs, durable)
        if plan.repairs:
            turn.note_plan(plan)
        # The standing approvals journaled with the run's approvals hold for the rest of it, and a new wait's
        # state carries them on.
        standing = journaled_standing(record)
        fresh, ready, held, nested, approvals = await recovered_jobs(turn, plan, record, standing)
        limits = active_limits()
        carried = _carry_into(limits, turn, plan.calls)
        if limits is not None:
            # The calls that run now as admitted before the crash (approved, or started and run again) and the
            # external calls handed out count as made, whatever the caps say now; the calls never admitted are
            # held to what is left. A call still waiting for a person is held to the caps when it is resumed.
            admitted = [(job.slot, job.call.id, job.tool.name, job.args) for job in ready]
            # Approved with a person's arguments (admitted again to judge them): approved calls, counted so.
            admitted += [
                (job.slot, job.call.id, job.tool.name, job.args)
                for job in fresh
                if (approval := approvals.get(job.call.id)) is not None
                and approval.fingerprint == view.fingerprint(job.index)
            ]
            admitted += [(out.slot, plan.calls[out.slot].id, out.tool_name, out.args) for out in turn.external or ()]
            for _, call_id, tool_name, args in sorted(admitted, key=lambda entry: entry[0]):
                limits.admitted(call_id, tool_name, args, run=turn.run_identity())
        # Calls approved to resume their nested runs find them as ``resume`` sets them (``toolsched._executor.nested``).
        token = resuming.set(nested) if nested else None
        try:
            with standing_in_force(standing) if standing else contextlib.nullcontext():
                outcome = await self._drive(
                    turn,
                    fresh=fresh,
                    ready=ready,
                    held=held,
                    slot_calls=plan.calls,
                    duplicates=plan.duplicates,
                    steering=request.steering,
                    carried=carried,
                    approvals=approvals,
                    recovered=True,
                )
        finally:
            if token is not None:
                resuming.reset(token)
        return outcome

    async def _drive(
        self,
        turn: Turn,
        *,
        fresh: list[Job],
        slot_calls: list[ToolCall],
        duplicates: list[Duplicate] | None,
        steering: Steering | None,
        refused: Plan | None = None,
        ready: Sequence[Job] = (),
        held: list[Held] | None = None,
        prior: RunState | None = None,
        carried: set[str] | frozenset[str] = frozenset(),
        approvals: Mapping[str, CallRecord] | None = None,
        recovered: bool = False,
    ) -> Outcome:
        """What every entry path shares: answer what the engine refused (``refused``), admit the fresh
        calls, run them with the ready ones (``ready``), finish; ``held`` collects the calls held for a
        person, ``prior`` is the state a resumed turn came from, ``approvals`` the approvals a recovered run's
        journal holds for the fresh calls asked again, ``recovered`` whether the turn is a recovered run's. The
        run's ``Limits`` take its answers, but those ``carried`` from before (counted by ``_carry_into``), and
        count once each call a resumed or recovered run's ``Limits`` had counted before it stopped.
        ``duplicates`` is None when there are none: an empty list kept while the calls wait would be one more
        object per run for the collector to walk."""
        if refused is not None and not refused.refused:
            refused = None
        if refused is not None and turn.settings.repair_function is not None:
            # The repair function may take a while (it may ask a model): the run is in progress meanwhile, and
            # ``cancel``/``interrupt`` reach its calls, those being repaired included.
            turn.jobs = fresh
            turn.live.add(turn)
            try:
                fresh = await repair_refused(turn, refused, fresh)
            finally:
                turn.live.discard(turn)
        view = turn.view
        jobs = fresh
        limits = active_limits()
        if limits is not None and (jobs or refused is not None):
            # The calls to a tool that does not exist count too, in model order with the others.
            # A resumed or recovered run's calls that its ``Limits`` counted before it stopped are not counted again.
            jobs = await limit_jobs(jobs, turn, limits, resumed=prior is not None or recovered, refused=refused)
        if refused is not None:
            for slot in refused.refused:
                await turn.answer_refused(refused, slot)
        if (view.checks_input or view.admits) and jobs:
            # Admission awaits (input checks, hooks, a person's approval): the run is in progress meanwhile, and
            # ``cancel``/``interrupt`` reach its calls (a call cancelled or a run interrupted now never runs).
            turn.jobs = [*jobs, *ready] if ready else jobs
            turn.live.add(turn)
            try:
                if view.checks_input:
                    jobs = await check_semantics(jobs, turn)
                if view.admits and jobs:
                    if held is None:
                        held = []
                    jobs = await admit(jobs, turn, held, prior, approvals)
            finally:
                turn.live.discard(turn)
        if ready:
            jobs = sorted([*jobs, *ready], key=lambda job: job.slot)
        if watching_call.get() is None:
            steering_messages = await run_jobs(jobs, turn, steering)
        else:
            # A run inside a call (a nested run): its calls copy this context, and must not take that call for
            # theirs (``toolsched._backends.threads.unwatched``).
            token = watching_call.set(None)
            try:
                steering_messages = await run_jobs(jobs, turn, steering)
            finally:
                watching_call.reset(token)
        if turn.emit is not None:
            await turn.emit.flush()
        if duplicates is None:
            duplicates = []
        if not held and not turn.parked and not turn.external:
            outcome = new_outcome(turn.ordered(), duplicates, steering_messages, False, [], None, None)
        else:
            outcome = turn.finish(slot_calls, held or [], duplicates, steering_messages, prior)
        if limits is not None:
            _settle(limits, outcome, carried, turn)
        return outcome


def _settle(limits: Limits, outcome: Outcome, carried: set[str] | frozenset[str], turn: Turn) -> None:
    """The run's ``Limits`` take the outcome's answers but those ``carried`` from before. (Apart from ``_drive``:
    a comprehension there reading ``carried`` would make it a cell that every waiting run keeps.)"""
    answered = [result for result in outcome.results if result.call_id not in carried]
    limits.settle(answered, run=turn.run_identity())


async def _with_run_id(turn: Awaitable[Outcome], run_id: str) -> Outcome:
    """The outcome of ``turn`` (a run given its ID), carrying that ID."""
    return replace(await turn, run_id=run_id)


def _carry_into(limits: Limits | None, turn: Turn, calls: Sequence[ToolCall]) -> set[str]:
    """Counts the answers a resumed or recovered turn carries from before in ``limits``; their call IDs."""
    carried = turn.ordered_partial()
    if limits is not None:
        limits.carry(carried, calls, run=turn.run_identity())
    return {result.call_id for result in carried}


def _interrupt_turn(turn: Turn, suffix: str) -> None:
    """``interrupt`` of one run, on the run's event loop."""
    turn.stop_calls(
        f"not run: the user interrupted the run{suffix}",
        turn.jobs,
        f" because the user interrupted the run{suffix}",
    )
    for repairing in list(turn.repairs.values()) if turn.repairs else ():
        repairing.stop(None)  # not started: skipped, as the turn's other calls not started are


def _cancel_in_turn(turn: Turn, call_id: str, suffix: str) -> bool:
    """``cancel`` of one run's call ``call_id``, on the run's event loop: whether it will end cancelled."""
    stopped = False
    for job in turn.jobs:
        if job.call.id == call_id and job.state != DONE:
            stopped = job.cancel(f"`{job.tool.name}` was cancelled by the caller{suffix}") or stopped
    repairing = turn.repairs.get(call_id) if turn.repairs else None
    if repairing is not None:
        # Its arguments are being repaired: the repair ends, and the call never runs.
        repairing.stop(f"`{repairing.tool_name}` was cancelled by the caller{suffix}")
        stopped = True
    return stopped


def _stoppable_in_turn(turn: Turn, call_id: str) -> bool:
    """Whether ``_cancel_in_turn`` would stop the call ``call_id`` of a run on another thread, read from here."""
    repairs = turn.repairs
    if repairs and call_id in repairs:
        return True
    return any(job.call.id == call_id and job.stoppable() for job in tuple(turn.jobs))


def _check_steering(steering: object) -> None:
    """A steering callback given to a run: a callable (plain or async), checked before anything runs."""
    if not callable(steering):
        raise OptionError(f"steering must be a callable returning messages or None, got {steering!r}")


def _check_run_id(run_id: object) -> None:
    """A run ID given to ``run``, ``stream`` or ``turn``: non-empty text (a journal has limits of its own)."""
    if type(run_id) is not str or not run_id:
        raise OptionError(f"run_id must be a non-empty string, got {run_id!r}")


def _person_input(record: CallRecord) -> Any:
    """The arguments of a person's that a resumed call is admitted from (None: the model's): those it was approved
    with, else those it was admitted from when it asked again after such an approval."""
    if record.edited_args is not None:
        return record.edited_args
    return record.input_args if record.edited else None


def _edited(record: CallRecord) -> bool:
    """Whether a resumed call's answer says a person's arguments were involved (``ToolResult.edited``): it runs or
    is refused with them, or (an external call) was handed out with them. A rejection answers without them."""
    return record.edited_args is not None or (record.edited and record.status != "rejected")
