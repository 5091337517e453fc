"""A worker pool that grows only when calls actually wait.

Spawning a task costs more than running a no-op tool call end to end, so a
concurrent batch starts with one worker (the calling task) and adds another
each time a running call first suspends on the event loop, up to the
concurrency cap. Calls that never wait run back to back with no task at all;
calls that wait overlap exactly as if every worker had been started up front.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Generator, Sequence
from typing import Any, TypeVar

import anyio

__all__ = ["run_pool"]

T = TypeVar("T")


class _NoticeFirstSuspension:
    """Awaits a coroutine, calling ``on_suspend`` when it first yields to the event loop.

    Everything the coroutine yields is passed to the event loop unchanged and
    everything sent or thrown back is passed in unchanged, so it behaves as a
    plain ``await`` on asyncio and trio alike (cancellation included).
    """

    __slots__ = ("_coroutine", "_on_suspend")

    def __init__(self, coroutine: Coroutine[Any, Any, Any], on_suspend: Callable[[], None]) -> None:
        self._coroutine = coroutine
        self._on_suspend = on_suspend

    def __await__(self) -> Generator[Any, Any, Any]:
        inner = self._coroutine.__await__()
        try:
            yielded = inner.send(None)
        except StopIteration as finished:
            return finished.value
        self._on_suspend()
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                inner.close()
                raise
            except BaseException as thrown:
                try:
                    yielded = inner.throw(thrown)
                except StopIteration as finished:
                    return finished.value
            else:
                try:
                    yielded = inner.send(sent)
                except StopIteration as finished:
                    return finished.value


async def run_pool(items: Sequence[T], concurrency: int, work: Callable[[T], Coroutine[Any, Any, None]]) -> None:
    """Runs ``work(item)`` for every item, in order of start, at most ``concurrency`` at once.

    ``work`` must return a coroutine. An exception from ``work`` cancels the
    other workers and propagates, as in a task group.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    total = len(items)
    position = 0
    workers = 1

    def next_item() -> tuple[bool, Any]:
        nonlocal position
        if position >= total:
            return False, None
        item = items[position]
        position += 1
        return True, item

    async with anyio.create_task_group() as group:

        def grow() -> None:
            nonlocal workers
            if workers < concurrency and position < total:
                workers += 1
                group.start_soon(worker)

        async def worker() -> None:
            while True:
                found, item = next_item()
                if not found:
                    return
                await _NoticeFirstSuspension(work(item), grow)

        await worker()
