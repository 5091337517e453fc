"""Running a turn's admitted calls under its strategy, on one worker pool that grows only when calls wait.

Spawning a task costs more than running a no-op tool call end to end, so
calls run on a pool that starts with one worker (the calling task) and adds
another each time a running call first suspends on the event loop, up to the
concurrency cap: calls that never wait run back to back with no task at all;
calls that wait overlap exactly as if every worker had been started up front.

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
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NoReturn, Protocol

import anyio
import anyio.lowlevel

from toolsched import _core
from toolsched.errors import GuardrailTripped, ToolCallFailed, ToolTimeoutError
from toolsched.events import BatchFinished, BatchStarted
from toolsched.executor.call import SKIPPED, answer_unstarted, execute
from toolsched.executor.settings import Steering
from toolsched.executor.turn import Job, Turn, judge
from toolsched.fastpath import run_until_suspended
from toolsched.hooks import BatchEvent, Hook, HookTimeout
from toolsched.results import Decision, ToolCall, ToolResult, detached
from toolsched.strategies import resolve_cap
from toolsched.tools import Access
from toolsched.workers import WorkerGroup, note_host

__all__ = [
    "aborts",
    "declared_access",
    "is_safe",
    "partitioned_batches",
    "raise_failure",
    "run_jobs",
    "run_pool",
    "steer",
    "trip",
]

logger = logging.getLogger("toolsched")


# -- the pool -----------------------------------------------------------------------


class _Ready(Protocol):
    """A source of work that hands out items as they become ready (``ResourceAware``'s conflict graph).

    Finishing an item may make others ready; workers wait while items run but
    none is ready, and leave once the source is over.
    """

    def take(self) -> Any:
        """The next item to start, or None when none is ready now."""

    def has_ready(self) -> bool: ...

    async def done(self, item: Any) -> None:
        """An item finished (what waited for it may become ready)."""

    def over(self) -> bool:
        """No item will ever become ready again."""


class _Slack(Protocol):
    """Who may lend the pool's slots (the turn): ``lent`` items wait without working, and ``pool``
    is the pool of the running batch, once it has one."""

    lent: int
    pool: Any


def run_pool(
    ready: Sequence[Any] | _Ready,
    concurrency: int,
    work: Callable[[Any], Coroutine[Any, Any, None]],
    slack: _Slack | None = None,
) -> Coroutine[Any, Any, None]:
    """Runs ``work(item)`` for every item, at most ``concurrency`` at once, on workers that grow on suspension
    (a coroutine to await: the one that does it, with no frame of this function left in the chain).

    ``ready`` is a list (items start in order, every one is ready) or a
    ``_Ready`` source. ``work`` must return a coroutine. An exception from
    ``work`` cancels the other workers and propagates, as in a task group.

    With ``slack``, an item that waits without working (for a rate limit's token, or between
    attempts) lends its slot (``slack.lent``): another worker may start meanwhile, and the
    item waits for a free slot before it works again, so that at most ``concurrency`` items
    work at once.
    """
    return _run_pool(ready, concurrency, work, slack)


async def _run_pool(
    ready: Sequence[Any] | _Ready,
    concurrency: int,
    work: Callable[[Any], Coroutine[Any, Any, None]],
    slack: _Slack | None,
) -> None:
    """``run_pool``'s coroutine. Ready items run back to back in this task until one waits; only then is
    there a pool. On asyncio, when every item fits under the cap, each item left starts at once in a worker
    of its own (``_Pool.start_each``); else the workers start one by one as running items wait, each taking
    the next item as its own ends (``_Pool.take_in_order``). On asyncio there is no worker group
    either until then (or until an item raises): it is made then, entered as it would have been before the
    first item, from what was noted of the running task as this coroutine took its first step (not when it
    was made: it may be awaited in another scope, or in a task of its own). Most batches never wait, and
    making, entering and leaving a group cost a turn 9.1k instructions (``python benches/pieces.py``). On
    trio, or for a ``_Ready`` source, the group is entered before anything runs."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    # Checked against the concrete types: an isinstance check against an ABC costs more than a no-op call.
    items = ready if isinstance(ready, (list, tuple)) else None
    note = note_host() if items is not None else None
    group: WorkerGroup | None = None
    try:
        if note is None:
            group = WorkerGroup()
            if not group.enter():
                await group.__aenter__()
        try:
            if items is not None:
                position = 0
                total = len(items)
                while position < total:
                    item = items[position]
                    position += 1
                    suspended = run_until_suspended(work(item))
                    if suspended is not None:
                        if group is None:
                            group = WorkerGroup()
                            group.enter(note)
                        if total <= concurrency and group.loop is not None:
                            # Every item fits under the cap: each one left starts now in a worker of its own.
                            pool = _Pool(group, concurrency, work, items, total, None, slack)
                            pool.start_each(position)
                            await suspended
                            if group.cancelled():
                                # Workers may have left their items unstarted: the run's cancellation is
                                # raised here, as ``take_in_order`` raises it (its own item may have waited
                                # only inside a shield, and the group may be left without a wait).
                                await anyio.lowlevel.checkpoint_if_cancelled()
                            break
                        pool = _Pool(group, concurrency, work, items, position, None, slack)
                        pool.grow()
                        await suspended
                        await pool.take_in_order()
                        break
            else:
                assert group is not None  # a source comes without a note
                source = _Pool(group, concurrency, work, (), 0, ready, slack)  # type: ignore[arg-type]
                await source.take_when_ready()
        except BaseException as exc:
            if group is None:
                group = WorkerGroup()
                group.enter(note)
            if not await group.__aexit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            if group is not None and not group.leave():
                await group.__aexit__(None, None, None)
    except BaseExceptionGroup as failures:
        _raise_stopping(failures)


def _raise_stopping(failures: BaseExceptionGroup[BaseException]) -> NoReturn:
    """Raises what failed the pool: the same exception whatever the strategy, so a tool that raised
    KeyboardInterrupt, SystemExit or GeneratorExit stops the run with that exception, not with a group
    only concurrent batches make; anything else as the group."""
    stopping = _stopping(failures)
    if stopping is None:
        raise failures
    raise stopping from None


class _Pool:
    """The workers of one ``run_pool`` once an item waited: the calling task is the first of them."""

    __slots__ = (
        "base",
        "concurrency",
        "excess",
        "freed",
        "group",
        "items",
        "position",
        "reclaiming",
        "running",
        "slack",
        "source",
        "waiting",
        "wake",
        "work",
        "workers",
    )

    def __init__(
        self,
        group: WorkerGroup,
        concurrency: int,
        work: Callable[[Any], Coroutine[Any, Any, None]],
        items: Sequence[Any],
        position: int,
        source: _Ready | None = None,
        slack: _Slack | None = None,
    ) -> None:
        self.group = group
        self.concurrency = concurrency
        self.work = work
        self.items = items
        self.position = position
        self.source = source
        self.workers = 1
        # Every item the workers take runs in a copy of the context the pool began in (as those the
        # calling task ran before), never in a copy of whatever context started the worker: a call
        # that lends its slot starts one from inside its own context. (The workers do not share it:
        # a tool that re-enters the event loop, as nest_asyncio allows, steps one worker inside
        # another's step, and one context cannot be entered twice.)
        self.base = contextvars.copy_context()
        self.running = 0
        self.waiting = 0
        # Made when a worker first waits: most pools never wait, and an event costs microseconds.
        self.wake: anyio.Event | None = None
        # Lent slots: items waiting to work again, and what tells them a slot was freed.
        self.slack = slack
        self.reclaiming = 0
        self.freed: anyio.Event | None = None
        # Set when an item that lent its slot stopped without taking one back (cancelled, or timed out, while it
        # waited): its worker went on, so the pool may have a worker too many; the next to ask leaves.
        self.excess = False
        if slack is not None:
            slack.pool = self

    def grow(self) -> None:
        """Another worker, when the cap allows and there is something for it to take."""
        lent = 0 if self.slack is None else self.slack.lent
        if self.workers - lent < self.concurrency and (
            self.position < len(self.items) if self.source is None else self.source.has_ready()
        ):
            self.workers += 1
            if self.source is None:
                self.group.start(self.take_in_order(True))
            else:
                self.group.start_soon(self.take_when_ready)

    def start_each(self, position: int) -> None:
        """A worker for each item from ``position`` on, started now (an asyncio group, and every item fits under
        the cap). The pool then starts no more (its ``position`` is past its items), and the calling task keeps
        the item it ran. Its ``workers`` stays 1: each item has its slot, and one that lends it finds it free
        again (``reclaim``). Items start in order: asyncio steps new tasks first in, first out.

        Rather than workers that each start the next as their item waits (one event-loop round per item) and
        take the next item when theirs ends: counted for calls that all wait, 2 / 4 / 5 / 10 calls in one run,
        101.8k / 84.7k / 80.3k / 73.2k instructions per call before, 99.0k / 78.9k / 73.5k / 65.2k now; 100
        runs at once, 3 / 10 calls, 100.3k / 85.1k before, 100.5k / 78.7k now. Three calls in one run cost
        more (81.0k → 84.6k): there the calling task, its own call over, ran the last item itself before the
        worker grown for it began (``python benches/instructions.py N TURNS [--runs 100] --wait``)."""
        items = self.items
        group = self.group
        for index in range(position, len(items)):
            group.start(self.take_one(items[index]))

    async def take_one(self, item: Any) -> None:
        """A worker of ``start_each``: runs ``item`` unless the run is being stopped by then (it is then left
        to the run's end, unstarted, as the items a worker of ``take_in_order`` would not take)."""
        try:
            if not self.group.cancelled():
                await self.work(item)
        except BaseException as exc:
            self.group.ended(exc)
        else:
            self.group.ended(None)

    def _retires(self) -> bool:
        """A worker between items leaves when more items would work than the cap lets (an item that lent its
        slot stopped without taking one back), or when an item that lent its slot waits for one and none is
        free yet (workers that end together leave no more than the waiting items need)."""
        working = self.workers - self.slack.lent  # type: ignore[union-attr]
        if working <= self.concurrency:
            self.excess = False
            if not self.reclaiming or working < self.concurrency:
                return False
        self._leave()
        return True

    def gave_back(self) -> None:
        """An item that lent its slot stops without taking one back (``slack.lent`` counts it no more): the
        worker that ran it goes on, one too many if another took its slot meanwhile."""
        self.excess = True

    def lend(self) -> None:
        """An item lent its slot (``slack.lent`` counts it already): an item waiting to work again takes it,
        else another worker may start."""
        if self.reclaiming:
            self._free()
        else:
            self.grow()

    async def reclaim(self) -> None:
        """An item that lent its slot waits for a free one, then works again (``slack.lent`` less one)."""
        slack = self.slack
        assert slack is not None
        self.reclaiming += 1
        reclaimed = False
        try:
            while self.workers - slack.lent >= self.concurrency:
                if self.waiting and self.wake is not None:
                    # Workers with nothing to take wait for an item to finish, and none may finish before
                    # this one works again: woken, they see it waiting and leave (``_retires``).
                    self.wake.set()
                    self.wake = None
                if self.freed is None:
                    self.freed = anyio.Event()
                await self.freed.wait()
            reclaimed = True
        finally:
            self.reclaiming -= 1
            slack.lent -= 1
            if not reclaimed:
                # Stopped while it waited for its slot: it works no more, and takes none.
                self.gave_back()

    async def take_in_order(self, worker: bool = False) -> None:
        """Every item is ready: takes the next until none is left (no waiting, no bookkeeping).

        ``worker``: this runs as a task of the group, and tells it how it ended (``WorkerGroup.ended``)
        rather than raising; the task that runs the pool raises.
        """
        try:
            items = self.items
            work = self.work
            base = self.base
            while self.position < len(items):
                if (self.reclaiming or self.excess) and self._retires():
                    return
                if self.group.cancelled():
                    await self._stop_taking()
                    return
                item = items[self.position]
                self.position += 1
                suspended = run_until_suspended(work(item), base)
                if suspended is not None:
                    self.grow()
                    await suspended
            self._leave()
        except BaseException as exc:
            if not worker:
                raise
            self.group.ended(exc)
            worker = False  # told
        finally:
            if worker:
                self.group.ended(None)

    async def _stop_taking(self) -> None:
        """The run is being stopped: this worker takes nothing more. The task that runs the pool raises
        the run's cancellation here (a pool that just ended would let the run go on to assemble results
        it never made); a worker outside the run's scopes leaves, and hears of it from its group."""
        self._leave()
        await anyio.lowlevel.checkpoint_if_cancelled()

    def _leave(self) -> None:
        """A worker leaves the pool: its slot is free for an item that lent its own."""
        self.workers -= 1
        self._free()

    def _free(self) -> None:
        """Tells the items waiting to work again that a slot may be free (each asks again)."""
        if self.freed is not None:
            self.freed.set()
            self.freed = None

    async def take_when_ready(self) -> None:
        source = self.source
        assert source is not None
        while True:
            if (self.reclaiming or self.excess) and self._retires():
                return
            if self.group.cancelled():
                await self._stop_taking()
                return
            item = source.take()
            if item is not None:
                self.running += 1
                suspended = run_until_suspended(self.work(item), self.base)
                if suspended is not None:
                    self.grow()
                    await suspended
                self.running -= 1
                await source.done(item)
                if self.waiting and self.wake is not None:
                    self.wake.set()
                    self.wake = None
            elif self.running == 0 or source.over():
                self._leave()
                return
            else:
                if self.wake is None:
                    self.wake = anyio.Event()
                event = self.wake
                self.waiting += 1
                try:
                    await event.wait()
                finally:
                    self.waiting -= 1


def _stopping(failures: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The first KeyboardInterrupt, SystemExit or GeneratorExit in a group of failures, if any."""
    for failure in failures.exceptions:
        if isinstance(failure, BaseExceptionGroup):
            found = _stopping(failure)
            if found is not None:
                return found
        elif isinstance(failure, (KeyboardInterrupt, SystemExit, GeneratorExit)):
            return failure
    return None


# -- running a turn -----------------------------------------------------------------


async def run_jobs(jobs: list[Job], turn: Turn, steering: Steering | None) -> list[Any]:
    """Runs the admitted calls; meanwhile the run can be interrupted and its calls cancelled.

    Every call runs in its own copy of the caller's context, as a task would
    (``run_until_suspended``): what a tool does to context variables stays in
    its call.

    Returns the steering messages when steering stopped the run.
    """
    settings = turn.settings
    # Read when a run starts (the environment may say), whatever the turn holds.
    cap = resolve_cap(settings.strategy)
    turn.jobs = jobs
    turn.live.add(turn)
    try:
        if len(jobs) == 1 and turn.emit is None and not settings.pre_batch and not settings.post_batch:
            # One call, no batch hooks, no events: batch 0 without the batch bookkeeping.
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
        if settings.strategy.kind == "resource_aware":
            return await _run_graph(jobs, turn, cap, steering)
        return await _run_batches(jobs, turn, cap, steering)
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
    settings = turn.settings
    batches = _batches(jobs, turn, cap)
    # By index, not enumerate: no iterator objects stay alive while a batch's calls wait.
    for number in range(len(batches)):
        start, end, concurrency = batches[number]
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
        blocked = await _before_batch(batch, number, concurrent, turn) if settings.pre_batch else None
        if blocked is not None:
            await answer_unstarted(batch, turn, "hook_blocked", blocked, number)
        elif concurrent:
            try:
                await run_pool(batch, concurrency, _in_batch(number, turn), turn)
            finally:
                turn.pool = None
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
            await _after_batch(batch, number, concurrent, turn)
        if turn.emit is not None:
            turn.emit(BatchFinished(number, tuple(job.call.id for job in batch)))
            if turn.emit.pending:
                await turn.emit.flush()
        if turn.tripped is not None:
            raise trip(turn)
        if turn.failures is not None:
            await raise_failure(jobs[end:], turn, turn.failures)
    return []


def _in_batch(number: int, turn: Turn) -> Callable[[Job], Coroutine[Any, Any, None]]:
    """The work of a concurrent batch's pool: each call executed as part of batch ``number``."""
    return lambda job: execute(job, number, True, turn)


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
    answer.append(messages)


def declared_access(job: Job) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
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
        self.accesses = accesses = [declared_access(job) for job in jobs]
        wait_offsets, _, self._dependent_offsets, self._dependents = _core.plan_conflicts(accesses)
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
        await _after_batch(jobs, 0, concurrent, turn)
    if emit is not None:
        emit(BatchFinished(0, tuple(job.call.id for job in jobs)))
        await emit.flush()
    if turn.tripped is not None:
        raise trip(turn)
    if turn.failures is not None:
        await raise_failure(unstarted, turn, turn.failures)
    return messages


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


def _batch_event(batch: list[Job], number: int, concurrent: bool, turn: Turn, done: bool) -> BatchEvent:
    calls = tuple(ToolCall(job.call.id, job.tool.name, detached(job.args)) for job in batch)
    results: tuple[ToolResult, ...] = ()
    if done:
        ids = {job.call.id for job in batch}
        results = tuple(result for result in turn.ordered_partial() if result.call_id in ids)
    return BatchEvent(number, calls, concurrent, results, turn.context)


def _batch_hooks(hooks: tuple[Hook, ...], batch: list[Job]) -> list[Hook]:
    return [hook for hook in hooks if any(hook.matcher.matches((job.tool.name, *job.tool.aliases)) for job in batch)]


async def _before_batch(batch: list[Job], number: int, concurrent: bool, turn: Turn) -> str | None:
    """``pre_batch`` hooks; a deny, an error or a timeout blocks the whole batch (the reason is returned)."""
    hooks = _batch_hooks(turn.settings.pre_batch, batch)
    if not hooks:
        return None
    event = _batch_event(batch, number, concurrent, turn, False)
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


async def _after_batch(batch: list[Job], number: int, concurrent: bool, turn: Turn) -> None:
    hooks = _batch_hooks(turn.settings.post_batch, batch)
    if not hooks:
        return
    event = _batch_event(batch, number, concurrent, turn, True)
    for hook in hooks:
        try:
            await hook(event)
        except Exception:
            logger.warning("%s failed on batch %d", hook.label, number, exc_info=True)
