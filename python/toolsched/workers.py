"""The worker tasks of a call pool: a task group at asyncio's price, with anyio's cancellation inside.

A pool (``executor/schedule.py``) starts a worker each time a running call first waits. On
asyncio, an anyio task group wraps every task it starts in a handle with a cancel scope and an
event of its own: about 15 µs per task against 4 µs for a plain ``asyncio`` task
(``python benches/platform_runs.py --sleep 0.001``: turns whose calls really wait start a worker
per call). ``WorkerGroup`` starts each worker as a plain asyncio task running inside an anyio
``CancelScope`` of its own, so everything anyio offers inside it (scopes, deadlines, shields)
works as in any task, and the group stops its workers through those scopes, never with a bare
``Task.cancel()`` that would pierce a shield. On other event loops (trio) it is an anyio task
group.

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
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup

__all__ = ["WorkerGroup"]


class WorkerGroup:
    """Starts workers (``start_soon``) inside ``async with`` and waits for them when it is left."""

    __slots__ = ("_errors", "_group", "_loop", "_scope", "_waiting", "_workers")

    def __init__(self) -> None:
        self._group: TaskGroup | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scope: anyio.CancelScope | None = None
        # Each running worker and the scope it runs in (made with the first worker: most groups start none).
        self._workers: dict[asyncio.Task[None], anyio.CancelScope] | None = None
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
        scope = anyio.CancelScope()
        task = self._loop.create_task(self._run(work, scope))
        if self._workers is None:
            self._workers = {}
        self._workers[task] = scope

    async def _run(self, work: Callable[[], Coroutine[Any, Any, None]], scope: anyio.CancelScope) -> None:
        try:
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
            waiting = self._waiting
            if not workers and waiting is not None and not waiting.done():
                waiting.set_result(None)

    def _fail(self, error: BaseException) -> None:
        if self._errors is None:
            self._errors = []
        self._errors.append(error)

    def _cancel(self) -> None:
        """Cancels the entering task's body and every worker, each through its own scope."""
        if self._scope is not None:
            self._scope.cancel()
        for scope in (self._workers or {}).values():
            scope.cancel()

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
