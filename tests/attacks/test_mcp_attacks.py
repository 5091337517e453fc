"""Hostile MCP servers: results and tool lists that are not the protocol's, replies sent twice, a server that
hangs in a call.

Every call gets one result (``McpToolError`` / ``McpConnectionError`` as the message of a failure), a tool
list that is not MCP is an ``McpConnectionError``, and no server process outlives its connection.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import toolsched as ts
from toolsched import mcp as ts_mcp

pytestmark = pytest.mark.anyio

# A hang guard only: every test here ends in seconds when the bridge works.
LIMIT = 30

# The hand-written server (tests/support/raw_mcp_server.py): its docstring lists the hostile answers.
RAW_SERVER = Path(__file__).parents[1] / "support" / "raw_mcp_server.py"


def _tool(name: Any, schema: Any = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "description": str(name)}
    if schema is not False:
        entry["inputSchema"] = {"type": "object"} if schema is None else schema
    return entry


def _server(tmp_path: Path, tools: list[dict[str, Any]]) -> tuple[ts_mcp.McpConnection, Path]:
    script = RAW_SERVER
    listing = tmp_path / "tools.json"
    listing.write_text(json.dumps(tools))
    pid_file = tmp_path / "pid"
    connection = ts_mcp.connect_stdio(sys.executable, [str(script), str(listing), str(pid_file)], read_timeout=5.0)
    return connection, pid_file


@pytest.mark.parametrize("reply", ["content_not_a_list", "unknown_block"])
async def test_a_call_result_that_is_not_mcp_is_an_mcp_tool_error_and_the_next_call_works(
    tmp_path: Path, reply: str
) -> None:
    connection, _ = _server(tmp_path, [_tool(reply), _tool("echo")])
    with anyio.fail_after(LIMIT):
        async with connection:
            executor = ts.Executor(await connection.tools())
            outcome = await executor.run([ts.ToolCall("1", reply, {}), ts.ToolCall("2", "echo", {})])
    failed, answered = outcome.results
    assert failed.error_kind == "execution_error"
    assert (failed.error or "").startswith("McpToolError: ")
    assert f"answered `{reply}` with a result that is not MCP: content" in (failed.error or "")
    assert answered.output == "echo:{}"


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        (_tool(5), "tools.1.name"),
        (_tool("no_schema", False), "tools.1.inputSchema"),
        (_tool("string_schema", {"type": "string"}), "tools.1.inputSchema.type"),
    ],
    ids=["name-a-number", "no-input-schema", "schema-not-an-object"],
)
async def test_a_tool_list_that_is_not_mcp_is_a_connection_error_naming_the_entry(
    tmp_path: Path, entry: dict[str, Any], named: str
) -> None:
    connection, _ = _server(tmp_path, [_tool("good"), entry])
    with anyio.fail_after(LIMIT):
        async with connection:
            with pytest.raises(ts.McpConnectionError, match="its `tools/list` answer is not MCP") as raised:
                await connection.tools()
    assert named in str(raised.value)


async def test_an_answer_sent_twice_is_taken_once_and_the_next_call_gets_its_own(tmp_path: Path) -> None:
    connection, _ = _server(tmp_path, [_tool("twice"), _tool("echo")])
    with anyio.fail_after(LIMIT):
        async with connection:
            executor = ts.Executor(await connection.tools())
            first = await executor.run([ts.ToolCall("1", "twice", {})])
            second = await executor.run([ts.ToolCall("2", "echo", {"n": 2})])
    assert first.results[0].output == "first"
    assert second.results[0].output == 'echo:{"n": 2}'


async def test_a_call_the_server_never_answers_times_out_and_the_server_is_gone_with_its_connection(
    tmp_path: Path,
) -> None:
    connection, pid_file = _server(tmp_path, [_tool("hang")])
    with anyio.fail_after(LIMIT):
        async with connection:
            (listed,) = await connection.tools()
            hurried = listed.replica()
            hurried.timeout = 0.5
            outcome = await ts.Executor([hurried]).run([ts.ToolCall("1", "hang", {})])
            pid = int(pid_file.read_text())
    assert outcome.results[0].error_kind == "timeout"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
