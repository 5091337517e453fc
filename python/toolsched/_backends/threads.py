"""Sync tool bodies in worker threads, answered truthfully when their call is cancelled.

A thread cannot be stopped, so a sync body's call keeps two promises:

- a body that has not started when its call is answered never starts later
  (a gate, closed under a lock, decides whether the thread runs it at all);
- a body that did start, in a call that is cancelled (a failed sibling, the
  caller, an interrupt), is waited for, and the call reports what the body
  really did: the model is never told ``cancelled`` about work that happened.

Such a call is not stopped at all: its job asks the body's gate (``thread_gate``)
when it is cancelled, and leaves the call's scope alone once the body started,
so the call waits for the body as any call waits for its work. Its own timeout
and a cancellation of the run around it still end it at once: a stuck body is
then answered ``timeout`` (or the run's cancellation goes on) and its thread is
left to return (``ctx.cancelled`` turns true), as README says. The executor
tells which case applies through ``watching_call``, set in the call's own
context.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from contextvars import Context, ContextVar
from typing import Any, Protocol

import anyio
import anyio.to_thread

__all__ = ["CallWatch", "Gate", "run_in_thread", "unwatched", "watching_call"]


class CallWatch(Protocol):
    """What a threaded body needs to know of its call (the executor's job implements it)."""

    # Set when the body was waited for after its call was cancelled: its outcome is the call's.
    body_outlived_cancel: bool
    # Set when the call's own deadline passed while its cancelled body was waited for.
    timed_out: bool
    # Set when the call ends while its body goes on in the thread: the event is set when the body returns.
    body_left: threading.Event | None
    # The gate of the body the call runs in a thread now (None between attempts): a cancellation of the call
    # closes it, and leaves the call's scope alone when the body started.
    thread_gate: Gate | None

    def stop_after_body(self) -> None:
        """The body waited for after the call was cancelled has returned: the call stops now (no more attempts)."""
        ...

    def waits_for_started_body(self) -> bool:
        """Whether a cancellation of the call waits for a body that already started (not a timeout)."""
        ...

    def deadline(self) -> float:
        """The call's own deadline (``anyio.current_time()`` scale; ``inf`` when it has no timeout)."""
        ...


# The call being executed, in its own context (None outside the executor, or for calls without a cancel scope).
watching_call: ContextVar[CallWatch | None] = ContextVar("toolsched_watching_call", default=None)


def unwatched(context: Context) -> Context:
    """``context`` for the calls of a run, with no call of an enclosing run watched in it: a run started inside
    a call (a nested run) copies that call's context, and a sync body of its own must not take the enclosing
    call for its call (a cancellation of the enclosing call would wait for it, and report it as a success)."""
    if context.get(watching_call) is not None:
        context.run(watching_call.set, None)
    return context


class Gate:
    """Whether a body may start, and what it did (shared by the event loop and the worker thread)."""

    __slots__ = ("_lock", "closed", "error", "finished", "started", "value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.closed = False
        self.started = False
        self.finished = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        """In the worker thread: runs the body unless its call was answered first."""
        with self._lock:
            if self.closed:
                return None
            self.started = True
        try:
            self.value = fn(*args)
            return self.value
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            self.finished.set()

    def close_unless_started(self) -> bool:
        """On the loop: makes sure the body never starts; False when it already had."""
        with self._lock:
            if self.started:
                return False
            self.closed = True
            return True

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


async def run_in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a worker thread, keeping the promises above."""
    gate = Gate()
    call = watching_call.get()
    if call is not None:
        call.thread_gate = gate
    try:
        return await anyio.to_thread.run_sync(gate.run, fn, args, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        if gate.close_unless_started():
            raise
        if call is None:
            raise
        if call.body_outlived_cancel:
            # The call was cancelled once its body ran, and left running to report what the body did; this is
            # its own deadline, or a cancellation of the run: it ends now, its body goes on in the thread.
            call.body_outlived_cancel = False
            call.timed_out = anyio.current_time() >= call.deadline()
            call.body_left = gate.finished
            raise
        if not call.waits_for_started_body():
            # Timed out (or the run is cancelled): the call ends now, its body goes on in the thread.
            call.body_left = gate.finished
            raise
        # Started, and its scope cancelled by the body itself (``ctx.cancel`` from its thread): the body's
        # real outcome is the call's, unless the call's own timeout runs out first (it then ends ``timeout``,
        # its thread left to return).
        deadline = call.deadline()
        with anyio.CancelScope(shield=True, deadline=deadline) as waiting:
            left = None if deadline == math.inf else max(deadline - anyio.current_time(), 0.0)
            await anyio.to_thread.run_sync(gate.finished.wait, left, abandon_on_cancel=True)
        if waiting.cancelled_caught or not gate.finished.is_set():
            call.timed_out = True
            call.body_left = gate.finished
            raise
        call.body_outlived_cancel = True
        return gate.outcome()
    finally:
        if call is not None:
            if call.thread_gate is gate:
                call.thread_gate = None
            if call.body_outlived_cancel:
                call.stop_after_body()
