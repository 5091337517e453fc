"""Delivering a run's events to its listeners, in order, from the loop or a worker thread."""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import anyio.from_thread

from toolsched._backends.workers import observer_failure
from toolsched._values.events import Event, under_parent

__all__ = ["Emitter", "is_async_callable"]

logger = logging.getLogger("toolsched")


def is_async_callable(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` gives a coroutine: an ``async def`` function or method, an object whose
    ``__call__`` is one, or a ``functools.partial`` of either. Judged once, when a callback is taken."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or (callable(fn) and inspect.iscoroutinefunction(type(fn).__call__))


class Emitter:
    """Delivers a run's events to plain and async callbacks, in order.

    Plain callbacks run at once; async ones are awaited at the executor's next
    checkpoint, so emitting never needs a task. Events from worker threads
    hop back to the event loop first. The emitter of a nested run stamps each
    event with its parent call (``parent``).
    """

    __slots__ = ("_async_sinks", "_loop_thread", "_parent", "_plain_sinks", "pending")

    def __init__(self, sinks: Iterable[Callable[[Event], Any]], parent: str | None = None) -> None:
        self._parent = parent
        self._plain_sinks: list[Callable[[Event], Any]] = []
        self._async_sinks: list[Callable[[Event], Awaitable[Any]]] = []
        for sink in sinks:
            (self._async_sinks if is_async_callable(sink) else self._plain_sinks).append(sink)
        # Events waiting for the async callbacks: ``flush`` delivers them (callers skip it while empty).
        self.pending: list[Event | _Answer] = []
        self._loop_thread = threading.get_ident()

    def __call__(self, event: Event) -> None:
        if threading.get_ident() != self._loop_thread:
            anyio.from_thread.run_sync(self._deliver, event)
        else:
            self._deliver(event)

    def _deliver(self, event: Event) -> None:
        if self._parent is not None:
            event = under_parent(event, self._parent)
        for sink in self._plain_sinks:
            try:
                answer = sink(event)
            except BaseException as exc:
                if not observer_failure(exc):
                    raise
                logger.exception("event callback %r failed on %s", sink, _described(event))
                continue
            if answer is not None and inspect.isawaitable(answer):
                # A plain callable that hands back an awaitable (a lambda around an async function, say): it is
                # awaited with the async callbacks, in order, as a hook's would be.
                self.pending.append(_Answer(sink, event, answer))
        if self._async_sinks:
            self.pending.append(event)

    async def flush(self) -> None:
        while self.pending:
            event = self.pending.pop(0)
            if isinstance(event, _Answer):
                try:
                    await event.answer
                except BaseException as exc:
                    if not observer_failure(exc):
                        raise
                    logger.exception("event callback %r failed on %s", event.sink, _described(event.event))
                continue
            for sink in self._async_sinks:
                try:
                    await sink(event)
                except BaseException as exc:
                    # A cancellation that is not the run's (something it awaited, cancelled by someone else) too.
                    if not observer_failure(exc):
                        raise
                    logger.exception("event callback %r failed on %s", sink, _described(event))


def _described(event: Event) -> str:
    """An event as a log line names it: its kind and its call. Not its ``repr``, which shows the result and can
    fail (an output nested past the recursion limit: ``logging`` re-raises that ``RecursionError``)."""
    result = getattr(event, "result", None)
    call_id = getattr(event, "call_id", None) or getattr(result, "call_id", None)
    kind = type(event).__name__
    return kind if call_id is None else f"{kind} of call {call_id!r}"


class _Answer:
    """What a plain callback handed back for an event, still to be awaited (``Emitter.flush``)."""

    __slots__ = ("answer", "event", "sink")

    def __init__(self, sink: Callable[[Event], Any], event: Event, answer: Awaitable[Any]) -> None:
        self.sink = sink
        self.event = event
        self.answer = answer
