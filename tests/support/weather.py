"""The provider tests' one tool: ``get_weather(city)``, which notes every city it is run for."""

from __future__ import annotations

import toolsched as ts


def weather(ran: list[str]) -> list[ts.Tool]:
    """A read-only, concurrency-safe ``get_weather`` tool that appends each city it runs for to ``ran``."""

    @ts.tool(read_only=True, concurrency_safe=True)
    async def get_weather(city: str) -> str:
        """Current weather for a city."""
        ran.append(city)
        return f"{city}: 18°C"

    return [get_weather]
