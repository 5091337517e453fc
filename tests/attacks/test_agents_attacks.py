"""Attacks on ``scheduled(agent)`` (the Agents SDK integration): its tools are live copies, instances of a cached
subclass of each tool's class whose fields read through to the agent's tool. Copies of those copies made the
Python ways must still run through the executor and its rules, and scheduling must keep no tool class alive."""

from __future__ import annotations

import copy
import dataclasses
import gc
import weakref
from collections.abc import Callable
from typing import Any

import pytest
from agents import Agent, FunctionTool, RunConfig, Runner, function_tool
from agents.items import ToolCallOutputItem
from scripted_models import ScriptedAgentModel, final_message, function_call

import toolsched as ts
from toolsched.integrations.agents import scheduled

pytestmark = pytest.mark.anyio

NO_TRACING = RunConfig(tracing_disabled=True)


@pytest.fixture
def anyio_backend() -> str:
    # The Agents SDK runs on asyncio only.
    return "asyncio"


async def _answer(context: Any, arguments: str) -> str:
    return "answered"


def test_a_tool_class_made_at_run_time_is_not_kept_alive_by_scheduling() -> None:
    """A tool class made per agent (``type(...)`` at run time): once neither the tool nor its scheduled agent is
    held, the class and the live class made for its copies go too (they were cached for the process's life)."""
    made: list[weakref.ref[type]] = []
    for number in range(3):
        kind = type(f"Made{number}", (FunctionTool,), {})
        tool = kind(
            name="lookup", description="Looks up.", params_json_schema={"type": "object"}, on_invoke_tool=_answer
        )
        agent = scheduled(Agent(name="helper", tools=[tool]))
        assert isinstance(agent.tools[0], kind)
        made.append(weakref.ref(kind))
        del kind, tool, agent
    gc.collect()
    assert [ref() for ref in made] == [None, None, None]


def test_a_live_class_is_shared_by_the_copies_that_live_at_once() -> None:
    @function_tool
    def lookup(key: str) -> str:
        """Looks a key up."""
        return key

    first = scheduled(Agent(name="a", tools=[lookup])).tools[0]
    second = scheduled(Agent(name="b", tools=[lookup])).tools[0]
    assert type(first) is type(second)


COPIES: dict[str, Callable[[Any], Any]] = {
    "copy.copy": copy.copy,
    "copy.deepcopy": copy.deepcopy,
    "dataclasses.replace": lambda tool: dataclasses.replace(tool, description="Removes a file, for good."),
}


@pytest.mark.parametrize("how", list(COPIES))
async def test_a_copy_of_a_scheduled_tool_still_runs_through_the_executors_rules(how: str) -> None:
    ran: list[str] = []

    @function_tool
    def remove(path: str) -> str:
        """Removes a file."""
        ran.append(path)
        return f"removed {path}"

    agent = scheduled(Agent(name="files", tools=[remove]), permissions=ts.Permissions(deny=["remove"]))
    model = ScriptedAgentModel([[function_call("c1", "remove", {"path": "a.txt"})], [final_message("done")]])
    other = Agent(name="copied", model=model, tools=[COPIES[how](agent.tools[0])])
    result = await Runner.run(other, "remove a.txt", run_config=NO_TRACING)
    [output] = [item.output for item in result.new_items if isinstance(item, ToolCallOutputItem)]
    assert output == "`remove` with this input is denied by the rule `remove`"
    assert ran == []
