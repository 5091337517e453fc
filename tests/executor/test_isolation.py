"""Process isolation: tools run in real worker processes; a crash or a timeout costs only that call."""

from __future__ import annotations

import datetime
import os
import threading
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio


@ts.tool(isolation="process", concurrency_safe=True)
def whoami() -> int:
    """The worker's process ID."""
    return os.getpid()


@ts.tool(isolation="process", concurrency_safe=True)
def weekday(day: datetime.date) -> str:
    """Arguments are coerced in the caller and pickled across."""
    return day.strftime("%A")


@ts.tool(isolation="process", concurrency_safe=True)
async def add_async(a: int, b: int) -> int:
    """An async body runs on the worker's own event loop."""
    await anyio.lowlevel.checkpoint()
    return a + b


@ts.tool(isolation="process", concurrency_safe=True)
def refuse(text: str) -> None:
    raise ValueError(text)


@ts.tool(isolation="process", concurrency_safe=True)
def crash(code: int) -> None:
    os._exit(code)


@ts.tool(isolation="process", timeout=0.3)
def linger() -> None:
    threading.Event().wait(60)


class Salted(ts.Tool):
    name = "salted"
    description = "A class-form tool: its attributes travel to the worker by value."
    isolation = "process"
    input_schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}

    def __init__(self, salt: str) -> None:
        self.salt = salt

    def call(self, args: Any, ctx: ts.ToolContext | None) -> list[Any]:
        return [os.getpid(), ctx is None, self.salt + args["text"]]


# anyio keeps one task per event loop that shuts its worker processes down when the loop ends.
POOL_SHUTDOWN_TASKS = {"AnyIO process pool shutdown task", "anyio._backends._trio._shutdown_process_pool"}


def running_tasks() -> set[int]:
    return {task.id for task in anyio.get_running_tasks() if task.name not in POOL_SHUTDOWN_TASKS}


async def test_process_tools_run_in_worker_processes_and_a_crash_fails_only_its_call() -> None:
    before = running_tasks()
    executor = ts.Executor([whoami, weekday, add_async, Salted("pepper-"), crash, refuse], strategy=ts.Parallel())
    outcome = await executor.run(
        [
            ts.ToolCall("1", "whoami"),
            ts.ToolCall("2", "weekday", {"day": "2026-01-02"}),
            ts.ToolCall("3", "crash", {"code": 3}),
            ts.ToolCall("4", "add_async", {"a": 2, "b": 3}),
            ts.ToolCall("5", "salted", {"text": "x"}),
            ts.ToolCall("6", "refuse", {"text": "no"}),
        ]
    )
    results = {r.call_id: r for r in outcome.results}
    assert isinstance(results["1"].output, int)
    assert results["1"].output != os.getpid()
    assert results["2"].output == "Friday"
    assert results["3"].error_kind == "execution_error"
    assert results["3"].error == (
        "WorkerLostError: the worker process running `crash` exited before returning a result"
    )
    assert results["4"].output == 5
    pid, got_no_context, salted = results["5"].output
    assert (pid != os.getpid(), got_no_context, salted) == (True, True, "pepper-x")
    assert results["6"].error_kind == "execution_error"
    assert results["6"].error == "ValueError: no"
    assert running_tasks() <= before


async def test_a_timeout_terminates_the_worker_process() -> None:
    executor = ts.Executor([whoami, linger])
    first = (await executor.run([ts.ToolCall("1", "whoami")])).results[0].output
    # The idle worker is reused for the next call, which runs past its timeout.
    with anyio.fail_after(20):
        outcome = await executor.run([ts.ToolCall("2", "linger")])
    assert outcome.results[0].error_kind == "timeout"
    with pytest.raises(ProcessLookupError):
        os.kill(first, 0)
    second = (await executor.run([ts.ToolCall("3", "whoami")])).results[0].output
    assert second != first


def test_a_process_tool_must_be_importable_by_the_worker() -> None:
    @ts.tool(isolation="process")
    def local() -> None:
        return None

    with pytest.raises(ts.ToolDefinitionError, match="module level"):
        ts.Executor([local])


def test_a_process_tool_cannot_take_a_context() -> None:
    def progress(ctx: ts.ToolContext) -> None:
        return None

    progress.__qualname__ = "progress"
    with pytest.raises(ts.ToolDefinitionError, match="cannot take ctx"):
        ts.Executor([ts.tool(isolation="process")(progress)])
