"""The wheel without extras: every module imports (but the integrations, which name their extra), a turn streams."""

from __future__ import annotations

import importlib
import pkgutil

import anyio

import toolsched

# ``python -m toolsched`` runs the command line when imported; the LangGraph integration's state
# helpers and the Agents SDK's private names are imported only by their integration, after its own
# check; the scripted Agents SDK model is imported by no module of the package (the tests and
# benchmarks use it, with the agents extra).
NOT_IMPORTED = {
    "toolsched.__main__",
    "toolsched.integrations._langgraph_state",
    "toolsched.integrations._agents_sdk",
    "toolsched.testing._agents_model",
}

for module in pkgutil.walk_packages(toolsched.__path__, "toolsched."):
    if module.name in NOT_IMPORTED:
        continue
    try:
        importlib.import_module(module.name)
    except ImportError as exc:
        print(f"{module.name}: {exc}")


# A streamed turn: driven by a task of its own, started where the running event loop is found.
@toolsched.tool
async def echo(text: str) -> str:
    """Echo the text."""
    return text


async def streamed() -> None:
    events = [
        event async for event in toolsched.Executor([echo]).stream([toolsched.ToolCall("c1", "echo", {"text": "hi"})])
    ]
    print("streamed:", type(events[-1]).__name__, events[-1].outcome.results[0].output)


anyio.run(streamed)
