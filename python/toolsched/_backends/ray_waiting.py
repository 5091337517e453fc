"""Waiting for many Ray results at once: one thread per backend, one ``ray.wait`` over every call in flight.

``RayWaiter.result(reference)`` is awaited by each call; the waiter's thread
asks Ray which of the references in flight are ready (``ray.wait`` on all of
them), fetches those, and wakes each waiting event loop once per batch, not
once per call. A call cancelled while it waits is forgotten by the waiter at
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

# How long one ``ray.wait`` blocks before the thread takes in the calls submitted meanwhile.
_POLL_SECONDS = 0.002


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
                ready, _ = ray.wait(references, num_returns=len(references), timeout=_POLL_SECONDS, fetch_local=True)
            except Exception as exc:  # Ray itself failed (shut down, disconnected): every call in flight hears it
                self._settle([(reference, None, exc) for reference in references])
                continue
            if ready:
                self._settle([self._fetch(ray, reference) for reference in ready])

    @staticmethod
    def _fetch(ray: Any, reference: Any) -> tuple[Any, Any, BaseException | None]:
        try:
            return reference, ray.get(reference), None
        except BaseException as exc:  # the call's own failure, re-raised in the call that waits
            return reference, None, exc

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
