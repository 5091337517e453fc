"""Partial output: ctx.update emits ToolUpdated; tool_update hooks observe or suppress it."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio


@ts.tool
async def download(ctx: ts.ToolContext) -> str:
    for part in ("10%", "secret-token", "100%"):
        ctx.update(part)
    return "file.bin (secret-token inside)"


@ts.tool
def convert(ctx: ts.ToolContext) -> str:
    ctx.update(f"thread {threading.get_ident() != MAIN_THREAD}")
    ctx.update("secret-token")
    return "converted"


MAIN_THREAD = threading.get_ident()


def updates(events: list[ts.Event]) -> list[Any]:
    return [event.partial for event in events if isinstance(event, ts.ToolUpdated)]


async def test_updates_are_events_in_order() -> None:
    events: list[ts.Event] = []
    await ts.Executor([download], on_event=events.append).run([ts.ToolCall("c1", "download")])
    assert updates(events) == ["10%", "secret-token", "100%"]
    assert all(e.call_id == "c1" and e.tool_name == "download" for e in events if isinstance(e, ts.ToolUpdated))


async def test_a_hook_observes_and_suppresses_updates_but_never_the_result() -> None:
    observed: list[Any] = []

    def redact(event: ts.ToolUpdated) -> bool:
        observed.append(event.partial)
        return "secret" not in str(event.partial)

    events: list[ts.Event] = []
    hooks = ts.Hooks().tool_update("download|convert", redact)
    executor = ts.Executor([download, convert], hooks=hooks, on_event=events.append, strategy=ts.Sequential())
    outcome = await executor.run([ts.ToolCall("c1", "download"), ts.ToolCall("c2", "convert")])
    assert observed == ["10%", "secret-token", "100%", "thread True", "secret-token"]
    assert updates(events) == ["10%", "100%", "thread True"]
    # The final results are untouched, secret and all.
    assert [r.output for r in outcome.results] == ["file.bin (secret-token inside)", "converted"]


async def test_hooks_see_updates_even_without_listeners_and_only_for_matching_tools() -> None:
    observed: list[str] = []

    @ts.tool
    async def other(ctx: ts.ToolContext) -> str:
        ctx.update("other part")
        return "other"

    hooks = ts.Hooks().tool_update("download", lambda event: observed.append(event.partial))
    await ts.Executor([download, other], hooks=hooks).run([ts.ToolCall("c1", "download"), ts.ToolCall("c2", "other")])
    assert observed == ["10%", "secret-token", "100%"]


async def test_a_hook_that_fails_suppresses_the_update(caplog: pytest.LogCaptureFixture) -> None:
    def broken(event: ts.ToolUpdated) -> None:
        raise ValueError("bad hook")

    events: list[ts.Event] = []
    executor = ts.Executor([download], hooks=ts.Hooks().tool_update("*", broken), on_event=events.append)
    with caplog.at_level(logging.WARNING, logger="toolsched"):
        outcome = await executor.run([ts.ToolCall("c1", "download")])
    assert updates(events) == []
    assert outcome.results[0].output.startswith("file.bin")
    assert "the update was suppressed" in caplog.text


async def test_a_hook_answering_something_else_suppresses_the_update() -> None:
    events: list[ts.Event] = []
    hooks = ts.Hooks().tool_update("*", lambda event: "yes")  # type: ignore[arg-type, return-value]
    executor = ts.Executor([download], hooks=hooks, on_event=events.append)
    await executor.run([ts.ToolCall("c1", "download")])
    assert updates(events) == []


def test_update_hooks_must_be_plain_functions() -> None:
    async def later(event: ts.ToolUpdated) -> None:
        return None

    with pytest.raises(TypeError, match="plain function"):
        ts.Hooks().tool_update("*", later)  # type: ignore[arg-type]


async def test_update_hooks_leave_a_child_runs_updates_to_the_child() -> None:
    parent_hook: list[Any] = []
    events: list[ts.Event] = []

    @ts.agent_tool(ts.Executor([download]))
    async def fetcher(child: ts.ChildRun) -> str:
        child.ctx.update("parent part")
        outcome = await child.run([ts.ToolCall("d", "download")])
        return str(outcome.results[0].output)

    hooks = ts.Hooks().tool_update("fetcher", lambda event: parent_hook.append(event.partial))
    await ts.Executor([fetcher], hooks=hooks, on_event=events.append).run([ts.ToolCall("p1", "fetcher", {})])
    assert parent_hook == ["parent part"]
    child_updates = [e.partial for e in events if isinstance(e, ts.ToolUpdated) and e.parent_call_id == "p1"]
    assert child_updates == ["10%", "secret-token", "100%"]
