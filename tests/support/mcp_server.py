"""A small MCP server for the bridge's tests, written with the `mcp` package's server API.

Run as `python tests/mcp_server.py` (stdio) or `python tests/mcp_server.py http PORT`
(streamable HTTP on 127.0.0.1).
"""

from __future__ import annotations

import fcntl
import logging
import os
import stat
import sys

import anyio
from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp.types import ToolAnnotations

server = MCPServer("bridge-test")
received: list[str] = []


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
def add(a: int, b: int = 2) -> int:
    """Add two integers."""
    received.append("add")
    return a + b


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def received_calls() -> str:
    """The names of the calls this server received, in order."""
    return ",".join(received)


@server.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True, open_world_hint=True))
def write_note(text: str) -> str:
    """Write a note (additive, idempotent)."""
    received.append("write_note")
    return f"noted: {text}"


@server.tool()
def wipe() -> str:
    """Wipe everything (no annotations: MCP's defaults apply)."""
    received.append("wipe")
    return "wiped"


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the given reason."""
    received.append("fail")
    raise ToolError(reason)


@server.tool()
def refuse() -> str:
    """Answers with a protocol error instead of a result."""
    received.append("refuse")
    raise MCPError(-32602, "refusing on purpose")


@server.tool()
async def count_to(n: int, ctx: Context) -> str:
    """Count to n, reporting progress."""
    received.append("count_to")
    for step in range(1, n + 1):
        await ctx.report_progress(step, n, f"step {step}")
    return f"counted to {n}"


@server.tool()
def exit_now() -> str:
    """Ends the server process in the middle of the call."""
    sys.stdout.flush()
    os._exit(3)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def pid() -> int:
    """The server's process ID (for a test that kills it from outside)."""
    return os.getpid()


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def slow(seconds: float) -> str:
    """Waits, then answers."""
    await anyio.sleep(seconds)
    return f"waited {seconds}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def started_then_slow(seconds: float, ctx: Context) -> str:
    """Reports that it started (progress 0 of 1), then waits, then answers."""
    await ctx.report_progress(0, 1, "started")
    await anyio.sleep(seconds)
    return f"waited {seconds}"


def _wire_out() -> int:
    """The descriptor the server writes its messages to: the pipe it was started with as stdout (the server
    keeps it under another number and points fd 1 at stderr while it serves)."""
    for fd in range(3, 256):
        try:
            mode = os.fstat(fd).st_mode
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        except OSError:
            continue
        if stat.S_ISFIFO(mode) and flags & os.O_ACCMODE == os.O_WRONLY:
            return fd
    raise RuntimeError("no pipe to write messages to")


@server.tool()
def close_wire() -> str:
    """Closes the pipe the server answers on and goes on running: the client sees the connection end."""
    os.close(_wire_out())
    return "closed"


@server.tool()
def garbage() -> str:
    """Writes a line that is not JSON-RPC to the pipe the server answers on, then answers normally."""
    os.write(_wire_out(), b"this is not json-rpc\n")
    return "wrote garbage"


@server.tool()
def grow() -> str:
    """Adds the tool `echo` to this server."""
    received.append("grow")

    def echo(text: str) -> str:
        return text

    server.add_tool(echo, name="echo", description="Echo the text back.")
    return "grown"


# A one-pixel PNG: the image the `snapshot` tool returns, with a caption.
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c63f8cfc0f01f00050001ff89993d1d0000000049454e44ae426082"
)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def snapshot(caption: str):  # type: ignore[no-untyped-def]  # unannotated: content, not structured output
    """A caption and a one-pixel PNG."""
    received.append("snapshot")
    return [caption, Image(data=PIXEL, format="png")]


if __name__ == "__main__":
    logging.basicConfig(level=logging.CRITICAL)
    if len(sys.argv) == 3 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
