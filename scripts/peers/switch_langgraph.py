"""pytest plugin: every LangGraph ``ToolNode`` a test suite builds is toolsched's.

``scripts/peers/run.py`` loads it (``-p switch_langgraph``) for the switched run of
langgraph-prebuilt's own tests. Loaded before the tests are imported, it puts
``toolsched.integrations.langgraph.ToolNode`` in place of the stock class wherever LangGraph's
modules hold it (``langgraph.prebuilt``, ``langgraph.prebuilt.tool_node``, and
``create_react_agent``'s module), so ``from langgraph.prebuilt import ToolNode`` and the node
``create_react_agent`` builds are toolsched's.
"""

from __future__ import annotations

import sys
from typing import Any

import langgraph.prebuilt
import langgraph.prebuilt.chat_agent_executor
import langgraph.prebuilt.tool_node
import pytest

from toolsched.integrations.langgraph import ToolNode as ToolschedToolNode

__all__: list[str] = []


class ToolNode(ToolschedToolNode):
    """toolsched's node, counting the nodes the tests build (the run's summary says how many)."""

    built = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        ToolNode.built += 1


stock = langgraph.prebuilt.tool_node.ToolNode
switched = [
    name
    for name, module in list(sys.modules.items())
    if (name == "langgraph" or name.startswith("langgraph.")) and getattr(module, "ToolNode", None) is stock
]
for name in switched:
    setattr(sys.modules[name], "ToolNode", ToolNode)  # noqa: B010


def pytest_report_header() -> str:
    return f"toolsched switch: ToolNode is toolsched.integrations.langgraph.ToolNode in {', '.join(switched)}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.write_line(f"toolsched switch: {ToolNode.built} toolsched ToolNodes built")
