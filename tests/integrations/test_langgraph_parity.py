"""toolsched's ToolNode against LangGraph's, call for call: the same error handling, the same texts,
the same exceptions, and synchronous invocation wherever LangGraph's node allows it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, ToolCall, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import InjectedState, InjectedStore, ToolRuntime
from langgraph.prebuilt import ToolNode as StockToolNode
from langgraph.runtime import Runtime
from langgraph.types import Command, Send
from pydantic import BaseModel
from scripted_models import tool_calls_message
from typing_extensions import TypedDict

from tests.conftest import InFlight
from toolsched.integrations.langgraph import ToolNode

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    # LangGraph runs on asyncio.
    return "asyncio"


@tool
def divide(a: int, b: int) -> float:
    """Divide a by b."""
    if b == 0:
        raise ValueError("b must not be zero")
    return a / b


@tool
def fetch(url: str) -> str:
    """Fetch a page."""
    raise RuntimeError(f"cannot reach {url}")


def only_value_errors(error: ValueError) -> str:
    return f"handled: {error}"


HANDLINGS: list[tuple[str, dict[str, Any]]] = [
    ("default", {}),
    ("true", {"handle_tool_errors": True}),
    ("false", {"handle_tool_errors": False}),
    ("text", {"handle_tool_errors": "something went wrong"}),
    ("type", {"handle_tool_errors": ValueError}),
    ("tuple", {"handle_tool_errors": (ValueError, KeyError)}),
    ("handler", {"handle_tool_errors": only_value_errors}),
]

CALLS = [
    ("value-error", ("c1", "divide", {"a": 1, "b": 0})),
    ("runtime-error", ("c1", "fetch", {"url": "x"})),
    ("invalid-args", ("c1", "divide", {"a": "one", "b": 2})),
    ("unknown-tool", ("c1", "launch", {})),
    ("fine", ("c1", "divide", {"a": 6, "b": 3})),
]


async def outcome(make: Callable[..., Any], options: dict[str, Any], call: tuple[str, str, dict[str, Any]]) -> Any:
    """What a one-node graph answers for one call: its ToolMessages, or the exception that left it."""
    graph = StateGraph(MessagesState)
    graph.add_node("tools", make([divide, fetch], **options))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    try:
        out = await graph.compile().ainvoke({"messages": [tool_calls_message(call)]})
    except Exception as exc:
        return ("raised", type(exc).__name__)
    messages = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    return [(m.tool_call_id, m.status, m.content) for m in messages]


@pytest.mark.parametrize(("handling", "options"), HANDLINGS, ids=[h for h, _ in HANDLINGS])
@pytest.mark.parametrize(("case", "call"), CALLS, ids=[c for c, _ in CALLS])
async def test_errors_are_handled_as_langgraph_handles_them(
    handling: str, options: dict[str, Any], case: str, call: tuple[str, str, dict[str, Any]]
) -> None:
    stock = await outcome(StockToolNode, options, call)
    ours = await outcome(ToolNode, options, call)
    if case == "invalid-args" and isinstance(stock, list) and "Error invoking tool" in stock[0][2]:
        # Both answer the model; the validation text itself comes from different validators
        # (pydantic for LangGraph, JSON Schema for toolsched), so only the frame is compared.
        assert isinstance(ours, list) and ours[0][:2] == stock[0][:2]
        for text in (ours[0][2], stock[0][2]):
            assert "Error invoking tool" in text and "divide" in text and "Please fix the error" in text
        assert ours[0][2].split("Error invoking")[0][:18] == stock[0][2].split("Error invoking")[0][:18]
        return
    assert ours == stock


def test_sync_invoke_works_while_an_event_loop_runs_in_the_thread() -> None:
    ai: AIMessage = tool_calls_message(("c1", "divide", {"a": 6, "b": 3}))

    async def inside_a_running_loop() -> list[str]:
        # As in a notebook: synchronous code called where an event loop already runs.
        out = ToolNode([divide]).invoke({"messages": [ai]})
        return [m.content for m in out["messages"]]

    assert asyncio.run(inside_a_running_loop()) == ["2.0"]
    assert [m.content for m in ToolNode([divide]).invoke({"messages": [ai]})["messages"]] == ["2.0"]


async def test_plain_langchain_tools_overlap_as_they_do_in_langgraph(in_flight: InFlight) -> None:
    @tool
    async def slow(n: int) -> int:
        """Take a while."""
        await in_flight.hold(str(n), 0.05)
        return n

    calls = tool_calls_message(("c1", "slow", {"n": 1}), ("c2", "slow", {"n": 2}), ("c3", "slow", {"n": 3}))
    out = await ToolNode([slow]).ainvoke({"messages": [calls]})
    assert [m.content for m in out["messages"]] == ["1", "2", "3"]
    assert in_flight.peak == 3


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_create_react_agent_takes_the_node_as_it_takes_langgraph_s() -> None:
    from langchain_core.messages import HumanMessage
    from langgraph.prebuilt import create_react_agent
    from scripted_models import ScriptedChatModel

    ran: list[int] = []

    @tool
    def double(n: int) -> int:
        """Double a number."""
        ran.append(n)
        return n * 2

    model = ScriptedChatModel(script=[tool_calls_message(("c1", "double", {"n": 21})), AIMessage("42")])
    agent = create_react_agent(model, ToolNode([double]))
    final = await agent.ainvoke({"messages": [HumanMessage("double 21")]})
    assert ran == [21]
    assert final["messages"][-1].content == "42"
    assert [m.content for m in final["messages"] if isinstance(m, ToolMessage)] == ["42"]


# -- the state a node run by Send gets, and what cannot be injected -----------------------------


class _PydanticState(BaseModel):
    messages: Annotated[list[AnyMessage], add_messages]
    foo: str = ""


def _state_seen_by_send_and_by_edge(node_class: type) -> tuple[tuple[type, Any], tuple[type, Any]]:
    call = ToolCall(name="record", args={}, id="call_1", type="tool_call")
    seen: list[tuple[type, Any]] = []

    @tool
    def record(state: Annotated[_PydanticState, InjectedState]) -> str:
        """Notes the state the tool gets."""
        seen.append((type(state), state.foo))
        return "ok"

    def agent(state: _PydanticState) -> dict[str, Any]:
        return {"messages": [AIMessage("", tool_calls=[call])]}

    def run(route: Callable[[Any], Any]) -> tuple[type, Any]:
        seen.clear()
        graph = (
            StateGraph(_PydanticState)
            .add_node("agent", agent)
            .add_node("tools", node_class([record]))
            .add_edge(START, "agent")
            .add_conditional_edges("agent", route, ["tools"])
            .compile()
        )
        graph.invoke({"messages": [], "foo": "bar"})
        return seen[0]

    return run(lambda _: [Send("tools", [call])]), run(lambda _: "tools")


def test_a_node_sent_bare_tool_calls_gets_the_graphs_state_as_from_an_edge() -> None:
    ours = _state_seen_by_send_and_by_edge(ToolNode)
    assert ours == _state_seen_by_send_and_by_edge(StockToolNode)
    by_send, by_edge = ours
    assert by_send == by_edge == (_PydanticState, "bar")


def _state_of_the_calling_node(node_class: type) -> list[Any]:
    seen: list[Any] = []

    @tool
    def record(runtime: ToolRuntime) -> str:
        """Notes the state the tool gets."""
        seen.append(runtime.state)
        return "ok"

    class State(TypedDict):
        value: str

    def call_tools(state: State) -> dict[str, Any]:
        node_class([record]).invoke([ToolCall(name="record", args={}, id="c1", type="tool_call")])
        return {}

    inner = StateGraph(State).add_node(call_tools).add_edge(START, "call_tools").compile()
    outer = (
        StateGraph(State)
        .add_node("inner", inner)
        .add_conditional_edges(START, lambda _: [Send("inner", {"value": "inner"})], ["inner"])
        .compile()
    )
    outer.invoke({"value": "outer"})
    return seen


def test_bare_tool_calls_invoked_inside_a_node_see_that_graphs_state() -> None:
    assert _state_of_the_calling_node(ToolNode) == _state_of_the_calling_node(StockToolNode) == [{"value": "inner"}]


@tool
def needs_foo(value: int, foo: Annotated[str, InjectedState("foo")]) -> str:
    """Reads the state's foo."""
    return foo


@tool
def needs_store(value: int, store: Annotated[Any, InjectedStore()]) -> str:
    """Reads the store."""
    return "stored"


@pytest.mark.parametrize(
    ("tool_", "given", "raised"),
    [
        (needs_foo, "state without the field", KeyError),
        (needs_foo, "messages alone", ValueError),
        (needs_store, "no store", ValueError),
    ],
)
def test_what_cannot_be_injected_leaves_the_node_whatever_the_error_handling(
    tool_: Any, given: str, raised: type[BaseException]
) -> None:
    message = AIMessage("", tool_calls=[ToolCall(name=tool_.name, args={"value": 1}, id="c1", type="tool_call")])
    node_input: Any = [message] if given == "messages alone" else {"messages": [message], "other": 1}
    # The node's runtime, as a graph without a store gives it.
    config = {"configurable": {"__pregel_runtime": Runtime(context=None, store=None)}}
    for node_class in (StockToolNode, ToolNode):
        with pytest.raises(raised) as caught:
            node_class([tool_], handle_tool_errors=True).invoke(node_input, config=config)
        assert type(caught.value) is raised, node_class


# -- interceptors that supply a tool, parent commands that send ---------------------------------


@tool
def static_tool(x: int) -> str:
    """A tool the node knows."""
    return f"static: {x}"


@tool
def supplied_tool(x: int, runtime: ToolRuntime) -> str:
    """A tool only the interceptor knows; it takes the runtime."""
    return f"supplied: x={x}, call={runtime.tool_call_id}"


def _swap_in(request: Any, execute: Any) -> Any:
    if request.tool_call["name"] == "wanted":
        assert request.tool is None
        return execute(request.override(tool=supplied_tool))
    return execute(request)


async def _aswap_in(request: Any, execute: Any) -> Any:
    if request.tool_call["name"] == "wanted":
        assert request.tool is None
        return await execute(request.override(tool=supplied_tool))
    return await execute(request)


@pytest.mark.parametrize("interceptor", ["wrap_tool_call", "awrap_tool_call"])
async def test_a_tool_an_interceptor_supplies_runs_with_its_injections(interceptor: str) -> None:
    hook = _swap_in if interceptor == "wrap_tool_call" else _aswap_in
    calls = [
        ToolCall(name="wanted", args={"x": 42}, id="call_1", type="tool_call"),
        ToolCall(name="static_tool", args={"x": 1}, id="call_2", type="tool_call"),
    ]
    config = {"configurable": {"__pregel_runtime": Runtime(context=None, store=None)}}
    answers = []
    for node_class in (StockToolNode, ToolNode):
        node = node_class([static_tool], **{interceptor: hook})
        result = await node.ainvoke({"messages": [AIMessage("", tool_calls=calls)]}, config=config)
        answers.append([(m.tool_call_id, m.content, m.status) for m in result["messages"]])
    assert (
        answers[0]
        == answers[1]
        == [
            ("call_1", "supplied: x=42, call=call_1", "success"),
            ("call_2", "static: 1", "success"),
        ]
    )


@tool
def to_alice(tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:
    """Hands over to Alice."""
    message = ToolMessage("to Alice", name="to_alice", tool_call_id=tool_call_id)
    return Command(goto=[Send("alice", {"messages": [message]})], graph=Command.PARENT)


@tool
def to_bob(tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:
    """Hands over to Bob."""
    message = ToolMessage("to Bob", name="to_bob", tool_call_id=tool_call_id)
    return Command(goto=[Send("bob", {"messages": [message]})], graph=Command.PARENT)


def test_parent_commands_that_send_are_merged_into_one_as_langgraph_merges_them() -> None:
    calls = [
        ToolCall(name="to_alice", args={}, id="1", type="tool_call"),
        ToolCall(name="to_bob", args={}, id="2", type="tool_call"),
    ]
    config = {"configurable": {"__pregel_runtime": Runtime(context=None, store=None)}}
    message = AIMessage("", tool_calls=calls)
    results = [
        node_class([to_alice, to_bob]).invoke([message], config=config) for node_class in (StockToolNode, ToolNode)
    ]
    assert results[0] == results[1]
    (merged,) = results[1]
    assert merged.graph == Command.PARENT and [send.node for send in merged.goto] == ["alice", "bob"]


def _answer_none_for_c1(request: Any, execute: Any) -> Any:
    return None if request.tool_call["id"] == "c1" else execute(request)


async def _aanswer_none_for_c1(request: Any, execute: Any) -> Any:
    return None if request.tool_call["id"] == "c1" else await execute(request)


@pytest.mark.parametrize("interceptor", ["wrap_tool_call", "awrap_tool_call"])
@pytest.mark.parametrize("given", ["state", "messages"])
@pytest.mark.parametrize("other", ["divide", "to_alice"])
async def test_what_an_interceptor_answers_is_combined_as_langgraph_combines_it(
    interceptor: str, given: str, other: str
) -> None:
    """An interceptor that answers ``None`` (or anything not a ``Command``) gets it back as LangGraph's
    node gives it: in the state's messages, beside a tool's ``Command`` as well."""
    hook = _answer_none_for_c1 if interceptor == "wrap_tool_call" else _aanswer_none_for_c1
    calls = [
        ToolCall(name="divide", args={"a": 1, "b": 1}, id="c1", type="tool_call"),
        ToolCall(name=other, args={"a": 6, "b": 3} if other == "divide" else {}, id="c2", type="tool_call"),
    ]
    message = AIMessage("", tool_calls=calls)
    node_input: Any = {"messages": [message]} if given == "state" else [message]
    config = {"configurable": {"__pregel_runtime": Runtime(context=None, store=None)}}
    results = [
        await node_class([divide, to_alice], **{interceptor: hook}).ainvoke(node_input, config=config)
        for node_class in (StockToolNode, ToolNode)
    ]
    assert results[0] == results[1]
    if other == "divide":
        answers = results[1] if given == "messages" else results[1]["messages"]
        assert answers[0] is None and answers[1].content == "2.0"
    else:
        first, merged = results[1]
        assert first == ([None] if given == "messages" else {"messages": [None]})
        assert merged.graph == Command.PARENT and [send.node for send in merged.goto] == ["alice"]
