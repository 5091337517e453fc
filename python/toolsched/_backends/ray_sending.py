"""Sending calls to Ray: every call an event loop starts in one pass of its loop goes out together.

A call puts what it sends in its event loop's outbox (``RaySender.send``) and
waits; the first call of a pass schedules one ``flush`` on that loop, behind the
callbacks the loop has ready (twice over, so that a call cancelled in the same
pass hears it first), which submits every call in the outbox back to back, then
hands all their references to the ``RayWaiter`` at once. A call cancelled before
its flush is never sent; a call whose submission fails hears that failure when
it wakes.
Works on asyncio and trio: each loop has its own outbox.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from toolsched._backends.ray_waiting import RayWaiter, Waiting

__all__ = ["Outgoing", "RaySender"]


class Outgoing:
    """One call on its way to Ray: what submits it, and, once sent, its reference."""

    __slots__ = ("dropped", "failure", "index", "reference", "submit", "waiting")

    def __init__(self, submit: Callable[[], tuple[Any, int]], waiting: Waiting) -> None:
        self.submit = submit
        self.waiting = waiting
        self.reference: Any = None  # set when sent
        self.index = -1  # the actor it went to (-1: a task)
        self.failure: BaseException | None = None  # what submitting it raised
        self.dropped = False  # cancelled before it was sent


class RaySender:
    """Submits the calls of one event-loop pass together, then hands their references to ``waiter``."""

    def __init__(self, waiter: RayWaiter) -> None:
        self._waiter = waiter
        self._lock = threading.Lock()
        # One outbox per event loop (keyed by its native token) with calls waiting for its flush.
        self._outboxes: dict[Any, list[Outgoing]] = {}

    def send(self, outgoing: Outgoing, native: Any) -> None:
        """Queues ``outgoing`` on the calling event loop (``native``: its native token); it is submitted once
        the loop's tasks ready now have run."""
        with self._lock:
            outbox = self._outboxes.get(native)
            if outbox is not None:
                outbox.append(outgoing)
                return
            self._outboxes[native] = [outgoing]
        # On the loop's own thread: asyncio's plain call_soon (no wake-up write), trio's token.
        schedule = native.call_soon if hasattr(native, "call_soon") else native.run_sync_soon
        try:
            schedule(self._flush_soon, native, schedule)
        except RuntimeError:
            self.flush(native)  # the loop takes no more callbacks (it is closing): send now

    def _flush_soon(self, native: Any, schedule: Callable[..., Any]) -> None:
        # Once more behind the loop's ready callbacks: a call cancelled in this pass (its task woken by the
        # cancellation after this callback was queued) hears it before its call is sent.
        try:
            schedule(self.flush, native)
        except RuntimeError:
            self.flush(native)

    def flush(self, native: Any) -> None:
        """Submits every call in the loop's outbox, in order; never raises (each call hears its own failure)."""
        with self._lock:
            outbox = self._outboxes.pop(native, [])
        sent: list[tuple[Any, Waiting]] = []
        for outgoing in outbox:
            if outgoing.dropped:
                continue
            try:
                outgoing.reference, outgoing.index = outgoing.submit()
            except BaseException as exc:  # re-raised in the call's own task
                outgoing.failure = exc
                RayWaiter.fail(outgoing.waiting, exc)
                continue
            sent.append((outgoing.reference, outgoing.waiting))
        if not sent:
            return
        try:
            self._waiter.watch(sent)
        except BaseException as exc:  # no waiting thread (cannot start one): every call sent hears it
            for _, waiting in sent:
                RayWaiter.fail(waiting, exc)
