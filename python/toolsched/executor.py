"""The executor: runs a turn's plan on anyio and answers every call exactly once."""

from __future__ import annotations

import heapq
import inspect
import logging
import math
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from time import perf_counter
from typing import Any, Literal, cast

import anyio
import anyio.from_thread
import anyio.lowlevel

from toolsched import _core
from toolsched.approvals import (
    ApprovalRequest,
    Approver,
    CallRecord,
    ChildRecord,
    RunState,
    args_digest,
    detached,
    tool_fingerprint,
)
from toolsched.backends import Backend, assign_backends
from toolsched.context import ToolContext
from toolsched.durable import JournalFailed, RunJournal
from toolsched.errors import (
    GuardrailTripped,
    OptionError,
    SemanticError,
    ToolCallFailed,
    ToolTimeoutError,
    UnknownToolError,
)
from toolsched.events import (
    BatchFinished,
    BatchStarted,
    Event,
    RunFinished,
    ToolFinished,
    ToolProgress,
    ToolsChanged,
    ToolsRefreshFailed,
    ToolStarted,
    new_tool_finished,
    new_tool_started,
    under_parent,
)
from toolsched.guardrails import Guardrail, GuardrailEvent, Guardrails
from toolsched.hooks import (
    BatchEvent,
    Hook,
    Hooks,
    HookTimeout,
    Rewrite,
    ToolHooks,
    UpdateFilter,
    new_hook_event,
)
from toolsched.journal import Journal
from toolsched.nested import NestedHold, resuming
from toolsched.outcome import Outcome, new_outcome
from toolsched.permissions import Behavior, Decision, Permissions, ToolRules
from toolsched.pool import run_pool, run_until_suspended
from toolsched.registry import SEARCH_TOOL_NAME, ToolRegistry, ToolSet
from toolsched.resources import RunResources, current_resources
from toolsched.results import Duplicate, ErrorKind, ToolCall, ToolResult, new_result
from toolsched.shaping import fits_as_is, shape_output
from toolsched.strategies import Partitioned, Strategy, resolve_cap
from toolsched.tools import Access, Tool, ToolFacts

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
    hop back to the event loop first. The emitter of a nested run stamps each
    event with its parent call (``parent``).
    """

    __slots__ = ("_async_sinks", "_loop_thread", "_parent", "_plain_sinks", "pending")

    def __init__(self, sinks: Iterable[Callable[[Event], Any]], parent: str | None = None) -> None:
        self._parent = parent
        self._plain_sinks: list[Callable[[Event], Any]] = []
        self._async_sinks: list[Callable[[Event], Awaitable[Any]]] = []
        for sink in sinks:
            (self._async_sinks if inspect.iscoroutinefunction(sink) else self._plain_sinks).append(sink)
        # Events waiting for the async callbacks: ``flush`` delivers them (callers skip it while empty).
        self.pending: list[Event] = []
        self._loop_thread = threading.get_ident()

    def __call__(self, event: Event) -> None:
        if threading.get_ident() != self._loop_thread:
            anyio.from_thread.run_sync(self._deliver, event)
        else:
            self._deliver(event)

    def _deliver(self, event: Event) -> None:
        if self._parent is not None:
            event = under_parent(event, self._parent)
        for sink in self._plain_sinks:
            try:
                sink(event)
            except Exception:
                logger.exception("event callback %r failed on %r", sink, event)
        if self._async_sinks:
            self.pending.append(event)

    async def flush(self) -> None:
        while self.pending:
            event = self.pending.pop(0)
            for sink in self._async_sinks:
                try:
                    await sink(event)
                except Exception:
                    logger.exception("event callback %r failed on %r", sink, event)


_PlannedRow = tuple[int, int, Any, str | None, str | None]


def _planned_rows(
    prepared: tuple[list[int], list[Any], list[tuple[int, str, str]], list[int] | None, list[tuple[int, int, bool]]],
) -> list[_PlannedRow]:
    """``ToolTable.prepare``'s columns as one ``(index, tool, args, error_kind, message)`` row per planned call."""
    tool_rows, arg_rows, failures, positions, _ = prepared
    indices = range(len(tool_rows)) if positions is None else positions
    rows: list[_PlannedRow] = [
        (index, tool, args, None, None) for index, tool, args in zip(indices, tool_rows, arg_rows, strict=True)
    ]
    for slot, error_kind, message in failures:
        rows[slot] = (rows[slot][0], rows[slot][1], None, error_kind, message)
    return rows


def _duplicates(calls: list[ToolCall], rows: list[tuple[int, int, bool]]) -> list[Duplicate]:
    return [Duplicate(calls[index].id, index, first, differ) for index, first, differ in rows]


def _judge_call(
    job: _Job, static: bool | None, judge: Callable[[Any], bool], if_it_raises: bool, consequence: str
) -> bool:
    """A per-call flag: the tool's constant when it has one, else its judgement of the
    arguments; a judgement that raises counts as the fail-closed answer."""
    if static is not None:
        return static
    try:
        return bool(judge(job.args))
    except Exception:
        logger.warning("%s of %s raised; %s", judge.__name__, job.tool.name, consequence, exc_info=True)
        return if_it_raises


class _Job:
    """One runnable call of a turn (internal, mutable while the turn runs)."""

    __slots__ = (
        "args",
        "call",
        "cancel_reason",
        "ctx",
        "declared",
        "facts",
        "index",
        "scope",
        "slot",
        "state",
        "tool",
    )

    def __init__(self, slot: int, call: ToolCall, tool: Tool, facts: ToolFacts, args: Any, index: int) -> None:
        self.slot = slot
        self.call = call
        self.tool = tool
        self.facts = facts
        self.args = args
        self.index = index
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


class _Policy:
    """What admission must do for one tool, worked out once per executor (internal).

    ``admit`` is False when nothing can stop or ask about the tool's calls:
    they go straight to scheduling.
    """

    __slots__ = ("admit", "hooks", "post_failure", "post_success", "pre", "refuse_interaction", "rules", "update")

    def __init__(self, rules: ToolRules | None, hooks: ToolHooks | None, refuse_interaction: bool, admit: bool) -> None:
        self.rules = rules
        self.hooks = hooks
        self.pre: tuple[Hook, ...] = hooks.pre if hooks is not None else ()
        self.post_success: tuple[Hook, ...] = hooks.post_success if hooks is not None else ()
        self.post_failure: tuple[Hook, ...] = hooks.post_failure if hooks is not None else ()
        self.update: tuple[Hook, ...] = hooks.update if hooks is not None else ()
        self.refuse_interaction = refuse_interaction
        self.admit = admit


class _View:
    """What an executor works out for one tool set of its registry (internal, fixed once built).

    A turn takes the view current when it starts and uses it to the end, so
    a tool set that changes meanwhile never mixes into a running turn. A view
    is rebuilt only when the registry's set changes; loading deferred tools
    keeps the compiled table, and with it every tool's policy.
    """

    __slots__ = (
        "admits",
        "checks_input",
        "facts",
        "fingerprints",
        "plain",
        "policies",
        "post_hooked",
        "resourceful",
        "table",
        "tools",
        "toolset",
        "update_hooked",
    )

    tools: tuple[Tool, ...]
    facts: tuple[ToolFacts, ...]
    policies: tuple[_Policy, ...]
    admits: bool
    checks_input: bool
    post_hooked: bool
    update_hooked: bool
    resourceful: bool
    fingerprints: dict[int, str]

    def __init__(self, executor: Executor, toolset: ToolSet, previous: _View | None) -> None:
        self.toolset = toolset
        self.table = toolset.table
        if previous is not None and previous.table is toolset.table:
            for name in (
                "tools",
                "facts",
                "policies",
                "admits",
                "checks_input",
                "post_hooked",
                "update_hooked",
                "resourceful",
            ):
                setattr(self, name, getattr(previous, name))
            self.fingerprints = previous.fingerprints
        else:
            self.tools = toolset.tools
            self.facts = tuple(member._facts() for member in self.tools)
            if executor._backends is not None or executor._default_backend is not None:
                executor._remote.update(
                    assign_backends(self.tools, executor._backends, executor._default_backend)
                )
            reused: dict[int, tuple[Tool, _Policy]] = {}
            if previous is not None:
                reused = {
                    id(member): (member, policy)
                    for member, policy in zip(previous.tools, previous.policies, strict=True)
                }
            policies = []
            for member, facts in zip(self.tools, self.facts, strict=True):
                known = reused.get(id(member))
                policies.append(known[1] if known is not None else executor._policy(member, facts))
            self.policies = tuple(policies)
            self.admits = any(policy.admit for policy in policies)
            self.checks_input = any(facts.validates_input for facts in self.facts)
            self.post_hooked = any(policy.post_success or policy.post_failure for policy in policies)
            self.update_hooked = any(policy.update for policy in policies)
            self.resourceful = any(facts.run_resource is not None for facts in self.facts)
            self.fingerprints = {}
        # Runs that need nothing around them: no per-run resources, no refresh afterwards.
        self.plain = not self.resourceful and executor.registry._source is None

    def fingerprint(self, index: int) -> str:
        fingerprint = self.fingerprints.get(index)
        if fingerprint is None:
            fingerprint = tool_fingerprint(self.tools[index])
            self.fingerprints[index] = fingerprint
        return fingerprint


class _Held:
    """A call waiting for a person's decision (internal)."""

    __slots__ = ("digest", "fingerprint", "job", "reason")

    def __init__(self, job: _Job, reason: str, digest: str, fingerprint: str) -> None:
        self.job = job
        self.reason = reason
        self.digest = digest
        self.fingerprint = fingerprint


class _Rejected(Exception):
    """A guardrail refused a call (internal)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _Turn:
    """Results of one run as they complete, and what the run's calls can see."""

    __slots__ = (
        "abort",
        "batch",
        "completed",
        "context",
        "count",
        "durable",
        "emit",
        "failures",
        "halt",
        "interactive",
        "jobs",
        "parked",
        "scoped",
        "slots",
        "tripped",
        "view",
    )

    def __init__(self, count: int, context: Any, interactive: bool, emit: _Emitter | None, view: _View) -> None:
        self.count = count
        self.context = context
        self.interactive = interactive
        self.emit = emit
        self.view = view
        self.completed: list[ToolResult] = []
        self.slots: list[int] = []
        self.tripped: GuardrailTripped | None = None
        # Calls whose nested runs wait for approvals: (job, the nested run's record); None when none do.
        self.parked: list[tuple[_Job, ChildRecord]] | None = None
        # The run's journal when the run is durable: every answer is journaled before it is recorded.
        self.durable: RunJournal | None = None
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

    def carry(self, slot: int, result: ToolResult) -> None:
        """Takes over a result from an earlier part of the run (no events: it was reported then)."""
        self.completed.append(result)
        self.slots.append(slot)

    def record(self, slot: int, result: ToolResult) -> None:
        self.completed.append(result)
        self.slots.append(slot)
        if self.emit is not None:
            self.emit(ToolFinished(result))

    async def answer(
        self, slot: int, call: ToolCall, tool_name: str, kind: ErrorKind, message: str, batch: int | None = None
    ) -> None:
        """Answers a call that does not run with an error result (journaled first in a durable run)."""
        result = new_result(call.id, tool_name, None, message, kind, True, 0.0, False, batch, False, None)
        if self.durable is not None:
            await self.durable.finished(result)
        if self.emit is not None:
            self.emit(ToolStarted(call.id, tool_name, batch, ran=False))
        self.record(slot, result)

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
      or for progress only; ``on_event`` may be a list of callbacks, each called in turn;
    - ``on_error``: ``"result"`` (a failed tool becomes an ``execution_error``
      result) or ``"raise"`` (``ToolCallFailed`` once the failing batch settles);
    - ``abort_siblings_on_error``: a failure cancels the rest of its batch, for
      every tool (each tool can also ask for it with its own flag);
    - ``unknown_tool``: ``"result"`` or ``"raise"`` (``UnknownToolError``);
    - ``max_input_bytes`` / ``max_input_depth`` / ``max_schema_errors``: argument limits;
    - ``interactive``: whether a person is present (``ToolContext.interactive``);
    - ``offload_dir``: where ``truncate="offload"`` writes full outputs;
    - ``error_formatter``: ``(exception, call) -> message`` for failed tools
      (if it fails, the default message is used);
    - ``permissions``: a ``Permissions`` (rules and mode) deciding which calls run;
    - ``hooks``: a ``Hooks`` registry (pre/post call, pre/post batch);
    - ``approver``: ``async (ApprovalRequest) -> bool | Decision`` for calls that
      ask; without one such calls are held and the run ends ``interrupted``;
    - ``input_guardrails`` / ``output_guardrails``: checks just before a call
      runs and on its output (see ``toolsched.guardrails``);
    - ``backends`` / ``default_backend``: where tool bodies run besides this
      process, by name (``{"ray": RayBackend()}``), and the backend of tools
      that name none (default ``"local"``);
    - ``journal``: a ``Journal`` (``SqliteJournal``, ``PostgresJournal``) that makes
      runs durable: each call's transitions are written before the run goes on,
      and ``recover(run_id)`` finishes a run after a crash.

    Each run uses the registry's tool set as it is when the run starts; a
    registry with ``refresh_tools`` is refreshed after each run's results are
    complete (``ToolsChanged`` / ``ToolsRefreshFailed`` events), so the next
    run sees the new set. Tools with per-run resources (``toolsched.resources``)
    have them opened by the run on first use and closed when it ends; agent
    tools (``toolsched.nested``) run child executors inside their calls.
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
    ) -> None:
        if journal is not None and not isinstance(journal, Journal):
            raise OptionError(f"journal must be a toolsched.Journal (SqliteJournal, PostgresJournal), got {journal!r}")
        self.journal = journal
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
        if isinstance(on_event, (list, tuple)):
            on_event = tuple(on_event)
            if not all(callable(sink) for sink in on_event):
                raise OptionError(f"on_event must be a callable or a list of callables, got {on_event!r}")
        elif on_event is not None and not callable(on_event):
            raise OptionError(f"on_event must be a callable or a list of callables, got {on_event!r}")
        self.on_event: EventCallback | tuple[EventCallback, ...] | None = on_event
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
        # The invoker of each tool whose body runs on a backend other than this process;
        # extended whenever a refreshed tool set brings new tools (see _View).
        self._backends = backends
        self._default_backend = default_backend
        self._remote = assign_backends(tuple(self.registry), backends, default_backend)
        self._control_plane(permissions, hooks, approver, input_guardrails, output_guardrails)
        self._view = _View(self, self.registry._set, None)
        # Runs executing on this executor now, for ``interrupt`` and ``cancel``.
        self._runs: set[_Turn] = set()

    def _control_plane(
        self,
        permissions: Permissions | None,
        hooks: Hooks | None,
        approver: Approver | None,
        input_guardrails: Iterable[Guardrail],
        output_guardrails: Iterable[Guardrail],
    ) -> None:
        """Checks the permission, hook, approval and guardrail options and precomputes each tool's policy."""
        if permissions is not None and not isinstance(permissions, Permissions):
            raise OptionError(f"permissions must be a toolsched.Permissions, got {permissions!r}")
        if hooks is not None and not isinstance(hooks, Hooks):
            raise OptionError(f"hooks must be a toolsched.Hooks, got {hooks!r}")
        if approver is not None and not callable(approver):
            raise OptionError(f"approver must be an async callable of an ApprovalRequest, got {approver!r}")
        self.permissions = permissions
        self.hooks = hooks
        self.approver = approver
        checks_in, checks_out = Guardrails("input", input_guardrails), Guardrails("output", output_guardrails)
        self._input_guardrails: Guardrails | None = checks_in if checks_in else None
        self._output_guardrails: Guardrails | None = checks_out if checks_out else None
        self._mode = permissions.mode if permissions is not None else "default"
        self._pre_batch = hooks.batch_hooks("pre_batch") if hooks is not None else ()
        self._post_batch = hooks.batch_hooks("post_batch") if hooks is not None else ()

    def _policy(self, member: Tool, facts: ToolFacts) -> _Policy:
        """What admission must do for one tool: its rules, its hooks, whether it can be stopped or asked about."""
        permissions, hooks = self.permissions, self.hooks
        rules = permissions.for_tool(member) if permissions is not None else None
        tool_hooks = hooks.for_tool((member.name, *member.aliases)) if hooks is not None else None
        refuse_interaction = member.requires_user_interaction and not self.interactive
        asks = facts.static_needs_approval is not False and self._mode != "bypass"
        admit = bool(
            refuse_interaction
            or rules is not None
            or (tool_hooks is not None and tool_hooks.pre)
            or self._mode not in ("default", "bypass")
            or facts.checks_permissions
            or asks
        )
        return _Policy(rules, tool_hooks, refuse_interaction, admit)

    def _current_view(self) -> _View:
        """The view of the registry's tool set as it is now (rebuilt only when the set changed)."""
        view = self._view
        toolset = self.registry._set
        if view.toolset is not toolset:
            view = self._view = _View(self, toolset, view)
        return view

    # -- public API -------------------------------------------------------------

    async def run(
        self,
        calls: Iterable[ToolCall],
        *,
        steering: Steering | None = None,
        context: Any = None,
        run_id: str | None = None,
    ) -> Outcome:
        """Runs a turn's calls; returns one result per unique call ID, in model order.

        The turn uses the registry's tool set as it is when the turn starts.
        With a registry that has ``refresh_tools``, the set is refreshed once
        the results are complete, before this returns.

        With a journal, the run is journaled under ``run_id`` (a new one when
        not given; ``Outcome.run_id``): ``RunExistsError`` for an ID already in
        the journal, and a ``JournalError`` raised when the journal fails mid-run.
        """
        if self.journal is not None:
            durable = RunJournal(self.journal, uuid.uuid4().hex if run_id is None else run_id)
            return await self._journaled(
                durable, lambda: self._start(calls, None, steering, context, None, None, durable)
            )
        view = self._current_view()
        if view.plain:
            outcome = await self._run(calls, steering, context, None, view, None)
        else:
            outcome = await self._start(calls, None, steering, context, None, None)
        return outcome if run_id is None else replace(outcome, run_id=run_id)

    async def recover(
        self,
        run_id: str,
        *,
        steering: Steering | None = None,
        context: Any = None,
        force: bool = False,
    ) -> Outcome:
        """Finishes a journaled run after a crash and returns its outcome, in model order.

        Calls that finished are answered from the journal and never run again.
        A call that started but did not finish runs again only if its tool is
        ``idempotent``; otherwise it gets an ``interrupted`` error result (its
        outcome is unknown). Calls approved or still waiting for a person keep
        that decision; calls that never started run as they would have.

        Raises ``UnknownRunError`` for a run the journal does not have and
        ``RunClaimedError`` while another process holds the run (``force=True``
        takes it from a holder known to be dead).
        """
        if self.journal is None:
            raise OptionError("recover() needs an executor built with journal=")
        durable = RunJournal(self.journal, run_id)
        return await self._journaled(durable, lambda: self._recover(durable, force, steering, context))

    async def _journaled(self, durable: RunJournal, body: Callable[[], Awaitable[Outcome]]) -> Outcome:
        """Runs a durable run's ``body``, then releases the run; a journal failure is raised as itself."""
        try:
            outcome = await body()
        except Exception:
            if durable.failure is not None:
                raise durable.failure from None
            raise
        finally:
            await durable.release()
        if durable.failure is not None:
            raise durable.failure
        return replace(outcome, run_id=durable.run_id)

    async def stream(
        self,
        calls: Iterable[ToolCall],
        *,
        steering: Steering | None = None,
        context: Any = None,
    ) -> AsyncIterator[Event]:
        """Runs a turn, yielding its events as they happen; the last is ``RunFinished``.

        Leaving the loop early cancels the run (wrap in ``contextlib.aclosing``
        to make that prompt). With a journal the run is durable, as with ``run``
        (its ID is ``RunFinished.outcome.run_id``).
        """
        send, receive = anyio.create_memory_object_stream[Event](max_buffer_size=math.inf)
        failure: list[BaseException] = []

        async def drive() -> None:
            async with send:
                try:
                    if self.journal is not None:
                        durable, sink = RunJournal(self.journal, uuid.uuid4().hex), send.send_nowait
                        outcome = await self._journaled(
                            durable, lambda: self._start(calls, None, steering, context, sink, None, durable)
                        )
                    else:
                        outcome = await self._start(calls, None, steering, context, send.send_nowait, None)
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
        Returns how many runs it reached (runs that are executing their calls).
        Call it from the event loop's thread.
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

    async def resume(
        self,
        state: RunState,
        *,
        steering: Steering | None = None,
        context: Any = None,
    ) -> Outcome:
        """Continues an interrupted run from its ``RunState``; returns every result, in model order.

        Calls that completed are never run again; rejected calls are answered
        ``permission_denied``; every other call is checked again against the
        current tools, rules and hooks before it runs. An approval holds only
        for the same tool and the same final arguments: otherwise the call is
        asked again. A state resumes once (``StateError`` after that).
        """
        if not isinstance(state, RunState):
            raise TypeError(f"resume() takes the RunState of an interrupted run, got {type(state).__name__}")
        if self.journal is not None and state._run_id is not None:
            durable = RunJournal(self.journal, state._run_id)
            return await self._journaled(
                durable, lambda: self._start(None, state, steering, context, None, None, durable)
            )
        return await self._start(None, state, steering, context, None, None)

    async def _start(
        self,
        calls: Iterable[ToolCall] | None,
        state: RunState | None,
        steering: Steering | None,
        context: Any,
        sink: Callable[[Event], Any] | None,
        parent: str | None,
        durable: RunJournal | None = None,
    ) -> Outcome:
        """Runs a turn (``calls``) or resumes one (``state``) with what surrounds it.

        Around: the run's per-run resources, and the nested runs it resumes.
        After: the registry's refresh, once the results are complete.
        ``sink`` receives the events too; ``parent`` is the parent call of a nested run.
        """
        view = self._current_view()
        children = state._children() if state is not None else None
        try:
            if view.resourceful or children:
                outcome = await self._scoped(calls, state, steering, context, sink, parent, view, children, durable)
            elif state is None:
                assert calls is not None
                outcome = await self._run(calls, steering, context, sink, view, parent, durable)
            else:
                outcome = await self._resume(state, steering, context, sink, view, parent, durable)
        except Exception:
            # A run that raises (on_error="raise", a tripped guardrail) has its results too: refresh all the same.
            if self.registry._source is not None:
                await self._refresh(sink, parent)
            raise
        if self.registry._source is not None:
            await self._refresh(sink, parent)
        return outcome

    async def _scoped(
        self,
        calls: Iterable[ToolCall] | None,
        state: RunState | None,
        steering: Steering | None,
        context: Any,
        sink: Callable[[Event], Any] | None,
        parent: str | None,
        view: _View,
        children: dict[str, CallRecord] | None,
        durable: RunJournal | None = None,
    ) -> Outcome:
        """A run with per-run resources (opened on first use, closed when it ends) or nested runs to resume."""
        resumed = resuming.set(children) if children else None
        try:
            if not view.resourceful:
                if state is None:
                    assert calls is not None
                    return await self._run(calls, steering, context, sink, view, parent, durable)
                return await self._resume(state, steering, context, sink, view, parent, durable)
            failure: Exception | None = None
            outcome: Outcome | None = None
            async with anyio.create_task_group() as group:
                resources = RunResources(group, context)
                token = current_resources.set(resources)
                try:
                    if state is None:
                        assert calls is not None
                        outcome = await self._run(calls, steering, context, sink, view, parent, durable)
                    else:
                        outcome = await self._resume(state, steering, context, sink, view, parent, durable)
                except Exception as exc:
                    # Raised after the task group, which would wrap it: the resources close first.
                    failure = resources.error = exc
                except BaseException as exc:
                    resources.error = exc
                    raise
                finally:
                    current_resources.reset(token)
                    resources.close()
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
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            logger.warning("refreshing the tool set failed; the previous set stays", exc_info=True)
            event: Event = ToolsRefreshFailed(detail)
        else:
            if not changed:
                return
            after = {member.name for member in self.registry}
            event = ToolsChanged(tuple(sorted(after - before)), tuple(sorted(before - after)))
        emit = self._emitter(sink, parent)
        if emit is not None:
            emit(event)
            await emit.flush()

    async def _resume(
        self,
        state: RunState,
        steering: Steering | None,
        context: Any,
        sink: Callable[[Event], Any] | None,
        view: _View,
        parent: str | None,
        durable: RunJournal | None = None,
    ) -> Outcome:
        records = state._claim()
        if durable is not None:
            await self._journal_resumed(durable, records)
        cap = resolve_cap(self.strategy)
        emit = self._emitter(sink, parent)
        turn = _Turn(len(records), context, self.interactive, emit, view)
        turn.durable = durable
        slot_calls = [ToolCall(record.call_id, record.name, record.args) for record in records]
        todo: list[int] = []
        for slot, record in enumerate(records):
            if record.result is not None:
                turn.carry(slot, record.result)
            elif record.status == "rejected":
                name = record.tool or record.name
                await turn.answer(
                    slot, slot_calls[slot], name, "permission_denied", _not_approved(name, record.message)
                )
            else:
                todo.append(slot)
        calls = [slot_calls[slot] for slot in todo]
        tools, facts = view.tools, view.facts
        planned = _planned_rows(view.table.prepare(calls, view.toolset.disabled_mask(), **self._limits))
        jobs: list[_Job] = []
        for (index, tool_index, args, error_kind, message) in planned:
            slot, call = todo[index], calls[index]
            if error_kind is None:
                jobs.append(_Job(slot, call, tools[tool_index], facts[tool_index], args, tool_index))
                continue
            message = message or ""
            if error_kind == "unknown_tool":
                message = _unavailable(view, call.name, message)
                if self.unknown_tool == "raise":
                    raise UnknownToolError(message, call_id=call.id, tool_name=call.name)
            name = tools[tool_index].name if tool_index >= 0 else call.name
            await turn.answer(slot, call, name, cast(ErrorKind, error_kind), message)
        jobs = await self._check_semantics(jobs, turn)
        held: list[_Held] = []
        if jobs:
            jobs = await self._admit(jobs, turn, held, state)
        steering_messages = await self._run_batches(jobs, turn, cap, steering)
        if emit is not None:
            await emit.flush()
        duplicates = list(state._duplicates)
        if held or turn.parked:
            return self._interrupted(slot_calls, turn, held, duplicates, steering_messages, state)
        return new_outcome(turn.ordered(), duplicates, steering_messages, False, [], None, None)

    # -- durable runs -------------------------------------------------------------

    @staticmethod
    async def _journal_resumed(durable: RunJournal, records: list[CallRecord]) -> None:
        """Claims a journaled run being resumed and journals the decisions a person made since."""
        await durable.claim(False)
        for record in records:
            if record.status == "approved":
                await durable.write(record.call_id, "approved", {"args": record.request_args, "digest": record.digest})
            elif record.status == "rejected":
                await durable.write(record.call_id, "rejected", {"message": record.message})

    @staticmethod
    async def _journal_decision(
        durable: RunJournal, job: _Job, behavior: Behavior, message: str | None, held: list[_Held]
    ) -> None:
        """Journals how a call that asked was settled: held for a person, approved, or rejected."""
        if behavior == "ask":
            entry = held[-1]
            payload = {
                "args": detached(job.args),
                "reason": entry.reason,
                "digest": entry.digest,
                "fingerprint": entry.fingerprint,
            }
            await durable.write(job.call.id, "pending", payload)
        elif behavior == "allow":
            await durable.write(job.call.id, "approved", {"args": detached(job.args), "digest": args_digest(job.args)})
        else:
            await durable.write(job.call.id, "rejected", {"message": message})

    async def _recover(
        self, durable: RunJournal, force: bool, steering: Steering | None, context: Any
    ) -> Outcome:
        """Finishes a journaled run from where its calls were left (see ``recover``)."""
        record = await durable.claim(force)
        view = self._current_view()
        calls = list(record.turn)
        prepared = view.table.prepare(calls, view.toolset.disabled_mask(), **self._limits)
        planned, duplicate_rows = _planned_rows(prepared), prepared[4]
        emit = self._emitter(None, None)
        turn = _Turn(len(planned), context, self.interactive, emit, view)
        turn.durable = durable
        tools, facts = view.tools, view.facts
        entries = {entry.call_id: entry for entry in record.calls}
        fresh: list[_Job] = []
        ready: list[_Job] = []
        held: list[_Held] = []
        for slot, (index, tool_index, args, error_kind, message) in enumerate(planned):
            call = calls[index]
            entry = entries[call.id]
            if entry.result is not None:
                turn.carry(slot, entry.result)
                continue
            if error_kind is not None and entry.state == "started":
                # Started with a tool that is gone now: whether it is idempotent cannot be known.
                await turn.answer(slot, call, call.name, "interrupted", _unknown_outcome(call.name))
                continue
            if error_kind is not None:
                # The tool set changed since the crash: the call is answered as it would be now.
                text = _unavailable(view, call.name, str(message)) if error_kind == "unknown_tool" else str(message)
                name = tools[tool_index].name if tool_index >= 0 else call.name
                await turn.answer(slot, call, name, cast(ErrorKind, error_kind), text)
                continue
            tool = tools[tool_index]
            job = _Job(slot, call, tool, facts[tool_index], args, tool_index)
            decision = entry.decision or {}
            if entry.state == "planned":
                fresh.append(job)
            elif entry.state == "rejected":
                refusal = _not_approved(tool.name, decision.get("message"))
                await turn.answer(slot, call, tool.name, "permission_denied", refusal)
            elif entry.state == "pending":
                job.args = decision.get("args", args)
                fingerprint = str(decision.get("fingerprint", view.fingerprint(tool_index)))
                digest = str(decision.get("digest", args_digest(job.args)))
                held.append(_Held(job, str(decision.get("reason", "")), digest, fingerprint))
            elif entry.state == "approved":
                job.args = decision.get("args", args)
                ready.append(job)
            elif tool.idempotent:
                run_with = entry.run_with or {}
                job.args = run_with.get("args", args)
                ready.append(job)
            else:
                await turn.answer(slot, call, tool.name, "interrupted", _unknown_outcome(tool.name))
        jobs = await self._check_semantics(fresh, turn)
        if view.admits and jobs:
            jobs = await self._admit(jobs, turn, held, None)
        if ready:
            jobs = sorted(jobs + ready, key=lambda job: job.slot)
        steering_messages = await self._run_batches(jobs, turn, resolve_cap(self.strategy), steering)
        if emit is not None:
            await emit.flush()
        duplicates = _duplicates(calls, duplicate_rows) if duplicate_rows else []
        if held or turn.parked:
            slot_calls = [calls[row[0]] for row in planned]
            return self._interrupted(slot_calls, turn, held, duplicates, steering_messages, None)
        return new_outcome(turn.ordered(), duplicates, steering_messages, False, [], None, None)

    # -- the pipeline -------------------------------------------------------------

    def _emitter(self, extra: Callable[[Event], Any] | None, parent: str | None = None) -> _Emitter | None:
        if extra is None and self.on_event is None and self.on_progress is None:
            return None
        sinks: list[Callable[[Event], Any]] = []
        if isinstance(self.on_event, (list, tuple)):
            sinks.extend(self.on_event)
        elif self.on_event is not None:
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
        return _Emitter(sinks, parent) if sinks else None

    async def _run(
        self,
        calls: Iterable[ToolCall],
        steering: Steering | None,
        context: Any,
        extra_sink: Callable[[Event], Any] | None,
        view: _View,
        parent: str | None,
        durable: RunJournal | None = None,
    ) -> Outcome:
        calls = calls if isinstance(calls, list) else list(calls)
        for position, call in enumerate(calls):
            if not isinstance(call, ToolCall):
                raise TypeError(f"calls[{position}] must be a ToolCall, got {type(call).__name__}")
        if durable is not None:
            await durable.begin(calls)
        cap = resolve_cap(self.strategy)
        tool_rows, arg_rows, failures, positions, duplicate_rows = view.table.prepare(
            calls, view.toolset.disabled_mask(), **self._limits
        )
        emit = self._emitter(extra_sink, parent)
        turn = _Turn(len(tool_rows), context, self.interactive, emit, view)
        turn.durable = durable
        tools, facts = view.tools, view.facts
        slot_calls = calls if positions is None else [calls[index] for index in positions]
        if failures:
            refused = {failure[0] for failure in failures}
            jobs = [
                _Job(slot, slot_calls[slot], tools[tool_index], facts[tool_index], args, tool_index)
                for slot, (tool_index, args) in enumerate(zip(tool_rows, arg_rows, strict=True))
                if slot not in refused
            ]
            for slot, error_kind, message in failures:
                call = slot_calls[slot]
                if error_kind == "unknown_tool":
                    message = _unavailable(view, call.name, message)
                    if self.unknown_tool == "raise":
                        raise UnknownToolError(message, call_id=call.id, tool_name=call.name)
                tool_index = tool_rows[slot]
                name = tools[tool_index].name if tool_index >= 0 else call.name
                await turn.answer(slot, call, name, cast(ErrorKind, error_kind), message)
        else:
            jobs = []
            for slot, call in enumerate(slot_calls):
                tool_index = tool_rows[slot]
                jobs.append(_Job(slot, call, tools[tool_index], facts[tool_index], arg_rows[slot], tool_index))
        duplicates = _duplicates(calls, duplicate_rows) if duplicate_rows else []

        if view.checks_input:
            jobs = await self._check_semantics(jobs, turn)
        held: list[_Held] = []
        if view.admits and jobs:
            jobs = await self._admit(jobs, turn, held, None)
        steering_messages = await self._run_batches(jobs, turn, cap, steering)
        if emit is not None:
            await emit.flush()
        if held or turn.parked:
            return self._interrupted(slot_calls, turn, held, duplicates, steering_messages, None)
        return new_outcome(turn.ordered(), duplicates, steering_messages, False, [], None, None)

    def _context(self, job: _Job, turn: _Turn, cancel_call: Callable[[str], object] | None = None) -> ToolContext:
        emit: Callable[[Event], None] | None = turn.emit
        if turn.view.update_hooked:
            hooks = turn.view.policies[job.index].update
            if hooks:
                emit = UpdateFilter(hooks, emit)
        return ToolContext(job.call.id, job.tool.name, turn.context, turn.interactive, emit, cancel_call)

    async def _check_semantics(self, jobs: list[_Job], turn: _Turn) -> list[_Job]:
        """Phase 3: each tool's ``validate_input``; a refusal answers the call."""
        if not turn.view.checks_input:
            return jobs
        passed = []
        for job in jobs:
            if job.facts.validates_input:
                try:
                    await job.tool.validate_input(job.args, self._context(job, turn))
                except SemanticError as exc:
                    await turn.answer(job.slot, job.call, job.tool.name, "semantic_error", str(exc))
                    continue
                except Exception as exc:
                    message = f"input check of `{job.tool.name}` failed: {format_error(exc, job.call)}"
                    await turn.answer(job.slot, job.call, job.tool.name, "semantic_error", message)
                    continue
            passed.append(job)
        return passed

    def _batches(self, jobs: list[_Job], cap: int) -> list[tuple[int, int, int]]:
        strategy = self.strategy
        if len(jobs) <= 1:
            return [(0, len(jobs), 1)] if jobs else []
        if strategy.kind == "partitioned":
            # Most tools declare a constant: the tool is asked only when it judges its arguments.
            safe = [
                job.facts.static_safe if job.facts.static_safe is not None else self._is_safe(job) for job in jobs
            ]
        else:
            safe = [False] * len(jobs)
        size = getattr(strategy, "size", 1)
        batches: list[tuple[int, int, int]] = _core.plan_batches(strategy.kind, safe, max_concurrency=cap, size=size)
        return batches

    @staticmethod
    def _is_safe(job: _Job) -> bool:
        return _judge_call(job, job.facts.static_safe, job.tool.is_concurrency_safe, False, "running the call alone")

    async def _run_batches(
        self, jobs: list[_Job], turn: _Turn, cap: int, steering: Steering | None
    ) -> list[Any]:
        """Runs the admitted calls; meanwhile the run can be interrupted and its calls cancelled.

        ``ResourceAware`` runs them as a graph; every other strategy runs its
        planned batches one after another, with steering and interrupts
        checked between them.
        """
        turn.jobs = jobs
        self._runs.add(turn)
        try:
            if len(jobs) == 1 and turn.emit is None and not self._pre_batch and not self._post_batch:
                # One call, no batch hooks, no events: batch 0 without the batch bookkeeping.
                # Nothing has awaited since the run was registered, so no interrupt can be pending.
                turn.batch = jobs
                await self._execute(jobs[0], 0, False, turn)
                if turn.tripped is not None:
                    raise self._trip(turn)
                if turn.failures is not None:
                    await self._raise_failure([], turn, turn.failures)
                return []
            if self.strategy.kind == "resource_aware":
                return await self._run_graph(jobs, turn, cap, steering)
            for number, (start, end, concurrency) in enumerate(self._batches(jobs, cap)):
                if turn.halt is not None:
                    await self._answer_unstarted(jobs[start:], turn, "skipped", turn.halt)
                    return []
                if number and steering is not None:
                    messages = await _maybe_await(steering())
                    if messages:
                        await self._answer_unstarted(jobs[start:], turn, "skipped", _SKIPPED)
                        return list(messages)
                batch = jobs[start:end]
                concurrent = concurrency > 1 and len(batch) > 1
                turn.batch = batch
                turn.scoped = concurrent and (
                    self.abort_siblings_on_error or any(job.tool.abort_siblings_on_error for job in batch)
                )
                if turn.emit is not None:
                    turn.emit(BatchStarted(number, tuple(job.call.id for job in batch), concurrent))
                blocked = await self._before_batch(batch, number, concurrent, turn) if self._pre_batch else None
                if blocked is not None:
                    await self._answer_unstarted(batch, turn, "hook_blocked", blocked, number)
                elif concurrent:
                    await self._run_pool(batch, concurrency, number, turn)
                else:
                    for job in batch:
                        await self._execute(job, number, False, turn)
                turn.abort = None
                turn.scoped = False
                if self._post_batch:
                    await self._after_batch(batch, number, concurrent, turn)
                if turn.emit is not None:
                    turn.emit(BatchFinished(number, tuple(job.call.id for job in batch)))
                    if turn.emit.pending:
                        await turn.emit.flush()
                if turn.tripped is not None:
                    raise self._trip(turn)
                if turn.failures is not None:
                    await self._raise_failure(jobs[end:], turn, turn.failures)
            return []
        finally:
            self._runs.discard(turn)

    async def _answer_unstarted(
        self, jobs: list[_Job], turn: _Turn, kind: ErrorKind, message: str, batch: int | None = None
    ) -> None:
        """Answers calls that will not run; one cancelled on its own keeps its own reason."""
        for job in jobs:
            job.state = _DONE
            if job.cancel_reason is not None:
                await turn.answer(job.slot, job.call, job.tool.name, "cancelled", job.cancel_reason, batch)
            else:
                await turn.answer(job.slot, job.call, job.tool.name, kind, message, batch)

    async def _raise_failure(
        self, rest: list[_Job], turn: _Turn, failures: list[tuple[int, ToolResult, BaseException | None]]
    ) -> None:
        """Ends a run whose batch had a raising failure: the first in model order is raised.

        The calls that did not start are answered as skipped first, so the
        error carries a result for every call.
        """
        failures = sorted(failures, key=lambda failure: failure[0])
        _, first, cause = failures[0]
        reason = f"not run: call {first.call_id} (`{first.tool_name}`) failed"
        await self._answer_unstarted(rest, turn, "skipped", reason)
        if turn.emit is not None:
            await turn.emit.flush()
        error = ToolTimeoutError if first.error_kind == "timeout" else ToolCallFailed
        raise error(first, [failure[1] for failure in failures[1:]], turn.ordered_partial()) from cause

    async def _run_pool(self, batch: list[_Job], concurrency: int, number: int, turn: _Turn) -> None:
        """Runs a concurrent batch on a pool that grows only when calls wait."""
        await run_pool(batch, concurrency, lambda job: self._execute(job, number, True, turn))

    @staticmethod
    def _access(job: _Job) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """The call's declared ``(reads, writes)``, or None when unknown (it then conflicts with every call)."""
        try:
            access = job.tool.resources(job.args)
        except Exception:
            logger.warning(
                "resources() of %s raised; the call conflicts with every other call", job.tool.name, exc_info=True
            )
            return None
        if access is None:
            return None
        if not isinstance(access, Access):
            logger.warning(
                "resources() of %s returned %r, not a toolsched.Access; the call conflicts with every other call",
                job.tool.name,
                access,
            )
            return None
        return access.reads, access.writes

    async def _run_graph(self, jobs: list[_Job], turn: _Turn, cap: int, steering: Steering | None) -> list[Any]:
        """``ResourceAware``: a call starts once every earlier call it conflicts with has finished.

        The engine plans the waits from the declared resources in one
        crossing. Workers take the ready calls, earliest in model order first;
        the calling task is the first worker, and another joins (up to ``cap``)
        each time a running call first waits while calls are ready, so calls
        that never wait cost no task. Steering is checked after each call
        while calls remain unstarted. The whole turn is batch 0, so a failure
        that aborts its siblings cancels every call still running or waiting.
        """
        count = len(jobs)
        if count == 0:
            return []
        emit = turn.emit
        workers_cap = min(cap, count)
        concurrent = workers_cap > 1
        turn.batch = jobs
        turn.scoped = concurrent and (
            self.abort_siblings_on_error or any(job.tool.abort_siblings_on_error for job in jobs)
        )
        if emit is not None:
            emit(BatchStarted(0, tuple(job.call.id for job in jobs), concurrent))
        blocked = await self._before_batch(jobs, 0, concurrent, turn) if self._pre_batch else None
        state = _GraphState()
        started = bytearray(count)
        if blocked is not None:
            await self._answer_unstarted(jobs, turn, "hook_blocked", blocked, 0)
        elif count == 1:
            # Nothing to plan: no crossing, no task.
            started[0] = 1
            await self._execute(jobs[0], 0, False, turn)
        else:
            accesses = [self._access(job) for job in jobs]
            wait_offsets, _, dependent_offsets, dependents = _core.plan_conflicts(accesses)
            remaining = [wait_offsets[i + 1] - wait_offsets[i] for i in range(count)]
            ready = [i for i in range(count) if remaining[i] == 0]  # ascending, so already a heap
            # A call of unknown resources waits for every earlier call, and every later one waits for it.
            overlaps = [concurrent and access is not None for access in accesses]

            async with anyio.create_task_group() as group:

                def grow() -> None:
                    if ready and state.workers < workers_cap and not state.stopped:
                        state.workers += 1
                        group.start_soon(worker)

                async def worker() -> None:
                    while True:
                        if ready and not state.stopped:
                            index = heapq.heappop(ready)
                            job = jobs[index]
                            started[index] = 1
                            state.started += 1
                            state.running += 1
                            suspended = run_until_suspended(self._execute(job, 0, overlaps[index], turn))
                            if suspended is not None:
                                grow()
                                await suspended
                            state.running -= 1
                            first, end = dependent_offsets[index], dependent_offsets[index + 1]
                            if first != end:
                                for later in dependents[first:end]:
                                    remaining[later] -= 1
                                    if remaining[later] == 0:
                                        heapq.heappush(ready, later)
                            if turn.tripped is not None or turn.failures is not None:
                                state.stopped = True
                            elif steering is not None and state.started < count and not state.stopped:
                                await self._steer(steering, state)
                            state.wake_all()
                        elif state.running == 0 or state.stopped:
                            return
                        else:
                            await state.wait()

                await worker()
        if state.failure is not None:
            raise state.failure
        turn.abort = None
        turn.scoped = False
        unstarted = [jobs[index] for index in range(count) if not started[index]] if blocked is None else []
        if state.messages and turn.failures is None:
            await self._answer_unstarted(unstarted, turn, "skipped", _SKIPPED)
        if self._post_batch:
            await self._after_batch(jobs, 0, concurrent, turn)
        if emit is not None:
            emit(BatchFinished(0, tuple(job.call.id for job in jobs)))
            await emit.flush()
        if turn.tripped is not None:
            raise self._trip(turn)
        if turn.failures is not None:
            await self._raise_failure(unstarted, turn, turn.failures)
        return state.messages

    @staticmethod
    async def _steer(steering: Steering, state: _GraphState) -> None:
        try:
            messages = await _maybe_await(steering())
        except Exception as exc:
            # Raised from the run as it is, not inside the pool's exception group.
            state.failure = exc
            state.stopped = True
            return
        if messages and not state.stopped:
            state.stopped = True
            state.messages = list(messages)

    async def _execute(self, job: _Job, batch: int, concurrent: bool, turn: _Turn) -> None:
        """Phases 5 to 9 for one call: input guardrails, execute, output guardrails, post hooks, shape, record."""
        tool = job.tool
        call = job.call
        emit = turn.emit
        if job.cancel_reason is not None or turn.abort is not None or turn.halt is not None:
            # Stopped before it started: answered without running.
            if turn.abort is not None:
                await self._answer_unstarted([job], turn, "cancelled", f"not run: {turn.abort}", batch)
            else:
                await self._answer_unstarted([job], turn, "skipped", turn.halt or _SKIPPED, batch)
            if emit is not None:
                await emit.flush()
            return
        job.state = _RUNNING
        scope = None
        if job.facts.scoped or turn.scoped:
            # ``move_on_after`` builds the backend's scope directly (``CancelScope()``
            # initialises it twice). The deadline waits for the input guardrails and
            # the concurrency slot when there are any.
            deferred = tool.max_concurrency is not None or self._input_guardrails is not None
            scope = job.scope = anyio.move_on_after(None if deferred else tool.timeout)
        ctx = None
        if job.facts.takes_context:
            ctx = job.ctx = self._context(job, turn, job.declare_cancelled)
        if emit is not None:
            emit(new_tool_started(call.id, tool.name, batch, True, None))
        error: str | None = None
        kind: ErrorKind | None = None
        output: Any = None
        cause: BaseException | None = None
        started = perf_counter()
        # The tool's body runs here, or on the backend the tool names.
        invoke = self._remote.get(tool, job.facts.invoke) if self._remote else job.facts.invoke
        try:
            if scope is None:
                if self._input_guardrails is not None:
                    await self._guard(self._input_guardrails, job, None, turn)
                if turn.durable is not None:
                    await turn.durable.started(call.id, job.args)
                if tool.max_concurrency is None:
                    output = await invoke(job.args, ctx)
                else:
                    output = await self._invoke_limited(job, invoke, ctx, None)
            else:
                # A scope cancelled before it is entered (say by an event callback
                # on ToolStarted) stops the call at its first checkpoint.
                with scope:
                    if self._input_guardrails is not None:
                        await self._guard(self._input_guardrails, job, None, turn)
                        if tool.timeout is not None and tool.max_concurrency is None:
                            scope.deadline = anyio.current_time() + tool.timeout
                    if turn.durable is not None:
                        await turn.durable.started(call.id, job.args)
                    if tool.max_concurrency is None:
                        output = await invoke(job.args, ctx)
                    else:
                        output = await self._invoke_limited(job, invoke, ctx, scope)
                job.scope = None
                if scope.cancelled_caught:
                    kind, error = self._stopped(job)
            if kind is None and self._output_guardrails is not None:
                await self._guard(self._output_guardrails, job, output, turn)
        except _Rejected as exc:
            kind, error, output = "guardrail_rejected", exc.message, None
        except NestedHold as hold:
            # The call's nested run waits for approvals: no result yet, the run ends interrupted.
            self._close(job, ctx)
            if turn.parked is None:
                turn.parked = []
            turn.parked.append((job, hold.record))
            if emit is not None:
                await emit.flush()
            return
        except JournalFailed:
            raise
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
        duration_ms = (perf_counter() - started) * 1000.0
        if ctx is not None:
            if job.declared:
                kind, error, cause, output = "cancelled", job.cancel_reason, None, None
            ctx._finish(kind is not None and kind != "execution_error")
        truncated = False
        offload_path = None
        if kind is None and not fits_as_is(output, tool):
            try:
                output, truncated, offload_path = await shape_output(output, tool, call.id, self.offload_dir)
            except Exception as exc:
                kind, error, cause = "execution_error", f"the output of `{tool.name}` could not be shaped: {exc}", exc
                output = None
        result = new_result(
            call.id, tool.name, output, error, kind, kind is not None, duration_ms, concurrent, batch, truncated,
            offload_path,
        )
        if turn.durable is not None:
            await turn.durable.finished(result)
        job.state = _DONE
        # ``turn.record``, written out: this runs once per call.
        turn.completed.append(result)
        turn.slots.append(job.slot)
        if emit is not None:
            emit(new_tool_finished(result, None))
        if kind is not None and kind in _EXECUTION_FAILURES:
            self._failed(job, result, cause, turn)
        if turn.view.post_hooked:
            # Phase 8: ``post_tool_use`` or ``post_tool_use_failure``; they observe, their errors are logged.
            policy = turn.view.policies[job.index]
            hooks = policy.post_success if kind is None else policy.post_failure
            if hooks:
                event = new_hook_event(call.id, tool.name, detached(job.args), batch, result, turn.context)
                for hook in hooks:
                    try:
                        await hook.invoke(event)
                    except Exception:
                        logger.warning("%s failed on call %s", hook.label, call.id, exc_info=True)
        if emit is not None and emit.pending:
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
        """A call ends here without a result of its own (its run is cancelled, or it waits in a nested run)."""
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

    async def _invoke_limited(
        self,
        job: _Job,
        invoke: Callable[[Any, ToolContext | None], Awaitable[Any]],
        ctx: ToolContext | None,
        scope: anyio.CancelScope | None,
    ) -> Any:
        """Calls the tool under its concurrency cap; its timeout counts from when it gets a slot."""
        timeout = job.tool.timeout
        async with job.facts.limiter():
            if scope is not None and timeout is not None:
                scope.deadline = anyio.current_time() + timeout
            return await invoke(job.args, ctx)

    # -- the control plane: admission, approvals, guardrails, hooks ---------------

    async def _admit(self, jobs: list[_Job], turn: _Turn, held: list[_Held], prior: RunState | None) -> list[_Job]:
        """Phase 4 for the whole turn, in model order: hooks, rules, mode, the tool, then the approver.

        Denied calls are answered; calls that wait for a person go to ``held``;
        the admitted calls come back with their final input.
        """
        policies = turn.view.policies
        records = {record.call_id: record for record in prior._records} if prior is not None else {}
        admitted = []
        for job in jobs:
            policy = policies[job.index]
            if not policy.admit:
                admitted.append(job)
                continue
            record = records.get(job.call.id)
            behavior, kind, message = await self._decide(job, policy, turn, record)
            if behavior == "ask":
                behavior, message = await self._settle(job, message or "", record, prior, held, turn)
                kind = "permission_denied"
                if turn.durable is not None:
                    await self._journal_decision(turn.durable, job, behavior, message, held)
            if behavior == "allow":
                admitted.append(job)
            elif behavior == "deny" and kind is not None:
                await turn.answer(job.slot, job.call, job.tool.name, kind, message or "")
        return admitted

    async def _decide(
        self, job: _Job, policy: _Policy, turn: _Turn, record: CallRecord | None
    ) -> tuple[Behavior, ErrorKind | None, str | None]:
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
                event = new_hook_event(job.call.id, tool.name, detached(job.args), None, None, turn.context)
                try:
                    answer = await hook.invoke(event)
                except HookTimeout as exc:
                    return "deny", "hook_blocked", f"{hook.label} {exc}; the call was blocked"
                except Exception as exc:
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
                    return "deny", "hook_blocked", (
                        f"{hook.label} returned {answer!r}, not None, a Decision or a Rewrite; the call was blocked"
                    )
            if rewritten:
                refusal = await self._recheck(job, turn)
                if refusal is not None:
                    return "deny", "hook_blocked", refusal
        rule = policy.rules.evaluate(job.args) if policy.rules is not None else None
        mode = self._mode
        if rule is not None:
            if rule[0] == "deny":
                return "deny", "permission_denied", f"`{tool.name}` with this input is denied by the rule `{rule[1]}`"
            if rule[0] == "allow" and hook_ask is None and mode != "plan" and not job.facts.checks_permissions:
                # An allow rule waives every other ask, and nothing is left that could deny.
                return "allow", None, None
        if mode == "plan" and not self._is_read_only(job):
            return "deny", "permission_denied", f"plan mode: `{tool.name}` may change state, so it does not run"
        tool_ask: str | None = None
        if job.facts.checks_permissions:
            decision = await self._tool_decision(job, turn)
            if decision.behavior == "deny":
                return "deny", "permission_denied", decision.reason or f"`{tool.name}` refused this call"
            if decision.behavior == "ask":
                tool_ask = decision.reason or f"`{tool.name}` asks for approval of this call"
        if (
            record is not None
            and record.status in ("approved", "nested")
            and record.fingerprint == turn.view.fingerprint(job.index)
            and record.digest == args_digest(job.args)
        ):
            return "allow", None, None
        waived = hook_allowed or (rule is not None and rule[0] == "allow")
        reason: str | None = None
        if rule is not None and rule[0] == "ask":
            reason = f"matches the ask rule `{rule[1]}`"
        elif hook_ask is not None:
            reason = hook_ask
        elif tool_ask is not None:
            reason = tool_ask
        elif not waived:
            if mode == "ask":
                reason = "every call needs approval in ask mode"
            elif mode == "accept_reads" and not self._is_read_only(job):
                reason = f"`{tool.name}` may change state; accept_reads mode asks first"
            elif self._needs_approval(job):
                reason = f"`{tool.name}` needs approval before it runs"
        if reason is None or mode == "bypass":
            return "allow", None, None
        return "ask", None, reason

    async def _recheck(self, job: _Job, turn: _Turn) -> str | None:
        """Validates input rewritten by hooks again (schema, then ``validate_input``); the refusal, if any."""
        checked, message = turn.view.table.check(job.index, job.args, **self._limits)
        if message is not None:
            return f"the input rewritten by a pre_tool_use hook is invalid: {message}"
        job.args = detached(checked)
        if job.facts.validates_input:
            try:
                await job.tool.validate_input(job.args, self._context(job, turn))
            except SemanticError as exc:
                return f"the input rewritten by a pre_tool_use hook was refused: {exc}"
            except Exception as exc:
                return f"the input rewritten by a pre_tool_use hook was refused: {format_error(exc, job.call)}"
        return None

    async def _tool_decision(self, job: _Job, turn: _Turn) -> Decision:
        """The tool's ``check_permissions``; an error or a wrong answer denies (fail closed)."""
        try:
            decision = await job.tool.check_permissions(job.args, self._context(job, turn))
        except Exception as exc:
            logger.warning("check_permissions of %s failed", job.tool.name, exc_info=True)
            return Decision.deny(f"permission check of `{job.tool.name}` failed: {format_error(exc, job.call)}")
        if not isinstance(decision, Decision):
            return Decision.deny(f"permission check of `{job.tool.name}` returned {decision!r}, not a Decision")
        return decision

    @staticmethod
    def _is_read_only(job: _Job) -> bool:
        static = job.facts.static_read_only
        return _judge_call(job, static, job.tool.is_read_only, False, "treating the call as a write")

    @staticmethod
    def _needs_approval(job: _Job) -> bool:
        static = job.facts.static_needs_approval
        return _judge_call(job, static, job.tool.requires_approval, True, "asking for approval")

    async def _settle(
        self, job: _Job, reason: str, record: CallRecord | None, prior: RunState | None, held: list[_Held], turn: _Turn
    ) -> tuple[Behavior, str | None]:
        """A call that asks: an earlier decision bound to this tool and input, else the approver, else held."""
        tool = job.tool
        fingerprint = turn.view.fingerprint(job.index)
        digest = args_digest(job.args)
        if prior is not None:
            standing = prior._standing(tool.name, fingerprint)
            if standing is not None:
                if standing[0] == "rejected":
                    return "deny", _not_approved(tool.name, standing[1])
                return "allow", None
            if record is not None and record.status in ("approved", "nested"):
                # An approval for this call that _decide did not honour: given for another tool or input.
                changed = "the tool" if record.fingerprint != fingerprint else "the arguments"
                reason = f"{reason} (asked again: {changed} changed since the approval)"
        if self.approver is not None:
            request = ApprovalRequest(job.call.id, tool.name, detached(job.args), reason)
            try:
                answer = await _maybe_await(self.approver(request))
            except Exception as exc:
                logger.warning("the approver failed on call %s", job.call.id, exc_info=True)
                return "deny", _not_approved(tool.name, f"the approver failed ({format_error(exc, job.call)})")
            if answer is True or (isinstance(answer, Decision) and answer.behavior == "allow"):
                return "allow", None
            if answer is False:
                return "deny", _not_approved(tool.name, None)
            if isinstance(answer, Decision) and answer.behavior == "deny":
                return "deny", _not_approved(tool.name, answer.reason)
            if not (isinstance(answer, Decision) and answer.behavior == "ask"):
                logger.warning("the approver returned %r for call %s; rejecting it", answer, job.call.id)
                return "deny", _not_approved(tool.name, f"the approver returned {answer!r}")
        held.append(_Held(job, reason, digest, fingerprint))
        return "ask", None

    def _interrupted(
        self,
        slot_calls: list[ToolCall],
        turn: _Turn,
        held: list[_Held],
        duplicates: list[Duplicate],
        steering_messages: list[Any],
        prior: RunState | None,
    ) -> Outcome:
        """The outcome of a run that waits for decisions, with the state to resume it from."""
        results = dict(zip(turn.slots, turn.completed, strict=True))
        waiting = {entry.job.slot: entry for entry in held}
        parked = {job.slot: (job, child) for job, child in turn.parked or ()}
        records = []
        for slot, call in enumerate(slot_calls):
            args = call.args if isinstance(call.args, str) else detached(dict(call.args))
            result = results.get(slot)
            if result is not None:
                records.append(CallRecord(call.id, call.name, args, "done", result=result))
                continue
            if slot in parked:
                job, child = parked[slot]
                records.append(
                    CallRecord(
                        call.id,
                        call.name,
                        args,
                        "nested",
                        tool=job.tool.name,
                        fingerprint=turn.view.fingerprint(job.index),
                        request_args=detached(job.args),
                        digest=args_digest(job.args),
                        child=child,
                    )
                )
                continue
            entry = waiting[slot]
            records.append(
                CallRecord(
                    call.id,
                    call.name,
                    args,
                    "pending",
                    tool=entry.job.tool.name,
                    fingerprint=entry.fingerprint,
                    request_args=detached(entry.job.args),
                    reason=entry.reason,
                    digest=entry.digest,
                )
            )
        always_allow = dict(prior._always_allow) if prior is not None else {}
        always_reject = dict(prior._always_reject) if prior is not None else {}
        state = RunState._create(records, list(duplicates), always_allow, always_reject)
        if turn.durable is not None:
            state._run_id = turn.durable.run_id
        return Outcome(turn.ordered_partial(), duplicates, steering_messages, True, state.pending, state)

    async def _guard(self, guardrails: Guardrails, job: _Job, output: Any, turn: _Turn) -> None:
        """Runs input (``output`` None) or output guardrails; raises ``_Rejected`` with the refusal."""
        stage = guardrails.stage
        event = GuardrailEvent(stage, job.call.id, job.tool.name, detached(job.args), output, turn.context)
        try:
            refusal = await guardrails.refusal(event)
        except GuardrailTripped as exc:
            if turn.tripped is None:
                turn.tripped = exc
            raise _Rejected(exc.message) from None
        if refusal is not None:
            raise _Rejected(refusal)

    @staticmethod
    def _trip(turn: _Turn) -> GuardrailTripped:
        tripped = turn.tripped
        assert tripped is not None
        tripped.results = tuple(turn.ordered_partial())
        return tripped

    def _batch_event(self, batch: list[_Job], number: int, concurrent: bool, turn: _Turn, done: bool) -> BatchEvent:
        calls = tuple(ToolCall(job.call.id, job.tool.name, detached(job.args)) for job in batch)
        results: tuple[ToolResult, ...] = ()
        if done:
            ids = {job.call.id for job in batch}
            results = tuple(result for result in turn.ordered_partial() if result.call_id in ids)
        return BatchEvent(number, calls, concurrent, results, turn.context)

    @staticmethod
    def _batch_hooks(hooks: tuple[Hook, ...], batch: list[_Job]) -> list[Hook]:
        return [
            hook for hook in hooks if any(hook.matcher.matches((job.tool.name, *job.tool.aliases)) for job in batch)
        ]

    async def _before_batch(self, batch: list[_Job], number: int, concurrent: bool, turn: _Turn) -> str | None:
        """``pre_batch`` hooks; a deny, an error or a timeout blocks the whole batch (the reason is returned)."""
        hooks = self._batch_hooks(self._pre_batch, batch)
        if not hooks:
            return None
        event = self._batch_event(batch, number, concurrent, turn, False)
        for hook in hooks:
            try:
                answer = await hook(event)
            except HookTimeout as exc:
                return f"{hook.label} {exc}; the batch was blocked"
            except Exception as exc:
                logger.warning("%s failed on batch %d", hook.label, number, exc_info=True)
                detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                return f"{hook.label} failed ({detail}); the batch was blocked"
            if isinstance(answer, Decision) and answer.behavior == "deny":
                return answer.reason or f"blocked by {hook.label}"
            if answer is not None and not isinstance(answer, Decision):
                return f"{hook.label} returned {answer!r}, not None or a Decision; the batch was blocked"
        return None

    async def _after_batch(self, batch: list[_Job], number: int, concurrent: bool, turn: _Turn) -> None:
        hooks = self._batch_hooks(self._post_batch, batch)
        if not hooks:
            return
        event = self._batch_event(batch, number, concurrent, turn, True)
        for hook in hooks:
            try:
                await hook(event)
            except Exception:
                logger.warning("%s failed on batch %d", hook.label, number, exc_info=True)


def _not_approved(tool_name: str, message: str | None) -> str:
    text = f"the call to `{tool_name}` was not approved"
    return f"{text}: {message}" if message else text


def _unknown_outcome(tool_name: str) -> str:
    return (
        "the outcome of this call is unknown: it started before the run was interrupted and "
        f"`{tool_name}` is not idempotent, so it was not run again"
    )


def _unavailable(view: _View, name: str, message: str) -> str:
    """The ``unknown_tool`` message, telling how to load a deferred tool that has not been."""
    toolset = view.toolset
    member = toolset.by_name.get(name)
    if member is None or member.name not in toolset.deferred or member.name in toolset.loaded:
        return message
    search = f"`{SEARCH_TOOL_NAME}`" if SEARCH_TOOL_NAME in toolset.by_name else "tool search"
    return (
        f"tool `{member.name}` is not loaded yet: find it with {search} (which loads it), "
        "then call it in a later turn"
    )


class _GraphState:
    """What the workers of a ``ResourceAware`` run share (internal)."""

    __slots__ = ("_wake", "failure", "messages", "running", "started", "stopped", "waiting", "workers")

    def __init__(self) -> None:
        self.failure: Exception | None = None
        self.messages: list[Any] = []
        self.running = 0
        self.started = 0
        self.stopped = False
        self.waiting = 0
        self.workers = 1
        # Made when a worker first waits: most runs never wait, and an event costs microseconds.
        self._wake: anyio.Event | None = None

    async def wait(self) -> None:
        """Waits until a call finishes."""
        if self._wake is None:
            self._wake = anyio.Event()
        self.waiting += 1
        try:
            await self._wake.wait()
        finally:
            self.waiting -= 1

    def wake_all(self) -> None:
        if self.waiting and self._wake is not None:
            self._wake.set()
            self._wake = None


_SKIPPED = "not run: the run was steered away before this call started"
