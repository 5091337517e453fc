"""The MCP bridge against a real MCP server process (stdio, and streamable HTTP on 127.0.0.1)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import toolsched as ts
from toolsched import mcp as ts_mcp

pytestmark = pytest.mark.anyio

SERVER = str(Path(__file__).resolve().parents[1] / "support" / "mcp_server.py")
# Every test is bounded: a server that hangs fails the test instead of the suite.
LIMIT = 30


async def test_stdio_tools_map_hints_run_through_the_pipeline_and_refresh() -> None:
    with anyio.fail_after(LIMIT):
        async with ts_mcp.connect_stdio(sys.executable, [SERVER]) as server:
            tools = {member.name: member for member in await server.tools()}
            assert set(tools) >= {"add", "write_note", "wipe", "fail", "refuse", "count_to", "grow"}

            add, note, wipe = tools["add"], tools["write_note"], tools["wipe"]
            assert (add.read_only, add.concurrency_safe, add.destructive, add.open_world) == (True, True, False, False)
            assert (note.read_only, note.concurrency_safe, note.destructive) == (False, False, False)
            assert note.idempotent and note.open_world is True
            # No annotations: MCP's defaults (may write, destructive), unsafe to share a batch.
            assert (wipe.read_only, wipe.concurrency_safe, wipe.destructive, wipe.open_world) == (
                False,
                False,
                True,
                None,
            )
            assert add.input_schema["required"] == ["a"]

            progress: list[ts.Event] = []
            executor = ts.Executor(list(tools.values()), on_progress=progress.append)
            outcome = await executor.run(
                [
                    ts.ToolCall("1", "add", {"a": 1}),
                    ts.ToolCall("2", "add", '{"a": "one"}'),
                    ts.ToolCall("3", "fail", {"reason": "disk full"}),
                    ts.ToolCall("4", "refuse", {}),
                    ts.ToolCall("5", "count_to", {"n": 3}),
                    ts.ToolCall("6", "add", {"a": 40, "b": 2}),
                ]
            )
            by_id = {result.call_id: result for result in outcome.results}
            assert [result.call_id for result in outcome.results] == ["1", "2", "3", "4", "5", "6"]
            assert by_id["1"].output == "3" and not by_id["1"].is_error
            assert by_id["2"].error_kind == "invalid_input" and "/a" in (by_id["2"].error or "")
            assert by_id["3"].error_kind == "execution_error" and "disk full" in (by_id["3"].error or "")
            assert "McpToolError" in (by_id["3"].error or "")
            assert by_id["4"].error_kind == "execution_error" and "refusing on purpose" in (by_id["4"].error or "")
            assert by_id["5"].output == "counted to 3"
            assert [event.fraction for event in progress if isinstance(event, ts.ToolProgress)] == pytest.approx(
                [1 / 3, 2 / 3, 1.0]
            )
            assert by_id["6"].output == "42"

            # The call the engine rejected never reached the server.
            audit = await executor.run([ts.ToolCall("a", "received_calls", {})])
            assert audit.results[0].output == "add,fail,refuse,count_to,add"

            # Between turns, a changed tool list is picked up.
            assert "echo" not in tools
            grown = await executor.run([ts.ToolCall("g", "grow", {})])
            assert grown.results[0].output == "grown"
            assert await server.tools() == list(tools.values())  # listed once, until refreshed
            after = {member.name: member for member in await server.refresh_tools()}
            assert set(after) == set(tools) | {"echo"}
            # Unchanged tools keep their objects, so executors built on them stay valid.
            assert all(after[name] is member for name, member in tools.items())
            echoed = await ts.Executor(list(after.values())).run([ts.ToolCall("e", "echo", {"text": "back"})])
            assert echoed.results[0].output == "back"


async def test_server_exiting_mid_call_answers_every_call_with_an_error() -> None:
    with anyio.fail_after(LIMIT):
        async with ts_mcp.connect_stdio(sys.executable, [SERVER]) as server:
            executor = ts.Executor(await server.tools())
            outcome = await executor.run(
                [
                    ts.ToolCall("1", "add", {"a": 1}),
                    ts.ToolCall("2", "exit_now", {}),
                    ts.ToolCall("3", "add", {"a": 2}),
                ]
            )
            assert [result.call_id for result in outcome.results] == ["1", "2", "3"]
            assert outcome.results[0].output == "3"
            for result in outcome.results[1:]:
                assert result.error_kind == "execution_error"
                assert "McpConnectionError" in (result.error or "")
                assert "closed the connection" in (result.error or "")
            with pytest.raises(ts.McpConnectionError, match="could not list"):
                await server.refresh_tools()


async def test_a_server_that_cannot_start_is_a_connection_error() -> None:
    with anyio.fail_after(LIMIT):
        with pytest.raises(ts.McpConnectionError, match="could not connect"):
            async with ts_mcp.connect_stdio(sys.executable, ["-c", "import sys; sys.exit(2)"]):
                pass
        connection = ts_mcp.connect_stdio(sys.executable, [SERVER])
        with pytest.raises(ts.McpConnectionError, match="not connected"):
            await connection.tools()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def _wait_for_port(port: int) -> None:
    while True:
        try:
            stream = await anyio.connect_tcp("127.0.0.1", port)
        except OSError:
            await anyio.sleep(0.05)
            continue
        await stream.aclose()
        return


async def test_streamable_http_server() -> None:
    port = _free_port()
    process = await anyio.open_process(
        [sys.executable, SERVER, "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        with anyio.fail_after(LIMIT):
            await _wait_for_port(port)
            async with ts_mcp.connect_http(
                f"http://127.0.0.1:{port}/mcp", headers={"x-test": "1"}, prefix="web_"
            ) as server:
                tools = {member.name: member for member in await server.tools()}
                assert tools["web_add"].read_only
                executor = ts.Executor(list(tools.values()))
                outcome = await executor.run(
                    [ts.ToolCall("1", "web_add", {"a": 2, "b": 3}), ts.ToolCall("2", "web_fail", {"reason": "no"})]
                )
                assert outcome.results[0].output == "5"
                assert outcome.results[1].error_kind == "execution_error"
    finally:
        process.kill()
        with anyio.CancelScope(shield=True):
            await process.wait()
            await process.aclose()


async def test_an_http_request_past_its_timeout_is_a_timeout_and_a_server_error_is_not() -> None:
    process, port = await _http_server()
    try:
        with anyio.fail_after(LIMIT):
            async with ts_mcp.connect_http(f"http://127.0.0.1:{port}/mcp", read_timeout=0.5) as server:
                tools = {member.name: member for member in await server.tools()}
                bounded = tools["slow"].replica()
                bounded.timeout = 0.5
                bounded.name = "bounded"
                executor = ts.Executor([*tools.values(), bounded])
                outcome = await executor.run(
                    [
                        # Ended by the connection's read_timeout, then by the tool's own timeout.
                        ts.ToolCall("1", "slow", {"seconds": LIMIT}),
                        ts.ToolCall("2", "bounded", {"seconds": LIMIT}),
                        ts.ToolCall("3", "fail", {"reason": "disk full"}),
                        ts.ToolCall("4", "add", {"a": 1}),
                    ]
                )
                by_id = {result.call_id: result for result in outcome.results}
                assert by_id["1"].error_kind == "timeout"
                url = f"http://127.0.0.1:{port}/mcp"
                assert (
                    by_id["1"].error == f"MCP server at {url} did not answer `slow` within 0.5 seconds (read_timeout)"
                )
                assert (by_id["2"].error_kind, by_id["2"].error) == (
                    "timeout",
                    "`bounded` did not finish within 0.5 seconds",
                )
                assert by_id["3"].error_kind == "execution_error" and "disk full" in (by_id["3"].error or "")
                assert by_id["4"].output == "3"
    finally:
        await _stop(process)


def _low_level_server() -> Any:
    """An in-process server with paged tool lists, odd names, a broken schema and non-text results."""
    from mcp.server import Server
    from mcp_types import (
        CallToolResult,
        ImageContent,
        ListToolsResult,
        TextContent,
        Tool,
        ToolAnnotations,
    )

    pages = {
        None: ListToolsResult(
            tools=[
                Tool(
                    name="files/read.all",
                    description="Read every file.",
                    input_schema={"type": "object", "properties": {}},
                    annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False),
                ),
                Tool(name="broken", input_schema={"type": "object", "properties": {"x": {"type": "nonsense"}}}),
            ],
            next_cursor="page-2",
        ),
        "page-2": ListToolsResult(
            tools=[
                Tool(name="picture", input_schema={"type": "object"}),
                Tool(name="stats", input_schema={"type": "object"}),
                Tool(name="files_read_all", input_schema={"type": "object"}),
            ]
        ),
    }

    async def list_tools(ctx: Any, params: Any) -> ListToolsResult:
        return pages[params.cursor if params is not None else None]

    async def call_tool(ctx: Any, params: Any) -> CallToolResult:
        if params.name == "picture":
            return CallToolResult(
                content=[TextContent(text="a dot"), ImageContent(data="iVBORw0KGgo=", mime_type="image/png")]
            )
        if params.name == "stats":
            return CallToolResult(content=[], structured_content={"files": 3})
        return CallToolResult(content=[TextContent(text="one"), TextContent(text="two")])

    return Server("low-level", on_list_tools=list_tools, on_call_tool=call_tool)


async def test_paged_lists_odd_names_broken_schemas_and_content_kinds(caplog: pytest.LogCaptureFixture) -> None:
    from mcp import Client

    with anyio.fail_after(LIMIT), caplog.at_level(logging.WARNING, logger="toolsched.mcp"):
        async with ts_mcp.connect(Client(_low_level_server()), label="low-level") as server:
            tools = {member.name: member for member in await server.tools()}
            # Both pages are listed; names become provider-safe and unique; the broken schema is left out.
            assert list(tools) == ["files_read_all", "picture", "stats", "files_read_all_2"]
            assert tools["files_read_all"].remote_name == "files/read.all"
            assert tools["files_read_all"].read_only and not tools["files_read_all"].destructive
            assert any("broken" in record.getMessage() for record in caplog.records)
            outcome = await ts.Executor(list(tools.values())).run(
                [
                    ts.ToolCall("1", "files_read_all", {}),
                    ts.ToolCall("2", "picture", {}),
                    ts.ToolCall("3", "stats", {}),
                ]
            )
            texts, picture, stats = (result.output for result in outcome.results)
            assert texts == "one\ntwo"
            assert picture == [
                {"type": "text", "text": "a dot"},
                {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            ]
            assert stats == {"files": 3}

        distrusting = ts_mcp.connect(Client(_low_level_server()), trust_hints=False)
        async with distrusting as server:
            first = (await server.tools())[0]
            assert (first.read_only, first.concurrency_safe, first.destructive, first.open_world) == (
                False,
                False,
                True,
                None,
            )


def test_local_names_fit_every_provider() -> None:
    assert ts_mcp.local_name("gh_", "repos/list.all", set()) == "gh_repos_list_all"
    long_name = ts_mcp.local_name("", "t" * 100, set())
    assert len(long_name) == 64 and long_name == ts_mcp.local_name("", "t" * 100, set())
    assert long_name != ts_mcp.local_name("", "t" * 99, set())
    assert ts_mcp.local_name("", "a.b", {"a_b", "a_b_2"}) == "a_b_3"


async def _http_server() -> tuple[Any, int]:
    port = _free_port()
    process = await anyio.open_process(
        [sys.executable, SERVER, "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    await _wait_for_port(port)
    return process, port


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_http_server_that_dies_mid_call_fails_only_its_calls(anyio_backend: str) -> None:
    @ts.tool(concurrency_safe=True)
    async def local(n: int) -> int:
        await anyio.sleep(0.05)
        return n

    process, port = await _http_server()
    try:
        with anyio.fail_after(LIMIT):
            async with ts_mcp.connect_http(f"http://127.0.0.1:{port}/mcp") as server:
                executor = ts.Executor([local, *await server.tools()])
                calls = [
                    ts.ToolCall("1", "local", {"n": 1}),
                    ts.ToolCall("2", "exit_now"),
                    ts.ToolCall("3", "add", {"a": 2}),
                ]
                outcome = await executor.run(calls)
                assert [r.call_id for r in outcome.results] == ["1", "2", "3"]
                assert outcome.results[0].output == 1
                for result in outcome.results[1:]:
                    assert result.error_kind == "execution_error", result
                    assert "McpConnectionError" in (result.error or "")
                # Later calls fail at once, and the connection still closes cleanly.
                again = await executor.run([ts.ToolCall("4", "add", {"a": 1}), ts.ToolCall("5", "local", {"n": 5})])
                assert again.results[0].error_kind == "execution_error"
                assert again.results[1].output == 5
    finally:
        await _stop(process)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_http_server_killed_between_turns_fails_the_next_calls(anyio_backend: str) -> None:
    process, port = await _http_server()
    try:
        with anyio.fail_after(LIMIT):
            async with ts_mcp.connect_http(f"http://127.0.0.1:{port}/mcp") as server:
                executor = ts.Executor(await server.tools())
                first = await executor.run([ts.ToolCall("1", "add", {"a": 1})])
                assert first.results[0].output == "3"
                process.kill()
                await process.wait()
                outcome = await executor.run([ts.ToolCall("2", "add", {"a": 2})])
                assert outcome.results[0].error_kind == "execution_error"
                assert "McpConnectionError" in (outcome.results[0].error or "")
    finally:
        await _stop(process)


async def _stop(process: Any) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    with anyio.CancelScope(shield=True):
        await process.wait()
        await process.aclose()


# -- a connection that is gone --------------------------------------------------------------------

NOT_SENT = "was called after that and was not sent"


async def _until_gone(server: ts_mcp.McpConnection) -> None:
    """Waits until the connection knows its server is gone (its ``client`` refuses)."""
    while True:
        try:
            assert server.client is not None
        except ts.McpConnectionError:
            return
        await anyio.sleep(0.01)


async def test_a_call_after_the_server_died_says_it_was_never_sent() -> None:
    with anyio.fail_after(LIMIT):
        async with ts_mcp.connect_stdio(sys.executable, [SERVER]) as server:
            executor = ts.Executor(await server.tools())
            # exit_now is unsafe: the `add` after it starts only once the server is gone.
            outcome = await executor.run([ts.ToolCall("1", "exit_now", {}), ts.ToolCall("2", "add", {"a": 2})])
            during, after = (result.error or "" for result in outcome.results)
            assert "closed the connection during `exit_now`" in during
            assert NOT_SENT not in during
            assert f"closed the connection; `add` {NOT_SENT}" in after
            assert "during" not in after
            # A later turn says the same, and so does a refresh of the tool list.
            later = await executor.run([ts.ToolCall("3", "add", {"a": 3})])
            assert f"`add` {NOT_SENT}" in (later.results[0].error or "")
            with pytest.raises(ts.McpConnectionError, match=f"could not list .*`tools/list` {NOT_SENT}"):
                await server.refresh_tools()


async def test_a_server_killed_between_turns_fails_the_next_call_as_not_sent() -> None:
    with anyio.fail_after(LIMIT):
        async with ts_mcp.connect_stdio(sys.executable, [SERVER]) as server:
            executor = ts.Executor(await server.tools())
            first = await executor.run([ts.ToolCall("1", "pid", {})])
            os.kill(int(first.results[0].output), signal.SIGKILL)
            # The connection sees the server's output end without any call in flight.
            await _until_gone(server)
            outcome = await executor.run([ts.ToolCall("2", "add", {"a": 2})])
            error = outcome.results[0].error or ""
            assert outcome.results[0].error_kind == "execution_error"
            assert f"closed the connection; `add` {NOT_SENT}" in error


async def test_every_call_in_flight_when_the_server_dies_is_answered_and_none_hangs() -> None:
    with anyio.fail_after(LIMIT):
        async with ts_mcp.connect_stdio(sys.executable, [SERVER]) as server:
            executor = ts.Executor(await server.tools(), strategy=ts.Parallel())
            outcome = await executor.run(
                [
                    ts.ToolCall("1", "slow", {"seconds": LIMIT}),
                    ts.ToolCall("2", "slow", {"seconds": LIMIT}),
                    ts.ToolCall("3", "exit_now", {}),
                ]
            )
            assert [result.call_id for result in outcome.results] == ["1", "2", "3"]
            for result, name in zip(outcome.results, ["slow", "slow", "exit_now"], strict=True):
                assert f"closed the connection during `{name}`" in (result.error or ""), result


async def test_a_server_that_closes_its_pipe_and_runs_on_is_gone_and_still_closes() -> None:
    with anyio.fail_after(LIMIT):
        async with ts_mcp.connect_stdio(sys.executable, [SERVER]) as server:
            executor = ts.Executor(await server.tools())
            outcome = await executor.run([ts.ToolCall("1", "close_wire", {}), ts.ToolCall("2", "add", {"a": 1})])
            assert "closed the connection during `close_wire`" in (outcome.results[0].error or "")
            assert f"`add` {NOT_SENT}" in (outcome.results[1].error or "")
        # Leaving the block stopped the process that still ran.


async def test_a_line_that_is_not_json_rpc_costs_no_call() -> None:
    with anyio.fail_after(LIMIT):
        async with ts_mcp.connect_stdio(sys.executable, [SERVER]) as server:
            executor = ts.Executor(await server.tools())
            outcome = await executor.run([ts.ToolCall("1", "garbage", {}), ts.ToolCall("2", "add", {"a": 1})])
            assert [result.output for result in outcome.results] == ["wrote garbage", "3"]
            assert server.client is not None


async def test_a_connection_entered_again_after_its_server_died_starts_a_new_one() -> None:
    connection = ts_mcp.connect_stdio(sys.executable, [SERVER])
    with anyio.fail_after(LIMIT):
        async with connection as server:
            executor = ts.Executor(await server.tools())
            await executor.run([ts.ToolCall("1", "exit_now", {})])
            await _until_gone(server)
        async with connection as server:
            outcome = await ts.Executor(await server.tools()).run([ts.ToolCall("2", "add", {"a": 5})])
            assert outcome.results[0].output == "7"
        # Closed as it should be: a call now says the connection is not open, not that the server closed it.
        outcome = await executor.run([ts.ToolCall("3", "add", {"a": 1})])
        error = outcome.results[0].error or ""
        assert "not connected" in error and "closed the connection" not in error


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_http_server_gone_between_turns_fails_later_calls_as_not_sent(anyio_backend: str) -> None:
    process, port = await _http_server()
    try:
        with anyio.fail_after(LIMIT):
            async with ts_mcp.connect_http(f"http://127.0.0.1:{port}/mcp") as server:
                executor = ts.Executor(await server.tools())
                assert (await executor.run([ts.ToolCall("1", "add", {"a": 1})])).results[0].output == "3"
                await _stop(process)
                # Over HTTP the first request finds the server gone; the ones after it are not sent.
                first = await executor.run([ts.ToolCall("2", "add", {"a": 2})])
                assert "McpConnectionError" in (first.results[0].error or "")
                assert NOT_SENT not in (first.results[0].error or "")
                later = await executor.run([ts.ToolCall("3", "add", {"a": 3})])
                assert f"`add` {NOT_SENT}" in (later.results[0].error or "")
    finally:
        await _stop(process)
