"""Every example in examples/ runs, against the real SDK clients and recorded responses."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from example_scripts import load_example
from recorded import Recorded

from toolsched import mcp as ts_mcp

pytestmark = pytest.mark.anyio

ANSWER = "Paris is 18°C and London is 59°F."


def sdk_client(recorded: Recorded, provider: str) -> Any:
    if provider == "anthropic":
        return recorded.anthropic()
    if provider == "gemini":
        return recorded.gemini()
    return recorded.openai()


PROVIDER_EXAMPLES = [
    ("anthropic_tools", "anthropic", ("tool_use", "end_turn")),
    ("openai_responses_tools", "openai_responses", ("function_calls", "final")),
    ("openai_chat_tools", "openai_chat", ("tool_calls", "final")),
    ("gemini_tools", "gemini", ("function_calls", "final")),
]


@pytest.mark.parametrize("entry", ["main", "main_with_loop"])
@pytest.mark.parametrize(("example", "provider", "responses"), PROVIDER_EXAMPLES)
async def test_provider_example(example: str, provider: str, responses: tuple[str, ...], entry: str) -> None:
    module = load_example(example)
    recorded = Recorded(provider, *responses)
    answer = await getattr(module, entry)(sdk_client(recorded, provider))
    assert answer == ANSWER
    assert len(recorded.requests) == 2
    # The second request carries both results, computed by the example's tool.
    second = str(recorded.requests[1])
    assert "Paris: 18°C" in second and "London: 59°F" in second


async def test_mcp_example() -> None:
    from mcp import Client
    from mcp_server import server

    module = load_example("mcp_tools")
    recorded = Recorded("anthropic", "mcp_tool_use", "mcp_end_turn")
    connection = ts_mcp.connect(Client(server), label="in-process test server")
    with anyio.fail_after(30):
        result = await module.main(recorded.anthropic(), connection, "What is 2 + 40?")
    assert (result.stop, result.text) == ("done", "2 + 40 = 42 (on 2026-05-01).")
    offered = [tool["name"] for tool in recorded.requests[0]["tools"]]
    assert "add" in offered and "today" in offered and offered == sorted(offered)
    assert recorded.requests[1]["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_04Add", "content": "42"},
        {"type": "tool_result", "tool_use_id": "toolu_05Today", "content": "2026-05-01"},
    ]
