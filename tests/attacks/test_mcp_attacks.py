"""Hostile MCP servers: results and tool lists that are not the protocol's, replies sent twice, a server that
hangs in a call.

Every call gets one result (``McpToolError`` / ``McpConnectionError`` as the message of a failure), a tool
list entry that is not an MCP tool is left out with a warning (an answer that is not a list is an
``McpConnectionError``), and no server process outlives its connection.
"""

from __future__ import annotations

import json
import logging
import os
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
    ("entry", "named", "why"),
    [
        (_tool(5), "`tools/list` entry 1", "it is not an MCP tool: name: Input should be a valid string"),
        (_tool("no_schema", False), "tool 'no_schema'", "it is not an MCP tool: inputSchema: Field required"),
        (
            _tool("string_schema", {"type": "string"}),
            "tool 'string_schema'",
            "it is not an MCP tool: inputSchema.type: Input should be 'object'",
        ),
        (
            "a tool",
            "`tools/list` entry 1",
            "it is not an MCP tool: Input should be a valid dictionary or instance of Tool",
        ),
    ],
    ids=["name-a-number", "no-input-schema", "schema-not-an-object", "not-an-object"],
)
async def test_a_tool_list_entry_that_is_not_mcp_is_left_out_with_a_warning_and_the_others_work(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, entry: Any, named: str, why: str
) -> None:
    connection, _ = _server(tmp_path, [_tool("good"), entry, _tool("echo")])
    with anyio.fail_after(LIMIT), caplog.at_level(logging.WARNING, logger="toolsched"):
        async with connection:
            tools = await connection.tools()
            assert [member.name for member in tools] == ["good", "echo"]
            outcome = await ts.Executor(tools).run([ts.ToolCall("1", "good", {}), ts.ToolCall("2", "echo", {"n": 1})])
            assert [result.output for result in outcome.results] == ["good:{}", 'echo:{"n": 1}']
    warnings = [record.getMessage() for record in caplog.records if record.name.startswith("toolsched")]
    assert warnings == [f"MCP server `{sys.executable}`: {named} is left out of its tools: {why}"]


async def test_a_tool_list_with_no_mcp_tool_lists_none(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    connection, _ = _server(tmp_path, [_tool(5), _tool("no_schema", False)])
    with anyio.fail_after(LIMIT), caplog.at_level(logging.WARNING, logger="toolsched"):
        async with connection:
            assert await connection.tools() == []
            outcome = await ts.Executor(await connection.tools()).run([ts.ToolCall("1", "no_schema", {})])
            assert outcome.results[0].error_kind == "unknown_tool"
    assert len([record for record in caplog.records if "is left out of its tools" in record.getMessage()]) == 2


@pytest.mark.parametrize("tools", ['"a tool"', "5", "null", '{"name": "good", "inputSchema": {"type": "object"}}'])
async def test_a_tool_list_answer_that_is_not_a_list_is_a_connection_error(tmp_path: Path, tools: str) -> None:
    connection, _ = _server(tmp_path, [])
    (tmp_path / "tools.json").write_text(tools)
    with anyio.fail_after(LIMIT):
        async with connection:
            with pytest.raises(ts.McpConnectionError, match="its `tools/list` answer is not MCP: tools: ") as raised:
                await connection.tools()
    assert "Input should be a valid list" in str(raised.value)


async def test_entries_that_are_not_mcp_are_left_out_of_every_page_of_a_paged_list(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    connection, _ = _server(tmp_path, [_tool("first"), _tool(1)])
    (tmp_path / "tools.json.next").write_text("page-2")
    (tmp_path / "tools.json.page-2").write_text(json.dumps([_tool(2), _tool("second"), _tool("bad", False)]))
    (tmp_path / "tools.json.page-2.next").write_text("page-3")
    (tmp_path / "tools.json.page-3").write_text(json.dumps([_tool("third")]))
    with anyio.fail_after(LIMIT), caplog.at_level(logging.WARNING, logger="toolsched"):
        async with connection:
            tools = await connection.tools()
            assert [member.name for member in tools] == ["first", "second", "third"]
            outcome = await ts.Executor(tools).run([ts.ToolCall("1", "third", {})])
            assert outcome.results[0].output == "third:{}"
    left_out = [record.getMessage().split(": ", 1)[1] for record in caplog.records if "left out" in record.getMessage()]
    assert [message.split(" is left out")[0] for message in left_out] == [
        "`tools/list` entry 1",
        "`tools/list` entry 0 of the page at cursor 'page-2'",
        "tool 'bad'",
    ]


def _nested_schema(levels: int) -> str:
    """The text of an input schema ``{"type": "object", "properties": {"x": ...}}`` that nests ``levels`` JSON
    levels deep (written out as text: ``json`` cannot write one past its recursion limit)."""
    pairs = (levels - 1) // 2
    return '{"type": "object", "properties": {"x": ' * pairs + '{"type": "object"}' + "}}" * pairs


def _write_listing(path: Path, entries: list[tuple[str, str]], description: str = "") -> None:
    """A listing of tools (name, input schema text), each described by ``description``, written as text."""
    described = f'"description": {json.dumps(description, ensure_ascii=False)}, '
    listed = ", ".join(f'{{"name": "{name}", {described}"inputSchema": {schema}}}' for name, schema in entries)
    path.write_text(f"[{listed}]", encoding="utf-8")


async def test_a_tool_schema_nested_deeper_than_the_mcp_parser_reads_is_listed_and_works(tmp_path: Path) -> None:
    # 201 levels: its reply nests past the 200 levels the `mcp` package's JSON parser reads, and within the
    # 256 the engine reads a tool's schema to.
    connection, _ = _server(tmp_path, [])
    _write_listing(tmp_path / "tools.json", [("good", '{"type": "object"}'), ("deep", _nested_schema(201))])
    with anyio.fail_after(LIMIT):
        async with connection:
            tools = {member.name: member for member in await connection.tools()}
            assert list(tools) == ["good", "deep"]
            executor = ts.Executor(list(tools.values()))
            outcome = await executor.run(
                [ts.ToolCall("1", "deep", {"x": {"x": {}}}), ts.ToolCall("2", "deep", {"x": 1})]
            )
            assert outcome.results[0].output == 'deep:{"x": {"x": {}}}'
            assert outcome.results[1].error_kind == "invalid_input"


async def test_a_tool_schema_nested_deeper_than_a_schema_may_leaves_out_that_tool_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # 257 levels is one past what the engine reads a schema to; 20,001 is past what Python's `json` reads.
    connection, _ = _server(tmp_path, [])
    entries = [
        ("good", '{"type": "object"}'),
        ("at_the_limit", _nested_schema(255)),
        ("too_deep", _nested_schema(257)),
        ("far_too_deep", _nested_schema(20_001)),
        ("echo", '{"type": "object"}'),
    ]
    _write_listing(tmp_path / "tools.json", entries)
    with anyio.fail_after(LIMIT), caplog.at_level(logging.WARNING, logger="toolsched"):
        async with connection:
            tools = await connection.tools()
            assert [member.name for member in tools] == ["good", "at_the_limit", "echo"]
            outcome = await ts.Executor(tools).run([ts.ToolCall("1", "echo", {})])
            assert outcome.results[0].output == "echo:{}"
    warnings = [record.getMessage() for record in caplog.records if record.name.startswith("toolsched")]
    assert warnings == [
        f"MCP server `{sys.executable}`: tool {name!r} is left out of its tools: it nests deeper than a tool's "
        "input schema may (256 levels)"
        for name in ("too_deep", "far_too_deep")
    ]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.parametrize("answers", ["json", "sse"])
async def test_over_http_an_entry_not_mcp_or_nested_too_deep_is_left_out_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, answers: str
) -> None:
    listing = tmp_path / "tools.json"
    entries = [
        ("good", '{"type": "object"}'),
        ("deep", _nested_schema(201)),
        ("too_deep", _nested_schema(257)),
        ("no_schema", '{"type": "string"}'),
        ("echo", '{"type": "object"}'),
    ]
    # Line separators JSON holds unescaped, which end no line of server-sent events.
    _write_listing(listing, entries, description="one\u2028two\u2029three\x85four")
    port = _free_port()
    mode = "--http" if answers == "json" else "--http-sse"
    process = await anyio.open_process([sys.executable, str(RAW_SERVER), mode, str(port), str(listing)])
    try:
        with anyio.fail_after(LIMIT), caplog.at_level(logging.WARNING, logger="toolsched"):
            while True:
                try:
                    await (await anyio.connect_tcp("127.0.0.1", port)).aclose()
                    break
                except OSError:
                    await anyio.sleep(0.05)
            url = f"http://127.0.0.1:{port}/mcp"
            async with ts_mcp.connect_http(url, read_timeout=5.0) as connection:
                tools = await connection.tools()
                assert [member.name for member in tools] == ["good", "deep", "echo"]
                outcome = await ts.Executor(tools).run(
                    [ts.ToolCall("1", "deep", {"x": {}}), ts.ToolCall("2", "echo", {})]
                )
                assert [result.output for result in outcome.results] == ['deep:{"x": {}}', "echo:{}"]
    finally:
        process.kill()
        with anyio.CancelScope(shield=True):
            await process.wait()
            await process.aclose()
    warnings = [record.getMessage() for record in caplog.records if record.name.startswith("toolsched")]
    assert warnings == [
        f"MCP server at {url}: tool 'too_deep' is left out of its tools: it nests deeper than a tool's input schema "
        "may (256 levels)",
        f"MCP server at {url}: tool 'no_schema' is left out of its tools: it is not an MCP tool: inputSchema.type: "
        "Input should be 'object'",
    ]


def test_a_deep_line_with_a_string_left_open_is_read_in_one_pass() -> None:
    # The reply a server could send while a listing waits: too deep for the `mcp` package's parser, and not
    # JSON (a string never closed, full of escaped quotes). Each string's start was scanned to the end of the
    # text again, holding the event loop (and the interpreter) for hours with this megabyte; a child process
    # reads it, so that only the child is held if that comes back.
    script = (
        "import json, sys\n"
        "from toolsched._tools.mcp_listing import cut_too_deep\n"
        "text = '[' * 300 + '\"' + '\\\\\"' * 500_000\n"
        "cut = cut_too_deep(text, 260)\n"
        "try:\n"
        "    json.loads(cut)\n"
        "except ValueError:\n"
        "    print('not json')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=LIMIT, check=True)
    assert done.stdout == "not json\n"


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
