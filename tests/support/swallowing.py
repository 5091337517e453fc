"""A tool that catches its own cancellation and returns a value anyway, as a careless ``except BaseException``
does: its call is answered as what stopped it (``timeout`` or ``cancelled``), never as a success."""

from __future__ import annotations

from typing import Any

import anyio

import toolsched as ts


def swallowing_tool(started: list[int], **options: Any) -> ts.Tool:
    """The tool ``slow(n, mode="")``, declared with ``options`` (``timeout``, ``circuit``, ...): it notes ``n`` in
    ``started``, waits 5 s, and returns even when that wait is cancelled."""

    @ts.tool(name="slow", **options)
    async def slow(n: int, mode: str = "") -> str:
        started.append(n)
        try:
            await anyio.sleep(5)
        except anyio.get_cancelled_exc_class():
            return "caught it, returned anyway"
        return "done"

    return slow
