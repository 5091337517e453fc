"""Quickstart: define tools, run one turn of calls, read the results in model order."""

from __future__ import annotations

import anyio

import toolsched as ts


@ts.tool(read_only=True, concurrency_safe=True)
async def read_file(path: str, limit: int = 100) -> str:
    """Read a text file."""
    await anyio.sleep(0.01)
    return f"first {limit} lines of {path}"


@ts.tool(read_only=True, concurrency_safe=True, max_result_chars=200)
def grep(pattern: str, path: str = ".") -> list[str]:
    """Search files for a pattern (a sync tool: it runs in a worker thread)."""
    return [f"{path}/main.py:{line}: {pattern}" for line in range(3)]


@ts.tool(destructive=True)
async def write_file(path: str, text: str) -> str:
    """Write a file."""
    return f"wrote {len(text)} characters to {path}"


async def main() -> None:
    executor = ts.Executor([read_file, grep, write_file], strategy=ts.Partitioned(max_concurrency=10))
    outcome = await executor.run(
        [
            ts.ToolCall(id="c1", name="read_file", args={"path": "a.py"}),
            ts.ToolCall(id="c2", name="grep", args='{"pattern": "load"}'),  # JSON text, as OpenAI sends it
            ts.ToolCall(id="c3", name="write_file", args={"path": "b.py", "text": "print()"}),
            ts.ToolCall(id="c4", name="read_file", args={"path": 42}),  # invalid: path must be a string
        ]
    )
    for result in outcome.results:
        status = f"error ({result.error_kind}): {result.error}" if result.is_error else repr(result.output)
        print(f"{result.call_id} {result.tool_name} batch={result.batch} {status}")


if __name__ == "__main__":
    anyio.run(main)
