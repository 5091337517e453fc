"""Process isolation: tools run in real worker processes; a crash or a timeout costs only that call."""

from __future__ import annotations

import datetime
import os
import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pydantic
import pydantic_core
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


def ran(log: str, name: str) -> None:
    """Notes in ``log`` that the body of ``name`` ran."""
    with open(log, "a", encoding="utf-8") as runs:
        runs.write(name + "\n")


def booked(day: datetime.date, log: str) -> str:
    """Books a day."""
    ran(log, "booked")
    return day.isoformat()


class Window(pydantic.BaseModel):
    days: int
    log: str

    @pydantic.field_validator("days")
    @classmethod
    def short(cls, value: int) -> int:
        if value > 30:
            raise ValueError("at most 30 days \u2014 \u00abrefus\u00e9\u00bb")
        if value < 0:
            # pydantic cannot carry a lone surrogate in a message: validating raises UnicodeEncodeError.
            raise ValueError("no days before today \udc80")
        return value


class Planner(ts.Tool):
    name = "planner"
    description = "Plans a window of days."
    input_model = Window
    isolation = "process"

    def call(self, args: Window, ctx: ts.ToolContext | None) -> str:
        ran(args.log, "planner")
        return f"{args.days} days"


class LocalPlanner(Planner):
    isolation = "none"


class Unsendable:
    """A detail of a refusal that cannot be pickled."""

    def __reduce__(self) -> Any:
        raise TypeError("an Unsendable cannot be pickled")

    def __str__(self) -> str:
        return "somewhere unsendable"


class Route(pydantic.BaseModel):
    to: str
    log: str

    @pydantic.field_validator("to")
    @classmethod
    def known(cls, value: str) -> str:
        if value != "home":
            raise pydantic_core.PydanticCustomError("unknown_place", "no route to {place}", {"place": Unsendable()})
        return value


class Router(ts.Tool):
    name = "router"
    description = "Routes somewhere known."
    input_model = Route
    isolation = "process"

    def call(self, args: Route, ctx: ts.ToolContext | None) -> str:
        ran(args.log, "router")
        return f"to {args.to}"


class LocalRouter(Router):
    isolation = "none"


class ArgumentsRefused(Exception):
    """A tool's own exception that has the name of toolsched's refusal of arguments."""


def strict(text: str, log: str) -> str:
    """Refuses in its body, with an exception of its own."""
    ran(log, "strict")
    raise ArgumentsRefused(f"the body refuses {text!r}")


def refusal_tools(isolation: str) -> list[ts.Tool]:
    """The same tools run in a worker process or in this one: each answers a call the same way."""
    if isolation == "process":
        planner: ts.Tool = Planner()
        router: ts.Tool = Router()
    else:
        planner, router = LocalPlanner(), LocalRouter()
    made = ts.tool(isolation=isolation, concurrency_safe=True)
    return [made(booked), made(strict), planner, router, made(whoami.fn)]


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


async def test_arguments_a_process_tools_model_refuses_end_invalid_input_as_in_process_and_the_body_never_runs(
    tmp_path: Path,
) -> None:
    """The tool's own model checks the arguments in this process, before anything crosses to the worker: a
    refusal (a date that is no date, a validator's refusal in text that is not ASCII, one whose detail
    cannot be pickled) is ``invalid_input`` with the message a tool run in this process gives, the body never
    runs, and the worker goes on answering. A body that raises its own ``ArgumentsRefused`` failed."""
    log = str(tmp_path / "runs.log")
    calls = [
        ts.ToolCall("date", "booked", {"day": "2024-13-45", "log": log}),
        ts.ToolCall("model", "planner", {"days": 90, "log": log}),
        ts.ToolCall("unsendable", "router", {"to": "work", "log": log}),
        ts.ToolCall("surrogate", "planner", {"days": -1, "log": log}),
        ts.ToolCall("body", "strict", {"text": "x", "log": log}),
        ts.ToolCall("fine-date", "booked", {"day": "2024-12-25", "log": log}),
        ts.ToolCall("fine-model", "planner", {"days": 7, "log": log}),
        ts.ToolCall("fine-route", "router", {"to": "home", "log": log}),
    ]
    isolated = ts.Executor(refusal_tools("process"), strategy=ts.Sequential())
    first = (await isolated.run([ts.ToolCall("pid", "whoami")])).results[0].output
    with anyio.fail_after(60):
        outcome = await isolated.run(calls)
    then = (await isolated.run([ts.ToolCall("pid", "whoami")])).results[0].output
    answers = [(result.error_kind, result.error, result.output) for result in outcome.results]
    assert answers[:3] == [
        (
            "invalid_input",
            "arguments for `booked` refused by its parameters: `day`: "
            "Input should be a valid date or datetime, month value is outside expected range of 1-12",
            None,
        ),
        (
            "invalid_input",
            "arguments for `planner` refused by its parameters: `days`: "
            "Value error, at most 30 days \u2014 \u00abrefus\u00e9\u00bb",
            None,
        ),
        (
            "invalid_input",
            "arguments for `router` refused by its parameters: `to`: no route to somewhere unsendable",
            None,
        ),
    ]
    # The model's check failed before it could refuse: as in this process, that is the tool failing.
    surrogate = answers[3]
    assert surrogate[0] == "execution_error"
    assert str(surrogate[1]).startswith("UnicodeEncodeError: 'utf-8' codec can't encode character '\\udc80'")
    assert answers[4:] == [
        ("execution_error", "ArgumentsRefused: the body refuses 'x'", None),
        (None, None, "2024-12-25"),
        (None, None, "7 days"),
        (None, None, "to home"),
    ]
    # Only the bodies given arguments their models took ran (and the one that failed in its body).
    ran = (await anyio.Path(log).read_text(encoding="utf-8")).split()
    assert ran == ["strict", "booked", "planner", "router"]
    # The refusals cost the worker nothing: the same process answers after them.
    assert isinstance(first, int) and first != os.getpid()
    assert then == first
    local = await ts.Executor(refusal_tools("none"), strategy=ts.Sequential()).run(calls)
    assert [(result.error_kind, result.error, result.output) for result in local.results] == answers
