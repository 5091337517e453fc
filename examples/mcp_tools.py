"""An MCP server's tools next to local ones, in an Anthropic tool loop.

The connection stays open across turns; `refresh_tools` picks up a changed
tool list between turns. Run with ANTHROPIC_API_KEY set and the command of an
MCP server that speaks stdio: `python examples/mcp_tools.py python path/to/server.py`.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio

import toolsched as ts
from toolsched import mcp as ts_mcp
from toolsched.loops import LoopResult, anthropic_loop

MODEL = "claude-sonnet-4-6"


@ts.tool(read_only=True, concurrency_safe=True)
async def today() -> str:
    """Today's date."""
    return "2026-05-01"


async def main(client: Any, connection: ts_mcp.McpConnection, question: str) -> LoopResult:
    async with connection as server:
        executor = ts.Executor([today, *await server.tools()])

        async def refresh_tools() -> ts.Executor | None:
            if not server.tools_changed:
                return None
            return ts.Executor([today, *await server.refresh_tools()])

        return await anthropic_loop(
            client,
            executor,
            messages=[{"role": "user", "content": question}],
            model=MODEL,
            max_tokens=1024,
            refresh_tools=refresh_tools,
        )


if __name__ == "__main__":
    from anthropic import AsyncAnthropic

    connection = ts_mcp.connect_stdio(sys.argv[1], sys.argv[2:])
    print(anyio.run(main, AsyncAnthropic(), connection, "What is 2 + 40?").text)
