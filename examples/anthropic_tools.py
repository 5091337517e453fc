"""Anthropic Messages with toolsched running the tool calls.

`main` is a hand-written tool loop where one call, `ts_anthropic.execute`,
replaces the tool-execution code; `main_with_loop` lets toolsched run the
whole loop. Run with ANTHROPIC_API_KEY set: `python examples/anthropic_tools.py`.
"""

from __future__ import annotations

from typing import Any, Literal

import anyio

import toolsched as ts
from toolsched.loops import anthropic_loop
from toolsched.providers import anthropic as ts_anthropic

MODEL = "claude-sonnet-4-6"
QUESTION = "What is the weather in Paris and London?"
CELSIUS = {"Paris": 18, "London": 15}


@ts.tool(read_only=True, concurrency_safe=True)
async def get_weather(city: str, unit: Literal["c", "f"] = "c") -> str:
    """Current temperature in a city, in Celsius ("c") or Fahrenheit ("f")."""
    celsius = CELSIUS.get(city, 20)
    return f"{city}: {celsius}°C" if unit == "c" else f"{city}: {round(celsius * 9 / 5 + 32)}°F"


executor = ts.Executor([get_weather])


async def main(client: Any) -> str:
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    while True:
        response = await client.messages.create(
            model=MODEL, max_tokens=1024, messages=messages, tools=ts_anthropic.tool_definitions(executor)
        )
        # The model's turn, each tool_use block with the ID its tool_result answers.
        messages.append(ts_anthropic.assistant_message(response))
        if response.stop_reason != "tool_use":
            return "".join(block.text for block in response.content if block.type == "text")
        turn = await ts_anthropic.execute(executor, response)
        messages.append(turn.message)


async def main_with_loop(client: Any) -> str | None:
    result = await anthropic_loop(
        client, executor, messages=[{"role": "user", "content": QUESTION}], model=MODEL, max_tokens=1024
    )
    return result.text


if __name__ == "__main__":
    from anthropic import AsyncAnthropic

    print(anyio.run(main, AsyncAnthropic()))
