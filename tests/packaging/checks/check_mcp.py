"""toolsched.mcp with the ``mcp`` extra alone: the test server's tools over stdio, and over HTTP with headers."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import anyio

import toolsched as ts
from toolsched import mcp as ts_mcp

SERVER = str(Path(sys.argv[1]) / "tests" / "support" / "mcp_server.py")


async def add_through(connection: ts_mcp.McpConnection, label: str) -> None:
    async with connection as server:
        executor = ts.Executor(await server.tools())
        outcome = await executor.run([ts.ToolCall("c1", "add", {"a": 40})])
        result = outcome.results[0]
        print(f"{label}: add -> {result.output or result.error}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def main() -> None:
    with anyio.fail_after(60):
        await add_through(ts_mcp.connect_stdio(sys.executable, [SERVER]), "stdio")
        port = free_port()
        process = await anyio.open_process(
            [sys.executable, SERVER, "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            while True:
                try:
                    stream = await anyio.connect_tcp("127.0.0.1", port)
                except OSError:
                    await anyio.sleep(0.05)
                    continue
                await stream.aclose()
                break
            # Headers make toolsched open its own httpx2 client.
            connection = ts_mcp.connect_http(f"http://127.0.0.1:{port}/mcp", headers={"x-check": "1"})
            await add_through(connection, "http")
        finally:
            process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()
                await process.aclose()


anyio.run(main)
