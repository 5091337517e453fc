"""Per-run resources: what a tool opens once per run, and the same run closes.

A tool declares one with ``async def open(self, run)`` / ``async def
close(self, run)``, or with ``run_resource``: a factory taking the
``RunScope`` and returning an async context manager (``@tool(run_resource=...)``).
The first call of the tool in a run opens it; every call of the tool in that
run sees it as ``ctx.resource``; when the run ends — with its results, with an
error, or cancelled — the run closes it. Two runs never share one.

Each resource is entered and exited by one task of the run that keeps it open,
so context managers that must be left in the task that entered them (cancel
scopes, task groups) work, and closing is shielded from the run's
cancellation so that it completes.
"""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import anyio

from toolsched._values.exception_text import described
from toolsched.errors import ResourceError

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from toolsched._tools.context import ToolContext

__all__ = ["ResourceFactory", "RunResources", "RunScope", "open_close", "with_run_resource"]

logger = logging.getLogger("toolsched")


class RunScope:
    """The run a per-run resource belongs to, as the tool's ``open``/``close`` or factory sees it.

    ``run_id`` identifies the run; ``context`` is the object given to
    ``Executor.run``; ``resource`` is what ``open`` returned (for ``close``);
    ``error`` is set before closing when the run ends with an exception
    (cancellation included), so that ``close`` can roll back rather than commit.
    """

    __slots__ = ("context", "error", "resource", "run_id", "tool_name")

    def __init__(self, run_id: str, tool_name: str, context: Any) -> None:
        self.run_id = run_id
        self.tool_name = tool_name
        self.context = context
        self.resource: Any = None
        self.error: BaseException | None = None

    def __repr__(self) -> str:
        return f"RunScope(run_id={self.run_id!r}, tool_name={self.tool_name!r})"


ResourceFactory = Callable[[RunScope], AbstractAsyncContextManager[Any]]


def open_close(open_fn: Callable[[RunScope], Any], close_fn: Callable[[RunScope], Any]) -> ResourceFactory:
    """A resource factory from a tool's ``open(run)`` / ``close(run)`` (plain or async)."""

    @asynccontextmanager
    async def opened(run: RunScope) -> AsyncIterator[Any]:
        value = open_fn(run)
        if inspect.isawaitable(value):
            value = await value
        run.resource = value
        try:
            yield value
        finally:
            closing = close_fn(run)
            if inspect.isawaitable(closing):
                await closing

    return opened


class _Entry:
    """One tool's resource in one run (internal)."""

    __slots__ = ("failure", "ready", "scope", "stopping", "value")

    def __init__(self, scope: RunScope) -> None:
        self.scope = scope
        self.ready = anyio.Event()
        self.value: Any = None
        self.failure: str | None = None
        # A KeyboardInterrupt (or the like) raised opening it: raised by the calls that asked for it.
        self.stopping: BaseException | None = None


class RunResources:
    """The per-run resources of one run (internal): opened on first use, closed by ``close()``.

    Lives inside a task group of the run, which its keeper tasks belong to;
    the run sets ``error`` if it ends with an exception, calls ``close()``
    and leaves the task group, which waits for every resource to be closed.
    """

    __slots__ = ("_closing", "_entries", "_group", "context", "error", "run_id")

    def __init__(self, group: TaskGroup, context: Any) -> None:
        self._group = group
        self._entries: dict[object, _Entry] = {}
        self._closing = anyio.Event()
        self.context = context
        self.run_id = uuid.uuid4().hex
        self.error: BaseException | None = None

    async def acquire(self, key: object, tool_name: str, factory: ResourceFactory) -> Any:
        """The resource of tool ``key`` in this run, opened by the first call that asks for it."""
        entry = self._entries.get(key)
        if entry is not None and entry.ready.is_set() and entry.failure is None:
            # Open already: no need to wait (waiting is a checkpoint, which would make the call suspend).
            return entry.value
        if entry is None:
            if self._closing.is_set():
                raise ResourceError(f"the run is ending: the per-run resource of `{tool_name}` cannot be opened")
            entry = self._entries[key] = _Entry(RunScope(self.run_id, tool_name, self.context))
            self._group.start_soon(self._keep, key, entry, factory)
        await entry.ready.wait()
        if entry.stopping is not None:
            raise entry.stopping
        if entry.failure is not None:
            raise ResourceError(entry.failure)
        return entry.value

    def close(self) -> None:
        """The run is over: every open resource closes (the task group waits for them)."""
        self._closing.set()

    async def _keep(self, key: object, entry: _Entry, factory: ResourceFactory) -> None:
        scope = entry.scope
        name = scope.tool_name
        # Shielded only once the resource is open, so that closing completes even when the run
        # is cancelled; the manager's own cancel scopes stay nested inside this one.
        with anyio.CancelScope() as guard:
            try:
                manager = factory(scope)
                value = await manager.__aenter__()
            except BaseException as exc:
                # Later calls in this run try again; the calls waiting now fail with the reason.
                del self._entries[key]
                detail = described(exc)
                entry.failure = f"opening the per-run resource of `{name}` failed ({detail})"
                entry.ready.set()
                if isinstance(exc, Exception):
                    logger.warning("opening the per-run resource of %s failed", name, exc_info=True)
                    return
                if not isinstance(exc, anyio.get_cancelled_exc_class()):
                    # An exception that stops the process: the calls that asked raise it in their own tasks, as
                    # if their tool had (on asyncio, a task ended by KeyboardInterrupt stops the event loop there).
                    entry.stopping = exc
                    return
                raise
            entry.value = value
            if scope.resource is None:
                scope.resource = value
            entry.ready.set()
            ended: BaseException | None = None
            try:
                await self._closing.wait()
            except BaseException as exc:
                ended = exc
                raise
            finally:
                guard.shield = True
                error = ended if ended is not None else self.error
                scope.error = error
                try:
                    if error is None:
                        await manager.__aexit__(None, None, None)
                    else:
                        await manager.__aexit__(type(error), error, error.__traceback__)
                except Exception as exc:
                    if exc is not error:
                        logger.warning("closing the per-run resource of %s failed", name, exc_info=True)


current_resources: ContextVar[RunResources | None] = ContextVar("toolsched_run_resources", default=None)


def with_run_resource(
    key: object,
    tool_name: str,
    factory: ResourceFactory,
    invoke: Callable[[Any, ToolContext | None], Awaitable[Any]],
) -> Callable[[Any, ToolContext | None], Awaitable[Any]]:
    """Wraps a tool's invoker: the call first gets the run's resource (opening it if needed) as ``ctx.resource``."""

    async def invoke_with_resource(args: Any, ctx: ToolContext | None) -> Any:
        resources = current_resources.get()
        if resources is None:
            raise ResourceError(f"`{tool_name}` has a per-run resource and runs only inside an Executor run")
        value = await resources.acquire(key, tool_name, factory)
        if ctx is not None:
            ctx.attach_resource(value)
        return await invoke(args, ctx)

    return invoke_with_resource
