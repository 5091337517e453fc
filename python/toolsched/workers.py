"""The worker tasks of a call pool: a task group at asyncio's price, with anyio's cancellation inside.

A pool (``executor/schedule.py``) starts a worker each time a running call first waits. On
asyncio, an anyio task group wraps every task it starts in a handle with a cancel scope and an
event of its own: about 15 µs per task against 4 µs for a plain ``asyncio`` task
(``python benches/platform_runs.py --sleep 0.001``: turns whose calls really wait start a worker
per call). ``WorkerGroup`` starts each worker as a plain asyncio task, so everything anyio offers
inside it (scopes, deadlines, shields) works as in any task. An anyio ``CancelScope`` around each
worker would cost another 6 µs per worker (its task state is made on entry), so the group stops
its workers as anyio stops the tasks of a cancelled scope, with ``Task.cancel()``, again each
event loop iteration until they end, and never while a worker is inside a shielded scope (it is
asked again once the shield is left). That needs anyio's record of each task's scopes; where an
anyio version does not have it, each worker runs inside a ``CancelScope`` of its own and is
stopped through it. On other event loops (trio) it is an anyio task group.

What it keeps of a task group: the entering task waits for every worker; a worker that raises
cancels the entering task's body and the other workers, and its exception is raised from the
group in a ``BaseExceptionGroup``; an exception from the body cancels the workers; a cancelled
entering task cancels its workers and waits for them before the cancellation goes on. A group
that started no worker is left without a checkpoint (anyio's task group runs one).

What differs: a worker is not inside the cancel scopes of the entering task, so a cancellation
of an enclosing scope reaches the workers when the entering task sees it, at its next wait. An
entering task inside a shielded section (a call that must finish) passes it on once it leaves.
"""

from __future__ import annotations

import asyncio
from asyncio import events
from collections.abc import Callable, Coroutine
from inspect import CORO_CREATED, getcoroutinestate
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup

__all__ = ["WorkerGroup", "being_stopped"]

# The workers a group has asked to stop (each leaves the set when it ends).
_STOPPED: set[asyncio.Task[Any]] = set()


def being_stopped() -> bool:
    """Whether the running task is a worker its group is stopping (without a cancel scope to show it)."""
    if not _STOPPED:
        return False
    try:
        return asyncio.current_task() in _STOPPED
    except RuntimeError:  # not on asyncio
        return False


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


def _started(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` has taken its first step."""
    coroutine = task.get_coro()
    return not isinstance(coroutine, Coroutine) or getcoroutinestate(coroutine) != CORO_CREATED


def _shielded(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` is inside a shielded anyio cancel scope now."""
    state = _TASK_STATES.get(task)
    scope = None if state is None else state.cancel_scope
    while scope is not None:
        if scope.shield:
            return True
        scope = getattr(scope, "_parent_scope", None)
    return False


class WorkerGroup:
    """Starts workers (``start_soon``) inside ``async with`` and waits for them when it is left."""

    __slots__ = ("_delivering", "_errors", "_group", "_loop", "_scope", "_stopping", "_waiting", "_workers")

    def __init__(self) -> None:
        self._group: TaskGroup | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scope: anyio.CancelScope | None = None
        # Each running worker and the scope it runs in, None when it runs in none (made with the first
        # worker: most groups start none).
        self._workers: dict[asyncio.Task[None], anyio.CancelScope | None] | None = None
        # Set once the group stops its workers; ``_delivering`` while a delivery is scheduled.
        self._stopping = False
        self._delivering = False
        self._errors: list[BaseException] | None = None
        # Set while the entering task waits for the last workers to end.
        self._waiting: asyncio.Future[None] | None = None

    async def __aenter__(self) -> WorkerGroup:
        loop = events._get_running_loop()
        if loop is None:
            self._group = anyio.create_task_group()
            await self._group.__aenter__()
        else:
            self._loop = loop
            self._scope = anyio.CancelScope()
            self._scope.__enter__()
        return self

    def start_soon(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Starts ``work()`` in a worker of the group."""
        if self._group is not None:
            self._group.start_soon(work)
            return
        assert self._loop is not None
        scope = None if _TASK_STATES is not None else anyio.CancelScope()
        task = self._loop.create_task(self._run(work, scope))
        if self._workers is None:
            self._workers = {}
        self._workers[task] = scope
        if self._stopping:
            self._deliver()

    async def _run(self, work: Callable[[], Coroutine[Any, Any, None]], scope: anyio.CancelScope | None) -> None:
        try:
            if scope is None:
                await work()
            else:
                with scope:
                    await work()
        except BaseException as exc:
            # A cancellation the group did not ask for (the event loop closing) stops the group without
            # being its error; anything else is raised from the group.
            if not isinstance(exc, asyncio.CancelledError):
                self._fail(exc)
            self._cancel()
        finally:
            workers = self._workers
            assert workers is not None
            task = asyncio.current_task()
            if task is not None:
                workers.pop(task, None)
                _STOPPED.discard(task)
            waiting = self._waiting
            if not workers and waiting is not None and not waiting.done():
                waiting.set_result(None)

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
        """Asks each worker without a scope of its own to stop, as anyio asks the tasks of a cancelled
        scope: at once unless it is shielded or its last request is still on its way, and again next
        event loop iteration while any of them runs."""
        self._delivering = False
        current = asyncio.current_task()
        running = False
        for task, scope in (self._workers or {}).items():
            if scope is not None or task.done():
                continue
            running = True
            if task is current or _shielded(task) or not _started(task):
                # Not now: itself, shielded, or not started yet (cancelled before its first step, a
                # worker would end without a word to its group).
                continue
            waiter = getattr(task, "_fut_waiter", None)
            if not isinstance(waiter, asyncio.Future) or not waiter.done():
                _STOPPED.add(task)
                task.cancel()
        if running and not self._delivering and self._loop is not None:
            self._delivering = True
            self._loop.call_soon(self._deliver)

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> bool:
        if self._group is not None:
            return bool(await self._group.__aexit__(kind, error, traceback))
        scope = self._scope
        loop = self._loop
        assert scope is not None and loop is not None
        if error is None and not self._workers and self._errors is None:
            # Nothing was started, or everything ended well: no waiting, no checkpoint.
            return bool(scope.__exit__(None, None, None))
        pending = error
        if error is not None:
            self._cancel()
            if not isinstance(error, asyncio.CancelledError):
                self._fail(error)
        while self._workers:
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
            scope.__exit__(None, None, None)
            raise BaseExceptionGroup("a worker of the pool failed", self._errors) from None
        if pending is None:
            return bool(scope.__exit__(None, None, None))
        if scope.__exit__(type(pending), pending, pending.__traceback__):
            return True  # the cancellation was this group's own
        if pending is error:
            return False
        raise pending
