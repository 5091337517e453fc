"""pytest plugin: every OpenAI Agents SDK ``Agent`` a test suite builds runs as ``scheduled(agent)``.

``scripts/peers/run.py`` loads it (``-p switch_agents``) for the switched run of the SDK's own
tests. An ``Agent`` is switched where it is made (``Agent(...)``, ``agent.clone(...)``) and where
its ``tools`` are assigned: it takes, in place, what ``scheduled(agent)`` gives its copy (its
``toolsched_executor`` and the schedule that routes its function tools' calls through it; the tools
are the agent's own objects, in its own list, but for those ``scheduled`` copies), so every
reference the test holds is the scheduled agent. A clone that keeps a switched agent's list shares
its executor, as a clone of a scheduled agent does. An agent without function tools is left as it
is. A list changed in place after it was assigned is not switched again. Agents the SDK builds for
itself (``Agent(...)`` or ``clone(...)`` called from the ``agents`` package, as the sandbox runtime
and its memory phases do) are not switched afresh: one holding a switched agent's tools shares that
agent's executor and schedule, as the SDK's clone of a scheduled agent keeps its class's.
``agents.testing``, the SDK's helpers for tests, counts as the test's own code.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import weakref
from typing import Any

import agents
import pytest
from agents import Agent, FunctionTool
from agents.agent import AgentBase

from toolsched.integrations.agents import scheduled

__all__: list[str] = []

# The switched agent each function tool was last scheduled with, by the tool's id: (a weak reference to the
# tool, one to the agent). Weak: an entry goes with its tool or agent, so the suite's heap does not keep every
# agent's executor to its end (a full run's garbage collections grew slower test after test).
_owners: dict[int, tuple[weakref.ref[FunctionTool], weakref.ref[Agent[Any]]]] = {}
_local = threading.local()
# What ``scheduled`` gives the agent it returns, beside its tools: the attributes the switch copies.
_SCHEDULED_STATE = ("toolsched_executor", "_toolsched_schedule")


def _inside() -> bool:
    return bool(getattr(_local, "depth", 0))


_SDK = os.path.dirname(os.path.abspath(agents.__file__)) + os.sep
_SDK_TESTING = _SDK + "testing" + os.sep
_PASSED_THROUGH = {os.path.abspath(__file__), os.path.abspath(dataclasses.__file__)}
_AGENT_METHODS = {"__init__", "__post_init__", "clone", "__setattr__", "_post_init", "_setattr"}


def _built_by_sdk() -> bool:
    """Whether the agent being made (or given tools) is the SDK's own doing: the first frame above the
    agent's own construction (``__init__``, ``__post_init__`` of the class and its subclasses, ``clone``,
    ``dataclasses.replace``) is code of the ``agents`` package other than ``agents.testing``."""
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        filename = os.path.abspath(code.co_filename) if not code.co_filename.startswith("<") else ""
        passed_through = (
            not filename
            or filename in _PASSED_THROUGH
            or (code.co_name in _AGENT_METHODS and isinstance(frame.f_locals.get("self"), AgentBase))
        )
        if not passed_through:
            return filename.startswith(_SDK) and not filename.startswith(_SDK_TESTING)
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _owner(tool: Any) -> Agent[Any] | None:
    """The switched agent ``tool`` was last scheduled with, while both live."""
    entry = _owners.get(id(tool))
    if entry is None or entry[0]() is not tool:
        return None
    return entry[1]()


def _remember(tool: FunctionTool, agent: Agent[Any]) -> None:
    key = id(tool)

    def forget(reference: weakref.ref[FunctionTool]) -> None:
        entry = _owners.get(key)
        if entry is not None and entry[0] is reference:
            del _owners[key]

    _owners[key] = (weakref.ref(tool, forget), weakref.ref(agent))


def _switched_copy(agent: Agent[Any], tools: list[Any]) -> Agent[Any] | None:
    """``scheduled`` applied to ``agent`` holding ``tools`` (None where there is nothing to switch)."""
    if not any(isinstance(item, FunctionTool) for item in tools):
        return None
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        # A clone, made from the fields only: it holds none of the state a switch gave ``agent`` before.
        return scheduled(agent.clone(tools=tools))
    finally:
        _local.depth -= 1


switched_agents = 0


def _take_from(agent: Agent[Any], copy: Agent[Any]) -> None:
    """Gives ``agent`` what ``scheduled`` gave its copy: its executor and schedule, the tools (the agent's own
    list where the copy holds the same tools: ``scheduled`` copies only those it cannot route in place)."""
    global switched_agents
    switched_agents += 1
    mine = vars(agent)
    for key, value in vars(copy).items():
        if key != "tools" and mine.get(key, _missing) is not value:
            object.__setattr__(agent, key, value)
    tools = mine.get("tools")
    if not (
        isinstance(tools, list)
        and len(tools) == len(copy.tools)
        and all(mine_ is theirs for mine_, theirs in zip(tools, copy.tools, strict=True))
    ):
        original_setattr(agent, "tools", copy.tools)
    for item in agent.tools:
        if isinstance(item, FunctionTool):
            _remember(item, agent)


def _share_schedule(agent: Agent[Any], tools: list[Any]) -> bool:
    """Gives ``agent`` the executor and schedule of the switched agent its function tools were scheduled with
    (a clone that keeps a switched agent's tools shares its executor, as a clone of a scheduled agent does)."""
    for item in tools:
        owner = _owner(item) if isinstance(item, FunctionTool) else None
        if owner is not None:
            state = vars(owner)
            if all(key in state for key in _SCHEDULED_STATE):
                for key in _SCHEDULED_STATE:
                    object.__setattr__(agent, key, state[key])
                return True
    return False


_missing = object()
original_post_init = Agent.__post_init__
original_setattr = AgentBase.__setattr__


def _post_init(self: Agent[Any]) -> None:
    original_post_init(self)  # type: ignore[no-untyped-call]
    if _inside():
        return
    tools = vars(self).get("tools")
    if not isinstance(tools, list):
        return
    if _built_by_sdk():
        # The SDK's own agents (a clone it makes of the running agent, with its tools) keep the schedule
        # those tools have, as the SDK's clone of a scheduled agent does; others are left as they are.
        _share_schedule(self, tools)
        return
    owner = next((_owner(item) for item in tools if isinstance(item, FunctionTool)), None)
    if owner is not None and owner.tools is tools:
        _share_schedule(self, tools)  # a clone that keeps the switched agent's list
        return
    copy = _switched_copy(self, tools)
    if copy is not None:
        _take_from(self, copy)


def _setattr(self: AgentBase[Any], name: str, value: Any) -> None:
    if (
        name == "tools"
        and isinstance(self, Agent)
        and not _inside()
        and isinstance(value, list)
        and "tools" in vars(self)  # assigned after the agent was made, not by its __init__
        and not _built_by_sdk()
    ):
        original_setattr(self, name, value)
        copy = _switched_copy(self, value)
        if copy is not None:
            _take_from(self, copy)
        return
    original_setattr(self, name, value)


Agent.__post_init__ = _post_init  # type: ignore[method-assign]
AgentBase.__setattr__ = _setattr  # type: ignore[method-assign]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.write_line(f"toolsched switch: {switched_agents} agents switched to scheduled(agent)")


def pytest_report_header() -> str:
    return "toolsched switch: every Agents SDK Agent runs as toolsched.integrations.agents.scheduled(agent)"
