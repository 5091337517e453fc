"""State kept per event loop: one value for each loop that uses it, none kept for loops that have ended.

A process may run several event loops at once (one per thread) or one after another (``anyio.run`` per
task). A tool's concurrency cap and its retry, rate-limit and circuit state belong to one loop (anyio's
primitives cannot cross loops); another loop using the same tool gets its own, and never replaces the
first's while the first still runs. The loops are held weakly: a loop its owner let go of without closing
it is collected (and closes its selector and self-pipe) as it would be were the tool never used on it.

What belongs to one loop is touched from that loop's thread only: code on another thread (another loop's,
or one that runs none) hands its work to the loop (``hand_to_loop``, ``run_on_loop``), reaching it by its
handle (``loop_handle``: asyncio's loop, or trio's token).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import sys
import weakref
from asyncio import events
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.lowlevel
import sniffio

__all__ = ["LoopValues", "hand_to_loop", "loop_ended", "loop_handle", "of_this_loop", "run_on_loop"]

T = TypeVar("T")

logger = logging.getLogger("toolsched")

# A tool's values per event loop: by the loop's id, the loop (held weakly) and its value.
LoopValues = dict[int, tuple["weakref.ref[Any]", T]]


def of_this_loop(values: LoopValues[T], make: Callable[..., T], *args: Any) -> T:
    """``values``' value for the current event loop, made by ``make(*args)`` the first time the loop asks (the
    arguments rather than a closure: this is asked once per call of a capped or resilient tool). When a loop
    asks for the first time, the values of loops that have ended or been collected since are dropped."""
    loop = anyio.lowlevel.current_token().native_token
    key = id(loop)
    entry = values.get(key)
    if entry is not None and entry[0]() is loop:
        return entry[1]
    for other in list(values):
        held = values.get(other)
        if held is None:
            continue
        token = held[0]()
        if token is None or loop_ended(token):
            values.pop(other, None)
    value = make(*args)
    values[key] = (weakref.ref(loop), value)
    return value


def loop_ended(token: object) -> bool:
    """Whether the event loop of ``token`` (an asyncio loop or a trio token) has ended."""
    is_closed = getattr(token, "is_closed", None)
    if is_closed is not None:
        return bool(is_closed())
    try:
        import trio
    except ImportError:  # pragma: no cover (a trio token exists only with trio installed)
        return False
    try:
        token.run_sync_soon(_nothing)  # type: ignore[attr-defined]
    except trio.RunFinishedError:
        return True
    return False


def _nothing() -> None:
    return None


def loop_handle() -> object | None:
    """The event loop running in this thread as other threads reach it (asyncio's loop, or trio's token), or
    None where none runs."""
    loop = events._get_running_loop()
    if loop is not None:
        return loop
    trio = sys.modules.get("trio")
    if trio is None:
        return None
    try:
        token: object = trio.lowlevel.current_trio_token()
    except RuntimeError:
        return None
    return token


def hand_to_loop(handle: object, fn: Callable[..., object], *args: Any) -> bool:
    """Schedules ``fn(*args)`` on the event loop of ``handle`` (``loop_handle``'s) from any thread, without
    waiting for it; False when that loop has ended (``fn`` never runs). An exception of ``fn`` is logged: the
    loop runs it outside any task, where trio would take it for a failure of its own."""
    try:
        if isinstance(handle, asyncio.AbstractEventLoop):
            handle.call_soon_threadsafe(_handed, fn, args, "asyncio")
        else:
            handle.run_sync_soon(_handed, fn, args, None)  # type: ignore[attr-defined]
    except RuntimeError:
        # asyncio's "Event loop is closed", trio's RunFinishedError (a RuntimeError).
        return False
    return True


def run_on_loop(handle: object, fn: Callable[..., object], *args: Any) -> bool:
    """Runs ``fn(*args)`` on the event loop of ``handle`` and waits until it has, from a thread that does not run
    that loop; False when that loop ended first. An exception of ``fn`` is raised here.

    An asyncio loop that is stopped, not closed (``run_until_complete`` returned with tasks still pending), runs
    nothing until it runs again, which it may never do: ``fn`` is handed to it without waiting (True), and runs,
    in order, when the loop runs again; an exception of ``fn`` is then logged."""
    if _stopped(handle):
        return hand_to_loop(handle, fn, *args)
    done: concurrent.futures.Future[None] = concurrent.futures.Future()

    def run() -> None:
        try:
            fn(*args)
        except BaseException as exc:
            done.set_exception(exc)
        else:
            done.set_result(None)

    if not hand_to_loop(handle, run):
        return False
    while True:
        try:
            done.result(timeout=_CLOSED_POLL)
            return True
        except concurrent.futures.TimeoutError:
            # An asyncio loop closed with the callback still queued drops it (trio runs every callback it took).
            if loop_ended(handle):
                return False
            if _stopped(handle):
                # Stopped with the callback still queued: it runs when the loop runs again, unwatched.
                done.add_done_callback(_log_failure(fn))
                return True


def _stopped(handle: object) -> bool:
    """Whether ``handle`` is an asyncio loop that is not running and not closed (trio's run only ever ends)."""
    return isinstance(handle, asyncio.AbstractEventLoop) and not handle.is_running() and not handle.is_closed()


def _log_failure(fn: Callable[..., object]) -> Callable[[concurrent.futures.Future[None]], None]:
    def log(done: concurrent.futures.Future[None]) -> None:
        exc = done.exception()
        if exc is not None and isinstance(exc, Exception):
            logger.error("%r, handed to the event loop from another thread, failed", fn, exc_info=exc)

    return log


# How often ``run_on_loop`` looks whether the loop it waits for has closed, in seconds.
_CLOSED_POLL = 0.25


def _handed(fn: Callable[..., object], args: tuple[Any, ...], library: str | None) -> None:
    """``fn(*args)`` in an event loop's callback, where no task runs. On asyncio, code that asks which library
    runs (``sniffio``, and anyio through it) is told so, as in the loop's tasks."""
    token = sniffio.current_async_library_cvar.set(library) if library is not None else None
    try:
        fn(*args)
    except Exception:
        logger.exception("%r, handed to the event loop from another thread, failed", fn)
    finally:
        if token is not None:
            sniffio.current_async_library_cvar.reset(token)
