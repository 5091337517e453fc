"""Module-level tools for the copy and pickle tests (pickle finds a ``@tool`` function by its module and name)."""

from __future__ import annotations

from typing import Any

import toolsched as ts


@ts.tool(name="capped_sum", max_concurrency=2, concurrency_safe=True)
def capped_sum(a: int, b: int) -> int:
    """Adds two numbers, two calls at a time."""
    return a + b


class CappedEcho(ts.Tool):
    """Echoes its text, two calls at a time."""

    name = "capped_echo"
    description = "Echoes its text."
    input_schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    max_concurrency = 2

    async def call(self, args: Any, ctx: ts.ToolContext) -> str:
        return str(args["text"])
