"""Per-call overhead of the executor and of argument validation (pytest-benchmark).

Run with ``make bench`` or
``.venv/bin/python -m pytest benches --benchmark-only``. Each turn runs inside one
event loop through ``run_until_complete``; the TaskGroup and direct-call
benchmarks pay the same loop overhead, so the differences are the executor's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import jsonschema
import jsonschema_rs
import pytest

import toolsched as ts
from toolsched import _core

SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
    "required": ["path"],
    "additionalProperties": False,
}


async def noop_body(path: str, limit: int = 10) -> None:
    return None


@ts.tool(concurrency_safe=True)
async def noop(path: str, limit: int = 10) -> None:
    return None


def texts(count: int) -> list[str]:
    return [json.dumps({"path": f"src/file_{i}.py", "limit": i % 50 + 1}) for i in range(count)]


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def drive(loop: asyncio.AbstractEventLoop, make: Callable[[], Coroutine[Any, Any, Any]]) -> Callable[[], Any]:
    return lambda: loop.run_until_complete(make())


SIZES = [1, 10, 100, 1000]


@pytest.mark.parametrize("count", SIZES)
def test_taskgroup_floor(benchmark: Any, loop: asyncio.AbstractEventLoop, count: int) -> None:
    """A bare asyncio.TaskGroup over the same coroutines, arguments decoded with json.loads."""
    benchmark.group = f"turn of {count} calls"
    payloads = texts(count)

    async def turn() -> list[Any]:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(noop_body(**json.loads(text))) for text in payloads]
        return [task.result() for task in tasks]

    benchmark(drive(loop, turn))


@pytest.mark.parametrize("count", SIZES)
def test_toolsched_run(benchmark: Any, loop: asyncio.AbstractEventLoop, count: int) -> None:
    """Executor.run with validation from JSON text, Partitioned, shaping and ordered results."""
    benchmark.group = f"turn of {count} calls"
    executor = ts.Executor([noop])
    calls = [ts.ToolCall(f"c{i}", "noop", text) for i, text in enumerate(texts(count))]
    result = loop.run_until_complete(executor.run(calls))
    assert len(result.results) == count and not any(r.is_error for r in result.results)
    benchmark(drive(loop, lambda: executor.run(calls)))


@ts.tool(concurrency_safe=True, rule_subject="path", name="noop")
async def guarded_noop(path: str, limit: int = 10) -> None:
    return None


async def allow_known(event: ts.HookEvent) -> None:
    return None


async def observe(event: ts.HookEvent) -> None:
    return None


@pytest.mark.parametrize("count", SIZES)
def test_toolsched_run_guarded(benchmark: Any, loop: asyncio.AbstractEventLoop, count: int) -> None:
    """The full pipeline: as above, plus one pre hook, one post hook and permission rules on the path."""
    benchmark.group = f"turn of {count} calls"
    executor = ts.Executor(
        [guarded_noop],
        hooks=ts.Hooks().pre_tool_use("noop", allow_known).post_tool_use("noop", observe),
        permissions=ts.Permissions(allow=["noop(src/**)"], deny=["noop(secret/**)"], root="/work/project"),
    )
    calls = [ts.ToolCall(f"c{i}", "noop", text) for i, text in enumerate(texts(count))]
    result = loop.run_until_complete(executor.run(calls))
    assert len(result.results) == count and not any(r.is_error for r in result.results)
    benchmark(drive(loop, lambda: executor.run(calls)))


def test_direct_call(benchmark: Any, loop: asyncio.AbstractEventLoop) -> None:
    """Calling the tool function directly: the floor for a single-call turn."""
    benchmark.group = "turn of 1 calls"
    payload = texts(1)[0]
    benchmark(drive(loop, lambda: noop_body(**json.loads(payload))))


VALIDATION_BATCH = 1000


def test_validate_toolsched(benchmark: Any) -> None:
    """JSON text to a validated dict in the Rust engine (one crossing for the batch)."""
    benchmark.group = f"validate {VALIDATION_BATCH} argument texts"
    table = ts.ToolRegistry([noop])._table
    calls = [ts.ToolCall(f"c{i}", "noop", text) for i, text in enumerate(texts(VALIDATION_BATCH))]
    limits = _core.Limits(1 << 24, 64, 10)
    tools, _, failures, _, _, _ = table.prepare(calls, [], limits)
    assert len(tools) == VALIDATION_BATCH and not failures
    benchmark(lambda: table.prepare(calls, [], limits))


def test_validate_json_loads_and_jsonschema_rs(benchmark: Any) -> None:
    """json.loads followed by the jsonschema-rs Python binding."""
    benchmark.group = f"validate {VALIDATION_BATCH} argument texts"
    validator = jsonschema_rs.validator_for(SCHEMA)
    payloads = texts(VALIDATION_BATCH)

    def validate_all() -> list[Any]:
        out = []
        for text in payloads:
            value = json.loads(text)
            validator.validate(value)
            out.append(value)
        return out

    benchmark(validate_all)


def test_validate_pure_python_jsonschema(benchmark: Any) -> None:
    """json.loads followed by the pure-Python jsonschema package."""
    benchmark.group = f"validate {VALIDATION_BATCH} argument texts"
    validator = jsonschema.Draft202012Validator(SCHEMA)
    payloads = texts(VALIDATION_BATCH)

    def validate_all() -> list[Any]:
        out = []
        for text in payloads:
            value = json.loads(text)
            validator.validate(value)
            out.append(value)
        return out

    benchmark.pedantic(validate_all, rounds=20, iterations=1)
