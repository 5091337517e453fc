"""Cost of the provider adapters around a turn: reading the calls and building the reply (pytest-benchmark).

Run with ``make bench`` or
``.venv/bin/python -m pytest benches/test_providers.py --benchmark-only``. Responses are
raw dicts of 1,000 calls; results are what the executor returns for them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import toolsched as ts
from toolsched.providers import anthropic, gemini, openai_chat, openai_responses

COUNT = 1_000


def arguments(i: int) -> dict[str, Any]:
    return {"path": f"src/file_{i}.py", "limit": i % 50 + 1}


RESPONSES: dict[str, Any] = {
    "anthropic": {
        "content": [
            {"type": "tool_use", "id": f"toolu_{i}", "name": "read", "input": arguments(i)} for i in range(COUNT)
        ]
    },
    "openai_responses": {
        "output": [
            {"type": "function_call", "call_id": f"call_{i}", "name": "read", "arguments": json.dumps(arguments(i))}
            for i in range(COUNT)
        ]
    },
    "openai_chat": {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": f"call_{i}",
                            "type": "function",
                            "function": {"name": "read", "arguments": json.dumps(arguments(i))},
                        }
                        for i in range(COUNT)
                    ],
                }
            }
        ]
    },
    "gemini": {
        "candidates": [
            {"content": {"parts": [{"functionCall": {"name": "read", "args": arguments(i)}} for i in range(COUNT)]}}
        ]
    },
}

MODULES: dict[str, Any] = {
    "anthropic": (anthropic, anthropic.results_to_message),
    "openai_responses": (openai_responses, openai_responses.results_to_items),
    "openai_chat": (openai_chat, openai_chat.results_to_messages),
    "gemini": (gemini, gemini.results_to_content),
}


@ts.tool
async def read(path: str, limit: int = 10) -> dict[str, Any]:
    return {"path": path, "lines": limit}


REGISTRY = ts.ToolRegistry([read])


@pytest.mark.parametrize("provider", list(RESPONSES))
def test_calls_from(benchmark: Any, provider: str) -> None:
    benchmark.group = f"calls_from, {COUNT} calls"
    module, _ = MODULES[provider]
    calls = benchmark(module.calls_from, RESPONSES[provider])
    assert len(calls) == COUNT


@pytest.mark.parametrize("provider", list(RESPONSES))
def test_results_to_reply(benchmark: Any, provider: str) -> None:
    benchmark.group = f"reply of {COUNT} results (dict outputs, budget checked)"
    module, build = MODULES[provider]
    calls = module.calls_from(RESPONSES[provider])
    results = [ts.ToolResult(call.id, "read", {"path": "p", "lines": 3}) for call in calls]
    reply = benchmark(lambda: build(calls, results, registry=REGISTRY))
    assert reply
