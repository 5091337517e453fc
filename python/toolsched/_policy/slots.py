"""The per-process concurrency slots (a tool's ``anyio.CapacityLimiter`` tokens) that the running code holds.

A call made inside a call of the same tool (a nested run in its body, on any executor) runs on its ancestor's slot:
another token would be a second one for the task holding the first (refused by anyio), or, with none free, a wait
for the slot its own ancestor holds. The executor's own cap, the fleet's local fallback and the calls the fleet
admits all take slots here, so each sees the others' (the fallback counts the calls the fleet admitted).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar

import anyio

__all__ = ["holding", "holds", "slot_of"]

# The limiters whose slots the calls this code runs inside hold; nested runs inherit it.
_held: ContextVar[frozenset[anyio.CapacityLimiter]] = ContextVar("toolsched_holding", default=frozenset())


def holds(limiter: anyio.CapacityLimiter) -> bool:
    """Whether the running code runs inside a call holding a slot of ``limiter``."""
    return limiter in _held.get()


@contextmanager
def holding(limiter: anyio.CapacityLimiter) -> Iterator[None]:
    """Marks a slot of ``limiter`` as held by the code run inside (the caller has taken it)."""
    token = _held.set(_held.get() | {limiter})
    try:
        yield
    finally:
        _held.reset(token)


@asynccontextmanager
async def slot_of(limiter: anyio.CapacityLimiter | None) -> AsyncIterator[None]:
    """Runs the code inside on a slot of ``limiter``: one taken here (waited for), or, inside a call holding one,
    that call's; none with no limiter."""
    if limiter is None or holds(limiter):
        yield
        return
    async with limiter:
        with holding(limiter):
            yield
