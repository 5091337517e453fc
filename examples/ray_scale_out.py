"""Scale-out: tool bodies on a Ray cluster; planning, checks, order and results stay here.

Run as it is, it starts a small Ray cluster on this machine. On a real cluster,
build the backend with ``ts.RayBackend(address="ray://head-node:10001")`` (or
``address="auto"`` on one of the cluster's nodes); the tools' code must be
importable on the workers (install it there, or ship it with Ray's
``runtime_env``).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import anyio

import toolsched as ts


@ts.tool(read_only=True, concurrency_safe=True, backend="ray", num_cpus=1)
def checksum(text: str) -> str:
    """SHA-256 of a text, computed on a Ray worker (a Ray task per call)."""
    return f"{hashlib.sha256(text.encode()).hexdigest()[:12]} ({where()})"


@ts.tool(read_only=True, concurrency_safe=True)
def word_count(text: str) -> str:
    """Counts words; it names no backend, so it runs in this process."""
    return f"{len(text.split())} words ({where()})"


class Glossary(ts.Tool):
    """Looks terms up in a table it loads once per worker: state that lives on a Ray actor."""

    name = "glossary"
    description = "Look a term up in the glossary."
    input_schema = {"type": "object", "properties": {"term": {"type": "string"}}, "required": ["term"]}
    read_only = True
    concurrency_safe = True
    backend = "ray"

    def __init__(self) -> None:
        self.table: dict[str, str] | None = None
        self.lookups = 0

    def call(self, args: dict[str, Any], ctx: ts.ToolContext) -> str:
        if self.table is None:
            self.table = {"ray": "a framework for distributed Python", "actor": "a stateful Ray worker"}
        self.lookups += 1
        meaning = self.table.get(args["term"], "not in the glossary")
        return f"{meaning} (lookup {self.lookups} on this worker, {where()})"


def where() -> str:
    return "here" if os.getpid() == HOME else "on a Ray worker"


HOME = os.getpid()


async def main(backend: ts.RayBackend | None = None) -> None:
    if backend is None:
        backend = ts.RayBackend(actor_pool={"glossary": 1}, init_options={"num_cpus": 2, "include_dashboard": False})
    executor = ts.Executor([checksum, word_count, Glossary()], backends={"ray": backend})
    outcome = await executor.run(
        [
            ts.ToolCall("c1", "checksum", {"text": "tool calls, scaled out"}),
            ts.ToolCall("c2", "word_count", {"text": "tool calls, scaled out"}),
            ts.ToolCall("c3", "glossary", {"term": "ray"}),
            ts.ToolCall("c4", "glossary", {"term": "actor"}),
            ts.ToolCall("c5", "checksum", {"text": 42}),  # invalid: answered here, never sent to Ray
        ]
    )
    backend.close()
    for result in outcome.results:
        print(result.call_id, result.tool_name, result.error_kind or "ok", result.output or result.error)


if __name__ == "__main__":
    # A demonstration cluster: loopback only, no usage reporting (read when Ray is imported).
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    anyio.run(main)
