"""A waiting call of a concurrent batch runs stepped (its task's coroutine is a ``Stepper``): what its task shows
and how it answers code that reaches for it are those of the same call run through ``execute`` (forced here by
an input guardrail that lets every call through, which a stepped call leaves out)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

import toolsched as ts

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


async def wait() -> str:
    """The batch's first call: it waits, so that the calls after it start in tasks of their own."""
    await asyncio.sleep(0.01)
    return "waited"


def executors(tool: Any) -> list[tuple[str, ts.Executor]]:
    """The same tools, once with stepped calls and once through ``execute``."""

    def tools() -> list[Any]:
        return [ts.tool(concurrency_safe=True)(wait), ts.tool(name="probe", concurrency_safe=True)(tool)]

    return [
        ("Stepper", ts.Executor(tools())),
        ("coroutine", ts.Executor(tools(), input_guardrails=[lambda event: None])),
    ]


BATCH = [ts.ToolCall("w", "wait", {}), ts.ToolCall("p", "probe", {})]


def ended(result: ts.ToolResult) -> tuple[Any, ...]:
    return (result.output, result.error_kind, result.error)


async def test_a_tool_stepping_its_own_task_is_refused_and_its_call_goes_on() -> None:
    # A coroutine stepped while it runs raises ValueError and is left as it was: the tool's call ends with what
    # the tool returns, whatever it tried on its own task's coroutine.
    async def steps_itself() -> list[str]:
        task = asyncio.current_task()
        assert task is not None
        coroutine: Any = task.get_coro()
        tried = []
        for step in (
            lambda: coroutine.send(None),
            lambda: coroutine.throw(ValueError("thrown in")),
            lambda: coroutine.close(),
            lambda: next(coroutine.__await__()),
        ):
            try:
                step()
            except ValueError as exc:
                tried.append(f"ValueError: {exc}")
            else:
                tried.append("stepped")
        await asyncio.sleep(0)
        return [type(coroutine).__name__, *tried]

    outcomes = []
    for kind, executor in executors(steps_itself):
        outcome = await executor.run(BATCH)
        output, error_kind, error = ended(outcome.results[1])
        assert error_kind is None, error
        assert output[0] == kind
        outcomes.append(output[1:])
    assert outcomes[0] == outcomes[1] == ["ValueError: coroutine already executing"] * 4


async def test_a_stepped_task_names_its_tool_in_its_description() -> None:
    # A task's description names the coroutine it runs: a stepped call's names its tool's coroutine (there is no
    # ``execute`` to name), never an unnamed object.
    async def described() -> list[str]:
        task = asyncio.current_task()
        assert task is not None
        await asyncio.sleep(0)
        return [type(task.get_coro()).__name__, repr(task)]

    seen = {}
    for kind, executor in executors(described):
        outcome = await executor.run(BATCH)
        shown_as, description = outcome.results[1].output
        assert shown_as == kind
        seen[kind] = description
    assert "described() running at" in seen["Stepper"], seen["Stepper"]
    assert "execute() running at" in seen["coroutine"], seen["coroutine"]


ABANDONED = """
import asyncio, gc, sys
import toolsched as ts

ended = []

async def wait():
    await asyncio.sleep(0.01)

async def waits_long(n: int):
    try:
        await asyncio.sleep(3600)
    finally:
        ended.append(n)

options = {"input_guardrails": [lambda event: None]} if sys.argv[1] == "coroutine" else {}
executor = ts.Executor([ts.tool(concurrency_safe=True)(wait), ts.tool(concurrency_safe=True)(waits_long)], **options)
loop = asyncio.new_event_loop()
run = loop.create_task(executor.run([ts.ToolCall("w", "wait", {})] + [
    ts.ToolCall(f"c{n}", "waits_long", {"n": n}) for n in range(3)
]))
loop.run_until_complete(asyncio.sleep(0.05))
kinds = sorted({type(task.get_coro()).__name__ for task in asyncio.all_tasks(loop)})
loop.close()
del run, loop, executor
gc.collect()
print(kinds, sorted(ended))
"""


@pytest.mark.parametrize("kind", ["Stepper", "coroutine"])
def test_calls_left_waiting_on_a_closed_event_loop_are_collected(kind: str, anyio_backend: str) -> None:
    # An event loop closed with a run's calls still waiting (closed without cancelling its tasks): once nothing
    # refers to it, the collector takes what was left, and each waiting tool's coroutine is closed (its
    # ``finally`` runs), stepped or not.
    finished = subprocess.run(
        [sys.executable, "-c", ABANDONED, kind], capture_output=True, text=True, timeout=120, check=True
    )
    assert finished.stdout.splitlines()[-1] == f"{sorted({kind, 'coroutine'})} [0, 1, 2]", finished.stdout
