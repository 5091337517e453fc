"""A turn whose calls arrive over time: each call starts the moment it may, results come back in model order.

``Executor.turn()`` gives a ``StreamingTurn``: ``submit`` calls as the model
streams them, ``close`` at the end of the response, ``results()`` yields each
result in model order as soon as it and every earlier one are ready, and
``outcome()`` is what ``run`` would have returned for the same calls.

Every call goes through the same rooms as in ``run``: the engine plans it
(lookup, dedup by ID, validation) as it arrives, admission runs in model
order (one call after another, as in ``run``), and the strategy's schedule
is built online, equal to the schedule of the whole turn, only with earlier
starts:

- Sequential: each call waits for the one before it;
- Parallel: every call starts at once, up to the cap;
- Batched: a chunk starts when it is full (or the stream ends) and the chunk
  before it is done;
- Partitioned: a concurrency-safe call joins the safe batch in progress and
  starts at once; an unsafe call waits for every earlier call and holds every
  later one;
- ResourceAware: the engine's conflict planner takes the calls one at a time
  and says which earlier calls each must wait for.

One task decides what starts (``_drive``); arrivals and finished calls only
change its state and wake it. Batch numbers are the ones ``run`` gives.
``was_concurrent`` depends on how many calls a batch ends with: a result is
handed out (``results``, ``outcome``) once that is known, and ``ToolFinished``
events carry what was known when the call finished. In a journaled turn every
result stays as it was journaled when its call finished (what ``recover``
reads), ``was_concurrent`` included.
"""

from __future__ import annotations

import heapq
import math
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextvars import copy_context
from dataclasses import replace
from types import TracebackType
from typing import Any

import anyio

from toolsched._backends.threads import unwatched
from toolsched._executor.admit import admit, check_semantics, limit_jobs, limit_unknown
from toolsched._executor.call import EXECUTION_FAILURES, SKIPPED, abort_reason, answer_unstarted, execute
from toolsched._executor.durable import JournalFailed, RunJournal
from toolsched._executor.online import Batch, Graph, Schedule
from toolsched._executor.repair import user_repair
from toolsched._executor.schedule import raise_failure, steer, trip
from toolsched._executor.settings import Settings, Steering
from toolsched._executor.strategies import resolve_cap
from toolsched._executor.turn import Held, Job, Plan, Turn, plan_calls
from toolsched._executor.view import View
from toolsched._policy.limits import active_limits
from toolsched._tools.resources import RunResources, current_resources
from toolsched._values.calls import Duplicate, ToolCall, plain_call
from toolsched._values.event_loops import loop_handle
from toolsched._values.events import BatchFinished, BatchStarted, Event
from toolsched._values.exception_text import described
from toolsched._values.fastpath import run_until_suspended
from toolsched._values.outcome import Outcome, new_outcome
from toolsched._values.results import ToolResult
from toolsched.errors import MalformedCallError, OptionError, StreamFailed, ToolschedError, TurnStateError
from toolsched.journal import JournalError

__all__ = ["StreamingTurn", "streaming_refusal", "unread_outcome"]


def streaming_refusal(settings: Settings) -> str | None:
    """Why an executor's turns cannot take calls over time, or None when they can."""
    if settings.pre_batch or settings.post_batch:
        return (
            "pre_batch/post_batch hooks see a whole batch, which a streamed turn does not have until it"
            " ends; run the turn with run() (a list, or an async iterable it reads to the end first)"
        )
    return None


async def unread_outcome(
    settings: Settings,
    view: View,
    calls: list[ToolCall],
    error: BaseException,
    *,
    context: Any,
    run_id: str | None,
    sink: Callable[[Event], Any] | None,
) -> Outcome:
    """The outcome of calls read from a stream that broke before any of them ran (a turn that cannot stream reads
    the whole stream first): each call the engine refuses is answered so, every other one ``skipped``, as a
    streamed turn answers the calls still waiting for admission when its stream breaks. With a journal, the run
    is journaled under ``run_id`` (a new one when None) as a streamed turn's is, so that ``recover`` knows it
    (``RunExistsError`` for an ID already in the journal)."""
    turn = Turn(settings, view, 0, context, settings.emitter(sink, None), set(), None)
    durable = None
    if settings.journal is not None:
        durable = RunJournal(settings.journal, uuid.uuid4().hex if run_id is None else run_id)
        await durable.begin(calls)
        turn.durable = durable
        turn.run_id = run_id = durable.run_id
    try:
        plan = plan_calls(settings, view, calls)
        turn.note_plan(plan)
        reason = f"not run: the stream of calls broke ({described(error)})"
        for slot, call in enumerate(plan.calls):
            kind, message = plan.refused.get(slot, ("skipped", reason))
            await turn.answer(slot, call, plan.tool_name(view, slot), kind, message)
        if turn.emit is not None:
            await turn.emit.flush()
    except JournalFailed as failed:
        raise failed.error from None
    finally:
        if durable is not None:
            await durable.release()
    return new_outcome(turn.ordered_partial(), plan.duplicates, [], False, [], None, run_id)


async def _shielded(work: Any) -> None:
    with anyio.CancelScope(shield=True):
        await work()


class StreamingTurn:
    """A turn that takes its calls over time (``Executor.turn``); use it as an async context manager.

    ``submit(call)`` hands over a call the moment it is complete; ``close()``
    says no more will come. ``results()`` yields every result in model order,
    each as soon as it and all earlier ones are ready; ``outcome()`` returns
    what ``Executor.run`` returns for the same calls. Leaving the block closes
    the turn and waits for its calls.

    If the block raises (the model's stream broke, the caller gave up), calls
    not started are answered ``skipped``, running calls of tools with
    ``interrupt_behavior="cancel"`` are cancelled, ``"block"`` calls finish,
    and ``StreamFailed`` is raised carrying the outcome of the calls submitted
    so far (journaled in a durable run, so ``recover`` never runs them again).
    A cancellation of the caller is wound down the same way and then goes on.
    """

    def __init__(
        self,
        settings: Settings,
        view: View,
        runs: set[Turn],
        refresh: Callable[[], Awaitable[None]] | None,
        *,
        steering: Steering | None,
        context: Any,
        run_id: str | None,
        sink: Callable[[Event], Any] | None = None,
    ) -> None:
        """Made by ``Executor.turn`` (``runs``: the executor's runs in progress; ``refresh``: the
        registry's refresh once the turn is over, when it has one)."""
        refusal = streaming_refusal(settings)
        if refusal is not None:
            raise OptionError(refusal)
        if loop_handle() is None:
            # Refused before anything of the turn is made (its streams would be left unclosed).
            raise TurnStateError(
                "executor.turn() was called where no event loop runs; make the turn on the event loop that runs "
                "it: async with executor.turn() as turn: ..."
            )
        self._refresh = refresh
        self._steering = steering
        self._context = context
        self._run_id = run_id
        self._turn = turn = Turn(settings, view, 0, context, settings.emitter(sink, None), runs, None)
        turn.tasked = True
        if run_id is not None:
            turn.run_id = run_id
        strategy = settings.strategy
        self._kind = strategy.kind
        self._cap = resolve_cap(strategy)
        self._schedule = Schedule(strategy.kind, self._cap, max(1, int(getattr(strategy, "size", 1))))
        # Whether a failure may cancel its siblings: then every call that may overlap runs in a cancel scope.
        self._may_abort = self._cap > 1 and (
            settings.abort_siblings_on_error or any(tool.abort_siblings_on_error for tool in view.tools)
        )
        # The calls by slot (first occurrences, model order), and the repeats dropped.
        self._calls: list[ToolCall] = []
        self._ids: dict[str, int] = {}
        # The slot of each first occurrence, by its position in the stream.
        self._slots: dict[int, int] = {}
        self._positions = 0
        self._duplicates: list[Duplicate] = []
        self._held: list[Held] = []
        self._jobs: list[Job] = []
        turn.jobs = self._jobs
        # Admission in model order: (position, call, slot, plan) for calls the engine refused,
        # (..., job) for the rest, (..., None) for a repeated ID (only journaled).
        self._admission_in, self._admission_out = anyio.create_memory_object_stream[
            tuple[int, ToolCall, int, Plan | Job | None]
        ](max_buffer_size=math.inf)
        self._journal = settings.journal
        self._keep_alive = anyio.CancelScope()
        # Admission's own scope: a broken stream stops what admission awaits (a hook, a person, a check).
        self._admission_scope = anyio.CancelScope()
        # The scope of a steering question being asked (None while none is): a broken stream ends it too.
        self._asking: anyio.CancelScope | None = None
        self._admitting = True
        self._current = -1
        self._in_flight = 0
        # Calls in flight that lent their slots while they wait without working (a rate-limit token, a retry's
        # backoff), and those of them waiting for a slot again; what they wait on (None while none does).
        self._lent = 0
        self._reclaiming = 0
        self._freed: anyio.Event | None = None
        turn.lender = self
        self._launched: set[int] = set()
        self._closed = False
        self._over = False
        self._entered = False
        # The thread whose event loop runs the turn (set when the block is entered).
        self._thread: int | None = None
        self._steered: list[Any] | None = None
        self._stop: str | None = None
        self._error: BaseException | None = None
        self._delivered = False
        self._outcome: Outcome | None = None
        self._wake = anyio.Event()
        self._finished = anyio.Event()
        # What consumers of ``results()`` wait on, made when the first waits (None while none does).
        self._ready: anyio.Event | None = None
        self._group: Any = None
        # A KeyboardInterrupt, SystemExit or GeneratorExit from a tool: raised as itself once the turn is down.
        self._fatal: BaseException | None = None
        self._resources: RunResources | None = None
        self._token: Any = None
        self._base = copy_context()

    # -- the block ------------------------------------------------------------------

    async def __aenter__(self) -> StreamingTurn:
        if self._entered:
            raise TurnStateError("a streamed turn is entered once")
        self._entered = True
        self._thread = threading.get_ident()
        turn = self._turn
        # Made by ``Executor.turn``, maybe outside the loop: it runs on this one.
        turn.loop, turn.thread = loop_handle(), self._thread
        if self._journal is not None:
            durable = RunJournal(self._journal, uuid.uuid4().hex if self._run_id is None else self._run_id)
            await durable.begin([])
            turn.durable = durable
            turn.run_id = self._run_id = durable.run_id
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        if turn.view.resourceful:
            self._resources = RunResources(self._group, self._context)
            self._token = current_resources.set(self._resources)
        # Calls run in copies of the caller's context as it is now (the run's resources included).
        self._base = unwatched(copy_context())
        turn.live.add(turn)
        # Its tasks are shielded: only the turn stops its calls (a caller's cancellation winds it down).
        self._group.start_soon(_shielded, self._admit_in_order)
        self._group.start_soon(_shielded, self._drive)
        if turn.durable is not None:
            self._group.start_soon(self._renew_lease, turn.durable)
        return self

    async def _renew_lease(self, durable: RunJournal) -> None:
        with self._keep_alive:
            await durable.watch(self._lease_lost)

    def _lease_lost(self, error: JournalError) -> None:
        """The run's lease is lost: the turn fails with it and winds down as a broken stream (closed: a later
        ``submit`` is refused), every running call that can be stopped cancelled whatever its
        ``interrupt_behavior`` (nothing of it can be journaled now)."""
        self._fail(error)
        self._wind_down(error, lease_lost=True)

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        caught: BaseException | None = None
        if error is not None and error is self._error:
            # The turn's own failure, raised in the block by ``outcome()`` or ``results()``: the turn ended with
            # it, the stream did not break. It goes on as it is.
            error = None
        if error is None:
            self.close()
            try:
                await self._finished.wait()
            except BaseException as exc:
                # Cancelled (or interrupted) while its calls ran: wound down as a broken stream.
                caught = error = exc
        if error is not None:
            self._wind_down(error)
            late = await self._wait_finished()
            if late is not None and caught is None:
                caught = late
        self._keep_alive.cancel()
        if self._resources is not None:
            # The task group waits for the resources' keepers: they close before it is left.
            self._resources.error = error if error is not None else self._error
            self._resources.close()
        cancelled = anyio.get_cancelled_exc_class()
        passed = error if isinstance(error, cancelled) else None
        try:
            await self._group.__aexit__(
                None if passed is None else type(passed), passed, None if passed is None else passed.__traceback__
            )
        finally:
            self._release()
            if self._turn.durable is not None:
                with anyio.CancelScope(shield=True):
                    await self._turn.durable.release()
        if caught is not None:
            raise caught
        if self._fatal is not None:
            raise self._fatal
        if self._refresh is not None:
            await self._refresh()
        if error is not None:
            if isinstance(error, Exception):
                raise StreamFailed(self._partial(), error) from error
            return
        if self._error is not None and not self._delivered:
            self._delivered = True
            raise self._error

    async def _wait_finished(self) -> BaseException | None:
        """Waits, shielded, until the turn is over, however often the caller's task is cancelled meanwhile (an
        asyncio ``task.cancel()`` passes anyio's shield: a second one left the calls running, the run live and a
        journaled run's lease held). The first such cancellation is handed back, to be raised once all is down."""
        pending: BaseException | None = None
        cancelled = anyio.get_cancelled_exc_class()
        with anyio.CancelScope(shield=True):
            while not self._finished.is_set():
                try:
                    await self._finished.wait()
                except cancelled as exc:
                    if pending is None:
                        pending = exc
        return pending

    def _release(self) -> None:
        turn = self._turn
        turn.live.discard(turn)
        if self._resources is not None:
            current_resources.reset(self._token)

    def _wind_down(self, error: BaseException | None, *, lease_lost: bool = False) -> None:
        """The stream broke: nothing new starts; ``"cancel"`` calls are cancelled, ``"block"`` calls finish (one
        waiting without working, for a rate-limit token or a retry's backoff, works no more), as ``interrupt``.
        ``lease_lost``: the run's lease is lost (``error``), and ``"block"`` calls are cancelled too where they
        can be."""
        what = "the run's lease was lost" if lease_lost else "the stream of calls broke"
        reason = what
        if error is not None:
            detail = described(error)
            reason = f"{what} ({detail})"
        self._turn.stop_calls(f"not run: {reason}", self._jobs, f": {reason}", every_call=lease_lost)
        self.close()
        # A call whose pre hook, approval or input check is awaited would hold the turn (and the caller's
        # cancellation) until it returned: it is answered without running instead, as every call after it.
        self._admission_scope.cancel()
        if self._asking is not None:
            self._asking.cancel()

    # -- input ----------------------------------------------------------------------

    def submit(self, call: ToolCall) -> None:
        """Hands over the next call of the turn (model order); it starts as soon as the schedule lets it."""
        if type(call) is not ToolCall:
            if not isinstance(call, ToolCall):
                raise MalformedCallError(f"submit() takes a ToolCall, got {type(call).__name__}")
            # Read once, here: the turn holds what was read (a subclass may answer differently on every read).
            call = plain_call(call, self._positions)
        if not self._entered:
            raise TurnStateError("submit() needs the turn's block: async with executor.turn() as turn")
        self._check_thread("submit")
        if self._closed:
            raise TurnStateError(f"the turn is closed; call {call.id!r} was not taken")
        position = self._positions
        self._positions += 1
        first = self._ids.get(call.id)
        if first is not None:
            self._duplicates.append(self._duplicate(call, position, first))
            self._admission_in.send_nowait((position, call, -1, None))
            return
        slot = len(self._calls)
        self._ids[call.id] = position
        self._slots[position] = slot
        self._calls.append(call)
        turn = self._turn
        plan = plan_calls(turn.settings, turn.view, [call], jobs=True)
        if plan.repairs:
            turn.note_plan(plan)
        if plan.refused:
            self._admission_in.send_nowait((position, call, slot, plan))
            return
        job = plan.jobs[0]
        job.slot = slot
        self._jobs.append(job)
        self._admission_in.send_nowait((position, call, slot, job))

    def _duplicate(self, call: ToolCall, position: int, first: int) -> Duplicate:
        """A repeated call ID: dropped, with whether its arguments differ from the first call's (as the engine says)."""
        turn = self._turn
        original = self._calls[self._slot_of_position(first)]
        rows = turn.view.table.prepare([original, call], turn.view.toolset.disabled_mask(), turn.settings.limits)[4]
        differ = bool(rows[0][2]) if rows else True
        return Duplicate(call.id, position, first, differ)

    def _slot_of_position(self, position: int) -> int:
        return self._slots[position]

    def _check_thread(self, method: str) -> None:
        """Refuses a call from a thread other than the one whose event loop runs the turn: nothing there would
        wake the turn (asyncio), or the call would half happen (trio)."""
        if self._thread is not None and threading.get_ident() != self._thread:
            raise TurnStateError(
                f"{method}() was called from another thread than the one running the turn's event loop; "
                f"hand it over with anyio.from_thread.run_sync(turn.{method}, ...)"
            )

    def close(self) -> None:
        """No more calls will come (the model's response ended); closing twice is harmless."""
        self._check_thread("close")
        if self._closed:
            return
        self._closed = True
        self._admission_in.close()

    # -- output ---------------------------------------------------------------------

    async def results(self) -> AsyncIterator[ToolResult]:
        """Each result in model order, as soon as it and every earlier result are ready.

        Ends when the turn is over (after ``close``); raises what ``outcome``
        would raise once the results before the failure are out.
        """
        if not self._entered:
            raise TurnStateError("results() needs the turn's block: async with executor.turn() as turn")
        turn = self._turn
        by_slot: dict[int, ToolResult] = {}
        seen = 0
        given = 0
        while True:
            completed = turn.completed
            while seen < len(completed):
                by_slot[turn.slots[seen]] = completed[seen]
                seen += 1
            if given in by_slot:
                final = self._final(given, by_slot[given])
                if final is not None:
                    yield final
                    given += 1
                    # The consumer may have awaited while it held that result: what finished meanwhile (the turn's
                    # end included) is read again before anything is judged over.
                    continue
            if self._over and (given >= len(self._calls) or given not in by_slot):
                # Every result is out, or the next waits for a person (or the turn failed).
                break
            # Every consumer waiting now shares one event: ``_notify`` sets it, the next waiter makes another.
            if self._ready is None:
                self._ready = anyio.Event()
            await self._ready.wait()
        if self._error is not None:
            self._delivered = True
            raise self._error

    async def outcome(self) -> Outcome:
        """Waits for the turn to end (after ``close``) and returns what ``run`` returns for the same calls."""
        if not self._entered:
            raise TurnStateError("outcome() needs the turn's block: async with executor.turn() as turn")
        await self._finished.wait()
        if self._error is not None:
            self._delivered = True
            raise self._error
        assert self._outcome is not None
        return self._outcome

    def _final(self, slot: int, result: ToolResult) -> ToolResult | None:
        """A result as it stands once its batch's size is known; None while it is not."""
        batch = self._schedule.batch_of.get(slot)
        if batch is None or result.batch is None or self._turn.durable is not None:
            # A journaled result stays as it was journaled when the call finished (recover() reads it so).
            return result
        concurrent = batch.concurrent()
        if concurrent is None:
            return None
        if self._schedule.graph is not None and concurrent:
            concurrent = self._schedule.graph.known[self._schedule.graph.index[slot]]
        if result.was_concurrent != concurrent:
            return replace(result, was_concurrent=concurrent)
        return result

    def _notify(self) -> None:
        ready = self._ready
        if ready is not None:
            self._ready = None
            ready.set()
        freed = self._freed
        if freed is not None:
            self._freed = None
            freed.set()
        self._wake.set()

    # -- admission, in model order ----------------------------------------------------

    async def _admit_in_order(self) -> None:
        turn = self._turn
        # What admission holds when the stream breaks: the item it took last, and the last position journaled.
        taken: tuple[int, ToolCall, int, Plan | Job | None] | None = None
        journaled = -1
        try:
            async with self._admission_out:
                with self._admission_scope:
                    async for position, call, slot, item in self._admission_out:
                        taken = (position, call, slot, item)
                        if turn.durable is not None:
                            # Journaled before anything else happens to it, so that recover() knows every call.
                            await turn.durable.add(position, call)
                        journaled = position
                        if isinstance(item, Plan):
                            item = await self._repaired(slot, item)
                            if item is None:
                                continue
                            # Repaired: from here on admission holds the call's job, as any other's.
                            taken = (position, call, slot, item)
                        await self._admit_one(slot, item)
                if self._admission_scope.cancelled_caught:
                    # The stream broke while admission waited (a hook, a person, a check): what it held, and
                    # what was still to come, is answered without running.
                    with anyio.CancelScope(shield=True):
                        await self._unadmitted(taken, journaled)
        except Exception as exc:
            # UnknownToolError (unknown_tool="raise"), a journal failure: the turn ends with it.
            self._fail(exc)
        finally:
            self._admitting = False
            self._schedule.seal_last()
            self._notify()

    async def _unadmitted(self, taken: tuple[int, ToolCall, int, Plan | Job | None] | None, journaled: int) -> None:
        """Answers the call admission held when the stream broke (unless it was placed, answered or held for a
        person meanwhile) and every call still waiting for admission, each journaled first in a durable run."""
        turn = self._turn
        pending: list[tuple[int, ToolCall, int, Plan | Job | None]] = [] if taken is None else [taken]
        while True:
            try:
                pending.append(self._admission_out.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                break
        answered = set(turn.slots)
        held = {entry.job.slot for entry in self._held}
        for position, call, slot, item in pending:
            if turn.durable is not None and position > journaled:
                await turn.durable.add(position, call)
            if item is None or slot in answered:
                continue
            if isinstance(item, Plan):
                # Answered as refused even where an unknown tool would raise (``unknown_tool="raise"``): the turn
                # ends with the broken stream already, and every call after it is still to be answered.
                kind, message = item.refused[0]
                await turn.answer(slot, item.calls[0], item.tool_name(turn.view, 0), kind, message)
            elif item.slot not in self._schedule.batch_of and item.slot not in held:
                await self._skip([item], None)
        self._notify()

    async def _repaired(self, slot: int, plan: Plan) -> Job | None:
        """The job of a call the engine refused, once the repair function repaired it; else the call is answered
        as refused, and None."""
        turn = self._turn
        repaired = await user_repair(turn, plan, 0, slot) if turn.settings.repair_function is not None else None
        if repaired is None:
            limits = active_limits()
            if limits is not None:
                # A call to a tool that does not exist counts toward the run's caps too.
                limit_unknown(plan, 0, turn, limits)
            await turn.answer_refused(plan, 0, slot)
            self._notify()
            return None
        self._jobs.append(repaired)
        return repaired

    async def _admit_one(self, slot: int, job: Job | None) -> None:
        """Admits one call taken from the stream, placed in the schedule unless refused (``None``: a repeated
        call ID, journaled only)."""
        turn = self._turn
        view = turn.view
        if job is None:
            return
        if self._stop is not None or turn.halt is not None or self._steered is not None:
            await self._skip([job], None)
            return
        jobs = [job]
        limits = active_limits()
        if limits is not None:
            jobs = await limit_jobs(jobs, turn, limits)
        if view.checks_input and jobs:
            jobs = await check_semantics(jobs, turn)
        if view.admits and jobs:
            jobs = await admit(jobs, turn, self._held, None)
        if jobs:
            self._schedule.place(job)
        self._notify()

    def _fail(self, exc: BaseException) -> None:
        if isinstance(exc, JournalFailed):
            exc = exc.error
        if self._error is None:
            self._error = exc
        if self._stop is None:
            self._stop = f"not run: the turn failed ({type(exc).__name__})"

    # -- the online schedule ------------------------------------------------------------

    async def _drive(self) -> None:
        """The one task that starts calls: wakes on every arrival and every finished call."""
        turn = self._turn
        try:
            while True:
                await self._wake.wait()
                self._wake = anyio.Event()
                await self._start_what_may()
                if turn.emit is not None and turn.emit.pending:
                    await turn.emit.flush()
                if not self._admitting and self._in_flight == 0 and self._all_started():
                    break
            await self._end()
        except BaseException as exc:
            if not isinstance(exc, Exception):
                self._fatal = self._fatal or exc
            self._fail(exc)
            await self._end()

    def _all_started(self) -> bool:
        if self._schedule.graph is not None:
            return (not self._schedule.graph.heap and self._schedule.graph.unstarted == 0) or self._stopped()
        return self._current >= len(self._schedule.batches) - 1 and (
            not self._schedule.batches or self._schedule.batches[-1].next >= len(self._schedule.batches[-1].jobs)
        )

    def _stopped(self) -> bool:
        return self._stop is not None or self._steered is not None

    async def _start_what_may(self) -> None:
        if self._schedule.graph is not None:
            await self._start_in_graph(self._schedule.graph)
            return
        turn = self._turn
        while True:
            batch = self._schedule.batches[self._current] if self._current >= 0 else None
            if batch is not None and not batch.complete():
                # A failing batch settles, as in run(): its calls still start; later batches do not.
                limit = batch.concurrency
                while self._busy() < limit and batch.next < len(batch.jobs) and self._may_start(batch):
                    job = batch.jobs[batch.next]
                    batch.next += 1
                    self._launch(job, batch)
                return
            if batch is not None:
                await self._batch_over(batch)
                if self._stopped():
                    await self._skip_later()
                    return
            following = self._current + 1
            if following >= len(self._schedule.batches):
                return
            upcoming = self._schedule.batches[following]
            if upcoming.number and self._steering is not None and turn.halt is None:
                messages = await self._ask_steering()
                if messages:
                    self._steered = list(messages)
                    await self._skip_later()
                    return
            self._current = following
            turn.batch = upcoming.jobs
            turn.scoped = self._may_abort and upcoming.concurrency > 1
            if turn.emit is not None:
                turn.emit(
                    BatchStarted(upcoming.number, tuple(j.call.id for j in upcoming.jobs), upcoming.concurrency > 1)
                )

    def _may_start(self, batch: Batch) -> bool:
        # A Batched chunk starts whole: once it is full or the stream ended.
        return batch.sealed or self._kind != "batched"

    async def _start_in_graph(self, graph: Graph) -> None:
        turn = self._turn
        batch = graph.batch
        if self._current < 0:
            self._current = 0
            turn.batch = batch.jobs
            turn.scoped = self._may_abort
            if turn.emit is not None:
                turn.emit(BatchStarted(0, tuple(j.call.id for j in batch.jobs), self._cap > 1))
        if self._stopped():
            await self._skip_graph(graph)
            return
        if self._steering is not None and graph.finished_since_steering and graph.unstarted and turn.halt is None:
            # As in run(): asked after calls finish while calls remain unstarted.
            graph.finished_since_steering = 0
            messages = await self._ask_steering()
            if messages:
                self._steered = list(messages)
                await self._skip_graph(graph)
                return
        while graph.heap and self._busy() < self._cap:
            index = heapq.heappop(graph.heap)
            graph.unstarted -= 1
            self._launch(batch.jobs[index], batch)

    async def _ask_steering(self) -> Sequence[Any] | None:
        """Asks the steering callback for messages; None, as if it had none, when the stream breaks meanwhile
        (the question would hold the turn, and the caller's cancellation, until it returned)."""
        assert self._steering is not None
        with anyio.CancelScope() as scope:
            self._asking = scope
            try:
                return await steer(self._steering, self._base)
            finally:
                self._asking = None
        return None

    # -- slots lent by calls that wait without working ------------------------------------------

    def _busy(self) -> int:
        """The slots taken: calls working, and calls waiting to work again (they come before new calls)."""
        return self._in_flight - self._lent + self._reclaiming

    def _lends(self) -> tuple[bool, int]:
        """Whether the calls running now lend their slots while they wait, as in ``run`` (where a pool runs
        them: a ResourceAware turn, or a batch that may run calls together), and how many slots there are."""
        if self._schedule.graph is not None:
            return True, self._cap
        if self._current < 0:
            return False, 1
        concurrency = self._schedule.batches[self._current].concurrency
        return concurrency > 1, concurrency

    def lend(self) -> None:
        """A running call waits without working: another call may start in its slot."""
        if self._lends()[0]:
            self._lent += 1
            self._notify()

    async def reclaim(self) -> None:
        """A call that lent its slot works again once a slot is free (before any new call starts)."""
        lends, slots = self._lends()
        if not lends:
            return
        self._reclaiming += 1
        try:
            # ``_lent`` counts this call still: the others working are ``_in_flight - _lent``.
            while self._in_flight - self._lent >= slots:
                if self._freed is None:
                    self._freed = anyio.Event()
                await self._freed.wait()
        finally:
            self._reclaiming -= 1
            self._lent -= 1

    def gave_back(self) -> None:
        """A call that lent its slot stopped while it waited: it takes no slot again."""
        if self._lends()[0]:
            self._lent -= 1

    def _launch(self, job: Job, batch: Batch) -> None:
        self._launched.add(job.slot)
        self._in_flight += 1
        concurrent = batch.concurrent()
        self._group.start_soon(self._run, job, batch, bool(concurrent))

    async def _run(self, job: Job, batch: Batch, concurrent: bool) -> None:
        turn = self._turn
        try:
            with anyio.CancelScope(shield=True):
                if self._schedule.graph is not None and concurrent:
                    concurrent = self._schedule.graph.known[self._schedule.graph.index[job.slot]]
                suspended = run_until_suspended(execute(job, batch.number, concurrent, turn), self._base)
                if suspended is not None:
                    await suspended
        except Exception as exc:
            # A journal failure: the turn ends with it.
            self._fail(exc)
        except BaseException as exc:
            self._fatal = self._fatal or exc
            self._fail(exc)
        finally:
            self._in_flight -= 1
            batch.done += 1
            if self._schedule.graph is not None:
                self._schedule.graph.finished(self._schedule.graph.index[job.slot])
            self._after(job, batch)
            self._notify()

    def _after(self, job: Job, batch: Batch) -> None:
        """A call finished: a raising failure or a tripped guardrail stops new starts; an aborting failure
        in a batch that may still grow cancels the calls that join it."""
        turn = self._turn
        if turn.tripped is not None or turn.failures is not None:
            if self._stop is None:
                self._stop = "stopped"
        if (
            turn.abort is None
            and not batch.sealed
            and (turn.settings.abort_siblings_on_error or job.tool.abort_siblings_on_error)
        ):
            # The call's result, looked for from the latest: it was recorded as the call ended (a scan from the
            # first result made a turn of n calls cost n squared; 8,000 calls took 2.7 s).
            slots = turn.slots
            for index in range(len(slots) - 1, -1, -1):
                if slots[index] == job.slot:
                    if turn.completed[index].error_kind in EXECUTION_FAILURES:
                        turn.abort = abort_reason(job)
                    break

    async def _batch_over(self, batch: Batch) -> None:
        turn = self._turn
        turn.abort = None
        turn.scoped = False
        batch.ended = True
        if turn.emit is not None:
            turn.emit(BatchFinished(batch.number, tuple(job.call.id for job in batch.jobs)))

    async def _skip(self, jobs: Sequence[Job], batch: int | None) -> None:
        turn = self._turn
        if self._steered is not None and turn.halt is None:
            await answer_unstarted(list(jobs), turn, "skipped", SKIPPED, batch)
        elif turn.halt is not None:
            await answer_unstarted(list(jobs), turn, "skipped", turn.halt, batch)
        else:
            await answer_unstarted(list(jobs), turn, "skipped", self._failure_reason())
        self._notify()

    def _failure_reason(self) -> str:
        turn = self._turn
        if turn.failures:
            _, first, _ = min(turn.failures, key=lambda failure: failure[0])
            return f"not run: call {first.call_id} (`{first.tool_name}`) failed"
        return self._stop or "not run"

    async def _skip_unstarted(self, batch: Batch) -> None:
        if batch.next < len(batch.jobs):
            rest = batch.jobs[batch.next :]
            batch.next = len(batch.jobs)
            batch.done += len(rest)
            await self._skip(rest, None)

    async def _skip_later(self) -> None:
        for batch in self._schedule.batches[self._current + 1 :]:
            await self._skip_unstarted(batch)
        self._current = len(self._schedule.batches) - 1

    async def _skip_graph(self, graph: Graph) -> None:
        batch = graph.batch
        answered = set(self._turn.slots)
        rest = [job for job in batch.jobs if job.slot not in self._launched and job.slot not in answered]
        for job in rest:
            index = graph.index[job.slot]
            if index in graph.heap:
                graph.heap.remove(index)
            graph.unstarted -= 1
        heapq.heapify(graph.heap)
        if rest:
            await self._skip(rest, None)

    async def _end(self) -> None:
        """The turn is over: the outcome (or the failure), once every call is answered."""
        turn = self._turn
        try:
            if self._schedule.graph is not None:
                await self._skip_graph(self._schedule.graph)
            else:
                for batch in self._schedule.batches:
                    await self._skip_unstarted(batch)
            if self._schedule.graph is not None and self._current >= 0 and turn.emit is not None:
                turn.emit(BatchFinished(0, tuple(job.call.id for job in self._schedule.graph.batch.jobs)))
            elif self._current >= 0 and not self._schedule.batches[self._current].ended:
                await self._batch_over(self._schedule.batches[self._current])
            if turn.emit is not None:
                await turn.emit.flush()
            self._settle_concurrency()
            turn.count = len(self._calls)
            if self._error is None:
                if turn.tripped is not None:
                    self._error = trip(turn)
                elif turn.failures is not None:
                    try:
                        await raise_failure([], turn, turn.failures)
                    except ToolschedError as exc:
                        self._error = exc
            if self._error is None:
                messages = self._steered or []
                if not self._held and not turn.parked and not turn.external:
                    self._outcome = new_outcome(turn.ordered(), self._duplicates, messages, False, [], None, None)
                else:
                    self._outcome = turn.finish(self._calls, self._held, self._duplicates, messages, None)
                limits = active_limits()
                if limits is not None:
                    limits.settle(self._outcome.results, run=turn.run_identity())
                if self._run_id is not None:
                    self._outcome = replace(self._outcome, run_id=self._run_id)
        finally:
            self._over = True
            self._finished.set()
            self._notify()

    def _settle_concurrency(self) -> None:
        """Every batch is sealed now: results carry the ``was_concurrent`` that ``run`` gives them."""
        turn = self._turn
        for batch in self._schedule.batches:
            batch.sealed = True
        completed = turn.completed
        for position, slot in enumerate(turn.slots):
            final = self._final(slot, completed[position])
            if final is not None:
                completed[position] = final

    def _partial(self) -> Outcome:
        """The outcome of the calls submitted before the stream broke (every one answered)."""
        if self._outcome is not None:
            return self._outcome
        turn = self._turn
        return new_outcome(turn.ordered_partial(), self._duplicates, [], False, [], None, self._run_id)
