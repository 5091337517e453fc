"""The worker tasks of a call pool: a task group at asyncio's price, with anyio's cancellation inside.

A pool (``_executor/pool.py``) starts workers once a running call first waits. On
asyncio, an anyio task group wraps every task it starts in a handle with a cancel scope and an
event of its own, several times the cost of a plain ``asyncio`` task
(``python benches/platform_runs.py --sleep 0.001``: turns whose calls really wait start a worker
per call; the figures are in docs/performance.md). ``WorkerGroup`` starts each worker as a plain
asyncio task, so everything anyio offers inside it (scopes, deadlines, shields) works as in any
task. An anyio ``CancelScope`` around each worker would cost more again per worker (its task state is
made on entry), so the group stops
its workers as anyio stops the tasks of a cancelled scope, with ``Task.cancel()``, again each
event loop iteration until they end, and never while a worker is inside a shielded scope (it is
asked again once the shield is left). That needs anyio's record of each task's scopes; where an
anyio version does not have it, each worker runs inside a ``CancelScope`` of its own and is
stopped through it. On other event loops (trio) it is an anyio task group.

A worker is a coroutine of its own that tells the group how it ended (``start`` and ``ended``: the
pool's workers are); ``start_soon`` wraps any work in such a coroutine. A worker that waits is alive
the whole time its call waits, so each object less per worker is one less for the cyclic collector to
walk at every pass while thousands of calls wait.

What it keeps of a task group: the entering task waits for every worker; a worker that raises
cancels the entering task's body and the other workers, and its exception is raised from the
group in a ``BaseExceptionGroup``; an exception from the body cancels the workers; a cancelled
entering task cancels its workers and waits for them before the cancellation goes on. A group
that started no worker is left without a checkpoint (anyio's task group runs one).

What differs: a worker is not inside the cancel scopes of the entering task, so a cancellation
of an enclosing scope reaches the workers when the entering task sees it, at its next wait; a
worker between two items asks ``cancelled()`` first, so none starts another meanwhile. An
entering task inside a shielded section (a call that must finish) passes it on once it leaves.
"""

from __future__ import annotations

import asyncio
import math
from asyncio import events
from collections.abc import Callable, Coroutine
from inspect import CORO_CREATED, getcoroutinestate
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup

from toolsched._core import Stepper

__all__ = [
    "HostNote",
    "WorkerGroup",
    "absorb_cancel",
    "being_stopped",
    "current_asyncio_task",
    "foreign_cancellation",
    "note_host",
    "observer_failure",
    "own_failure",
    "running_task",
    "take_back",
]

# The workers a group has asked to stop (each leaves the set when it ends).
_STOPPED: set[asyncio.Task[Any]] = set()


def being_stopped() -> bool:
    """Whether the running task is a worker its group is stopping (without a cancel scope to show it)."""
    return bool(_STOPPED) and current_asyncio_task() in _STOPPED


def take_back(task: asyncio.Task[Any]) -> None:
    """Takes back every cancellation requested of ``task`` (requests no one else waits on)."""
    while task.cancelling():
        task.uncancel()


async def absorb_cancel() -> None:
    """Takes, at a wait where it stops nothing, a cancellation still pending on the running task after its
    requests were taken back (Python 3.11 keeps it pending)."""
    try:
        await asyncio.sleep(0)
    except asyncio.CancelledError:
        pass


def foreign_cancellation(exc: BaseException) -> bool:
    """Whether ``exc`` is a cancellation that is not the run's: a future the code awaited was cancelled by
    someone else, or it raised one by hand, while nothing asked the running task to stop."""
    if not isinstance(exc, asyncio.CancelledError):
        # trio's Cancelled only ever comes from the run's own cancel scopes.
        return False
    try:
        task = asyncio.current_task()
    except RuntimeError:
        # Not on asyncio: an asyncio cancellation raised by hand is the code's own failure.
        return True
    return task is not None and task.cancelling() == 0


def own_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised by code the run calls (a check of a call, a hook, the approver, a tool's judgement
    of its arguments), is that code's own failure: any ``Exception``, or a cancellation that is not the run's."""
    return isinstance(exc, Exception) or foreign_cancellation(exc)


def observer_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised by code that only observes the run (a post hook, an event listener), is that
    code's own failure, to be logged (``own_failure``)."""
    return isinstance(exc, Exception) or foreign_cancellation(exc)


def current_asyncio_task() -> asyncio.Task[Any] | None:
    """The running asyncio task, None on another event loop (trio)."""
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


def _anyio_task_states() -> Any:
    """anyio's record of each asyncio task's innermost cancel scope, or None where it is not found."""
    try:
        from anyio._backends import _asyncio as backend
    except ImportError:  # pragma: no cover - anyio without its asyncio backend
        return None
    states = getattr(backend, "_task_states", None)
    state_type = getattr(backend, "TaskState", None)
    if states is None or state_type is None or "cancel_scope" not in getattr(state_type, "__slots__", ()):
        return None
    return states


_TASK_STATES = _anyio_task_states()

# An event loop's running task, read where asyncio keeps it: ``asyncio.current_task`` is a Python function
# on Python 3.11 that reads this same dict (``execute`` asks after every call that runs while its turn has
# a pool, python benches/instructions.py 3 10 --runs 100 --wait).
_running_tasks = getattr(asyncio.tasks, "_current_tasks", None)
running_task: Callable[[asyncio.AbstractEventLoop | None], asyncio.Task[Any] | None] = (
    _running_tasks.get
    if isinstance(_running_tasks, dict)
    else lambda loop: None if loop is None else asyncio.current_task(loop)
)


# What entering a group notes of the calling task: the event loop, the task, its innermost anyio cancel
# scope then, and how many cancellations it had been asked for then.
HostNote = tuple[asyncio.AbstractEventLoop, "asyncio.Task[Any] | None", Any, int]


def note_host() -> HostNote | None:
    """What ``WorkerGroup.enter`` notes of the running task, for a group entered later as if entered now;
    None where a group cannot be entered without a wait (trio, or no anyio record of task scopes)."""
    loop = events._get_running_loop()
    if loop is None or _TASK_STATES is None:
        return None
    host = running_task(loop)
    if host is None:
        return loop, None, None, 0
    return loop, host, _scope_of(host), host.cancelling()


def _started(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` has taken its first step (a stepped call's job says: ``toolsched._executor.stepped``)."""
    coroutine = task.get_coro()
    if isinstance(coroutine, Stepper):
        return coroutine.begun
    return not isinstance(coroutine, Coroutine) or getcoroutinestate(coroutine) != CORO_CREATED


def _scope_of(task: asyncio.Task[Any]) -> Any:
    """The innermost anyio cancel scope ``task`` is in now, or None."""
    state = _TASK_STATES.get(task)
    return None if state is None else state.cancel_scope


def _shielded(task: asyncio.Task[Any], base: Any = None) -> bool:
    """Whether ``task`` is inside a shielded anyio cancel scope entered within ``base`` (its scope when
    the group was entered; a shield outside the group does not hold against the group's own stop)."""
    scope = _scope_of(task)
    while scope is not None and scope is not base:
        if scope.shield:
            return True
        scope = getattr(scope, "_parent_scope", None)
    return False


async def _awaited(worker: Coroutine[Any, Any, None]) -> None:
    await worker


async def _in_scope(worker: Coroutine[Any, Any, None], scope: anyio.CancelScope) -> None:
    with scope:
        await worker


class WorkerGroup:
    """Starts workers (``start_soon``) inside ``async with`` and waits for them when it is left."""

    __slots__ = (
        "_base",
        "_baseline",
        "_delivering",
        "_errors",
        "_group",
        "_host",
        "_host_cancels",
        "_scope",
        "_stopping",
        "_waiting",
        "_workers",
        "loop",
    )

    def __init__(self) -> None:
        self._group: TaskGroup | None = None
        # The event loop when the workers are plain asyncio tasks (None on trio): ``running_task(loop)`` is a
        # worker's own task.
        self.loop: asyncio.AbstractEventLoop | None = None
        # Where anyio's record of task scopes is missing, the entering task's body runs in this scope.
        self._scope: anyio.CancelScope | None = None
        # Else the entering task is stopped as a worker is: ``_host`` (None once it leaves the group),
        # the scope it was in when it entered (``_base``), and how many stops it was sent (taken back
        # when it leaves, so that the scopes around the group count only their own).
        self._host: asyncio.Task[Any] | None = None
        self._base: Any = None
        self._baseline = 0
        self._host_cancels = 0
        # Each running worker and the scope it runs in, None when it runs in none (made with the first
        # worker: most groups start none).
        self._workers: dict[asyncio.Task[None], anyio.CancelScope | None] | None = None
        # Set once the group stops; ``_delivering`` while a delivery is scheduled.
        self._stopping = False
        self._delivering = False
        self._errors: list[BaseException] | None = None
        # Set while the entering task waits for the last workers to end.
        self._waiting: asyncio.Future[None] | None = None

    async def __aenter__(self) -> WorkerGroup:
        if self.enter():
            return self
        loop = events._get_running_loop()
        if loop is None:
            self._group = anyio.create_task_group()
            await self._group.__aenter__()
        else:
            self.loop = loop
            self._scope = anyio.CancelScope()
            self._scope.__enter__()
        return self

    def enter(self, note: HostNote | None = None) -> bool:
        """Enters the group without a wait where it can (asyncio, with anyio's record of task scopes): whether
        it did; if not, ``__aenter__`` enters it. With ``note`` (``note_host()``'s), it is entered as it would
        have been when that was noted: a pool notes the calling task before its first call and makes a group
        only once a call waits."""
        if note is None:
            note = note_host()
            if note is None:
                return False
        self.loop, self._host, self._base, self._baseline = note
        return True

    def leave(self) -> bool:
        """Leaves the group without a wait when that is all ``__aexit__`` would do (no worker left, none
        failed, nothing raised in the body): whether it did; if not, ``__aexit__`` must be awaited."""
        if self._group is not None or self._workers or self._errors is not None:
            return False
        self._close_scope(None)
        return True

    def cancelled(self) -> bool:
        """Whether the group's work must not start anything new: it is stopping, or a scope around the
        group was cancelled (the entering task learns that at its next wait; a worker between two items
        asks here first). Scopes entered inside the group, as a call's own timeout, do not count."""
        if self._stopping:
            return True
        if self._group is not None or self._scope is not None:
            # Workers inside anyio scopes (trio, or no record of task scopes): anyio's own answer.
            return anyio.current_effective_deadline() == -math.inf
        scope = self._base
        while scope is not None:
            if scope.cancel_called:
                return True
            if scope.shield:
                return False
            scope = getattr(scope, "_parent_scope", None)
        return False

    def plain_tasks(self) -> bool:
        """Whether each worker is a plain asyncio task running the coroutine it is started with, nothing around it
        (asyncio, with anyio's record of task scopes)."""
        return self.loop is not None and self._group is None and self._scope is None and _TASK_STATES is not None

    def cancelled_unasked(self) -> bool:
        """Whether the running task is one of the group's workers, cancelled by neither the group nor a scope
        around it: by the code it runs (a tool that cancels the task it runs in). That cancellation is taken
        back (``take_back``), and the worker may go on: its call failed, not the group."""
        if self._group is not None or self._stopping or not self._workers:
            return False
        task = asyncio.current_task(self.loop)
        if task is None or task not in self._workers or task in _STOPPED or self.cancelled():
            return False
        take_back(task)
        return True

    def start_soon(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Starts ``work()`` in a worker of the group."""
        if self._group is not None:
            self._group.start_soon(work)
            return
        self.start(self._run(work))

    def start(self, worker: Coroutine[Any, Any, None]) -> None:
        """Starts ``worker`` in a task of the group: a coroutine whose last act is to tell the group how
        it ended (``ended``). The pool's workers are such coroutines: one coroutine a worker where
        ``start_soon`` wraps the work in a second (``python benches/instructions.py 3 10 --runs 100 --wait``).
        Each worker runs in a copy of the current context, as any task."""
        if self._group is not None:
            self._group.start_soon(_awaited, worker)
            return
        loop = self.loop
        assert loop is not None
        scope = None if _TASK_STATES is not None else anyio.CancelScope()
        task = loop.create_task(worker if scope is None else _in_scope(worker, scope))
        if self._workers is None:
            self._workers = {}
        self._workers[task] = scope
        if self._stopping:
            self._deliver()

    async def _run(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        try:
            await work()
        except BaseException as exc:
            self.ended(exc)
        else:
            self.ended(None)

    def ended(self, error: BaseException | None) -> None:
        """A worker's last act: it ended, with ``error`` if it raised. A cancellation the group did not ask
        for (the event loop closing) stops the group without being its error; anything else is raised
        from the group. On trio the worker's error is raised again, for anyio's task group."""
        if self._group is not None:
            if error is not None:
                raise error
            return
        if error is not None:
            if not isinstance(error, asyncio.CancelledError):
                self._fail(error)
            self._cancel()
        workers = self._workers
        assert workers is not None
        task = running_task(self.loop)  # ``asyncio.current_task``, without its Python frame (once per worker)
        if task is not None:
            workers.pop(task, None)
            _STOPPED.discard(task)
        self._wake_if_none_left()

    def _fail(self, error: BaseException) -> None:
        if self._errors is None:
            self._errors = []
        self._errors.append(error)

    def _cancel(self) -> None:
        """Cancels the entering task's body and every worker."""
        if self._scope is not None:
            self._scope.cancel()
        self._stopping = True
        for scope in (self._workers or {}).values():
            if scope is not None:
                scope.cancel()
        self._deliver()

    def _deliver(self) -> None:
        """Asks the entering task and each worker without a scope of its own to stop, as anyio asks the
        tasks of a cancelled scope: at once unless it is shielded (within the group), not started yet,
        or its last request is still on its way; and again next event loop iteration while any runs."""
        self._delivering = False
        current = asyncio.current_task()
        running = False
        host = self._host
        if host is not None and not host.done():
            running = True
            if host is not current and not _shielded(host, self._base) and self._stop(host):
                self._host_cancels += 1
        self._forget_silent()
        for task, scope in (self._workers or {}).items():
            if scope is not None or task.done():
                continue
            running = True
            if task is current or _shielded(task) or not _started(task):
                # Not now: itself, shielded, or not started yet (cancelled before its first step, a
                # worker would end without a word to its group).
                continue
            if self._stop(task):
                _STOPPED.add(task)
        if running and not self._delivering and self.loop is not None:
            self._delivering = True
            self.loop.call_soon(self._deliver)

    def _forget_silent(self) -> bool:
        """Drops the workers whose tasks are done without having told the group (cancelled by someone else
        before their first step, as the event loop's shutdown cancels every task: their coroutine never began),
        waking the entering task if none is left. Returns whether none is left."""
        workers = self._workers
        if not workers:
            return True
        for task in [task for task in workers if task.done()]:
            del workers[task]
            _STOPPED.discard(task)
        self._wake_if_none_left()
        return not workers

    def _wake_if_none_left(self) -> None:
        """Wakes the entering task, waiting for the workers to end, once none is left."""
        waiting = self._waiting
        if not self._workers and waiting is not None and not waiting.done():
            waiting.set_result(None)

    @staticmethod
    def _stop(task: asyncio.Task[Any]) -> bool:
        """Cancels ``task`` unless what it waits for is done already (it wakes with the last request)."""
        waiter = getattr(task, "_fut_waiter", None)
        if isinstance(waiter, asyncio.Future) and waiter.done():
            return False
        task.cancel()
        return True

    def _leave(self) -> bool:
        """The entering task leaves: no more stops for it, those it was sent taken back. Returns whether
        it was sent any and nothing else cancelled it meanwhile (a cancellation that is the group's own)."""
        host = self._host
        self._host = None
        if host is None or not self._host_cancels:
            return False
        for _ in range(self._host_cancels):
            host.uncancel()
        self._host_cancels = 0
        return host.cancelling() <= self._baseline

    def _close_scope(self, error: BaseException | None) -> bool:
        """Leaves the body's scope or the host's stops: whether ``error`` (a cancellation) was the group's own."""
        scope = self._scope
        if scope is None:
            own = self._leave()
            return own and isinstance(error, asyncio.CancelledError)
        if error is None:
            return bool(scope.__exit__(None, None, None))
        return bool(scope.__exit__(type(error), error, error.__traceback__))

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> bool:
        if self._group is not None:
            return bool(await self._group.__aexit__(kind, error, traceback))
        loop = self.loop
        assert loop is not None
        if error is None and self.leave():
            # Nothing was started, or everything ended well: no waiting, no checkpoint.
            return False
        pending = error
        if error is not None:
            self._cancel()
            if not isinstance(error, asyncio.CancelledError):
                self._fail(error)
        while self._workers and not self._forget_silent():
            self._waiting = loop.create_future()
            try:
                if pending is None:
                    await self._waiting
                else:
                    # Stopping already: the workers' own ends are waited for, whatever else is cancelled.
                    with anyio.CancelScope(shield=True):
                        await self._waiting
            except asyncio.CancelledError as exc:
                # The entering task is cancelled (from outside, or by a failed worker): the workers stop too.
                pending = pending or exc
                self._cancel()
            finally:
                self._waiting = None
        if self._errors:
            self._close_scope(None)
            raise BaseExceptionGroup("a worker of the pool failed", self._errors) from None
        if pending is None:
            return self._close_scope(None)
        if self._close_scope(pending):
            return True  # the cancellation was this group's own
        if pending is error:
            return False
        raise pending
