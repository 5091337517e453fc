"""Tool sets that change between turns: refresh, is_enabled, deferred tools and tool_search."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio

MCP_SERVER = str(Path(__file__).resolve().parents[1] / "support" / "mcp_server.py")


def names(registry: ts.ToolRegistry) -> list[str]:
    return [item["name"] for item in registry.to_anthropic()]


@ts.tool(concurrency_safe=True)
async def read_file(path: str) -> str:
    """Read a text file."""
    return f"contents of {path}"


@ts.tool(concurrency_safe=True)
async def list_dir(path: str = ".") -> list[str]:
    """List a directory."""
    return ["a.txt"]


# -- refresh --------------------------------------------------------------------


async def test_refresh_after_the_turn_changes_what_the_next_turn_sees() -> None:
    offered: list[Any] = [read_file]
    asked: list[int] = []

    def current_tools() -> list[Any]:
        asked.append(1)
        return list(offered)

    registry = ts.ToolRegistry([read_file], refresh_tools=current_tools)
    executor = ts.Executor(registry)
    assert names(registry) == ["read_file"]
    # The server drops read_file and adds list_dir while turn 1 runs.
    offered[:] = [list_dir]
    first = await executor.run([ts.ToolCall("c1", "read_file", {"path": "a"})])
    assert first.results[0].output == "contents of a"
    assert asked == [1]
    assert names(registry) == ["list_dir"]
    # The model saw read_file in turn 1 and calls it again: it is gone now.
    second = await executor.run([ts.ToolCall("c2", "read_file", {"path": "a"}), ts.ToolCall("c3", "list_dir", {})])
    assert second.results[0].error_kind == "unknown_tool"
    assert "read_file" in (second.results[0].error or "") and "list_dir" in (second.results[0].error or "")
    assert second.results[1].output == ["a.txt"]


async def test_the_refresh_waits_until_every_result_is_in() -> None:
    log: list[str] = []

    @ts.tool(concurrency_safe=True)
    async def slow(n: int) -> int:
        log.append(f"start {n}")
        await anyio.sleep(0.01 * n)
        log.append(f"end {n}")
        return n

    async def current_tools() -> list[Any]:
        log.append("refresh")
        return [slow]

    executor = ts.Executor(ts.ToolRegistry([slow], refresh_tools=current_tools))
    outcome = await executor.run([ts.ToolCall(f"c{n}", "slow", {"n": n}) for n in (3, 1, 2)])
    assert [r.output for r in outcome.results] == [3, 1, 2]
    assert log[-1] == "refresh"
    assert log.count("refresh") == 1
    assert sorted(log[:-1]) == sorted(f"{kind} {n}" for kind in ("start", "end") for n in (1, 2, 3))


async def test_a_turn_keeps_the_tool_set_it_started_with() -> None:
    offered: list[Any] = []
    ran: list[str] = []

    @ts.tool
    async def first() -> str:
        # A refresh lands while the turn is running (another task could do this).
        changed = await registry.refresh()
        ran.append(f"first refreshed={changed}")
        return "first"

    @ts.tool
    async def second() -> str:
        ran.append("second")
        return "second"

    offered[:] = [first]
    registry = ts.ToolRegistry([first, second], refresh_tools=lambda: list(offered))
    executor = ts.Executor(registry, strategy=ts.Sequential())
    outcome = await executor.run([ts.ToolCall("c1", "first"), ts.ToolCall("c2", "second")])
    # `second` was removed mid-turn, yet the turn that saw it still runs it.
    assert [r.output for r in outcome.results] == ["first", "second"]
    assert ran == ["first refreshed=True", "second"]
    later = await executor.run([ts.ToolCall("c3", "second")])
    assert later.results[0].error_kind == "unknown_tool"


async def test_refresh_reports_added_and_removed_tools_as_an_event() -> None:
    offered: list[Any] = [read_file]
    events: list[ts.Event] = []
    executor = ts.Executor(ts.ToolRegistry([read_file], refresh_tools=lambda: list(offered)), on_event=events.append)
    offered[:] = [list_dir]
    await executor.run([ts.ToolCall("c1", "read_file", {"path": "a"})])
    changes = [event for event in events if isinstance(event, ts.ToolsChanged)]
    assert changes == [ts.ToolsChanged(added=("list_dir",), removed=("read_file",))]
    events.clear()
    await executor.run([ts.ToolCall("c2", "list_dir", {})])
    # The same tools again: nothing changed, nothing reported.
    assert not any(isinstance(event, ts.ToolsChanged | ts.ToolsRefreshFailed) for event in events)


async def test_a_refresh_that_raises_keeps_the_previous_set_and_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> list[Any]:
        raise ConnectionError("tool server unreachable")

    registry = ts.ToolRegistry([read_file], refresh_tools=broken)
    events: list[ts.Event] = []
    executor = ts.Executor(registry, on_event=events.append)
    with caplog.at_level(logging.WARNING, logger="toolsched"):
        outcome = await executor.run([ts.ToolCall("c1", "read_file", {"path": "a"})])
    assert outcome.results[0].output == "contents of a"
    failures = [event for event in events if isinstance(event, ts.ToolsRefreshFailed)]
    assert len(failures) == 1
    assert "ConnectionError: tool server unreachable" in failures[0].error
    assert "previous tool set stays" in failures[0].error
    assert "refreshing the tool set failed" in caplog.text
    assert names(registry) == ["read_file"]
    again = await executor.run([ts.ToolCall("c2", "read_file", {"path": "b"})])
    assert again.results[0].output == "contents of b"
    # Asked directly, the failure is raised as a typed error.
    with pytest.raises(ts.RefreshError, match="tool server unreachable") as caught:
        await registry.refresh()
    assert isinstance(caught.value.__cause__, ConnectionError)


@pytest.mark.parametrize("returned", ["read_file", 42, {"read_file": read_file}])
async def test_a_refresh_returning_no_tool_list_is_a_refresh_error(returned: Any) -> None:
    registry = ts.ToolRegistry([read_file], refresh_tools=lambda: returned)
    with pytest.raises(ts.RefreshError, match="must return a list of tools"):
        await registry.refresh()
    assert names(registry) == ["read_file"]


async def test_a_refreshed_set_with_clashing_names_is_refused_and_the_old_set_stays() -> None:
    @ts.tool(name="read_file")
    async def other_read(path: str) -> str:
        return "other"

    @ts.tool(aliases=["read_file"])
    async def cat(path: str) -> str:
        return "cat"

    offered: list[Any] = [read_file, other_read]
    registry = ts.ToolRegistry([read_file, list_dir], refresh_tools=lambda: list(offered))
    with pytest.raises(ts.ToolNameError, match="read_file"):
        await registry.refresh()
    offered[:] = [read_file, cat]
    with pytest.raises(ts.ToolNameError, match="read_file"):
        await registry.refresh()
    assert names(registry) == ["list_dir", "read_file"]
    # Through the executor the clash is reported after the turn, not raised.
    events: list[ts.Event] = []
    executor = ts.Executor(registry, on_event=events.append)
    outcome = await executor.run([ts.ToolCall("c1", "list_dir", {})])
    assert outcome.results[0].output == ["a.txt"]
    failures = [event for event in events if isinstance(event, ts.ToolsRefreshFailed)]
    assert len(failures) == 1 and "ToolNameError" in failures[0].error
    assert names(registry) == ["list_dir", "read_file"]


async def test_an_async_refresh_may_return_a_registry_or_none() -> None:
    replies: list[Any] = [None, ts.ToolRegistry([list_dir])]

    async def current_tools() -> Any:
        await anyio.lowlevel.checkpoint()
        return replies.pop(0)

    registry = ts.ToolRegistry([read_file], refresh_tools=current_tools)
    assert await registry.refresh() is False
    assert names(registry) == ["read_file"]
    assert await registry.refresh() is True
    assert names(registry) == ["list_dir"]


async def test_functions_returned_again_by_a_refresh_are_not_a_change() -> None:
    async def ping() -> str:
        return "pong"

    registry = ts.ToolRegistry([ping], refresh_tools=lambda: [ping])
    wrapped = registry.get("ping")
    assert await registry.refresh() is False
    assert registry.get("ping") is wrapped


async def test_a_slow_refresh_never_overwrites_a_newer_one() -> None:
    release = anyio.Event()
    replies = iter([[read_file], [list_dir]])

    async def current_tools() -> list[Any]:
        tools = next(replies)
        if tools == [read_file]:
            await release.wait()
        return tools

    registry = ts.ToolRegistry([], refresh_tools=current_tools)
    results: dict[str, bool] = {}

    async def refresh(label: str) -> None:
        results[label] = await registry.refresh()

    async with anyio.create_task_group() as group:
        group.start_soon(refresh, "older")
        await anyio.sleep(0.01)
        await refresh("newer")
        release.set()
    assert results == {"older": False, "newer": True}
    assert names(registry) == ["list_dir"]


def test_refresh_tools_must_be_callable() -> None:
    with pytest.raises(ts.OptionError, match="refresh_tools"):
        ts.ToolRegistry([read_file], refresh_tools=[list_dir])  # type: ignore[arg-type]


async def test_is_enabled_is_asked_each_turn_for_calls_and_exports() -> None:
    switch = {"on": True}
    ran: list[int] = []

    @ts.tool(enabled=lambda: switch["on"])
    async def deploy(n: int) -> int:
        ran.append(n)
        return n

    registry = ts.ToolRegistry([deploy, read_file])
    executor = ts.Executor(registry)
    assert names(registry) == ["deploy", "read_file"]
    assert (await executor.run([ts.ToolCall("c1", "deploy", {"n": 1})])).results[0].output == 1
    switch["on"] = False
    assert names(registry) == ["read_file"]
    off = await executor.run([ts.ToolCall("c2", "deploy", {"n": 2})])
    assert off.results[0].error_kind == "unknown_tool"
    assert "not available in this turn" in (off.results[0].error or "")
    switch["on"] = True
    assert (await executor.run([ts.ToolCall("c3", "deploy", {"n": 3})])).results[0].output == 3
    assert ran == [1, 3]


async def test_a_real_mcp_server_adding_a_tool_is_seen_from_the_next_turn() -> None:
    from toolsched import mcp as ts_mcp

    server_script = MCP_SERVER
    events: list[ts.Event] = []
    with anyio.fail_after(30):
        async with ts_mcp.connect_stdio(sys.executable, [server_script]) as server:
            registry = ts.ToolRegistry(await server.tools(), refresh_tools=server.refresh_tools)
            executor = ts.Executor(registry, on_event=events.append)
            assert "echo" not in names(registry)
            first = await executor.run([ts.ToolCall("g", "grow", {}), ts.ToolCall("e1", "echo", {"text": "too early"})])
            assert first.results[0].output == "grown"
            assert first.results[1].error_kind == "unknown_tool"
            assert [e for e in events if isinstance(e, ts.ToolsChanged)] == [ts.ToolsChanged(("echo",), ())]
            assert "echo" in names(registry)
            second = await executor.run([ts.ToolCall("e2", "echo", {"text": "back"})])
            assert second.results[0].output == "back"
            # The list did not change after turn 2: its tools kept their objects, so no new set, no event.
            assert len([e for e in events if isinstance(e, ts.ToolsChanged)]) == 1


# -- deferred tools and tool_search ---------------------------------------------------


def make_deferred() -> list[ts.Tool]:
    calls: list[str] = []

    @ts.tool(should_defer=True)
    async def create_calendar_event(title: str, day: str) -> str:
        """Create an event in the user's calendar on a given day."""
        calls.append(title)
        return f"created {title} on {day}"

    @ts.tool(should_defer=True)
    async def send_email(to: str, body: str) -> str:
        """Send an email message to a recipient."""
        return f"sent to {to}"

    @ts.tool(should_defer=True, always_load=True)
    async def weather(city: str) -> str:
        """Current weather for a city."""
        return f"sunny in {city}"

    return [create_calendar_event, send_email, weather, read_file]


async def test_deferred_tools_are_exported_only_after_tool_search_loads_them() -> None:
    registry = ts.ToolRegistry(make_deferred())
    executor = ts.Executor(registry)
    assert names(registry) == ["read_file", "tool_search", "weather"]
    assert registry.deferred == ["create_calendar_event", "send_email"]
    search_schema = next(item for item in registry.to_anthropic() if item["name"] == "tool_search")
    assert search_schema["input_schema"]["required"] == ["query"]
    assert search_schema["input_schema"]["properties"]["query"]["type"] == "string"

    # Turn 1: the model searches, and (too early) tries the tool in the same turn.
    first = await executor.run(
        [
            ts.ToolCall("s1", "tool_search", {"query": "calendar event"}),
            ts.ToolCall("c1", "create_calendar_event", {"title": "standup", "day": "monday"}),
        ]
    )
    found = first.results[0].output
    assert [tool["name"] for tool in found["tools"]] == ["create_calendar_event"]
    assert "calendar" in found["tools"][0]["description"]
    early = first.results[1]
    assert early.error_kind == "unknown_tool"
    assert "not loaded yet" in (early.error or "") and "tool_search" in (early.error or "")
    assert registry.loaded == frozenset({"create_calendar_event"})
    assert names(registry) == ["create_calendar_event", "read_file", "tool_search", "weather"]
    exported = next(item for item in registry.to_openai() if item["name"] == "create_calendar_event")
    assert set(exported["parameters"]["properties"]) == {"title", "day"}

    # Turn 2: the loaded tool is called.
    second = await executor.run([ts.ToolCall("c2", "create_calendar_event", {"title": "standup", "day": "monday"})])
    assert second.results[0].output == "created standup on monday"
    # send_email was never searched: still deferred.
    third = await executor.run([ts.ToolCall("c3", "send_email", {"to": "a@b", "body": "hi"})])
    assert third.results[0].error_kind == "unknown_tool"


async def test_tool_search_finds_by_exact_name_and_ranks_name_matches_first() -> None:
    registry = ts.ToolRegistry(make_deferred())
    executor = ts.Executor(registry)
    outcome = await executor.run(
        [
            ts.ToolCall("s1", "tool_search", {"query": "send_email"}),
            ts.ToolCall("s2", "tool_search", {"query": "message email calendar", "max_results": 1}),
        ]
    )
    assert [tool["name"] for tool in outcome.results[0].output["tools"]] == ["send_email"]
    assert [tool["name"] for tool in outcome.results[1].output["tools"]] == ["send_email"]
    assert registry.loaded == frozenset({"send_email"})


async def test_tool_search_without_a_match_lists_what_can_be_loaded() -> None:
    registry = ts.ToolRegistry(make_deferred())
    outcome = await ts.Executor(registry).run([ts.ToolCall("s1", "tool_search", {"query": "kubernetes"})])
    answer = outcome.results[0].output
    assert answer["tools"] == []
    assert "create_calendar_event" in answer["note"] and "send_email" in answer["note"]
    assert registry.loaded == frozenset()


async def test_tool_search_refuses_empty_blank_and_huge_queries() -> None:
    executor = ts.Executor(ts.ToolRegistry(make_deferred()))
    outcome = await executor.run(
        [
            ts.ToolCall("s1", "tool_search", {"query": ""}),
            ts.ToolCall("s2", "tool_search", {"query": "  ?! "}),
            ts.ToolCall("s3", "tool_search", {"query": "calendar " * 500}),
            ts.ToolCall("s4", "tool_search", {"query": "calendar", "max_results": 0}),
            ts.ToolCall("s5", "tool_search", {}),
        ]
    )
    kinds = [result.error_kind for result in outcome.results]
    assert kinds == ["invalid_input", "semantic_error", "invalid_input", "invalid_input", "invalid_input"]
    assert "/query" in (outcome.results[0].error or "")
    assert "no words" in (outcome.results[1].error or "")
    assert "/query" in (outcome.results[2].error or "")
    assert executor.registry.loaded == frozenset()


async def test_tool_search_is_concurrency_safe_and_read_only() -> None:
    registry = ts.ToolRegistry(make_deferred())
    search = registry.get("tool_search")
    assert search is not None
    assert search.is_concurrency_safe({"query": "x"}) is True
    assert search.is_read_only({"query": "x"}) is True
    outcome = await ts.Executor(registry).run(
        [
            ts.ToolCall("s1", "tool_search", {"query": "email"}),
            ts.ToolCall("r1", "read_file", {"path": "a"}),
            ts.ToolCall("s2", "tool_search", {"query": "calendar"}),
        ]
    )
    # All three are safe: one batch, run together.
    assert {result.batch for result in outcome.results} == {0}
    assert all(result.was_concurrent for result in outcome.results)
    # It is allowed in plan mode, where only read-only calls run.
    planning = ts.Executor(registry, permissions=ts.Permissions(mode="plan"))
    planned = await planning.run([ts.ToolCall("s3", "tool_search", {"query": "weather"})])
    assert planned.results[0].is_error is False


async def test_no_tool_search_without_deferred_tools_and_a_given_one_wins() -> None:
    assert "tool_search" not in ts.ToolRegistry([read_file])

    @ts.tool(name="tool_search")
    async def my_search(query: str) -> str:
        return f"custom {query}"

    registry = ts.ToolRegistry([*make_deferred(), my_search])
    assert registry.get("tool_search") is my_search
    outcome = await ts.Executor(registry).run([ts.ToolCall("s1", "tool_search", {"query": "email"})])
    assert outcome.results[0].output == "custom email"


async def test_loaded_tools_stay_loaded_across_a_refresh_while_they_exist() -> None:
    tools = make_deferred()
    offered: list[Any] = list(tools)
    registry = ts.ToolRegistry(tools, refresh_tools=lambda: list(offered))
    registry.load("send_email", "create_calendar_event")
    offered[:] = [tool for tool in tools if tool.name != "create_calendar_event"] + [list_dir]
    assert await registry.refresh() is True
    assert registry.loaded == frozenset({"send_email"})
    assert "send_email" in names(registry)
    with pytest.raises(ts.ToolNameError, match="no such deferred tool"):
        registry.load("read_file")
    # No deferred tool left: tool_search goes with them.
    offered[:] = [read_file]
    await registry.refresh()
    assert names(registry) == ["read_file"]


async def test_a_run_that_raises_still_refreshes_the_set() -> None:
    @ts.tool
    async def broken() -> str:
        raise RuntimeError("disk full")

    offered: list[Any] = [broken]
    executor = ts.Executor(ts.ToolRegistry([broken], refresh_tools=lambda: list(offered)), on_error="raise")
    offered[:] = [read_file]
    with pytest.raises(ts.ToolCallFailed, match="disk full"):
        await executor.run([ts.ToolCall("c1", "broken")])
    assert names(executor.registry) == ["read_file"]
