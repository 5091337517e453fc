"""What the ability to stop a call costs per call (pytest-benchmark).

A call runs in its own cancel scope only when it can be stopped while it runs:
its tool has a ``timeout``, ``interrupt_behavior="cancel"`` or process isolation,
or its batch can be aborted by a failure. Everything else takes the plain path.
Run with ``.venv/bin/python -m pytest benches/test_cancellation_overhead.py --benchmark-only``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

import toolsched as ts

COUNT = 1000


@ts.tool(concurrency_safe=True)
async def plain(path: str) -> None:
    return None


@ts.tool(concurrency_safe=True)
async def with_context(path: str, ctx: ts.ToolContext) -> None:
    return None


@ts.tool(concurrency_safe=True, timeout=30)
async def timed(path: str) -> None:
    return None


@ts.tool(concurrency_safe=True, interrupt_behavior="cancel")
async def interruptible(path: str) -> None:
    return None


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.mark.parametrize(
    ("name", "abort_siblings"),
    [("plain", False), ("with_context", False), ("timed", False), ("interruptible", False), ("plain", True)],
    ids=["plain", "takes-ctx", "timeout", "interrupt-cancel", "abort-siblings"],
)
def test_turn_by_cancellation_path(
    benchmark: Any, loop: asyncio.AbstractEventLoop, name: str, abort_siblings: bool
) -> None:
    benchmark.group = f"turn of {COUNT} calls, by cancellation path"
    executor = ts.Executor([plain, with_context, timed, interruptible], abort_siblings_on_error=abort_siblings)
    calls = [ts.ToolCall(f"c{i}", name, {"path": f"p{i}"}) for i in range(COUNT)]
    outcome = loop.run_until_complete(executor.run(calls))
    assert len(outcome.results) == COUNT and not any(r.is_error for r in outcome.results)
    benchmark(lambda: loop.run_until_complete(executor.run(calls)))
