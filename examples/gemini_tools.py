"""Google Gemini with toolsched running the function calls.

`main` is a hand-written tool loop where one call, `ts_gemini.execute`,
replaces the tool-execution code; `main_with_loop` lets toolsched run the
whole loop. Run with GEMINI_API_KEY set: `python examples/gemini_tools.py`.
"""

from __future__ import annotations

from typing import Any, Literal

import anyio

import toolsched as ts
from toolsched.loops import gemini_loop
from toolsched.providers import gemini as ts_gemini

MODEL = "gemini-2.5-flash"
QUESTION = "What is the weather in Paris and London?"
CELSIUS = {"Paris": 18, "London": 15}


@ts.tool(read_only=True, concurrency_safe=True)
async def get_weather(city: str, unit: Literal["c", "f"] = "c") -> str:
    """Current temperature in a city, in Celsius ("c") or Fahrenheit ("f")."""
    celsius = CELSIUS.get(city, 20)
    return f"{city}: {celsius}°C" if unit == "c" else f"{city}: {round(celsius * 9 / 5 + 32)}°F"


executor = ts.Executor([get_weather])


async def main(client: Any) -> str:
    contents: list[Any] = [{"role": "user", "parts": [{"text": QUESTION}]}]
    config = {"tools": ts_gemini.tool_definitions(executor)}
    while True:
        response = await client.aio.models.generate_content(model=MODEL, contents=contents, config=config)
        turn = await ts_gemini.execute(executor, response)
        contents.append(turn.assistant)
        if turn.content is None:
            return str(response.text)
        contents.append(turn.content)


async def main_with_loop(client: Any) -> str | None:
    result = await gemini_loop(client, executor, model=MODEL, contents=QUESTION)
    return result.text


if __name__ == "__main__":
    from google import genai

    print(anyio.run(main, genai.Client()))
