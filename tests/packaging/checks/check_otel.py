"""toolsched.integrations.otel with the ``otel`` extra alone: the API's default (no-op) providers."""

from __future__ import annotations

import anyio

import toolsched as ts
from toolsched.integrations import otel


@ts.tool(read_only=True)
async def read_file(path: str) -> str:
    """Read a text file."""
    return f"contents of {path}"


async def main() -> None:
    executor = otel.instrument(ts.Executor([read_file]))
    outcome = await executor.run([ts.ToolCall("c1", "read_file", {"path": "a.txt"}), ts.ToolCall("c2", "nope", {})])
    for result in outcome.results:
        print(result.call_id, result.error_kind or "ok", result.output)


anyio.run(main)
