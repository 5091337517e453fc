"""A LangGraph agent whose tool calls run through toolsched: one import changes.

The graph is LangGraph's usual agent loop. `ToolNode` comes from toolsched
instead of `langgraph.prebuilt`, so the calls are validated by the engine,
checked against permission rules, scheduled (the two weather lookups run
together, the note is written alone) and answered with the same
`ToolMessage`s. Run with OPENAI_API_KEY set and `langchain-openai` installed:
`python examples/langgraph_tool_node.py`.
"""

from __future__ import annotations

from typing import Any

import anyio
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

import toolsched as ts
from toolsched.integrations.langchain import from_langchain
from toolsched.integrations.langgraph import ToolNode  # was: from langgraph.prebuilt import ToolNode

QUESTION = "What is the weather in Paris and London? Save a note with the answer."
CELSIUS = {"Paris": 18, "London": 15}
NOTES: list[str] = []


@tool
async def get_weather(city: str) -> str:
    """Current temperature in a city, in Celsius."""
    return f"{city}: {CELSIUS.get(city, 20)}°C"


@tool
def save_note(text: str, folder: str = "notes") -> str:
    """Save a note in a folder."""
    NOTES.append(f"{folder}/{text}")
    return f"saved to {folder}"


def build_graph(model: Any) -> Any:
    tools = [
        from_langchain(get_weather, read_only=True, concurrency_safe=True),
        from_langchain(save_note, rule_subject="folder"),
    ]
    chat = model.bind_tools([get_weather, save_note])

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [chat.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools, permissions=ts.Permissions(deny=["save_note(/etc/**)"])))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


async def main(model: Any) -> str:
    final = await build_graph(model).ainvoke({"messages": [HumanMessage(QUESTION)]})
    return str(final["messages"][-1].content)


if __name__ == "__main__":
    from langchain_openai import ChatOpenAI

    print(anyio.run(main, ChatOpenAI(model="gpt-5")))
