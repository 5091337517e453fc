"""What a changing tool set, per-run resources and nested runs cost (pytest-benchmark).

Run with ``.venv/bin/python -m pytest benches/test_dynamic.py --benchmark-only``.
The plain turn of 10 calls is the reference each other turn is compared with.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

import toolsched as ts

TOOLS = 50


def make_tools(count: int, prefix: str) -> list[ts.Tool]:
    tools: list[ts.Tool] = []
    for i in range(count):

        async def body(path: str, limit: int = 10) -> str:
            return path

        body.__name__ = f"{prefix}_{i}"
        tools.append(ts.tool(body))
    return tools


@asynccontextmanager
async def connection(run: ts.RunScope) -> AsyncIterator[int]:
    yield 1


@ts.tool(concurrency_safe=True)
async def with_ctx(path: str, ctx: ts.ToolContext) -> int:
    return 1


@ts.tool(concurrency_safe=True, run_resource=connection)
async def with_resource(path: str, ctx: ts.ToolContext) -> int:
    return int(ctx.resource)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def drive(loop: asyncio.AbstractEventLoop, make: Callable[[], Coroutine[Any, Any, Any]]) -> Callable[[], Any]:
    return lambda: loop.run_until_complete(make())


def calls(name: str, count: int = 10) -> list[ts.ToolCall]:
    return [ts.ToolCall(f"c{i}", name, {"path": f"src/{i}.py"}) for i in range(count)]


def test_refresh_unchanged(benchmark: Any, loop: asyncio.AbstractEventLoop) -> None:
    """registry.refresh() when the callable returns the same 50 tools: no new set."""
    benchmark.group = "refresh a set of 50 tools"
    tools = make_tools(TOOLS, "same")
    registry = ts.ToolRegistry(tools, refresh_tools=lambda: tools)
    benchmark(drive(loop, registry.refresh))


def test_refresh_changed(benchmark: Any, loop: asyncio.AbstractEventLoop) -> None:
    """registry.refresh() swapping between two sets of 50 tools, and the executor's next view of it."""
    benchmark.group = "refresh a set of 50 tools"
    sets = [make_tools(TOOLS, "left"), make_tools(TOOLS, "right")]
    flip = [0]

    def source() -> list[ts.Tool]:
        flip[0] ^= 1
        return sets[flip[0]]

    registry = ts.ToolRegistry(sets[0], refresh_tools=source)
    executor = ts.Executor(registry)

    async def refresh() -> None:
        assert await registry.refresh()
        executor._current_view()

    benchmark(drive(loop, refresh))


def test_turn_plain(benchmark: Any, loop: asyncio.AbstractEventLoop) -> None:
    """A turn of 10 calls of a tool that takes ctx: the reference."""
    benchmark.group = "turn of 10 calls"
    executor = ts.Executor([with_ctx])
    benchmark(drive(loop, lambda: executor.run(calls("with_ctx"))))


def test_turn_with_refresh(benchmark: Any, loop: asyncio.AbstractEventLoop) -> None:
    """The same turn with a refresh_tools that returns the same tools (consulted after each run)."""
    benchmark.group = "turn of 10 calls"
    executor = ts.Executor(ts.ToolRegistry([with_ctx], refresh_tools=lambda: [with_ctx]))
    benchmark(drive(loop, lambda: executor.run(calls("with_ctx"))))


def test_turn_with_run_resource(benchmark: Any, loop: asyncio.AbstractEventLoop) -> None:
    """The same turn with a per-run resource: opened by the run's first call, closed when the run ends."""
    benchmark.group = "turn of 10 calls"
    executor = ts.Executor([with_resource])
    benchmark(drive(loop, lambda: executor.run(calls("with_resource"))))


def test_turn_nested(benchmark: Any, loop: asyncio.AbstractEventLoop) -> None:
    """One agent-tool call whose body runs the same 10 calls as one child turn."""
    benchmark.group = "turn of 10 calls"
    child = ts.Executor([with_ctx])
    child_calls = calls("with_ctx")

    @ts.agent_tool(child)
    async def delegate(child: ts.ChildRun) -> int:
        outcome = await child.run(child_calls)
        return len(outcome.results)

    executor = ts.Executor([delegate])
    benchmark(drive(loop, lambda: executor.run([ts.ToolCall("p1", "delegate", {})])))
