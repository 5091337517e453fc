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

__all__ = ["Resume", "run_pool", "run_until_suspended"]

T = TypeVar("T")


class Resume:
    """Awaits the rest of a coroutine that its caller started by hand and that suspended, yielding ``first``.

    A worker runs each call's coroutine up to its first suspension itself
    (``coroutine.send(None)``): a call that finishes without waiting costs no
    wrapper at all, and one that waits is handed to this, which passes
    ``first`` and everything after it to the event loop unchanged and
    everything sent or thrown back in unchanged, so the whole behaves as a
    plain ``await`` on asyncio and trio alike (cancellation included).
    """

    __slots__ = ("_coroutine", "_first")

    def __init__(self, coroutine: Coroutine[Any, Any, Any], first: Any) -> None:
        self._coroutine = coroutine
        self._first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        coroutine = self._coroutine
        yielded = self._first
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as thrown:
                try:
                    yielded = coroutine.throw(thrown)
                except StopIteration as finished:
                    return finished.value
            else:
                try:
                    yielded = coroutine.send(sent)
                except StopIteration as finished:
                    return finished.value


def run_until_suspended(coroutine: Coroutine[Any, Any, None]) -> Resume | None:
    """Runs ``coroutine`` up to its first suspension: None when it finished, else what awaits the rest of it."""
    try:
        first = coroutine.send(None)
    except StopIteration:
        return None
    return Resume(coroutine, first)


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

    async with anyio.create_task_group() as group:

        def grow() -> None:
            nonlocal workers
            if workers < concurrency and position < total:
                workers += 1
                group.start_soon(worker)

        async def worker() -> None:
            nonlocal position
            while position < total:
                item = items[position]
                position += 1
                suspended = run_until_suspended(work(item))
                if suspended is not None:
                    grow()
                    await suspended

        await worker()
