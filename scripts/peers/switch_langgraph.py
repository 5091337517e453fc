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

import langgraph.prebuilt
import langgraph.prebuilt.chat_agent_executor
import langgraph.prebuilt.tool_node

from toolsched.integrations.langgraph import ToolNode

__all__: list[str] = []

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
