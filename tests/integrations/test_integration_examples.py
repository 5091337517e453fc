"""The integration examples run: LangGraph and the Agents SDK with scripted models, OpenTelemetry as a script."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agents import set_tracing_disabled
from example_scripts import load_example, run_example
from langchain_core.messages import AIMessage, ToolMessage
from scripted_models import (
    ScriptedAgentModel,
    ScriptedChatModel,
    final_message,
    function_call,
    tool_calls_message,
)

pytestmark = pytest.mark.anyio

ANSWER = "Paris is 18°C and London is 15°C; noted."


@pytest.fixture
def anyio_backend() -> str:
    # LangGraph and the Agents SDK run on asyncio only.
    return "asyncio"


@pytest.fixture
def no_sdk_tracing() -> Iterator[None]:
    # The SDK would upload its traces; tests never reach the network.
    set_tracing_disabled(True)
    yield


async def test_langgraph_example() -> None:
    module = load_example("langgraph_tool_node")
    model = ScriptedChatModel(
        script=[
            tool_calls_message(
                ("c1", "get_weather", {"city": "Paris"}),
                ("c2", "get_weather", {"city": "London"}),
                ("c3", "save_note", {"text": "Paris 18, London 15", "folder": "/etc/cron.d"}),
                ("c4", "save_note", {"text": "Paris 18, London 15", "folder": "weather"}),
            ),
            AIMessage(ANSWER),
        ]
    )
    assert await module.main(model) == ANSWER
    answers = [message for message in model.seen[1] if isinstance(message, ToolMessage)]
    assert [(m.tool_call_id, m.status) for m in answers] == [
        ("c1", "success"),
        ("c2", "success"),
        ("c3", "error"),
        ("c4", "success"),
    ]
    assert [m.content for m in answers[:2]] == ["Paris: 18°C", "London: 15°C"]
    assert "denied by the rule `save_note(/etc/**)`" in str(answers[2].content)
    assert module.NOTES == ["weather/Paris 18, London 15"]


async def test_agents_sdk_example(no_sdk_tracing: None) -> None:
    module = load_example("agents_sdk")
    model = ScriptedAgentModel(
        [
            [
                function_call("c1", "get_weather", {"city": "Paris"}),
                function_call("c2", "get_weather", {"city": "London"}),
                function_call("c3", "save_note", {"text": "Paris 18, London 15", "folder": "/etc/cron.d"}),
                function_call("c4", "save_note", {"text": "Paris 18, London 15", "folder": "weather"}),
            ],
            [final_message(ANSWER)],
        ]
    )
    assert await module.main(model) == ANSWER
    sent = model.inputs[1]
    assert isinstance(sent, list)
    outputs = {item["call_id"]: item["output"] for item in sent if item.get("type") == "function_call_output"}
    assert outputs["c1"] == "Paris: 18°C" and outputs["c2"] == "London: 15°C"
    assert "denied by the rule `save_note(/etc/**)`" in outputs["c3"]
    assert outputs["c4"] == "saved to weather"
    assert module.NOTES == ["weather/Paris 18, London 15"]


def test_otel_example() -> None:
    assert run_example("otel_tracing.py").splitlines() == [
        "agent turn",
        "  execute_tool delete_file id=c4 error.type=unknown_tool",
        "  toolsched.batch",
        "    execute_tool read_file id=c1",
        "    execute_tool read_file id=c2",
        "  toolsched.batch",
        "    execute_tool write_file id=c3",
        "toolsched.tool.calls delete_file unknown_tool: 1",
        "toolsched.tool.calls read_file ok: 2",
        "toolsched.tool.calls write_file ok: 1",
    ]
