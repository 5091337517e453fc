"""Per-call overhead of ResourceAware runs (pytest-benchmark), beside the Partitioned runs of test_overhead.py.

Run with ``.venv/bin/python -m pytest benches --benchmark-only -k "turn of"``: the
groups are shared, so each ResourceAware row sits next to the Partitioned and
TaskGroup rows for the same turn size.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

import toolsched as ts


def access(args: Mapping[str, Any]) -> ts.Access:
    # Every fourth call edits a file an earlier call of the turn read: a few waits, many overlaps.
    return ts.Access(writes=[args["path"]]) if args["limit"] % 4 == 0 else ts.Access(reads=[args["path"]])


@ts.tool(resources=access)
async def noop(path: str, limit: int = 10) -> None:
    return None


def texts(count: int) -> list[str]:
    return [json.dumps({"path": f"src/file_{i % max(count // 2, 1)}.py", "limit": i % 50 + 1}) for i in range(count)]


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.mark.parametrize("count", [1, 10, 100, 1000])
def test_toolsched_run_resource_aware(benchmark: Any, loop: asyncio.AbstractEventLoop, count: int) -> None:
    """Executor.run with ResourceAware: resources() per call, the conflict plan, the worker pool."""
    benchmark.group = f"turn of {count} calls"
    executor = ts.Executor([noop], strategy=ts.ResourceAware())
    calls = [ts.ToolCall(f"c{i}", "noop", text) for i, text in enumerate(texts(count))]
    result = loop.run_until_complete(executor.run(calls))
    assert len(result.results) == count and not any(r.is_error for r in result.results)
    benchmark(lambda: loop.run_until_complete(executor.run(calls)))
