"""The wheel without extras: every module imports, except the integrations that name the extra they need."""

from __future__ import annotations

import importlib
import pkgutil

import toolsched

# ``python -m toolsched`` runs the command line when imported; the LangGraph integration's state
# helpers are imported only by toolsched.integrations.langgraph, after its own check.
NOT_IMPORTED = {"toolsched.__main__", "toolsched.integrations.langgraph_state"}

for module in pkgutil.walk_packages(toolsched.__path__, "toolsched."):
    if module.name in NOT_IMPORTED:
        continue
    try:
        importlib.import_module(module.name)
    except ImportError as exc:
        print(f"{module.name}: {exc}")
