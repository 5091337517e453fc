"""OpenAI Responses with toolsched running the function calls.

`main` is a hand-written tool loop where one call, `ts_responses.execute`,
replaces the tool-execution code; `main_with_loop` lets toolsched run the
whole loop. Run with OPENAI_API_KEY set: `python examples/openai_responses_tools.py`.
"""

from __future__ import annotations

from typing import Any, Literal

import anyio

import toolsched as ts
from toolsched.loops import openai_responses_loop
from toolsched.providers import openai_responses as ts_responses

MODEL = "gpt-5"
QUESTION = "What is the weather in Paris and London?"
CELSIUS = {"Paris": 18, "London": 15}


@ts.tool(read_only=True, concurrency_safe=True)
async def get_weather(city: str, unit: Literal["c", "f"] = "c") -> str:
    """Current temperature in a city, in Celsius ("c") or Fahrenheit ("f")."""
    celsius = CELSIUS.get(city, 20)
    return f"{city}: {celsius}°C" if unit == "c" else f"{city}: {round(celsius * 9 / 5 + 32)}°F"


executor = ts.Executor([get_weather])


async def main(client: Any) -> str:
    items: list[Any] = [{"role": "user", "content": QUESTION}]
    tools = ts_responses.tool_definitions(executor, strict=True)
    while True:
        response = await client.responses.create(model=MODEL, input=items, tools=tools)
        turn = await ts_responses.execute(executor, response)
        # The output items (each function_call with the call_id its output answers), then the outputs.
        items += [*turn.assistant, *turn.items]
        if not turn.calls:
            return str(response.output_text)


async def main_with_loop(client: Any) -> str | None:
    result = await openai_responses_loop(client, executor, input=QUESTION, model=MODEL, strict=True)
    return result.text


if __name__ == "__main__":
    from openai import AsyncOpenAI

    print(anyio.run(main, AsyncOpenAI()))
