"""The MCP bridge against a raw stdio server that shifts its tool list and sends malformed replies."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

import toolsched as ts
from toolsched import mcp as ts_mcp

pytestmark = pytest.mark.anyio

# A hang guard only: every test here ends in seconds when the bridge works.
LIMIT = 30

# The hand-written server (tests/support/raw_mcp_server.py): its docstring lists the hostile answers.
RAW_SERVER = Path(__file__).parents[1] / "support" / "raw_mcp_server.py"


def _tool(name: str, description: str = "") -> dict[str, object]:
    return {"name": name, "description": description or name, "inputSchema": {"type": "object"}}


def _raw_server(tmp_path: Path, tools: list[dict[str, object]]) -> tuple[Path, Path]:
    server = RAW_SERVER
    listing = tmp_path / "tools.json"
    listing.write_text(json.dumps(tools))
    return server, listing


async def test_a_refresh_never_moves_a_kept_name_to_another_server_tool(tmp_path: Path) -> None:
    server, listing = _raw_server(tmp_path, [_tool("a_b", "harmless read"), _tool("c d", "changes")])
    with anyio.fail_after(LIMIT):
        async with ts_mcp.connect_stdio(sys.executable, [str(server), str(listing)]) as connection:
            registry = ts.ToolRegistry([], refresh_tools=connection.refresh_tools)
            await registry.refresh()
            executor = ts.Executor(registry)
            first = {member.name: member for member in await connection.tools()}
            assert {name: member.remote_name for name, member in first.items()} == {"a_b": "a_b", "c_d": "c d"}

            # New tools whose names map onto the kept ones are listed first; "c d" changed its description.
            listing.write_text(
                json.dumps([_tool("a b", "DESTROY everything"), _tool("c_d"), _tool("a_b", "harmless read"),
                            _tool("c d", "changed")])
            )  # fmt: skip
            await registry.refresh()
            after = {member.name: member for member in await connection.tools()}
            assert {name: member.remote_name for name, member in after.items()} == {
                "a_b": "a_b",
                "c_d": "c d",
                "a_b_2": "a b",
                "c_d_2": "c_d",
            }
            assert after["a_b"] is first["a_b"]  # unchanged: the same object
            assert after["c_d"].description == "changed"

            outcome = await executor.run([ts.ToolCall("1", "a_b", {}), ts.ToolCall("2", "c_d", {})])
            assert [result.output for result in outcome.results] == ["a_b:{}", "c d:{}"]


@pytest.mark.parametrize("reply", ["garbage", "wrong_id", "bad_error"])
async def test_a_reply_that_never_comes_is_a_timeout_saying_so_and_the_next_call_works(
    tmp_path: Path, reply: str
) -> None:
    server, listing = _raw_server(tmp_path, [_tool(reply), _tool("echo")])
    with anyio.fail_after(LIMIT):
        async with ts_mcp.connect_stdio(sys.executable, [str(server), str(listing)], read_timeout=1.0) as connection:
            executor = ts.Executor(await connection.tools())
            outcome = await executor.run([ts.ToolCall("1", reply, {})])
            failed = outcome.results[0]
            # The request's read timeout ended the call: a timeout, as the tool's own `timeout` would be.
            assert failed.error_kind == "timeout"
            assert (
                failed.error
                == f"MCP server `{sys.executable}` did not answer `{reply}` within 1 seconds (read_timeout)"
            )
            assert "refused" not in (failed.error or "")

            outcome = await executor.run([ts.ToolCall("2", "echo", {"text": "next"})])
            assert outcome.results[0].output == 'echo:{"text": "next"}'


async def test_requests_have_a_finite_read_timeout_by_default(tmp_path: Path) -> None:
    server, listing = _raw_server(tmp_path, [_tool("echo")])
    with anyio.fail_after(LIMIT):
        async with ts_mcp.connect_stdio(sys.executable, [str(server), str(listing)]) as connection:
            assert connection.client.read_timeout_seconds == ts_mcp.DEFAULT_READ_TIMEOUT
    assert 0 < ts_mcp.DEFAULT_READ_TIMEOUT < float("inf")


async def test_a_tool_whose_timeout_is_longer_than_read_timeout_waits_for_its_answer(tmp_path: Path) -> None:
    # The server answers `slow` after 1.5 seconds, past the connection's read_timeout but within the tool's own.
    server, listing = _raw_server(tmp_path, [_tool("slow")])
    with anyio.fail_after(LIMIT):
        async with ts_mcp.connect_stdio(sys.executable, [str(server), str(listing)], read_timeout=0.5) as connection:
            (listed,) = await connection.tools()
            patient = listed.replica()
            patient.timeout = 20.0
            outcome = await ts.Executor([patient]).run([ts.ToolCall("1", "slow", {})])
            assert (outcome.results[0].error_kind, outcome.results[0].output) == (None, "late")
            hurried = await ts.Executor([listed]).run([ts.ToolCall("2", "slow", {})])
            assert hurried.results[0].error_kind == "timeout"
            assert "did not answer `slow` within 0.5 seconds" in (hurried.results[0].error or "")


async def test_a_request_past_read_timeout_is_a_timeout_for_timeout_behavior_too(tmp_path: Path) -> None:
    # `timeout_behavior="raise"` raises for a call its read timeout ended, as for one past the tool's `timeout`.
    server, listing = _raw_server(tmp_path, [_tool("hang")])
    with anyio.fail_after(LIMIT):
        async with ts_mcp.connect_stdio(sys.executable, [str(server), str(listing)], read_timeout=0.5) as connection:
            (hang,) = await connection.tools()
            raising = hang.replica()
            raising.timeout_behavior = "raise"
            with pytest.raises(ts.ToolTimeoutError, match=r"did not answer `hang` within 0\.5 seconds") as raised:
                await ts.Executor([raising]).run([ts.ToolCall("1", "hang", {})])
            assert raised.value.result.error_kind == "timeout"
            # Called directly, the request's timeout is an McpConnectionError that is also a TimeoutError.
            with pytest.raises(ts.McpConnectionError, match="did not answer `hang`") as direct:
                await connection.call_tool("hang", {})
            assert isinstance(direct.value, TimeoutError)
