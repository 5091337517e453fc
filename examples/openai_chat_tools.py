"""OpenAI Chat Completions with toolsched running the tool calls.

`main` is a hand-written tool loop where one call, `ts_chat.execute`,
replaces the tool-execution code; `main_with_loop` lets toolsched run the
whole loop. Run with OPENAI_API_KEY set: `python examples/openai_chat_tools.py`.
"""

from __future__ import annotations

from typing import Any, Literal

import anyio

import toolsched as ts
from toolsched.loops import openai_chat_loop
from toolsched.providers import openai_chat as ts_chat

MODEL = "gpt-4.1"
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
        completion = await client.chat.completions.create(
            model=MODEL, messages=messages, tools=ts_chat.tool_definitions(executor)
        )
        message = completion.choices[0].message
        if not message.tool_calls:
            return str(message.content)
        turn = await ts_chat.execute(executor, completion)
        # The model's message (each tool call with the ID its tool message answers), then the tool messages.
        messages += [turn.assistant, *turn.messages]


async def main_with_loop(client: Any) -> str | None:
    result = await openai_chat_loop(client, executor, messages=[{"role": "user", "content": QUESTION}], model=MODEL)
    return result.text


if __name__ == "__main__":
    from openai import AsyncOpenAI

    print(anyio.run(main, AsyncOpenAI()))
