"""An OpenAI Agents SDK agent whose function tools run through toolsched.

`scheduled(agent, ...)` returns a copy of the agent; `Runner.run` drives it as
before and produces the SDK's items, while each function call goes through
toolsched: admitted by the permission rules, the weather lookups overlapping
and the note (given flags, so not concurrency-safe) written alone. Run with
OPENAI_API_KEY set: `python examples/agents_sdk.py`.
"""

from __future__ import annotations

from typing import Any

import anyio
from agents import Agent, Runner, function_tool

import toolsched as ts
from toolsched.integrations.agents import from_function_tool, scheduled

QUESTION = "What is the weather in Paris and London? Save a note with the answer."
CELSIUS = {"Paris": 18, "London": 15}
NOTES: list[str] = []


@function_tool
async def get_weather(city: str) -> str:
    """Current temperature in a city, in Celsius."""
    return f"{city}: {CELSIUS.get(city, 20)}°C"


@function_tool
def save_note(text: str, folder: str) -> str:
    """Save a note in a folder."""
    NOTES.append(f"{folder}/{text}")
    return f"saved to {folder}"


def build_agent(model: Any) -> Agent[Any]:
    agent = Agent(name="assistant", instructions="Answer briefly.", model=model, tools=[get_weather, save_note])
    return scheduled(
        agent,
        tools=[
            from_function_tool(get_weather, read_only=True, concurrency_safe=True),
            from_function_tool(save_note, rule_subject="folder"),
        ],
        permissions=ts.Permissions(deny=["save_note(/etc/**)"]),
    )


async def main(model: Any = "gpt-5") -> str:
    result = await Runner.run(build_agent(model), QUESTION)
    return str(result.final_output)


if __name__ == "__main__":
    print(anyio.run(main))
