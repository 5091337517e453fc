"""MCP servers that misbehave at the edges of the protocol, and connections used the wrong way: a server that
stops reading its input, tool lists that page in a circle or list a tool twice, a connection entered twice,
options that are not what they must be.

Every call gets one result, no request outlives its ``read_timeout``, no server process outlives its
connection, and a wrong option is an ``OptionError`` naming it.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import socket
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
# The server written with the `mcp` package (tests/support/mcp_server.py).
SDK_SERVER = Path(__file__).parents[1] / "support" / "mcp_server.py"


def _tool(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "inputSchema": {"type": "object"}, **extra}


def _raw_server(tmp_path: Path, tools: list[dict[str, Any]], **options: Any) -> ts_mcp.McpConnection:
    listing = tmp_path / "tools.json"
    listing.write_text(json.dumps(tools))
    return ts_mcp.connect_stdio(sys.executable, [str(RAW_SERVER), str(listing)], **options)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_a_call_the_server_does_not_read_ends_at_read_timeout(tmp_path: Path) -> None:
    # `hang` stops the server reading its input: the pipe to it fills with the first calls' arguments, and a
    # later call cannot even be written. Each call still ends at its read timeout, as a timeout.
    connection = _raw_server(tmp_path, [_tool("hang")], read_timeout=1.0)
    blob = "x" * 300_000
    with anyio.fail_after(LIMIT):
        async with connection:
            executor = ts.Executor(await connection.tools(), strategy=ts.Parallel())
            outcome = await executor.run([ts.ToolCall(str(n), "hang", {"blob": blob}) for n in range(4)])
    assert [result.call_id for result in outcome.results] == ["0", "1", "2", "3"]
    for result in outcome.results:
        assert result.error_kind == "timeout", result
        assert f"MCP server `{sys.executable}` did not " in (result.error or "")
        assert "`hang` within 1 seconds (read_timeout)" in (result.error or "")


async def test_a_tool_list_whose_cursor_comes_back_lists_each_tool_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Page one names the cursor "again", and so does the page at "again": a walk that followed it would list
    # the same tools until its page bound, each under a new name.
    connection = _raw_server(tmp_path, [_tool("first")])
    (tmp_path / "tools.json.next").write_text("again")
    (tmp_path / "tools.json.again").write_text(json.dumps([_tool("second")]))
    (tmp_path / "tools.json.again.next").write_text("again")
    with anyio.fail_after(LIMIT), caplog.at_level(logging.WARNING, logger="toolsched"):
        async with connection:
            tools = await connection.tools()
            assert [(member.name, member.remote_name) for member in tools] == [
                ("first", "first"),
                ("second", "second"),
            ]
            outcome = await ts.Executor(tools).run([ts.ToolCall("1", "second", {})])
            assert outcome.results[0].output == "second:{}"
    warnings = [record.getMessage() for record in caplog.records if record.name.startswith("toolsched")]
    assert warnings == [
        f"MCP server `{sys.executable}`: its `tools/list` cursor 'again' came back; the tools listed before it "
        "are kept and the list ends there"
    ]


async def test_a_tool_list_longer_than_its_page_bound_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Every page names a new cursor: the walk stops at its bound, and says it did.
    pages = ts_mcp.MAX_TOOL_PAGES + 5
    connection = _raw_server(tmp_path, [_tool("t0")])
    (tmp_path / "tools.json.next").write_text("p1")
    for page in range(1, pages):
        (tmp_path / f"tools.json.p{page}").write_text(json.dumps([_tool(f"t{page}")]))
        (tmp_path / f"tools.json.p{page}.next").write_text(f"p{page + 1}")
    with anyio.fail_after(LIMIT), caplog.at_level(logging.WARNING, logger="toolsched"):
        async with connection:
            tools = await connection.tools()
    assert [member.name for member in tools] == [f"t{page}" for page in range(ts_mcp.MAX_TOOL_PAGES)]
    warnings = [record.getMessage() for record in caplog.records if record.name.startswith("toolsched")]
    assert warnings == [
        f"MCP server `{sys.executable}`: its `tools/list` goes on past {ts_mcp.MAX_TOOL_PAGES} pages (the next at "
        f"cursor 'p{ts_mcp.MAX_TOOL_PAGES}'); the tools of the first {ts_mcp.MAX_TOOL_PAGES} are kept"
    ]


async def test_a_tool_listed_twice_is_one_tool_with_its_first_schema(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Both entries would call the server's one `a`: a second toolsched tool for it would be checked against a
    # schema the server does not hold for it.
    strict = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    connection = _raw_server(tmp_path, [_tool("a"), {"name": "a", "inputSchema": strict}, _tool("b")])
    with anyio.fail_after(LIMIT), caplog.at_level(logging.WARNING, logger="toolsched"):
        async with connection:
            tools = await connection.tools()
            assert [(member.name, member.remote_name) for member in tools] == [("a", "a"), ("b", "b")]
            assert tools[0].input_schema == {"type": "object"}
            again = await connection.refresh_tools()
            assert again == tools and all(kept is member for kept, member in zip(again, tools, strict=True))
    warnings = [record.getMessage() for record in caplog.records if record.name.startswith("toolsched")]
    left_out = f"MCP server `{sys.executable}`: tool 'a' is listed again; its first entry is kept"
    assert warnings == [left_out, left_out]


async def test_a_connection_entered_while_open_is_refused_and_its_server_is_not_lost() -> None:
    connection = ts_mcp.connect_stdio(sys.executable, [str(SDK_SERVER)])
    with anyio.fail_after(LIMIT):
        async with connection:
            executor = ts.Executor(await connection.tools())
            first = await executor.run([ts.ToolCall("1", "pid", {})])
            pid = int(first.results[0].output)
            with pytest.raises(ts.McpConnectionError, match="is open already") as raised:
                async with connection:
                    pass
            assert "`async with`" in str(raised.value)
            # The open connection goes on with its server.
            again = await executor.run([ts.ToolCall("2", "pid", {})])
            assert again.results[0].output == str(pid)
        assert _gone(pid)
        # Closed, it can be entered again.
        async with connection:
            outcome = await ts.Executor(await connection.tools()).run([ts.ToolCall("3", "add", {"a": 1})])
            assert outcome.results[0].output == "3"


async def test_a_connection_entered_from_two_tasks_at_once_opens_once() -> None:
    connection = ts_mcp.connect_stdio(sys.executable, [str(SDK_SERVER)])
    refused: list[BaseException] = []
    pids: list[int] = []

    async def enter(opened: anyio.Event, done: anyio.Event) -> None:
        try:
            async with connection:
                pids.append(int(await connection.call_tool("pid", {})))
                opened.set()
                await done.wait()
        except ts.McpConnectionError as exc:
            refused.append(exc)
            opened.set()

    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as group:
            done = anyio.Event()
            events = [anyio.Event(), anyio.Event()]
            for opened in events:
                group.start_soon(enter, opened, done)
            for opened in events:
                await opened.wait()
            done.set()
    assert len(pids) == 1 and len(refused) == 1
    assert "is open already" in str(refused[0])
    assert _gone(pids[0])


@pytest.mark.parametrize("read_timeout", [0, -1, float("nan"), "5", True])
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_read_timeout_that_is_not_a_positive_number_is_an_option_error(read_timeout: Any, transport: str) -> None:
    with pytest.raises(ts.OptionError, match="read_timeout must be a positive number of seconds") as raised:
        if transport == "stdio":
            ts_mcp.connect_stdio(sys.executable, [str(SDK_SERVER)], read_timeout=read_timeout)
        else:
            ts_mcp.connect_http("http://127.0.0.1:1/mcp", read_timeout=read_timeout)
    assert repr(read_timeout) in str(raised.value)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_prefix_that_is_not_text_is_an_option_error(transport: str) -> None:
    with pytest.raises(ts.OptionError, match="prefix must be text, got 5"):
        if transport == "stdio":
            ts_mcp.connect_stdio(sys.executable, [str(SDK_SERVER)], prefix=5)  # type: ignore[arg-type]
        else:
            ts_mcp.connect_http("http://127.0.0.1:1/mcp", prefix=5)  # type: ignore[arg-type]


async def test_no_wait_and_an_infinite_read_timeout_still_connect(tmp_path: Path) -> None:
    for read_timeout in (None, float("inf")):
        connection = _raw_server(tmp_path, [_tool("echo")], read_timeout=read_timeout)
        with anyio.fail_after(LIMIT):
            async with connection:
                assert await connection.call_tool("echo", {}) == "echo:{}"


def _server_that_writes_to_stderr(tmp_path: Path, text: str) -> list[str]:
    """The arguments of a raw server that writes ``text`` (read from a file) to its stderr before it serves."""
    listing = tmp_path / "tools.json"
    listing.write_text(json.dumps([_tool("echo")]))
    written = tmp_path / "stderr.txt"
    written.write_text(text, encoding="utf-8")
    start = (
        "import runpy, sys\n"
        f"sys.stderr.write(open({str(written)!r}, encoding='utf-8').read())\n"
        "sys.stderr.flush()\n"
        f"sys.argv = [{str(RAW_SERVER)!r}, {str(listing)!r}]\n"
        f"runpy.run_path({str(RAW_SERVER)!r}, run_name='__main__')\n"
    )
    return ["-c", start]


async def test_a_server_stderr_goes_to_an_errlog_without_a_file_descriptor(tmp_path: Path) -> None:
    # A StringIO (or a notebook's or a test runner's captured stderr) has no descriptor a process can write to.
    errlog = io.StringIO()
    text = "starting é\n" + "noise\n" * 20_000
    connection = ts_mcp.connect_stdio(sys.executable, _server_that_writes_to_stderr(tmp_path, text), errlog=errlog)
    with anyio.fail_after(LIMIT):
        async with connection:
            assert await connection.call_tool("echo", {"n": 1}) == 'echo:{"n": 1}'
    assert errlog.getvalue() == text


async def test_a_server_started_while_stderr_is_captured_connects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # pytest's capsys puts a stream without a descriptor in sys.stderr, the default errlog.
    connection = ts_mcp.connect_stdio(sys.executable, _server_that_writes_to_stderr(tmp_path, "hello\n"))
    with anyio.fail_after(LIMIT):
        async with connection:
            assert await connection.call_tool("echo", {}) == "echo:{}"
    assert capsys.readouterr().err == "hello\n"


async def test_calls_in_flight_when_their_block_ends_say_the_block_closed_the_connection() -> None:
    # The server did not close anything: the connection's own `async with` ended while its calls waited.
    results: list[ts.ToolResult] = []
    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as group:
            async with ts_mcp.connect_stdio(sys.executable, [str(SDK_SERVER)]) as connection:
                started = anyio.Event()
                executor = ts.Executor(
                    await connection.tools(),
                    strategy=ts.Parallel(),
                    on_progress=lambda event: started.set() if isinstance(event, ts.ToolProgress) else None,
                )

                async def run() -> None:
                    outcome = await executor.run([ts.ToolCall("1", "started_then_slow", {"seconds": LIMIT})])
                    results.extend(outcome.results)

                group.start_soon(run)
                await started.wait()
    (result,) = results
    assert result.error_kind == "execution_error"
    assert result.error == (
        f"McpConnectionError: the connection to MCP server `{sys.executable}` was closed during `started_then_slow`: "
        "its `async with` block ended"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def test_leaving_an_http_connection_whose_server_never_ends_its_session_waits_read_timeout_at_most(
    tmp_path: Path,
) -> None:
    # Leaving the block ends the session with a DELETE, which this server never answers: the close is a
    # request like any other, bounded by read_timeout (the transport's own read bound is 300 seconds).
    listing = tmp_path / "tools.json"
    listing.write_text(json.dumps([_tool("echo")]))
    port = _free_port()
    process = await anyio.open_process([sys.executable, str(RAW_SERVER), "--http-session", str(port), str(listing)])
    try:
        with anyio.fail_after(LIMIT):
            while True:
                try:
                    await (await anyio.connect_tcp("127.0.0.1", port)).aclose()
                    break
                except OSError:
                    await anyio.sleep(0.05)
            async with ts_mcp.connect_http(f"http://127.0.0.1:{port}/mcp", read_timeout=1.0) as connection:
                outcome = await ts.Executor(await connection.tools()).run([ts.ToolCall("1", "echo", {})])
                assert outcome.results[0].output == "echo:{}"
            with pytest.raises(ts.McpConnectionError, match="not connected"):
                await connection.call_tool("echo", {})
    finally:
        process.kill()
        with anyio.CancelScope(shield=True):
            await process.wait()
            await process.aclose()


@pytest.mark.parametrize(
    ("name", "refused"),
    [
        ("shaped", "Tool shaped has an output schema but did not return structured content"),
        ("structured", "Invalid structured content returned by tool structured: 'no' is not of type 'integer'"),
    ],
    ids=["no-structured-content", "structured-content-of-another-shape"],
)
async def test_a_result_that_breaks_its_output_schema_is_an_mcp_tool_error(
    tmp_path: Path, name: str, refused: str
) -> None:
    # The `mcp` package checks a result against the output schema its tool declared, and refuses it with a
    # RuntimeError. `shaped` is answered with text only; `structured` with an `x` that is not an integer.
    output_schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    connection = _raw_server(tmp_path, [_tool(name, outputSchema=output_schema), _tool("echo")])
    with anyio.fail_after(LIMIT):
        async with connection:
            executor = ts.Executor(await connection.tools())
            outcome = await executor.run([ts.ToolCall("1", name, {}), ts.ToolCall("2", "echo", {})])
            with pytest.raises(ts.McpToolError, match=re.escape(refused)):
                await connection.call_tool(name, {})
    failed, answered = outcome.results
    assert failed.error_kind == "execution_error"
    assert (failed.error or "").startswith(
        f"McpToolError: MCP server `{sys.executable}` answered `{name}` with a result the `mcp` package refused: "
        f"{refused}"
    )
    assert answered.output == "echo:{}"


async def test_progress_of_no_number_is_not_reported_and_logs_no_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # NaN over 1, 1 over NaN, NaN over NaN and infinity over infinity are no fraction; 1 over 2 is a half.
    connection = _raw_server(tmp_path, [_tool("odd_progress")])
    events: list[ts.Event] = []
    with anyio.fail_after(LIMIT), caplog.at_level(logging.WARNING):
        async with connection:
            executor = ts.Executor(await connection.tools(), on_progress=events.append)
            outcome = await executor.run([ts.ToolCall("1", "odd_progress", {})])
    assert outcome.results[0].output == "done"
    assert [event.fraction for event in events if isinstance(event, ts.ToolProgress)] == [0.5]
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR] == []


async def test_a_stdio_command_its_arguments_and_its_directory_may_be_paths(tmp_path: Path) -> None:
    listing = tmp_path / "tools.json"
    listing.write_text(json.dumps([_tool("echo")]))
    connection = ts_mcp.connect_stdio(Path(sys.executable), [RAW_SERVER, listing], cwd=tmp_path)
    with anyio.fail_after(LIMIT):
        async with connection:
            assert await connection.call_tool("echo", {}) == "echo:{}"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"command": 5}, "command must be text or a path, got 5"),
        ({"args": "server.py"}, "args must be a sequence of arguments (text or paths), not one string: 'server.py'"),
        ({"args": ["server.py", 5]}, "args[1] must be text or a path, got 5"),
        ({"args": 5}, "args must be a sequence of arguments (text or paths), got 5"),
        ({"env": {"HOME": 1}}, "env must map names to text, got 'HOME': 1"),
        ({"env": ["HOME"]}, "env must map names to text, got ['HOME']"),
        ({"cwd": 5}, "cwd must be text or a path, got 5"),
    ],
    ids=["command", "args-one-string", "args-item", "args-not-a-sequence", "env-value", "env-not-a-mapping", "cwd"],
)
def test_a_stdio_option_of_the_wrong_kind_is_an_option_error(options: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"command": sys.executable, "args": [str(SDK_SERVER)], **options}
    with pytest.raises(ts.OptionError, match=re.escape(message)):
        ts_mcp.connect_stdio(**arguments)
