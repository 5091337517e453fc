"""Running a turn's admitted calls under its strategy; a concurrent batch's calls on a worker pool
(``_executor/pool.py``) that has tasks only once a call waits.

Sequential, Parallel, Batched and Partitioned run the engine's batches one
after another (steering and interrupts checked between them); ResourceAware
runs the whole turn as one graph, each call starting once every earlier call
it conflicts with has finished.
"""

from __future__ import annotations

import contextvars
import heapq
import inspect
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any

import anyio
import anyio.lowlevel

from toolsched import _core
from toolsched._backends.workers import observer_failure, own_failure
from toolsched._executor.call import SKIPPED, answer_unstarted, execute
from toolsched._executor.pool import run_pool
from toolsched._executor.settings import Steering
from toolsched._executor.stepped import stepped_calls
from toolsched._executor.strategies import resolve_cap
from toolsched._executor.turn import PENDING, Job, Turn, judge
from toolsched._policy.hooks import BatchEvent, Hook, HookTimeout
from toolsched._tools.tools import Access
from toolsched._values.calls import ToolCall, args_copy
from toolsched._values.decisions import Decision
from toolsched._values.events import BatchFinished, BatchStarted
from toolsched._values.exception_text import described
from toolsched._values.fastpath import run_until_suspended
from toolsched._values.numeric_options import shown
from toolsched._values.results import ToolResult, shown_result
from toolsched.errors import GuardrailTripped, OptionError, ToolCallFailed, ToolTimeoutError

__all__ = [
    "aborts",
    "declared_access",
    "is_safe",
    "partitioned_batches",
    "raise_failure",
    "readable_access",
    "run_jobs",
    "steer",
    "trip",
]

logger = logging.getLogger("toolsched")


# -- running a turn -----------------------------------------------------------------


def run_jobs(jobs: list[Job], turn: Turn, steering: Steering | None) -> Coroutine[Any, Any, list[Any]]:
    """Runs the admitted calls (a coroutine to await: the one that does it, with no frame of this function left
    in the chain each step of a waiting call passes through); meanwhile the run can be interrupted and its
    calls cancelled (it is among the executor's live runs).

    Every call runs in its own copy of the caller's context, as a task would
    (``run_until_suspended``): what a tool does to context variables stays in
    its call.

    The coroutine returns the steering messages when steering stopped the run. It is one frame fewer than a
    wrapper per batch (``python benches/instructions.py 3 10 --runs 100 --wait``; the counts are in
    docs/performance.md).
    """
    settings = turn.settings
    # Read when a run starts (the environment may say), whatever the turn holds.
    cap = resolve_cap(settings.strategy)
    turn.jobs = jobs
    if len(jobs) == 1 and turn.emit is None and not settings.pre_batch and not settings.post_batch:
        return _run_alone(jobs, turn)
    if settings.strategy.kind == "resource_aware":
        return _run_graph(jobs, turn, cap, steering)
    return _run_batches(jobs, turn, cap, steering)


async def _run_alone(jobs: list[Job], turn: Turn) -> list[Any]:
    """One call, no batch hooks, no events: batch 0 without the batch bookkeeping."""
    turn.live.add(turn)
    try:
        # Nothing has awaited since the run was registered, so no interrupt can be pending.
        turn.batch = jobs
        suspended = run_until_suspended(execute(jobs[0], 0, False, turn))
        if suspended is not None:
            await suspended
        if turn.tripped is not None:
            raise trip(turn)
        if turn.failures is not None:
            await raise_failure([], turn, turn.failures)
        return []
    finally:
        turn.live.discard(turn)


def _batches(jobs: list[Job], turn: Turn, cap: int) -> list[tuple[int, int, int]]:
    strategy = turn.settings.strategy
    if len(jobs) <= 1:
        return [(0, len(jobs), 1)] if jobs else []
    if strategy.kind == "partitioned":
        if turn.view.all_safe:
            # Every tool of the set is safe whatever its arguments: one batch, nothing to ask.
            return [(0, len(jobs), min(cap, len(jobs)))]
        # Most tools declare a constant: the tool is asked only when it judges its arguments.
        safe = [job.facts.static_safe if job.facts.static_safe is not None else is_safe(job) for job in jobs]
        return partitioned_batches(safe, cap)
    size = getattr(strategy, "size", 1)
    batches: list[tuple[int, int, int]] = _core.plan_batches(
        strategy.kind, [False] * len(jobs), max_concurrency=cap, size=size
    )
    return batches


def partitioned_batches(safe: list[bool], cap: int) -> list[tuple[int, int, int]]:
    """``Partitioned``'s batches for calls of this concurrency-safety: the engine's plan, which for calls that are
    all safe is one batch of all of them (made here: the crossing costs more than the answer)."""
    if safe and False not in safe:
        return [(0, len(safe), min(cap, len(safe)))]
    batches: list[tuple[int, int, int]] = _core.plan_batches("partitioned", safe, max_concurrency=cap)
    return batches


def is_safe(job: Job) -> bool:
    return judge(job, job.facts.static_safe, job.tool.is_concurrency_safe, False, "running the call alone")


def aborts(jobs: Sequence[Job], turn: Turn) -> bool:
    """Whether a failure among ``jobs`` cancels the others (the executor's option, or a tool's)."""
    if turn.settings.abort_siblings_on_error:
        return True
    # A loop rather than ``any`` over a generator: this runs for every batch of every turn.
    for job in jobs:
        if job.tool.abort_siblings_on_error:
            return True
    return False


async def _run_batches(jobs: list[Job], turn: Turn, cap: int, steering: Steering | None) -> list[Any]:
    """The planned batches one after another, with steering and interrupts checked between them."""
    turn.live.add(turn)
    try:
        settings = turn.settings
        batches = _batches(jobs, turn, cap)
        count = len(batches)
        # By index, not enumerate: no iterator objects stay alive while a batch's calls wait.
        for number in range(count):
            start, end, concurrency = batches[number]
            if count == 1:
                # The usual turn, one batch: its plan (a list and a tuple) is not kept while its calls wait.
                del batches
            if number:
                # A cancellation of the run that arrived as the last batch ended stops it here: nothing more starts.
                await anyio.lowlevel.checkpoint_if_cancelled()
            if turn.halt is not None:
                await answer_unstarted(jobs[start:], turn, "skipped", turn.halt)
                return []
            if number and steering is not None:
                messages = await steer(steering)
                if messages:
                    await answer_unstarted(jobs[start:], turn, "skipped", SKIPPED)
                    return list(messages)
            batch = jobs if end - start == len(jobs) else jobs[start:end]
            concurrent = concurrency > 1 and len(batch) > 1
            turn.batch = batch
            turn.scoped = concurrent and aborts(batch, turn)
            if turn.emit is not None:
                turn.emit(BatchStarted(number, tuple(job.call.id for job in batch), concurrent))
            recorded = len(turn.completed)
            blocked = await _before_batch(batch, number, concurrent, turn) if settings.pre_batch else None
            if blocked is not None:
                await answer_unstarted(batch, turn, "hook_blocked", blocked, number)
            elif concurrent:
                try:
                    await run_pool(
                        batch,
                        concurrency,
                        _in_batch(number, turn),
                        turn,
                        whole_task=True,
                        stepped=stepped_calls,
                        batch=number,
                    )
                finally:
                    turn.pool = None
                if len(turn.completed) - recorded < len(batch):
                    # Fewer results than calls (asked in one step: the batch is looked through only then). Calls
                    # still pending had their tasks cancelled from outside the run before their first step (the
                    # pool never cancels one that has not begun): they never ran, and are answered so.
                    unstarted = [job for job in batch if job.state == PENDING]
                    if unstarted:
                        await answer_unstarted(unstarted, turn, "cancelled", CANCELLED_UNSTARTED, number)
            else:
                for job in batch:
                    suspended = run_until_suspended(execute(job, number, False, turn))
                    if suspended is not None:
                        await suspended
                        # The call waited: a cancellation of the run may have come as it ended.
                        await anyio.lowlevel.checkpoint_if_cancelled()
            turn.abort = None
            turn.scoped = False
            if settings.post_batch:
                await _after_batch(batch, number, concurrent, turn, recorded)
            if turn.emit is not None:
                turn.emit(BatchFinished(number, tuple(job.call.id for job in batch)))
                if turn.emit.pending:
                    await turn.emit.flush()
            if turn.tripped is not None:
                raise trip(turn)
            if turn.failures is not None:
                await raise_failure(jobs[end:], turn, turn.failures)
        return []
    finally:
        turn.live.discard(turn)


# Why a call of a concurrent batch whose task was cancelled before it began is answered without running.
CANCELLED_UNSTARTED = "not run: the task it was to run in was cancelled from outside this run before it began"


def _in_batch(number: int, turn: Turn) -> Callable[[Job], Coroutine[Any, Any, None]]:
    """The work of a concurrent batch's pool: each call executed as part of batch ``number``.

    ``number`` and ``turn`` are bound as defaults rather than closed over: the function and one tuple, where
    a closure is the function, a tuple and a cell per name, kept by every waiting run (the call costs the same).
    """

    def work(job: Job, number: int = number, turn: Turn = turn) -> Coroutine[Any, Any, None]:
        return execute(job, number, True, turn)

    return work


async def steer(steering: Steering, context: contextvars.Context | None = None) -> Sequence[Any] | None:
    """Asks ``steering`` for messages, in a copy of ``context`` (the current one when None), as a call runs:
    it sees the context variables the run began with, wherever it is asked from (between batches, or on the
    worker where a ResourceAware call just finished), and what it sets stays in that one question."""
    answer: list[Sequence[Any] | None] = []
    suspended = run_until_suspended(_asked(steering, answer), context)
    if suspended is not None:
        await suspended
    return answer[0]


async def _asked(steering: Steering, answer: list[Sequence[Any] | None]) -> None:
    messages = steering()
    if inspect.isawaitable(messages):
        messages = await messages
    answer.append(steering_messages(messages))


def steering_messages(messages: Any) -> list[Any] | None:
    """What steering answered, as its list of messages (None or an empty list: go on). ``OptionError`` for an
    answer that is not a collection of messages: text, bytes and a mapping would be read as messages
    character by character or key by key, and a number or a bool is no collection at all."""
    if messages is None:
        return None
    if type(messages) is list:
        return messages
    if isinstance(messages, (str, bytes, bytearray, Mapping)) or not isinstance(messages, Iterable):
        text = shown(messages)
        text = text if len(text) <= 80 else f"{text[:77]}..."
        raise OptionError(f"steering must return a list of messages (or None to go on), got {text}")
    return list(messages)


def declared_access(job: Job) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The call's declared ``(reads, writes)``, or None when unknown (it then conflicts with every call)."""
    try:
        # Shown a copy: what it changes in the arguments never reaches the call.
        access = job.tool.resources(args_copy(job.args))
    except BaseException as exc:
        if not own_failure(exc):
            raise
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


def readable_access(
    access: tuple[tuple[str, ...], tuple[str, ...]] | None, job: Job
) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """``access`` when its reads and writes are tuples of non-empty strings, else None (unknown: the call
    conflicts with every call), as for any ``resources()`` that does not answer with an ``Access``."""
    if access is None or all(
        type(keys) is tuple and all(isinstance(key, str) and key for key in keys) for keys in access
    ):
        return access
    logger.warning(
        "resources() of %s returned an Access holding %r, not keys; the call conflicts with every other call",
        job.tool.name,
        access,
    )
    return None


class _Graph:
    """``ResourceAware``'s ready calls: a call is ready once every earlier call it conflicts with finished.

    Ready calls start earliest in model order first. Steering is checked after
    each call while calls remain unstarted; a raising failure or a tripped
    guardrail stops new starts.
    """

    __slots__ = (
        "_dependent_offsets",
        "_dependents",
        "_heap",
        "_remaining",
        "_steering",
        "_steering_context",
        "_turn",
        "accesses",
        "count",
        "failure",
        "messages",
        "started",
        "stopped",
        "taken",
    )

    def __init__(self, jobs: list[Job], turn: Turn, steering: Steering | None) -> None:
        count = len(jobs)
        accesses = [declared_access(job) for job in jobs]
        try:
            planned = _core.plan_conflicts(accesses)
        except TypeError:
            # An ``Access`` whose fields were set anew after it was made (it is frozen) to what is not keys.
            accesses = [readable_access(access, job) for access, job in zip(accesses, jobs, strict=True)]
            planned = _core.plan_conflicts(accesses)
        self.accesses = accesses
        wait_offsets, _, self._dependent_offsets, self._dependents = planned
        self._remaining = [wait_offsets[i + 1] - wait_offsets[i] for i in range(count)]
        self._heap = [i for i in range(count) if self._remaining[i] == 0]  # ascending, so already a heap
        self._turn = turn
        self._steering = steering
        # Steering is asked on whichever worker finished a call: in a copy of the run's context, not the worker's.
        self._steering_context = None if steering is None else contextvars.copy_context()
        self.count = count
        self.started = bytearray(count)
        self.taken = 0
        self.stopped = False
        self.failure: Exception | None = None
        self.messages: list[Any] = []

    def take(self) -> Any:
        if not self._heap or self.stopped:
            return None
        index = heapq.heappop(self._heap)
        self.started[index] = 1
        self.taken += 1
        return index

    def has_ready(self) -> bool:
        return bool(self._heap) and not self.stopped

    def over(self) -> bool:
        return self.stopped

    async def done(self, item: Any) -> None:
        index: int = item
        first, end = self._dependent_offsets[index], self._dependent_offsets[index + 1]
        if first != end:
            remaining = self._remaining
            for later in self._dependents[first:end]:
                remaining[later] -= 1
                if remaining[later] == 0:
                    heapq.heappush(self._heap, later)
        turn = self._turn
        if turn.tripped is not None or turn.failures is not None:
            self.stopped = True
        elif self._steering is not None and self.taken < self.count and not self.stopped:
            try:
                messages = await steer(self._steering, self._steering_context)
            except Exception as exc:
                # Raised from the run as it is, not inside the pool's exception group.
                self.failure = exc
                self.stopped = True
                return
            if messages and not self.stopped:
                self.stopped = True
                self.messages = list(messages)


async def _run_graph(jobs: list[Job], turn: Turn, cap: int, steering: Steering | None) -> list[Any]:
    """``ResourceAware``: the whole turn is batch 0, run as a conflict graph.

    The engine plans the waits from the declared resources in one crossing. A
    failure that aborts its siblings cancels every call still running or
    waiting; a call of unknown resources waits for every earlier call, and
    every later one waits for it.
    """
    turn.live.add(turn)
    try:
        count = len(jobs)
        if count == 0:
            return []
        settings = turn.settings
        emit = turn.emit
        workers_cap = min(cap, count)
        concurrent = workers_cap > 1
        turn.batch = jobs
        turn.scoped = concurrent and aborts(jobs, turn)
        if emit is not None:
            emit(BatchStarted(0, tuple(job.call.id for job in jobs), concurrent))
        recorded = len(turn.completed)
        blocked = await _before_batch(jobs, 0, concurrent, turn) if settings.pre_batch else None
        messages: list[Any] = []
        unstarted: list[Job] = []
        if blocked is not None:
            await answer_unstarted(jobs, turn, "hook_blocked", blocked, 0)
        elif count == 1:
            # Nothing to plan: no crossing, no task.
            suspended = run_until_suspended(execute(jobs[0], 0, False, turn))
            if suspended is not None:
                await suspended
        else:
            graph = _Graph(jobs, turn, steering)
            # A call of unknown resources waits for every earlier call, and every later one waits for it.
            overlaps = [concurrent and access is not None for access in graph.accesses]
            try:
                await run_pool(graph, workers_cap, lambda index: execute(jobs[index], 0, overlaps[index], turn), turn)
            finally:
                turn.pool = None
            if graph.failure is not None:
                raise graph.failure
            messages = graph.messages
            unstarted = [jobs[index] for index in range(count) if not graph.started[index]]
        turn.abort = None
        turn.scoped = False
        if messages and turn.failures is None:
            await answer_unstarted(unstarted, turn, "skipped", SKIPPED)
        if settings.post_batch:
            await _after_batch(jobs, 0, concurrent, turn, recorded)
        if emit is not None:
            emit(BatchFinished(0, tuple(job.call.id for job in jobs)))
            await emit.flush()
        if turn.tripped is not None:
            raise trip(turn)
        if turn.failures is not None:
            await raise_failure(unstarted, turn, turn.failures)
        return messages
    finally:
        turn.live.discard(turn)


async def raise_failure(
    rest: list[Job], turn: Turn, failures: list[tuple[int, ToolResult, BaseException | None]]
) -> None:
    """Ends a run whose batch had a raising failure: the first in model order is raised.

    The calls that did not start are answered as skipped first, so the
    error carries a result for every call.
    """
    failures = sorted(failures, key=lambda failure: failure[0])
    _, first, cause = failures[0]
    reason = f"not run: call {first.call_id} (`{first.tool_name}`) failed"
    await answer_unstarted(rest, turn, "skipped", reason)
    if turn.emit is not None:
        await turn.emit.flush()
    error = ToolTimeoutError if first.error_kind == "timeout" else ToolCallFailed
    raise error(first, [failure[1] for failure in failures[1:]], turn.ordered_partial()) from cause


def trip(turn: Turn) -> GuardrailTripped:
    tripped = turn.tripped
    assert tripped is not None
    tripped.results = tuple(turn.ordered_partial())
    return tripped


# -- batch hooks --------------------------------------------------------------------


def _batch_event(batch: list[Job], number: int, concurrent: bool, turn: Turn, recorded: int | None) -> BatchEvent:
    """The event batch hooks are shown, made once per batch and shared by its hooks. With ``recorded`` (how many
    results the turn held when the batch started), a ``post_batch`` event holding the batch's results in model
    order, each output copied once (``shown_result``): what a hook changes in them reaches neither the results
    nor what the model is sent."""
    calls = tuple(ToolCall(job.call.id, job.tool.name, args_copy(job.args)) for job in batch)
    results: tuple[ToolResult, ...] = ()
    if recorded is not None:
        # The batch's results were recorded after it started: only those are looked at, not the whole turn's.
        slots = {job.slot for job in batch}
        own = [pair for pair in zip(turn.slots[recorded:], turn.completed[recorded:], strict=True) if pair[0] in slots]
        own.sort(key=lambda pair: pair[0])
        results = tuple(shown_result(result) for _, result in own)
    return BatchEvent(number, calls, concurrent, results, turn.context)


def _batch_hooks(hooks: tuple[Hook, ...], batch: list[Job]) -> list[Hook]:
    return [hook for hook in hooks if any(hook.matcher.matches((job.tool.name, *job.tool.aliases)) for job in batch)]


async def _before_batch(batch: list[Job], number: int, concurrent: bool, turn: Turn) -> str | None:
    """``pre_batch`` hooks; a deny, an error or a timeout blocks the whole batch (the reason is returned)."""
    hooks = _batch_hooks(turn.settings.pre_batch, batch)
    if not hooks:
        return None
    event = _batch_event(batch, number, concurrent, turn, None)
    for hook in hooks:
        try:
            answer = await hook(event)
        except HookTimeout as exc:
            return f"{hook.label} {exc}; the batch was blocked"
        except BaseException as exc:
            if not own_failure(exc):
                raise
            logger.warning("%s failed on batch %d", hook.label, number, exc_info=True)
            detail = described(exc)
            return f"{hook.label} failed ({detail}); the batch was blocked"
        if isinstance(answer, Decision) and answer.behavior == "deny":
            return answer.reason or f"blocked by {hook.label}"
        if answer is not None and not isinstance(answer, Decision):
            return f"{hook.label} returned {answer!r}, not None or a Decision; the batch was blocked"
    return None


async def _after_batch(batch: list[Job], number: int, concurrent: bool, turn: Turn, recorded: int) -> None:
    """``post_batch`` hooks, shown one event (``_batch_event``); they observe, their errors are logged."""
    hooks = _batch_hooks(turn.settings.post_batch, batch)
    if not hooks:
        return
    event = _batch_event(batch, number, concurrent, turn, recorded)
    for hook in hooks:
        try:
            await hook(event)
        except BaseException as exc:
            # A cancellation that is not the run's (something it awaited, cancelled by someone else) too.
            if not observer_failure(exc):
                raise
            logger.warning("%s failed on batch %d", hook.label, number, exc_info=True)
