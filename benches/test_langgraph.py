"""LangGraph: the same compiled graph with the stock ToolNode and with toolsched's (pytest-benchmark).

Run with
``python -m pytest benches/test_langgraph.py --benchmark-only --benchmark-columns=min,median,mean,rounds``.
Each benchmark sends one ``AIMessage`` holding N calls of a no-op async LangChain
tool through ``START -> tools -> END`` with ``ainvoke``; both sides pay the same
graph overhead, so the difference is the node's. toolsched's node marks the tool
concurrency-safe, so it runs the calls together as the stock node does. Most of
a LangChain tool call is LangChain's own ``ainvoke`` (callbacks, input parsing);
the third row gives the node a toolsched tool instead, which skips it. The last row is
no tool node at all: a node that only builds one ``ToolMessage`` per call, the least any
node answering the calls through this graph can cost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode as StockToolNode

import toolsched as ts
from toolsched.integrations.langchain import from_langchain
from toolsched.integrations.langgraph import ToolNode


@tool
async def lookup(key: str, limit: int = 10) -> str:
    """Look a key up."""
    return key


@ts.tool(name="lookup", read_only=True, concurrency_safe=True)
async def native_lookup(key: str, limit: int = 10) -> str:
    """Look a key up (a toolsched tool: no LangChain invocation per call)."""
    return key


def compiled(node: Any) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("tools", node)
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    return graph.compile()


def turn(count: int) -> dict[str, Any]:
    calls = [
        {"id": f"call_{i}", "name": "lookup", "args": {"key": f"k{i}", "limit": i % 50 + 1}, "type": "tool_call"}
        for i in range(count)
    ]
    return {"messages": [AIMessage(content="", tool_calls=calls)]}


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


async def messages_only(state: dict[str, Any]) -> dict[str, Any]:
    """The floor: one ToolMessage per call, no tool run, no validation."""
    calls = state["messages"][-1].tool_calls
    return {
        "messages": [
            ToolMessage(content=call["args"]["key"], name=call["name"], tool_call_id=call["id"]) for call in calls
        ]
    }


NODES = {
    "stock ToolNode": lambda: StockToolNode([lookup]),
    "toolsched ToolNode": lambda: ToolNode([from_langchain(lookup, read_only=True, concurrency_safe=True)]),
    "toolsched ToolNode, toolsched tool": lambda: ToolNode([native_lookup]),
    "floor: a node that only builds the ToolMessages": lambda: messages_only,
}


@pytest.mark.parametrize("count", [1, 10, 100])
@pytest.mark.parametrize("kind", list(NODES))
def test_graph_turn(benchmark: Any, loop: asyncio.AbstractEventLoop, kind: str, count: int) -> None:
    benchmark.group = f"langgraph: graph turn of {count} calls"
    app = compiled(NODES[kind]())
    state = turn(count)
    out = loop.run_until_complete(app.ainvoke(state))
    assert len(out["messages"]) == count + 1
    benchmark(lambda: loop.run_until_complete(app.ainvoke(state)))
