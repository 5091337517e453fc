"""An MCP server's tools next to local ones, in an Anthropic tool loop.

The connection stays open across turns; `refresh_tools` picks up a changed
tool list between turns. Run with ANTHROPIC_API_KEY set and an MCP server
command: `python examples/mcp_tools.py python path/to/server.py`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
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


async def main(client: Any, command: str, args: Sequence[str], question: str) -> LoopResult:
    async with ts_mcp.connect_stdio(command, args) as server:
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

    result = anyio.run(main, AsyncAnthropic(), sys.argv[1], sys.argv[2:], "What is 2 + 40?")
    print(result.text)
