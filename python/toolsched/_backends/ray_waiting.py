"""Waiting for many Ray results at once: one thread per backend, one ``ray.wait`` over every call in flight.

``RayWaiter.result(reference)`` is awaited by each call; the waiter's thread
asks Ray which of the references in flight are ready (``ray.wait`` on all of
them, until a share of them is ready or for a while), fetches those with one
``ray.get``, and wakes each waiting event loop once per batch, not once per
call. A call cancelled while it waits is forgotten by the waiter at
once (its caller cancels the Ray work). Works on asyncio and trio: each
waiting call carries its own event loop's thread-safe scheduler.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel

from toolsched._backends.ray_worker import ray_package

__all__ = ["RayWaiter"]

# One ``ray.wait`` looks at every reference in flight (a fraction of a microsecond each, in this
# process, every time): the thread waits until a sixteenth of them are ready, or for a time that
# grows with their number (20 us each, between 2 and 50 ms), so that looking costs a few
# microseconds per result however many calls wait, and a result is noticed at most that long
# after it is ready (at 100 in flight: 2 ms, as when every wait looked at all of them).
_READY_SHARE = 16
_POLL_PER_REFERENCE = 0.00002
_POLL_SECONDS = (0.002, 0.05)


class _Waiting:
    """One call's wait: where its answer goes and how to wake its event loop."""

    __slots__ = ("call_soon", "done", "error", "ready", "value")

    def __init__(self, call_soon: Callable[[Callable[[], None]], Any]) -> None:
        self.call_soon = call_soon
        self.ready = anyio.Event()
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None


def _wake_all(batch: list[_Waiting]) -> None:
    for waiting in batch:
        waiting.ready.set()


class RayWaiter:
    """Waits on every Ray reference in flight with one thread; ``close()`` stops the thread."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._waiting: dict[Any, _Waiting] = {}
        self._thread: threading.Thread | None = None
        self._closed = False

    async def result(self, reference: Any) -> Any:
        """The value of ``reference``; raises what ``ray.get`` raises for it. Cancellable."""
        native: Any = anyio.lowlevel.current_token().native_token
        call_soon = native.call_soon_threadsafe if hasattr(native, "call_soon_threadsafe") else native.run_sync_soon
        waiting = _Waiting(call_soon)
        with self._lock:
            self._waiting[reference] = waiting
            if self._thread is None or not self._thread.is_alive():
                self._closed = False
                self._thread = threading.Thread(target=self._run, name="toolsched-ray-waiter", daemon=True)
                self._thread.start()
            self._lock.notify()
        try:
            await waiting.ready.wait()
        finally:
            if not waiting.done:
                with self._lock:
                    self._waiting.pop(reference, None)
        if waiting.error is not None:
            raise waiting.error
        return waiting.value

    def close(self) -> None:
        """Stops the thread once it has nothing in flight (calls still waiting keep it going)."""
        with self._lock:
            self._closed = True
            self._lock.notify()

    def _run(self) -> None:
        ray = ray_package()
        while True:
            with self._lock:
                while not self._waiting:
                    if self._closed:
                        self._thread = None
                        return
                    self._lock.wait()
                references = list(self._waiting)
            try:
                ready = self._ready(ray, references)
            except Exception as exc:  # Ray itself failed (shut down, disconnected): every call in flight hears it
                self._settle([(reference, None, exc) for reference in references])
                continue
            if ready:
                self._settle(self._fetch(ray, ready))

    @staticmethod
    def _ready(ray: Any, references: list[Any]) -> list[Any]:
        """The references that are ready: waits for a share of them (or a while), then takes every one ready."""
        count = len(references)
        share = max(1, count // _READY_SHARE)
        shortest, longest = _POLL_SECONDS
        timeout = min(max(count * _POLL_PER_REFERENCE, shortest), longest)
        ready, rest = ray.wait(references, num_returns=share, timeout=timeout, fetch_local=True)
        if len(ready) == share and rest:
            # ``ray.wait`` returns at most ``num_returns``: more may be ready already.
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0, fetch_local=True)
            ready.extend(more)
        return list(ready)

    @staticmethod
    def _fetch(ray: Any, ready: list[Any]) -> list[tuple[Any, Any, BaseException | None]]:
        """The answers of ready references: one ``ray.get`` for all of them, or one each if any failed."""
        try:
            values = ray.get(ready)
        except BaseException:  # one of them failed: each call hears its own answer
            pass
        else:
            return [(reference, value, None) for reference, value in zip(ready, values, strict=True)]
        answers: list[tuple[Any, Any, BaseException | None]] = []
        for reference in ready:
            try:
                answers.append((reference, ray.get(reference), None))
            except BaseException as exc:  # the call's own failure, re-raised in the call that waits
                answers.append((reference, None, exc))
        return answers

    def _settle(self, answers: list[tuple[Any, Any, BaseException | None]]) -> None:
        batches: dict[Callable[[Callable[[], None]], Any], list[_Waiting]] = {}
        with self._lock:
            for reference, value, error in answers:
                waiting = self._waiting.pop(reference, None)
                if waiting is None:
                    continue  # cancelled meanwhile
                waiting.value, waiting.error, waiting.done = value, error, True
                batches.setdefault(waiting.call_soon, []).append(waiting)
        for call_soon, batch in batches.items():
            try:
                call_soon(functools.partial(_wake_all, batch))
            except RuntimeError:
                pass  # that event loop is gone: nobody waits any more
