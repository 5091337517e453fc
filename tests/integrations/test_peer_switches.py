"""The switch plugins of ``scripts/peers`` (the host suites' switched runs): what they switch and what not.

Each check runs in a process of its own, since a switch changes the host's classes for the whole process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_with_switch(code: str) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "scripts" / "peers"), str(ROOT / "python"), *filter(None, [env.get("PYTHONPATH")])]
    )
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_agent_a_test_builds_is_scheduled_and_the_sdks_own_agents_are_not() -> None:
    out = run_with_switch(
        """
        import switch_agents
        import agents.sandbox.runtime_agent_preparation as sdk_module
        from agents import Agent, function_tool
        from toolsched.integrations.agents import AgentsFunctionTool

        @function_tool
        def lookup(key: str) -> str:
            "Looks a key up."
            return key

        @function_tool
        def other(key: str) -> str:
            "Another tool."
            return key

        def runs_through_toolsched(agent, tools):
            executor = getattr(agent, "toolsched_executor", None)
            return executor is not None and all(
                isinstance(member, AgentsFunctionTool) and member.tool is tool
                for member, tool in zip(executor.registry, tools)
            ) and all(mine is tool for mine, tool in zip(agent.tools, tools))

        built = Agent(name="a", tools=[lookup])
        print("built", runs_through_toolsched(built, [lookup]))
        clone = built.clone(name="b")
        print("clone shares", clone.tools is built.tools and clone.toolsched_executor is built.toolsched_executor)
        grown = built.clone(tools=[*built.tools, other])
        members = len(grown.toolsched_executor.registry)
        print("clone with a new tool", runs_through_toolsched(grown, [lookup, other]), members)
        supplied = [lookup, other]
        print("a given list kept", built.clone(tools=supplied).tools is supplied)
        built.tools = [lookup, other]
        print("assigned", runs_through_toolsched(built, [lookup, other]), len(built.toolsched_executor.registry))
        print("no function tools", hasattr(Agent(name="c"), "toolsched_executor"))
        namespace = {"Agent": Agent, "lookup": lookup, "other": other}
        exec(compile("made = Agent(name='sdk', tools=[other])", sdk_module.__file__, "exec"), namespace)
        print("made by the SDK", namespace["made"].tools[0] is other,
              getattr(namespace["made"], "toolsched_executor", None) is built.toolsched_executor)
        @function_tool
        def third(key: str) -> str:
            "A tool no test agent holds."
            return key

        namespace["third"] = third
        exec(compile("fresh = Agent(name='sdk', tools=[third])", sdk_module.__file__, "exec"), namespace)
        print("made by the SDK, tools no switched agent holds", hasattr(namespace["fresh"], "toolsched_executor"))
        """
    )
    assert out.splitlines() == [
        "built True",
        "clone shares True",
        "clone with a new tool True 2",
        "a given list kept True",
        "assigned True 2",
        "no function tools False",
        "made by the SDK True True",
        "made by the SDK, tools no switched agent holds False",
    ]


def test_every_toolnode_is_toolscheds_including_create_react_agents() -> None:
    out = run_with_switch(
        """
        import switch_langgraph
        import langgraph.prebuilt
        import langgraph.prebuilt.chat_agent_executor as executor_module
        from langgraph.prebuilt.tool_node import ToolNode
        from toolsched.integrations.langgraph import ToolNode as ToolschedToolNode

        print(all(issubclass(cls, ToolschedToolNode)
                  for cls in (langgraph.prebuilt.ToolNode, ToolNode, executor_module.ToolNode)))
        """
    )
    assert out.split() == ["True"]
