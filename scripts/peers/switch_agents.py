"""pytest plugin: every OpenAI Agents SDK ``Agent`` a test suite builds runs as ``scheduled(agent)``.

``scripts/peers/run.py`` loads it (``-p switch_agents``) for the switched run of the SDK's own
tests. An ``Agent`` is switched where it is made (``Agent(...)``, ``agent.clone(...)``) and where
its ``tools`` are assigned: it takes, in place, what ``scheduled(agent)`` gives its copy (the
function tools that run through toolsched and ``toolsched_executor``), so every reference the
test holds is the scheduled agent. A clone that keeps the switched tools shares them and their
executor, as a clone of a scheduled agent does. An agent without function tools is left as it is
(``scheduled`` would only copy its list). A list changed in place after it was assigned is not
switched again. Agents the SDK builds for itself (``Agent(...)`` or ``clone(...)`` called from the
``agents`` package, as the sandbox runtime and its memory phases do) are left as they are: a user's
``scheduled(agent)`` cannot reach them either (a clone keeps the scheduled tools it was given).
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

# Each function tool ``scheduled`` made and still alive, by id: (a weak reference to that tool, the SDK tool
# it stands for, its executor). Weak: the entry goes with the tool, so the suite's heap does not keep every
# agent's tools and executor to its end (a full run's garbage collections grew slower test after test).
_made: dict[int, tuple[weakref.ref[FunctionTool], FunctionTool, Any]] = {}
_local = threading.local()


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


def _made_entry(tool: Any) -> tuple[FunctionTool, FunctionTool, Any] | None:
    entry = _made.get(id(tool))
    if entry is None:
        return None
    made = entry[0]()
    return (made, entry[1], entry[2]) if made is not None and made is tool else None


def _remember(tool: FunctionTool, source: FunctionTool, executor: Any) -> None:
    key = id(tool)

    def forget(reference: weakref.ref[FunctionTool]) -> None:
        entry = _made.get(key)
        if entry is not None and entry[0] is reference:
            del _made[key]

    _made[key] = (weakref.ref(tool, forget), source, executor)


def _switched_copy(agent: Agent[Any], tools: list[Any]) -> Agent[Any] | None:
    """``scheduled`` applied to ``agent`` holding ``tools`` (None where there is nothing to switch)."""
    function_tools = [item for item in tools if isinstance(item, FunctionTool)]
    if not function_tools:
        return None
    entries = [_made_entry(item) for item in function_tools]
    if all(entry is not None for entry in entries) and len({id(entry[2]) for entry in entries if entry}) == 1:
        return None  # already the tools of one scheduled agent (a clone that kept them)
    originals = [entry[1] if (entry := _made_entry(item)) is not None else item for item in tools]
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        copy = scheduled(agent.clone(tools=originals))
    finally:
        _local.depth -= 1
    executor = getattr(copy, "toolsched_executor", None)
    by_name = {item.name: item for item in originals if isinstance(item, FunctionTool)}
    for item in copy.tools:
        if isinstance(item, FunctionTool) and item.name in by_name and item is not by_name[item.name]:
            _remember(item, by_name[item.name], executor)
    return copy


switched_agents = 0


def _take_from(agent: Agent[Any], copy: Agent[Any]) -> None:
    """Gives ``agent`` what ``scheduled`` gave its copy: the tools, the executor, anything else it set."""
    global switched_agents
    switched_agents += 1
    mine = vars(agent)
    for key, value in vars(copy).items():
        if key != "tools" and mine.get(key, _missing) is not value:
            object.__setattr__(agent, key, value)
    original_setattr(agent, "tools", copy.tools)


_missing = object()
original_post_init = Agent.__post_init__
original_setattr = AgentBase.__setattr__


def _post_init(self: Agent[Any]) -> None:
    original_post_init(self)  # type: ignore[no-untyped-call]
    if _inside() or _built_by_sdk():
        return
    tools = vars(self).get("tools")
    if isinstance(tools, list):
        copy = _switched_copy(self, tools)
        if copy is not None:
            _take_from(self, copy)
        else:
            _share_executor(self, tools)


def _share_executor(agent: Agent[Any], tools: list[Any]) -> None:
    for item in tools:
        entry = _made_entry(item)
        if entry is not None and entry[2] is not None:
            object.__setattr__(agent, "toolsched_executor", entry[2])
            return


def _setattr(self: AgentBase[Any], name: str, value: Any) -> None:
    if (
        name == "tools"
        and isinstance(self, Agent)
        and not _inside()
        and isinstance(value, list)
        and "tools" in vars(self)  # assigned after the agent was made, not by its __init__
        and not _built_by_sdk()
    ):
        copy = _switched_copy(self, value)
        if copy is not None:
            _take_from(self, copy)
            return
        original_setattr(self, name, value)
        _share_executor(self, value)
        return
    original_setattr(self, name, value)


Agent.__post_init__ = _post_init  # type: ignore[method-assign]
AgentBase.__setattr__ = _setattr  # type: ignore[method-assign]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.write_line(f"toolsched switch: {switched_agents} agents switched to scheduled(agent)")


def pytest_report_header() -> str:
    return "toolsched switch: every Agents SDK Agent runs as toolsched.integrations.agents.scheduled(agent)"
