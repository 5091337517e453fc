"""Starting a task that belongs to no task group of its caller: the driver of a streamed run.

``Executor.stream`` is an async generator. A generator that kept a task group
open across its ``yield`` would be closed, when its consumer leaves the loop
early, from wherever the interpreter finalises it — another task on asyncio, a
system task on trio — and a cancel scope cannot be left from another task. So
the run is driven by a task of its own (an asyncio task; a trio system task)
and the generator only reads its events: leaving early just cancels the run's
scope, which any code on the event loop's thread may do.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import Any

import sniffio

__all__ = ["start_detached"]

# Tasks started here, kept until they end: asyncio holds its tasks only weakly.
_running: set[Any] = set()


def start_detached(body: Callable[[], Awaitable[None]]) -> None:
    """Starts ``body()`` in a new task on the current event loop, in a copy of the current context.

    ``body`` must handle its own exceptions: nothing awaits the task.
    """
    library = sniffio.current_async_library()
    context = contextvars.copy_context()
    if library == "trio":
        import trio

        async def run_body() -> None:
            await body()

        trio.lowlevel.spawn_system_task(run_body, context=context)
        return
    import asyncio

    async def run_task() -> None:
        await body()

    task = asyncio.get_running_loop().create_task(run_task(), context=context)
    _running.add(task)
    task.add_done_callback(_running.discard)
