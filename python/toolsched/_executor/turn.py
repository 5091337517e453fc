"""The Turn: one run's calls in, one result per call out, in model order.

A turn is planned once (``plan_calls``: the engine's lookup, dedup and
validation, decoded in one place), its runnable calls become ``Job``s, and it
ends in one place (``Turn.finish``): every result in model order, or, when
calls wait for a person, the state to resume from.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from types import SimpleNamespace
from typing import Any, Protocol, cast

import anyio

from toolsched import _core
from toolsched._backends.threads import Gate
from toolsched._backends.workers import own_failure
from toolsched._executor.durable import RunJournal
from toolsched._executor.emitter import Emitter
from toolsched._executor.settings import Settings
from toolsched._executor.view import View
from toolsched._policy.hooks import UpdateFilter
from toolsched._policy.limits import active_limits
from toolsched._policy.permissions import Permissions
from toolsched._policy.runstate import CallRecord, ChildRecord, RunState, new_state
from toolsched._policy.tool_rules import UNDECIDED
from toolsched._tools.context import ToolContext
from toolsched._tools.registry import SEARCH_TOOL_NAME
from toolsched._tools.search import SearchContext
from toolsched._tools.tools import Tool, ToolFacts
from toolsched._values.calls import Duplicate, ToolCall, args_copy, plain_calls
from toolsched._values.digest import args_digest
from toolsched._values.effects import new_identity
from toolsched._values.event_loops import loop_handle
from toolsched._values.events import Event, ToolArgumentsRepaired, ToolFinished, ToolStarted
from toolsched._values.fastpath import slot_builder
from toolsched._values.outcome import Outcome, new_outcome
from toolsched._values.results import (
    ErrorKind,
    ToolResult,
    edited_result,
    error_result,
    repaired_result,
    shown_result,
)
from toolsched.errors import GuardrailTripped, UnknownToolError

__all__ = [
    "DONE",
    "PENDING",
    "RUNNING",
    "Handout",
    "Held",
    "Job",
    "Lender",
    "Plan",
    "Turn",
    "judge",
    "new_job",
    "new_plan",
    "new_turn",
    "plan_calls",
]

logger = logging.getLogger("toolsched")

# Guards the first choice of a run's identity (``Turn.run_identity``).
_IDENTITY_LOCK = threading.Lock()

# The life of a job: waiting for a worker, running, answered.
PENDING, RUNNING, DONE = 0, 1, 2


class Job:
    """One runnable call of a turn (internal, mutable while the turn runs).

    What every call uses is in slots; what few calls ever set (their cancel scope, context, cancellation, a
    body left in a thread, a pause, runs from before a crash) is read from the class until a call sets it, in
    the job's own ``__dict__`` then: a job's slots are walked by every full collection while its call waits
    (``python benches/gc_walk.py``), and slots left at their defaults would be walked too."""

    __slots__ = ("__dict__", "args", "attempts", "call", "facts", "index", "ruled", "ruling", "slot", "state", "tool")

    # How many runs a journal holds from before a crash (``recover`` goes on from there).
    prior_attempts: int = 0
    scope: anyio.CancelScope | None = None
    cancel_reason: str | None = None
    ctx: ToolContext | None = None
    # Set when the tool cancelled its own call (``ctx.cancel``): it ends cancelled whatever follows.
    declared: bool = False
    # Set when a body in a thread was waited for after the call was cancelled (``toolsched._backends.threads``).
    body_outlived_cancel: bool = False
    # Set when the call's deadline passed while its cancelled body was waited for: it ends ``timeout``.
    timed_out: bool = False
    # Set when its call ended while its body went on in a thread: set in turn when that body returns.
    body_left: threading.Event | None = None
    # The gate of the sync body it runs in a thread now (``toolsched._backends.threads``).
    thread_gate: Gate | None = None
    # The scope of a wait without working (a rate-limit token, a retry's backoff): an interrupt ends it.
    pause: anyio.CancelScope | None = None
    # Set when the fleet's circuit (``RedisCoordination``) was open after one of its failed attempts: its retries
    # stop there, as with the process's own circuit.
    circuit_open: bool = False

    def __init__(
        self, slot: int, call: ToolCall, tool: Tool, facts: ToolFacts, args: Any, index: int, ruling: Any = UNDECIDED
    ) -> None:
        self.slot = slot
        self.call = call
        self.tool = tool
        self.facts = facts
        self.args = args
        self.index = index
        # The engine's verdict on the call's rules (``RuleTable.judge``), valid while ``args`` is ``ruled``:
        # arguments replaced since (a hook's rewrite, a journal's) are judged anew.
        self.ruling = ruling
        self.ruled = args
        self.state = PENDING
        # How many times the tool has run for this call (a retry policy may run it again).
        self.attempts = 1

    def stop_after_body(self) -> None:
        """The sync body waited for after a cancellation returned: the call's scope stops what follows."""
        if self.scope is not None:
            self.scope.cancel()

    def waits_for_started_body(self) -> bool:
        """A cancelled call waits for a sync body already running in its thread; a timed-out one does not."""
        return self.cancel_reason is not None

    def deadline(self) -> float:
        return self.scope.deadline if self.scope is not None else math.inf

    def stoppable(self) -> bool:
        """Whether ``cancel`` would stop the call now: it has not started, or it runs in a cancel scope."""
        return self.state == PENDING or (self.state != DONE and self.scope is not None)

    def cancel(self, message: str) -> bool:
        """Asks the call to stop with a ``cancelled`` result carrying ``message``.

        Returns whether it will: a call not started yet never starts, and a
        running call in a cancel scope is stopped. A running call without one
        can only be asked (``ctx.cancelled`` turns true) and keeps its own result.
        """
        if self.state == DONE:
            return False
        if self.ctx is not None:
            self.ctx.request_cancel()
        if self.stoppable():
            if self.cancel_reason is None:
                self.cancel_reason = message
            gate = self.thread_gate
            if gate is not None and not gate.close_unless_started():
                # A sync body runs in its thread: it cannot be stopped, so the call waits for it and reports
                # what it did. Its scope is left alone: its own timeout, or a cancellation of the run, still
                # ends it at once (a cancelled scope would have shielded that wait from both).
                self.body_outlived_cancel = True
                return True
            if self.scope is not None:
                self.scope.cancel()
            return True
        return False

    def declare_cancelled(self, message: str) -> None:
        """The tool cancelled its own call: its result is ``cancelled``, and a scope stops it now."""
        if self.state == DONE:
            return
        if self.cancel_reason is None:
            self.cancel_reason = message
        self.declared = True
        if self.scope is not None:
            self.scope.cancel()

    def fleet_circuit_opened(self) -> None:
        """The fleet's circuit is open after one of the call's failed attempts: it runs no more."""
        self.circuit_open = True


def judge(
    job: Job, static: bool | None, judgement: Callable[[Any], bool], if_it_raises: bool, consequence: str
) -> bool:
    """A per-call flag: the tool's constant when it has one, else its judgement of the
    arguments (shown a copy: what it changes never reaches the call); a judgement that raises
    counts as the fail-closed answer."""
    if static is not None:
        return static
    try:
        return bool(judgement(args_copy(job.args)))
    except BaseException as exc:
        if not own_failure(exc):
            raise
        logger.warning("%s of %s raised; %s", judgement.__name__, job.tool.name, consequence, exc_info=True)
        return if_it_raises


# Each call of a turn gets a job: built in C (``fastpath.slot_builder``, ``python benches/pieces.py``), every
# slot not given taking the value ``Job.__init__`` gives it. ``ruled`` is given as ``args``.
new_job: Callable[[int, ToolCall, Tool, ToolFacts, Any, int, Any, Any], Job] = slot_builder(
    Job,
    ("slot", "call", "tool", "facts", "args", "index", "ruling", "ruled"),
    Job(0, cast(ToolCall, None), cast(Tool, None), cast(ToolFacts, None), None, 0),
)
# The builder itself, for a turn's jobs made in one crossing (``_core.turn_jobs``).
_JOB_BUILDER: _core.SlotBuilder = new_job.__self__  # type: ignore[attr-defined]


class Held:
    """A call waiting for a person's decision (internal). ``source`` is the input its admission began from,
    before hooks rewrote it (None: not known, the model's own)."""

    __slots__ = ("digest", "fingerprint", "job", "reason", "source")

    def __init__(self, job: Job, reason: str, digest: str, fingerprint: str, source: Any = None) -> None:
        self.job = job
        self.reason = reason
        self.digest = digest
        self.fingerprint = fingerprint
        self.source = source


class Handout:
    """A call of an external tool handed out to be answered from outside (internal): its slot, tool, the arguments
    it was handed out with, when (seconds since the epoch) and until when its answer is awaited (None: no limit)."""

    __slots__ = ("args", "deadline", "fingerprint", "handed_out", "slot", "tool_name")

    def __init__(
        self, slot: int, tool_name: str, fingerprint: str, args: Any, handed_out: float, deadline: float | None
    ) -> None:
        self.slot = slot
        self.tool_name = tool_name
        self.fingerprint = fingerprint
        self.args = args
        self.handed_out = handed_out
        self.deadline = deadline


class Plan:
    """The engine's plan of a list of calls, decoded (internal).

    ``calls`` are the planned calls by slot (first occurrences, model order);
    ``tools``/``args`` the tool index and validated arguments of each slot;
    ``refused`` the slots the engine answered, with the error kind and message;
    ``duplicates`` the calls dropped for repeating an ID; ``rulings`` the
    engine's verdict on each slot's permission rules (see ``Job.ruling``);
    ``repairs`` the slots whose arguments the engine repaired, with its fixes
    (None when none were).
    """

    __slots__ = ("args", "calls", "duplicates", "jobs", "refused", "repairs", "rulings", "tools")

    def __init__(
        self,
        calls: list[ToolCall],
        tools: list[int],
        args: list[Any],
        refused: dict[int, tuple[ErrorKind, str]],
        duplicates: list[Duplicate],
        rulings: list[Any],
    ) -> None:
        self.calls = calls
        self.tools = tools
        self.args = args
        self.refused = refused
        self.duplicates = duplicates
        self.rulings = rulings
        # The job of every slot the engine did not refuse, in model order (when ``plan_calls`` is asked for them).
        self.jobs: list[Job] = []
        self.repairs: dict[int, tuple[str, ...]] | None = None

    def __len__(self) -> int:
        return len(self.tools)

    def job(self, view: View, slot: int, turn_slot: int | None = None) -> Job:
        """The job of a planned slot that the engine did not refuse (``turn_slot`` places it in the turn)."""
        index = self.tools[slot]
        args = self.args[slot]
        return new_job(
            slot if turn_slot is None else turn_slot,
            self.calls[slot],
            view.tools[index],
            view.facts[index],
            args,
            index,
            self.rulings[slot],
            args,
        )

    def tool_name(self, view: View, slot: int) -> str:
        """The canonical name of a slot's tool, or the name the model used when there is none."""
        index = self.tools[slot]
        return view.tools[index].name if index >= 0 else self.calls[slot].name


# Every turn is planned once: built in C (``fastpath.slot_builder``), each slot given.
new_plan: Callable[
    [list[ToolCall], list[int], list[Any], dict[int, tuple[ErrorKind, str]], list[Duplicate], list[Any], list[Job]],
    Plan,
] = slot_builder(
    Plan, ("calls", "tools", "args", "refused", "duplicates", "rulings", "jobs"), Plan([], [], [], {}, [], [])
)


# The types of a turn's calls when every one is exactly a ToolCall (``plan_calls``).
_ONLY_TOOLCALL = {ToolCall}


def plan_calls(settings: Settings, view: View, calls: list[ToolCall], *, jobs: bool = False) -> Plan:
    """One crossing into the engine for a list of calls: type check, lookup, dedup by ID, validation.

    With ``jobs``, the plan also holds the job of every call the engine did not refuse. A call
    that is not exactly a ``ToolCall`` is read once, here (``plain_call``): the plan, and
    everything after it, holds what was read.
    """
    # Told by the set of the calls' types, built in C: a loop here costs every call of every turn.
    if calls and set(map(type, calls)) != _ONLY_TOOLCALL:
        calls = plain_calls(calls)
    repaired: list[tuple[int, tuple[str, ...]]] | None = None
    if settings.repairs:
        repaired = []
        tool_rows, arg_rows, failures, positions, duplicate_rows, rulings = view.table.prepare(
            calls, view.toolset.disabled_mask(), settings.limits, view.rules, ToolCall, repaired
        )
    else:
        tool_rows, arg_rows, failures, positions, duplicate_rows, rulings = view.table.prepare(
            calls, view.toolset.disabled_mask(), settings.limits, view.rules, ToolCall
        )
    assert rulings is not None  # given a rule table, the engine judges every slot
    planned = calls if positions is None else [calls[index] for index in positions]
    refused: dict[int, tuple[ErrorKind, str]] = {}
    for slot, error_kind, message in failures:
        if error_kind == "unknown_tool":
            message = unavailable(view, planned[slot].name, message, settings.permissions)
        refused[slot] = (cast(ErrorKind, error_kind), message)
    duplicates = (
        [Duplicate(calls[index].id, index, first, differ) for index, first, differ in duplicate_rows]
        if duplicate_rows
        else []
    )
    made: list[Job] = []
    if jobs:
        tools, facts = view.tools, view.facts
        if refused:
            made = [
                new_job(slot, planned[slot], tools[index], facts[index], args, index, rulings[slot], args)
                for slot, (index, args) in enumerate(zip(tool_rows, arg_rows, strict=True))
                if slot not in refused
            ]
        else:
            # The same jobs as the comprehension above, built in one crossing.
            made = _core.turn_jobs(_JOB_BUILDER, planned, tools, facts, tool_rows, arg_rows, rulings)
    plan = new_plan(planned, tool_rows, arg_rows, refused, duplicates, rulings, made)
    if repaired:
        plan.repairs = dict(repaired)
    return plan


def unavailable(view: View, name: str, message: str, permissions: Permissions | None) -> str:
    """The ``unknown_tool`` message, telling how to load a deferred tool that has not been (unless the
    rules deny it outright: ``tool_search`` does not offer it)."""
    toolset = view.toolset
    member = toolset.by_name.get(name)
    if member is None or member.name not in toolset.deferred or member.name in toolset.loaded:
        return message
    if permissions is not None and permissions.denies_outright(member):
        return message
    search = f"`{SEARCH_TOOL_NAME}`" if SEARCH_TOOL_NAME in toolset.by_name else "tool search"
    return (
        f"tool `{member.name}` is not loaded yet: find it with {search} (which loads it), then call it in a later turn"
    )


class Lender(Protocol):
    """What starts a turn's calls when no pool does (a streamed turn): it takes the slots its calls lend while
    they wait without working, and gives them one back when they work again."""

    def lend(self) -> None: ...

    async def reclaim(self) -> None: ...

    def gave_back(self) -> None: ...


class Repairing:
    """A call its executor's repair function is repairing (internal): ``stop`` ends the repair, and the call is
    answered ``cancelled`` with ``reason`` (a caller's ``cancel``) or ``skipped`` (an interrupt: ``reason`` None)."""

    __slots__ = ("reason", "scope", "tool_name")

    def __init__(self, scope: anyio.CancelScope, tool_name: str) -> None:
        self.scope = scope
        self.tool_name = tool_name
        self.reason: str | None = None

    def stop(self, reason: str | None) -> None:
        if self.reason is None:
            self.reason = reason
        self.scope.cancel()


class Turn:
    """Results of one run as they complete, and what the run's calls can see."""

    __slots__ = (
        "abort",
        "batch",
        "completed",
        "context",
        "count",
        "durable",
        "edited",
        "emit",
        "external",
        "failures",
        "halt",
        "identity",
        "interactive",
        "jobs",
        "lender",
        "lent",
        "live",
        "loop",
        "parked",
        "pool",
        "repaired",
        "repairs",
        "run_id",
        "scoped",
        "settings",
        "slots",
        "tasked",
        "thread",
        "tripped",
        "view",
    )

    def __init__(
        self,
        settings: Settings,
        view: View,
        count: int,
        context: Any,
        emit: Emitter | None,
        live: set[Turn],
        durable: RunJournal | None,
    ) -> None:
        self.settings = settings
        self.view = view
        self.count = count
        self.context = context
        self.interactive = settings.interactive
        self.emit = emit
        # The executor's runs in progress: a turn is among them while its calls execute.
        self.live = live
        # The event loop running the turn (``loop_handle``'s) and its thread: ``interrupt`` and ``cancel``
        # from another thread hand their work to it. Set again when a turn made outside its loop starts.
        self.loop = loop_handle()
        self.thread = threading.get_ident()
        self.completed: list[ToolResult] = []
        self.slots: list[int] = []
        self.tripped: GuardrailTripped | None = None
        # Calls whose nested runs wait for approvals: (job, the nested run's record); None when none do.
        self.parked: list[tuple[Job, ChildRecord]] | None = None
        # Calls of external tools handed out and waiting for their answers; None when none are.
        self.external: list[Handout] | None = None
        # The run's journal when the run is durable: every answer is journaled before it is recorded.
        self.durable = durable
        # The run's ID when it has one (given to ``run``, or the journal's): ``cancel(run_id=...)`` finds it by it.
        self.run_id = durable.run_id if durable is not None else None
        # The calls that reach execution, and the batch running now.
        self.jobs: Sequence[Job] = ()
        self.batch: Sequence[Job] = ()
        # Whether every call of the running batch gets a cancel scope (its siblings may abort it).
        self.scoped = False
        # Calls of the running batch waiting without working (a rate limit, a backoff): their pool
        # slots are lent to other calls; ``pool`` is the batch's worker pool once it has one.
        self.lent = 0
        self.pool: Any = None
        # Who else takes the slots a waiting call lends: a streamed turn, which starts its calls itself (no pool).
        self.lender: Lender | None = None
        # Whether each call runs in a task of its own that only the turn's scopes stop (a streamed turn).
        self.tasked = False
        # Set when a failure aborts the running batch: why its other calls are cancelled.
        self.abort: str | None = None
        # Set by an interrupt: why the calls not started yet are skipped.
        self.halt: str | None = None
        # Failures that end the run once their batch settles: (slot, result, exception).
        self.failures: list[tuple[int, ToolResult, BaseException | None]] | None = None
        # What the calls' idempotency keys derive from (``run_identity``), None until first needed.
        self.identity: str | None = None
        # The calls whose arguments were repaired, by call ID, with the fixes; None while none are.
        self.repaired: dict[str, tuple[str, ...]] | None = None
        # The calls a repair function is repairing now, by call ID (``cancel`` and ``interrupt`` reach them).
        self.repairs: dict[str, Repairing] | None = None
        # The calls a person approved with arguments of their own, by ID: their results say so. None when none were.
        self.edited: frozenset[str] | None = None

    def note_repaired(self, call: ToolCall, tool_name: str, fixes: tuple[str, ...], *, report: bool = True) -> None:
        """A call's arguments were repaired: its result will say so, and (with ``report``) a
        ``ToolArgumentsRepaired`` event says what was fixed, before the call is admitted."""
        if self.repaired is None:
            self.repaired = {}
        self.repaired[call.id] = fixes
        if report and self.emit is not None:
            self.emit(ToolArgumentsRepaired(call.id, tool_name, fixes))

    def note_plan(self, plan: Plan, report: bool = True) -> None:
        """Notes the calls of ``plan`` whose arguments the engine repaired (``note_repaired``)."""
        if plan.repairs:
            for slot, fixes in plan.repairs.items():
                self.note_repaired(plan.calls[slot], plan.tool_name(self.view, slot), fixes, report=report)

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
        self,
        slot: int,
        call: ToolCall,
        tool_name: str,
        kind: ErrorKind,
        message: str,
        batch: int | None = None,
        attempts: int = 0,
    ) -> None:
        """Answers a call that does not run (again) with an error result, journaled first in a durable run;
        ``attempts`` is how many times its tool had started on it (those a crashed run journaled)."""
        result = self.unrun(call, tool_name, kind, message, batch, attempts)
        if self.durable is not None:
            await self.durable.finished(result)
        if self.emit is not None:
            self.emit(ToolStarted(call.id, tool_name, batch, ran=False))
        self.record(slot, result)

    def unrun(
        self, call: ToolCall, tool_name: str, kind: ErrorKind, message: str, batch: int | None, attempts: int
    ) -> ToolResult:
        """The error result of a call that does not run (again), marked as repaired or edited as its call was."""
        result = error_result(call.id, tool_name, kind, message, batch, attempts=attempts)
        if self.repaired is not None or self.edited is not None:
            result = self.marked(result)
        return result

    def marked(self, result: ToolResult) -> ToolResult:
        """``result`` marked as repaired or edited, as its call was (asked only when either is noted: it is the
        rarer path)."""
        if self.repaired is not None and result.call_id in self.repaired:
            result = repaired_result(result)
        if self.edited is not None and result.call_id in self.edited:
            result = edited_result(result)
        return result

    async def answer_refused(self, plan: Plan, slot: int, turn_slot: int | None = None) -> None:
        """Answers a call the engine refused; an unknown tool raises instead when the executor says so."""
        kind, message = plan.refused[slot]
        call = plan.calls[slot]
        if kind == "unknown_tool" and self.settings.unknown_tool == "raise":
            raise UnknownToolError(message, call_id=call.id, tool_name=call.name)
        index = plan.tools[slot]
        if kind == "invalid_input" and index >= 0:
            limits = active_limits()
            if limits is not None:
                # A tool past its retry budget is answered so even when its arguments are refused.
                exhausted = limits.exhausted(self.view.tools[index].name, self.view.tools[index].max_model_retries)
                if exhausted is not None:
                    kind, message = "retries_exhausted", exhausted
        await self.answer(
            slot if turn_slot is None else turn_slot, call, plan.tool_name(self.view, slot), kind, message
        )

    def context_for(self, job: Job, cancel_call: Callable[[str], object] | None = None) -> ToolContext:
        """The ``ToolContext`` a call's tool sees (its updates filtered by ``on_update`` hooks)."""
        emit: Callable[[Event], None] | None = self.emit
        if self.view.update_hooked:
            hooks = self.view.policies[job.index].update
            if hooks:
                emit = UpdateFilter(hooks, emit)
        if job.tool is self.view.toolset.search:
            # The built-in tool_search offers only tools that this executor's rules do not deny outright.
            permissions = self.settings.permissions
            return SearchContext(
                job.call.id, job.tool.name, self.context, self.interactive, emit, cancel_call, permissions, self
            )
        return ToolContext(job.call.id, job.tool.name, self.context, self.interactive, emit, cancel_call, self)

    def run_identity(self) -> str:
        """The run's identity, which its calls' idempotency keys derive from: a journaled run's ID, the identity
        a resumed state or a parent call gave, else a random one, chosen when first asked for."""
        identity = self.identity
        if identity is None:
            # Chosen once, whichever thread asks first (sync tools ask from worker threads).
            with _IDENTITY_LOCK:
                identity = self.identity
                if identity is None:
                    identity = self.identity = self.durable.run_id if self.durable is not None else new_identity()
        return identity

    def stop_calls(self, halt: str, jobs: Iterable[Job], cancelled: str, *, every_call: bool = False) -> None:
        """Stops the turn (an interrupt, a broken stream): nothing new starts (``halt``); running calls of
        ``interrupt_behavior="cancel"`` tools (of every tool with ``every_call``) are cancelled (``cancelled``,
        after the tool's name), and a call waiting without working (a rate-limit token, a retry's backoff)
        works no more."""
        if self.halt is None:
            self.halt = halt
        for job in jobs:
            if job.state != RUNNING:
                continue
            if every_call or job.tool.interrupt_behavior == "cancel":
                job.cancel(f"`{job.tool.name}` was cancelled{cancelled}")
            if job.pause is not None:
                job.pause.cancel()

    def lend(self) -> None:
        """A call of the running batch starts waiting without working: another call may take its slot."""
        self.lent += 1
        if self.pool is not None:
            self.pool.lend()
        elif self.lender is not None:
            self.lender.lend()

    async def reclaim(self) -> None:
        """The call is ready to work again: it waits for a free slot of its batch first."""
        if self.pool is not None:
            await self.pool.reclaim()
            return
        try:
            if self.lender is not None:
                await self.lender.reclaim()
        finally:
            self.lent -= 1

    def give_back(self) -> None:
        """The call stopped while it waited (cancelled): it takes no slot again."""
        self.lent -= 1
        if self.pool is not None:
            self.pool.gave_back()
        elif self.lender is not None:
            self.lender.gave_back()

    def ordered_partial(self) -> list[ToolResult]:
        """The results recorded so far, in model order."""
        return [result for _, result in sorted(zip(self.slots, self.completed, strict=True), key=lambda p: p[0])]

    def ordered(self) -> list[ToolResult]:
        if self.count == len(self.completed) == 1:
            return list(self.completed)
        ordered: list[ToolResult] = _core.assemble(self.count, self.slots, self.completed)
        return ordered

    def finish(
        self,
        slot_calls: Sequence[ToolCall],
        held: list[Held],
        duplicates: list[Duplicate],
        steering_messages: list[Any],
        prior: RunState | None,
    ) -> Outcome:
        """The run's outcome: every result in model order, or, when calls wait, the state to resume from."""
        if not held and not self.parked and not self.external:
            return new_outcome(self.ordered(), duplicates, steering_messages, False, [], None, None)
        results = dict(zip(self.slots, self.completed, strict=True))
        waiting = {entry.job.slot: entry for entry in held}
        parked = {job.slot: (job, child) for job, child in self.parked or ()}
        handouts = {handout.slot: handout for handout in self.external or ()}
        records = []
        for slot, call in enumerate(slot_calls):
            args = call.args if isinstance(call.args, str) else args_copy(dict(call.args))
            result = results.get(slot)
            if result is not None:
                # The state's own copy of the output: the caller is handed the result itself in the outcome.
                records.append(CallRecord(call.id, call.name, args, "done", result=shown_result(result)))
                continue
            handout = handouts.get(slot)
            if handout is not None:
                records.append(
                    CallRecord(
                        call.id,
                        call.name,
                        args,
                        "external",
                        tool=handout.tool_name,
                        fingerprint=handout.fingerprint,
                        request_args=args_copy(handout.args),
                        digest=args_digest(handout.args),
                        handed_out=handout.handed_out,
                        deadline=handout.deadline,
                        # Handed out with a person's own arguments: its answer says so (``ToolResult.edited``).
                        edited=self.edited is not None and call.id in self.edited,
                    )
                )
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
                        fingerprint=self.view.fingerprint(job.index),
                        request_args=args_copy(job.args),
                        digest=args_digest(job.args),
                        child=child,
                    )
                )
                continue
            entry = waiting[slot]
            # A call admitted from a person's own arguments (approved with them, then asked again: a hook rewrote
            # them, or the tool changed) keeps them: the resume admits it from them, not from the model's. So does
            # one admitted from its repaired arguments: the hooks' rewrite of them is not what they start from.
            person = self.edited is not None and call.id in self.edited and entry.source is not None
            repaired = self.repaired is not None and call.id in self.repaired and entry.source is not None
            records.append(
                CallRecord(
                    call.id,
                    call.name,
                    args,
                    "pending",
                    tool=entry.job.tool.name,
                    fingerprint=entry.fingerprint,
                    request_args=args_copy(entry.job.args),
                    reason=entry.reason,
                    digest=entry.digest,
                    input_args=args_copy(entry.source) if person or repaired else None,
                    edited=person,
                )
            )
        run_id = self.durable.run_id if self.durable is not None else None
        state = new_state(records, list(duplicates), prior, run_id, self.run_identity())
        return Outcome(self.ordered_partial(), duplicates, steering_messages, True, state.pending, state)


# A turn of ``Executor.run``: built in C (``fastpath.slot_builder``), the slots not given taking the values
# ``Turn.__init__`` gives them; ``new_turn(settings, view, count, context, interactive, emit, live, loop, thread,
# durable, run_id, completed, slots)``, ``loop`` and ``thread`` the running loop's (``loop_handle()``,
# ``threading.get_ident()``), the last two new empty lists (``python benches/instructions.py 1 1000 --full``).
new_turn: Callable[
    [
        Settings,
        View,
        int,
        Any,
        bool,
        Emitter | None,
        set[Turn],
        object,
        int,
        RunJournal | None,
        str | None,
        list[Any],
        list[int],
    ],
    Turn,
] = slot_builder(
    Turn,
    (
        "settings",
        "view",
        "count",
        "context",
        "interactive",
        "emit",
        "live",
        "loop",
        "thread",
        "durable",
        "run_id",
        "completed",
        "slots",
    ),
    # Only the slots not given are read from it: a stand-in for the settings, which it reads.
    Turn(cast(Settings, SimpleNamespace(interactive=False)), cast(View, None), 0, None, None, set(), None),
)
