"""State kept per event loop: one value for each loop that uses it, none kept for loops that have ended.

A process may run several event loops at once (one per thread) or one after another (``anyio.run`` per
task). A tool's concurrency cap and its retry, rate-limit and circuit state belong to one loop (anyio's
primitives cannot cross loops); another loop using the same tool gets its own, and never replaces the
first's while the first still runs. The loops are held weakly: a loop its owner let go of without closing
it is collected (and closes its selector and self-pipe) as it would be were the tool never used on it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.lowlevel

__all__ = ["LoopValues", "loop_ended", "of_this_loop"]

T = TypeVar("T")

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
