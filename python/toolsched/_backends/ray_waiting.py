"""Waiting for many Ray results at once: one thread per backend, ``ray.wait`` over the calls in flight.

Each call waits on a ``Waiting`` the backend registers with ``watch`` once the
call is sent (``RayWaiter.result(reference)`` does both for one reference). The
waiter's thread asks Ray which references are ready (``ray.wait`` on the oldest
ones until a share of all of them is ready or for a while, and on all of them
now and then), and hands each event loop its batch of ready ones once per batch,
not once per call: the loop fetches them with one ``ray.get`` and wakes each
call. A call cancelled while it waits is forgotten by the waiter at once (its
caller cancels the Ray work). Works on asyncio and trio: each waiting call
carries its own event loop's thread-safe scheduler."""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel

from toolsched._backends.ray_worker import ray_package

__all__ = ["RayWaiter", "Waiting"]

# One ``ray.wait`` looks at every reference it is given (a fraction of a microsecond each, in this
# process, every time). The thread waits on the oldest calls in flight (results come back mostly in
# the order calls were sent) until a sixteenth of all of them are ready, or for a time that grows
# with their number (20 us each, between 2 and 50 ms); it looks at every call in flight when the
# oldest ones gave nothing in that time, and otherwise at most every four such times. A result is
# noticed at most that long after it is ready, and looking costs a few microseconds per result
# however many calls wait.
_READY_SHARE = 16
_POLL_PER_REFERENCE = 0.00002
_POLL_SECONDS = (0.002, 0.05)
_OLDEST_EXTRA = 16  # the oldest calls waited on: twice the share, and this many more
_FULL_LOOK_EVERY = 4  # poll times between two looks at every call in flight


class Waiting:
    """One call's wait: where its answer goes and how to wake its event loop."""

    __slots__ = ("call_soon", "done", "error", "ready", "reference", "value")

    def __init__(self, call_soon: Callable[[Callable[[], None]], Any]) -> None:
        self.call_soon = call_soon
        self.reference: Any = None  # set once the call is sent
        self.ready = anyio.Event()
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None


def _answer_all(batch: list[Waiting], error: BaseException | None) -> None:
    """On the batch's event loop: fetches the results of its ready references (or gives each ``error``) and
    wakes each call. Fetching here, with one ``ray.get`` a batch, keeps the waiting thread from taking the
    interpreter's lock back and forth while the loop runs."""
    if error is None:
        for waiting, (value, failure) in zip(batch, _fetch([waiting.reference for waiting in batch]), strict=True):
            waiting.value, waiting.error = value, failure
    else:
        for waiting in batch:
            waiting.error = error
    for waiting in batch:
        waiting.ready.set()


def _fetch(ready: list[Any]) -> list[tuple[Any, BaseException | None]]:
    """The answers of ready references: one ``ray.get`` for all of them, or one each if any failed."""
    ray = ray_package()
    try:
        values = ray.get(ready)
    except BaseException:  # one of them failed: each call hears its own answer
        pass
    else:
        return [(value, None) for value in values]
    answers: list[tuple[Any, BaseException | None]] = []
    for reference in ready:
        try:
            answers.append((ray.get(reference), None))
        except BaseException as exc:  # the call's own failure, re-raised in the call that waits
            answers.append((None, exc))
    return answers


class RayWaiter:
    """Waits on every Ray reference in flight with one thread; ``close()`` stops the thread."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._waiting: dict[Any, Waiting] = {}
        self._thread: threading.Thread | None = None
        self._closed = False

    @staticmethod
    def waiting(native: Any) -> Waiting:
        """A wait for a call about to be sent, on the event loop whose native token is ``native`` (the
        calling one: ``anyio.lowlevel.current_token().native_token``), registered by ``watch``."""
        call_soon = native.call_soon_threadsafe if hasattr(native, "call_soon_threadsafe") else native.run_sync_soon
        return Waiting(call_soon)

    def watch(self, sent: list[tuple[Any, Waiting]]) -> None:
        """Waits for each reference sent, for its ``Waiting`` (the thread starts with the first)."""
        with self._lock:
            for reference, waiting in sent:
                waiting.reference = reference
                self._waiting[reference] = waiting
            if self._thread is None or not self._thread.is_alive():
                self._closed = False
                self._thread = threading.Thread(target=self._run, name="toolsched-ray-waiter", daemon=True)
                self._thread.start()
            self._lock.notify()

    async def wait(self, waiting: Waiting) -> Any:
        """The answer ``waiting`` gets: its reference's value, or what ``ray.get`` raises for it, or what
        ``fail`` gave it. Cancellable: a cancelled wait is forgotten at once."""
        try:
            await waiting.ready.wait()
        finally:
            if not waiting.done and waiting.reference is not None:
                with self._lock:
                    self._waiting.pop(waiting.reference, None)
        if waiting.error is not None:
            raise waiting.error
        return waiting.value

    async def result(self, reference: Any) -> Any:
        """The value of ``reference``; raises what ``ray.get`` raises for it. Cancellable."""
        waiting = self.waiting(anyio.lowlevel.current_token().native_token)
        self.watch([(reference, waiting)])
        return await self.wait(waiting)

    @staticmethod
    def fail(waiting: Waiting, error: BaseException) -> None:
        """Answers a wait whose call was never sent with ``error`` (on the wait's own event loop)."""
        waiting.error, waiting.done = error, True
        waiting.ready.set()

    def close(self) -> None:
        """Stops the thread once it has nothing in flight (calls still waiting keep it going)."""
        with self._lock:
            self._closed = True
            self._lock.notify()

    def _run(self) -> None:
        ray = ray_package()
        looked_at_all = time.monotonic()
        while True:
            with self._lock:
                while not self._waiting:
                    if self._closed:
                        self._thread = None
                        return
                    self._lock.wait()
                count = len(self._waiting)
                share = max(1, count // _READY_SHARE)
                oldest = list(itertools.islice(self._waiting, 2 * share + _OLDEST_EXTRA))
            shortest, longest = _POLL_SECONDS
            timeout = min(max(count * _POLL_PER_REFERENCE, shortest), longest)
            try:
                ready = self._ready(ray, oldest, share, timeout)
                now = time.monotonic()
                if len(oldest) < count and (not ready or now - looked_at_all >= _FULL_LOOK_EVERY * timeout):
                    looked_at_all = now
                    ready.extend(self._ready_elsewhere(ray, set(oldest)))
            except Exception as exc:  # Ray itself failed (shut down, disconnected): every call in flight hears it
                with self._lock:
                    references = list(self._waiting)
                self._settle(references, exc)
                continue
            if ready:
                self._settle(ready)

    @staticmethod
    def _ready(ray: Any, oldest: list[Any], share: int, timeout: float) -> list[Any]:
        """The ready ones of the oldest calls: waits for ``share`` of them (or ``timeout``), then takes every
        one ready."""
        share = min(share, len(oldest))
        ready, rest = ray.wait(oldest, num_returns=share, timeout=timeout, fetch_local=True)
        if len(ready) == share and rest:
            # ``ray.wait`` returns at most ``num_returns``: more may be ready already.
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0, fetch_local=True)
            ready.extend(more)
        return list(ready)

    def _ready_elsewhere(self, ray: Any, looked_at: set[Any]) -> list[Any]:
        """The references in flight, other than ``looked_at``, that are ready now (no waiting)."""
        with self._lock:
            others = [reference for reference in self._waiting if reference not in looked_at]
        if not others:
            return []
        ready, _ = ray.wait(others, num_returns=len(others), timeout=0, fetch_local=True)
        return list(ready)

    def _settle(self, ready: list[Any], error: BaseException | None = None) -> None:
        """Hands the calls waiting on ``ready`` to their event loops, which fetch the results (or raise ``error``)."""
        batches: dict[Callable[[Callable[[], None]], Any], list[Waiting]] = {}
        with self._lock:
            for reference in ready:
                waiting = self._waiting.pop(reference, None)
                if waiting is None:
                    continue  # cancelled meanwhile
                waiting.done = True
                batches.setdefault(waiting.call_soon, []).append(waiting)
        for call_soon, batch in batches.items():
            try:
                call_soon(functools.partial(_answer_all, batch, error))
            except RuntimeError:
                pass  # that event loop is gone: nobody waits any more
