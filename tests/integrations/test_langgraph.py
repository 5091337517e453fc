"""toolsched's ToolNode inside real compiled LangGraph graphs, driven by a scripted chat model (no network)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import anyio
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState, InjectedStore, ToolRuntime, tools_condition
from langgraph.prebuilt import ToolNode as StockToolNode
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command, interrupt
from scripted_models import ScriptedChatModel, tool_calls_message

import toolsched as ts
from tests.conftest import InFlight
from toolsched.integrations.langchain import from_langchain
from toolsched.integrations.langgraph import ToolNode

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    # LangGraph runs on asyncio only.
    return "asyncio"


def agent_graph(node: Any, model: ScriptedChatModel, state: type = MessagesState, **compile_options: Any) -> Any:
    """The usual agent loop: the model, then tools while it asks for them."""

    def call_model(current: Any) -> dict[str, Any]:
        return {"messages": [model.invoke(current["messages"])]}

    graph = StateGraph(state)
    graph.add_node("agent", call_model)
    graph.add_node("tools", node)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(**compile_options)


def tool_messages(messages: list[Any]) -> list[ToolMessage]:
    return [message for message in messages if isinstance(message, ToolMessage)]


def file_tools(in_flight: InFlight, ran: list[str]) -> list[Any]:
    @tool
    async def read_file(path: str) -> str:
        """Read a text file."""
        ran.append(f"read {path}")
        await in_flight.hold(path)
        return f"contents of {path}"

    @tool
    async def write_file(path: str, text: str) -> str:
        """Write a text file."""
        ran.append(f"write {path}")
        await in_flight.hold(path)
        return f"wrote {len(text)} characters to {path}"

    return [read_file, write_file]


async def test_a_compiled_graph_runs_its_calls_through_toolsched(in_flight: InFlight) -> None:
    ran: list[str] = []
    read_file, write_file = file_tools(in_flight, ran)
    # Declared through from_langchain: the reads may overlap, the write (its flags left at toolsched's
    # fail-closed defaults) runs alone. A plain LangChain tool would overlap, as in LangGraph's node.
    node = ToolNode([from_langchain(read_file, read_only=True, concurrency_safe=True), from_langchain(write_file)])
    model = ScriptedChatModel(
        script=[
            tool_calls_message(
                ("c1", "read_file", {"path": "a.txt"}),
                ("c2", "read_file", {"path": "b.txt"}),
                ("c3", "write_file", {"path": "c.txt", "text": "hello"}),
            ),
            AIMessage(content="All done."),
        ]
    )
    app = agent_graph(node, model)
    final = await app.ainvoke({"messages": [HumanMessage("copy a and b into c")]})

    assert final["messages"][-1].content == "All done."
    answers = tool_messages(final["messages"])
    assert [(m.tool_call_id, m.name, m.content, m.status) for m in answers] == [
        ("c1", "read_file", "contents of a.txt", "success"),
        ("c2", "read_file", "contents of b.txt", "success"),
        ("c3", "write_file", "wrote 5 characters to c.txt", "success"),
    ]
    # The two reads overlapped; the write, not concurrency-safe, ran alone after them.
    assert in_flight.peak == 2
    reads_done = max(in_flight.position("end", "a.txt"), in_flight.position("end", "b.txt"))
    assert in_flight.position("start", "c.txt") > reads_done
    # The model's second turn saw every answer.
    assert [m.tool_call_id for m in tool_messages(model.seen[1])] == ["c1", "c2", "c3"]


async def test_messages_match_the_stock_tool_node_for_the_same_input() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @tool
    def describe(name: str, tags: list[str]) -> dict[str, Any]:
        """Describe a thing."""
        return {"name": name, "tags": tags}

    @tool(response_format="content_and_artifact")
    def search(query: str) -> tuple[str, list[int]]:
        """Search, with the raw hits as an artifact."""
        return f"3 hits for {query}", [1, 2, 3]

    ai = tool_calls_message(
        ("c1", "add", {"a": 2, "b": 40}),
        ("c2", "describe", {"name": "box", "tags": ["red", "small"]}),
        ("c3", "search", {"query": "llamas"}),
    )

    async def through(node: Any) -> list[ToolMessage]:
        graph = StateGraph(MessagesState)
        graph.add_node("tools", node)
        graph.add_edge(START, "tools")
        graph.add_edge("tools", END)
        return tool_messages((await graph.compile().ainvoke({"messages": [ai]}))["messages"])

    stock = await through(StockToolNode([add, describe, search]))
    ours = await through(ToolNode([add, describe, search]))
    shape = [(m.tool_call_id, m.name, m.content, m.artifact, m.status) for m in stock]
    assert [(m.tool_call_id, m.name, m.content, m.artifact, m.status) for m in ours] == shape
    assert shape[0][2] == "42"

    # A list of messages in, a list of messages out; a list of tool calls in, the same.
    listed = await ToolNode([add]).ainvoke([HumanMessage("hi"), tool_calls_message(("c9", "add", {"a": 1, "b": 1}))])
    assert isinstance(listed, list) and listed[0].content == "2"
    calls = [{"name": "add", "args": {"a": 3, "b": 4}, "id": "c8", "type": "tool_call"}]
    # Tool calls in (the Send API's form): a state update out, as LangGraph's node answers.
    assert [m.content for m in (await ToolNode([add]).ainvoke(calls))["messages"]] == ["7"]
    assert await ToolNode([add]).ainvoke({"messages": [AIMessage("no calls")]}) == {"messages": []}


async def test_refused_and_failed_calls_become_error_messages_and_denied_tools_never_run(in_flight: InFlight) -> None:
    ran: list[str] = []
    read_file, write_file = file_tools(in_flight, ran)

    @tool
    def flaky() -> str:
        """Always fails."""
        raise RuntimeError("backend down")

    node = ToolNode(
        [read_file, from_langchain(write_file, rule_subject="path"), flaky],
        permissions=ts.Permissions(deny=["write_file(/etc/**)"]),
        handle_tool_errors=True,
    )
    ai = tool_calls_message(
        ("c1", "write_file", {"path": "/etc/passwd", "text": "x"}),
        ("c2", "read_file", {"path": 7}),
        ("c3", "deploy", {}),
        ("c4", "flaky", {}),
        ("c5", "read_file", {"path": "ok.txt"}),
    )
    out = await node.ainvoke({"messages": [ai]})
    messages = out["messages"]
    assert [m.tool_call_id for m in messages] == ["c1", "c2", "c3", "c4", "c5"]
    assert [m.status for m in messages] == ["error", "error", "error", "error", "success"]
    assert "denied by the rule `write_file(/etc/**)`" in messages[0].content
    # Invalid arguments are reported as LangGraph reports them: the tool's own argument model's account.
    assert messages[1].content.startswith("Error: ToolInvocationError(")
    assert "path: Input should be a valid string" in messages[1].content
    assert messages[2].content == "Error: deploy is not a valid tool, try one of [read_file, write_file, flaky]."
    assert messages[3].content == "Error: RuntimeError('backend down')\n Please fix your mistakes."
    assert ran == ["read ok.txt"]


async def test_without_error_handling_a_tools_exception_leaves_the_graph() -> None:
    @tool
    def flaky() -> str:
        """Always fails."""
        raise RuntimeError("backend down")

    app = agent_graph(
        ToolNode([flaky], handle_tool_errors=False),
        ScriptedChatModel(
            script=[
                tool_calls_message(("c1", "flaky", {})),
            ]
        ),
    )
    with pytest.raises(RuntimeError, match="backend down"):
        await app.ainvoke({"messages": [HumanMessage("go")]})


async def test_a_tools_own_error_message_is_kept() -> None:
    @tool
    def strict_lookup(key: str) -> str:
        """Look a key up."""
        raise ToolException(f"no such key: {key}")

    strict_lookup.handle_tool_error = True

    seen: list[ts.ToolResult] = []

    def keep(event: ts.Event) -> None:
        if isinstance(event, ts.ToolFinished):
            seen.append(event.result)

    node = ToolNode([strict_lookup], on_event=keep)
    (message,) = (await node.ainvoke({"messages": [tool_calls_message(("c1", "strict_lookup", {"key": "k"}))]}))[
        "messages"
    ]
    assert (message.content, message.status) == ("no such key: k", "error")
    # toolsched saw the failure too (hooks, metrics and spans count it).
    assert seen[0].error_kind == "execution_error"
    assert seen[0].error == "LangChainToolError: no such key: k"


async def test_injected_arguments_are_filled_as_langgraph_fills_them() -> None:
    @tool
    async def remember(
        fact: str,
        call_id: Annotated[str, InjectedToolCallId],
        messages: Annotated[list[Any], InjectedState("messages")],
        state: Annotated[dict[str, Any], InjectedState],
        store: Annotated[BaseStore, InjectedStore()],
        runtime: ToolRuntime,
    ) -> str:
        """Remember a fact."""
        await store.aput(("facts",), call_id, {"fact": fact})
        assert runtime.tool_call_id == call_id
        assert runtime.store is store
        return f"{call_id}: {fact} ({len(messages)} messages, state keys {sorted(state)})"

    node = ToolNode([remember])
    # The model sees only `fact`.
    assert set(node.toolsched_tools["remember"].input_schema["properties"]) == {"fact"}
    store = InMemoryStore()
    model = ScriptedChatModel(
        script=[
            # A model trying to supply an injected value does not get its way.
            tool_calls_message(("c1", "remember", {"fact": "sky is blue", "call_id": "forged"})),
            AIMessage("noted"),
        ]
    )
    final = await agent_graph(node, model, store=store).ainvoke({"messages": [HumanMessage("remember")]})
    (answer,) = tool_messages(final["messages"])
    assert answer.content == "c1: sky is blue (2 messages, state keys ['messages'])"
    stored = await store.aget(("facts",), "c1")
    assert stored is not None and stored.value == {"fact": "sky is blue"}


async def test_a_tool_returning_a_command_updates_the_graph_state() -> None:
    class State(MessagesState):
        user: str

    @tool
    def log_in(name: str, call_id: Annotated[str, InjectedToolCallId]) -> Command:
        """Log a user in."""
        return Command(update={"user": name, "messages": [ToolMessage(f"hello {name}", tool_call_id=call_id)]})

    model = ScriptedChatModel(script=[tool_calls_message(("c1", "log_in", {"name": "ada"})), AIMessage("welcome")])
    final = await agent_graph(ToolNode([log_in]), model, state=State).ainvoke(
        {"messages": [HumanMessage("log me in")], "user": ""}
    )
    assert final["user"] == "ada"
    assert [m.content for m in tool_messages(final["messages"])] == ["hello ada"]


async def test_interrupt_inside_a_tool_pauses_the_graph_and_resumes() -> None:
    @tool
    def transfer(amount: int) -> str:
        """Move money (a person confirms first)."""
        answer = interrupt({"confirm": f"transfer {amount}?"})
        return f"transferred {amount}" if answer == "yes" else "cancelled by the user"

    model = ScriptedChatModel(script=[tool_calls_message(("c1", "transfer", {"amount": 5})), AIMessage("done")])
    app = agent_graph(ToolNode([transfer]), model, checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t1"}}
    paused = await app.ainvoke({"messages": [HumanMessage("pay")]}, config)
    (pending,) = paused["__interrupt__"]
    assert pending.value == {"confirm": "transfer 5?"}
    final = await app.ainvoke(Command(resume="yes"), config)
    assert [m.content for m in tool_messages(final["messages"])] == ["transferred 5"]


async def test_toolsched_tools_plain_functions_and_a_synchronous_graph() -> None:
    @ts.tool(max_result_chars=20)
    def shout(text: str) -> str:
        """Shout text back."""
        return text.upper() * 3

    def count(items: list[str]) -> int:
        """Count items."""
        return len(items)

    model = ScriptedChatModel(
        script=[
            tool_calls_message(("c1", "shout", {"text": "hello world"}), ("c2", "count", {"items": ["a", "b"]})),
            AIMessage("ok"),
        ]
    )
    app = agent_graph(ToolNode([shout, count]), model)
    final = await anyio.to_thread.run_sync(lambda: app.invoke({"messages": [HumanMessage("go")]}))
    shouted, counted = tool_messages(final["messages"])
    assert len(shouted.content) <= 20 and shouted.content.startswith("HELLO WORLD")
    assert counted.content == "2"


async def test_bad_input_gets_a_clear_error() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    node = ToolNode([add])
    missing = r"the state's `messages` is missing or empty \(keys present: history\)"
    with pytest.raises(ts.ResponseFormatError, match=missing):
        await node.ainvoke({"history": [tool_calls_message(("c1", "add", {"a": 1, "b": 2}))]})
    with pytest.raises(ts.ResponseFormatError, match="holds no AIMessage"):
        await node.ainvoke({"messages": [HumanMessage("hi")]})
    with pytest.raises(ts.ResponseFormatError, match=r"tool call 1 \(`add`\) has no id"):
        await node.ainvoke(
            {
                "messages": [
                    AIMessage(
                        "",
                        tool_calls=[
                            {"name": "add", "args": {"a": 1, "b": 2}, "id": "c1"},
                            {"name": "add", "args": {"a": 1, "b": 2}, "id": None},
                        ],
                    )
                ]
            }
        )
    with pytest.raises(ts.ResponseFormatError, match="empty list"):
        await node.ainvoke([])
    # The state key can be renamed, as in LangGraph.
    renamed = await ToolNode([add], messages_key="history").ainvoke(
        {"history": [tool_calls_message(("c1", "add", {"a": 1, "b": 2}))]}
    )
    assert [m.content for m in renamed["history"]] == ["3"]


class Connection:
    """Not something a model can send."""


def test_a_tool_whose_schema_is_not_json_schema_is_refused_by_name() -> None:
    @tool
    def query(sql: str, connection: Connection) -> str:
        """Run SQL."""
        return sql

    with pytest.raises(ts.ToolDefinitionError, match=r"LangChain tool `query`: argument `connection` \(Connection\)"):
        ToolNode([query])


async def test_the_node_reports_to_opentelemetry_under_the_graphs_caller() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from toolsched.integrations import otel

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    node = ToolNode([add])
    otel.instrument(node.executor, tracer_provider=provider, record_outputs=True)
    model = ScriptedChatModel(script=[tool_calls_message(("c1", "add", {"a": 1, "b": 2})), AIMessage("3")])
    with provider.get_tracer("app").start_as_current_span("request"):
        await agent_graph(node, model).ainvoke({"messages": [HumanMessage("add")]})
    spans = {span.name: span for span in exporter.get_finished_spans()}
    call, batch, request = spans["execute_tool add"], spans["toolsched.batch"], spans["request"]
    assert call.parent is not None and batch.context is not None and call.parent.span_id == batch.context.span_id
    assert batch.parent is not None and request.context is not None and batch.parent.span_id == request.context.span_id
    assert dict(call.attributes or {})["gen_ai.tool.call.result"] == "3"
    assert json.loads(json.dumps(dict(call.attributes or {})))["gen_ai.tool.call.id"] == "c1"
