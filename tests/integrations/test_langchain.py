"""LangChain tools imported as toolsched tools and run by a plain executor, on asyncio and trio."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Annotated

import anyio
import pydantic
import pytest
from langchain_core.tools import InjectedToolArg, InjectedToolCallId, StructuredTool, ToolException, tool

import toolsched as ts
from tests.conftest import InFlight
from toolsched.integrations.langchain import LangChainTool, from_langchain

pytestmark = pytest.mark.anyio


async def test_sync_and_async_langchain_tools_run_with_toolsched_flags(in_flight: InFlight) -> None:
    threads: list[bool] = []

    @tool
    def word_count(text: str) -> int:
        """Count the words of a text."""
        threads.append(threading.current_thread() is threading.main_thread())
        return len(text.split())

    @tool
    async def fetch(url: str) -> str:
        """Fetch a page."""
        await in_flight.hold(url)
        return f"<html>{url}</html>"

    executor = ts.Executor([from_langchain(word_count), from_langchain(fetch, read_only=True, concurrency_safe=True)])
    outcome = await executor.run(
        [
            ts.ToolCall("c1", "fetch", {"url": "/a"}),
            ts.ToolCall("c2", "fetch", {"url": "/b"}),
            ts.ToolCall("c3", "word_count", {"text": "three little words"}),
        ]
    )
    assert [result.output for result in outcome.results] == ["<html>/a</html>", "<html>/b</html>", "3"]
    assert [result.batch for result in outcome.results] == [0, 0, 1]
    assert in_flight.peak == 2
    # The sync tool ran in a worker thread, not on the event loop.
    assert threads == [False]


async def test_the_schema_is_what_the_model_sees_and_the_engine_checks_it_first() -> None:
    ran: list[str] = []

    class SearchArgs(pydantic.BaseModel):
        query: str = pydantic.Field(description="What to look for")
        limit: int = pydantic.Field(default=5, ge=1, le=50)

    @tool(args_schema=SearchArgs)
    def search(query: str, limit: int = 5) -> list[str]:
        """Search the index."""
        ran.append(query)
        return [f"{query} {i}" for i in range(limit)]

    imported = from_langchain(search)
    assert imported.description == "Search the index."
    assert imported.input_schema["properties"]["query"] == {"type": "string", "description": "What to look for"}
    assert imported.input_schema["required"] == ["query"]
    outcome = await ts.Executor([imported]).run(
        [
            ts.ToolCall("c1", "search", {"query": "x", "limit": 500}),
            ts.ToolCall("c2", "search", '{"query": "llamas", "limit": 2}'),
        ]
    )
    assert outcome.results[0].error_kind == "invalid_input"
    assert "500 is greater than the maximum of 50" in (outcome.results[0].error or "")
    assert outcome.results[1].output == ["llamas 0", "llamas 1"]
    assert ran == ["llamas"]


async def test_injected_arguments_are_hidden_from_the_model_and_cannot_be_forged() -> None:
    @tool
    def stamp(
        note: str, call_id: Annotated[str, InjectedToolCallId], user: Annotated[str, InjectedToolArg] = "nobody"
    ) -> str:
        """Stamp a note with the call's ID."""
        return f"{note} by {user} in {call_id}"

    imported = from_langchain(stamp)
    assert set(imported.input_schema["properties"]) == {"note"}
    outcome = await ts.Executor([imported]).run(
        [
            ts.ToolCall("c1", "stamp", {"note": "hi", "call_id": "forged", "user": "mallory"}),
        ]
    )
    assert outcome.results[0].output == "hi by nobody in c1"


async def test_a_tools_own_error_is_an_execution_error_with_its_text() -> None:
    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        raise ToolException(f"no such key: {key}")

    lookup.handle_tool_error = True

    @tool
    def crash() -> str:
        """Crashes."""
        raise ValueError("boom")

    outcome = await ts.Executor([from_langchain(lookup), from_langchain(crash)]).run(
        [
            ts.ToolCall("c1", "lookup", {"key": "k"}),
            ts.ToolCall("c2", "crash"),
        ]
    )
    assert [(r.error_kind, r.error) for r in outcome.results] == [
        ("execution_error", "LangChainToolError: no such key: k"),
        ("execution_error", "ValueError: boom"),
    ]


async def test_tools_described_by_raw_json_schema_and_artifacts() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    square = StructuredTool.from_function(
        func=lambda n: n * n, name="square", description="Square n.", args_schema=schema
    )

    @tool(response_format="content_and_artifact")
    def histogram(values: list[int]) -> tuple[str, dict[str, int]]:
        """Summarise values; the counts are the artifact."""
        return f"{len(values)} values", {str(v): values.count(v) for v in set(values)}

    outcome = await ts.Executor([from_langchain(square), from_langchain(histogram)]).run(
        [
            ts.ToolCall("c1", "square", {"n": 7}),
            ts.ToolCall("c2", "square", {"n": "7"}),
            ts.ToolCall("c3", "histogram", {"values": [1, 1, 2]}),
        ]
    )
    assert outcome.results[0].output == "49"
    assert outcome.results[1].error_kind == "invalid_input"
    assert outcome.results[2].output == "3 values"


def test_wrong_arguments_are_refused_by_name() -> None:
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    with pytest.raises(TypeError, match="from_langchain\\(\\) got unknown option\\(s\\): fast"):
        from_langchain(ping, fast=True)
    with pytest.raises(ts.ToolDefinitionError, match="takes a LangChain BaseTool, got function"):
        LangChainTool(lambda: None)  # type: ignore[arg-type]
    assert from_langchain(ping, name="ping2", aliases=["p"]).aliases == ("p",)


def test_importing_toolsched_needs_none_of_the_integrations_packages() -> None:
    script = (
        "import sys, toolsched, toolsched.integrations\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('langgraph', 'langchain_core', 'agents', 'opentelemetry'))\n"
        "print(heavy)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# On trio an async LangChain tool runs on an asyncio loop in a worker thread, which a timeout abandons
# (the call is answered, the thread lives on): here the cancellation itself is under test.
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_langchain_tool_runs_under_the_executors_timeout() -> None:
    @tool
    async def hang() -> str:
        """Never returns."""
        await anyio.sleep_forever()
        return "never"

    outcome = await ts.Executor([from_langchain(hang, timeout=0.05)]).run([ts.ToolCall("c1", "hang")])
    assert outcome.results[0].error_kind == "timeout"
