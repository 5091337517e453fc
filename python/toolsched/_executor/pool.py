"""The worker pool of a concurrent batch: calls run back to back on the calling task, and workers start
only once a call waits.

Spawning a task costs more than running a no-op tool call end to end, so a pool starts with one worker (the
calling task) and runs its calls back to back with no task at all while none waits. Once one waits, on
asyncio a batch that fits under the concurrency cap starts every call left at once, each in a worker of its
own; otherwise a worker is added each time a running call first suspends, up to the cap, and each takes the
next call as its own ends. Calls that wait overlap exactly as if every worker had been started up front.
The workers are a ``WorkerGroup`` (``toolsched/_backends/workers.py``).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NoReturn, Protocol

import anyio
import anyio.lowlevel

from toolsched._backends.workers import WorkerGroup, note_host
from toolsched._values.fastpath import run_until_suspended

__all__ = ["raise_stopping", "run_pool", "stopping"]


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


class _Steps(Protocol):
    """What starts some items of a batch as their task's whole coroutine (``toolsched._executor.stepped``)."""

    def takes(self, item: Any) -> bool: ...

    def start(self, item: Any) -> None: ...


# Gives the ``_Steps`` of a batch (its turn, its number, the group), or None when none of its items may be stepped.
_Stepping = Callable[[Any, int, WorkerGroup], "_Steps | None"]


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
    whole_task: bool = False,
    stepped: _Stepping | None = None,
    batch: int = 0,
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

    ``whole_task``: ``work`` may run as a task's whole coroutine (``_Pool.start_each``, needs ``slack``):
    then, once ``slack.pool.each`` is set, it is a worker of the pool's group as ``_Pool.take_one`` is: it
    does not begin when the group is stopping by then, and its last act is ``group.ended``.

    ``stepped`` (with ``whole_task``): ``stepped(slack, batch, group)`` gives what may start an item as its
    task's whole coroutine with no ``work`` coroutine at all (``toolsched._executor.stepped``), or None.
    """
    whole_task = whole_task and slack is not None
    return _run_pool(ready, concurrency, work, slack, whole_task, stepped if whole_task else None, batch)


async def _run_pool(
    ready: Sequence[Any] | _Ready,
    concurrency: int,
    work: Callable[[Any], Coroutine[Any, Any, None]],
    slack: _Slack | None,
    whole_task: bool = False,
    stepped: _Stepping | None = None,
    batch: int = 0,
) -> None:
    """``run_pool``'s coroutine. Ready items run back to back in this task until one waits; only then is
    there a pool. On asyncio, when every item fits under the cap, each item left starts at once in a worker
    of its own (``_Pool.start_each``); else the workers start one by one as running items wait, each taking
    the next item as its own ends (``_Pool.take_in_order``). On asyncio there is no worker group
    either until then (or until an item raises): it is made then, entered as it would have been before the
    first item, from what was noted of the running task as this coroutine took its first step (not when it
    was made: it may be awaited in another scope, or in a task of its own). Most batches never wait, and
    making, entering and leaving a group is a cost of its own per turn (``python benches/pieces.py``). On
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
                            # Not kept while the calls wait: one object less per waiting run.
                            note = None
                        if total <= concurrency and group.loop is not None:
                            # Every item fits under the cap: each one left starts now in a worker of its own.
                            pool = _Pool(group, concurrency, work, items, total, None, slack, False)
                            pool.start_each(position, whole_task, stepped, batch)
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
        raise_stopping(failures)


def raise_stopping(failures: BaseExceptionGroup[BaseException]) -> NoReturn:
    """Raises what failed a task group of the run: the same exception whatever the strategy or the journal,
    so a tool that raised an exception that stops the process (``stopping``) stops the run with that very
    exception, not with a group only concurrent batches, durable runs or per-run resources make; anything
    else as the group."""
    found = stopping(failures)
    if found is None:
        raise failures
    raise found from None


class _Pool:
    """The workers of one ``run_pool`` once an item waited: the calling task is the first of them."""

    __slots__ = (
        "base",
        "concurrency",
        "each",
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
        in_order: bool = True,
    ) -> None:
        """``in_order``: whether workers will take the items one after another (``take_in_order``,
        ``take_when_ready``); a pool that starts each item at once (``start_each``) is made without."""
        self.group = group
        self.concurrency = concurrency
        self.work = work
        self.items = items
        self.position = position
        self.source = source
        self.workers = 1
        # Set by ``start_each``: each item left runs in a task of its own.
        self.each = False
        # Every item the workers take runs in a copy of the context the pool began in (as those the
        # calling task ran before), never in a copy of whatever context started the worker: a call
        # that lends its slot starts one from inside its own context. (The workers do not share it:
        # a tool that re-enters the event loop, as nest_asyncio allows, steps one worker inside
        # another's step, and one context cannot be entered twice.) A pool whose items each start in a task of
        # their own runs none there, and keeps none: one object less per waiting run.
        self.base = contextvars.copy_context() if in_order else None
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

    def start_each(
        self, position: int, whole_task: bool = False, stepped: _Stepping | None = None, batch: int = 0
    ) -> None:
        """A worker for each item from ``position`` on, started now (an asyncio group, and every item fits under
        the cap). The pool then starts no more (its ``position`` is past its items), and the calling task keeps
        the item it ran. Its ``workers`` stays 1: each item has its slot, and one that lends it finds it free
        again (``reclaim``). Items start in order: asyncio steps new tasks first in, first out.

        Rather than workers that each start the next as their item waits (one event-loop round per item) and
        take the next item when theirs ends: fewer instructions per call for runs whose calls all wait
        (``python benches/instructions.py N TURNS [--runs 100] --wait``; the counts are in docs/performance.md).

        ``whole_task`` (``run_pool``'s): each task runs ``work(item)`` itself, with no coroutine of the pool's
        around it (one object and one frame less per waiting call); ``work`` is then the worker ``take_one``
        would be (``execute`` is, for a pool whose ``each`` is set)."""
        items = self.items
        group = self.group
        if whole_task:
            work = self.work
            start = group.start
            self.each = True
            steps = None if stepped is None else stepped(self.slack, batch, group)
            for index in range(position, len(items)):
                item = items[index]
                if steps is not None and steps.takes(item):
                    steps.start(item)
                else:
                    start(work(item))
            return
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


def stopping(failures: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The first exception in a task group's failures that stops the process rather than fails a call, if
    any: one that is neither an ``Exception`` nor a cancellation (KeyboardInterrupt, SystemExit,
    GeneratorExit, any other ``BaseException`` of the tool's own, or a ``BaseExceptionGroup`` the tool
    raised, which is not searched: it is what the tool raised)."""
    cancelled = (asyncio.CancelledError, anyio.get_cancelled_exc_class())
    for failure in failures.exceptions:
        if not isinstance(failure, (Exception, *cancelled)):
            return failure
    return None
