"""Anthropic Messages stream events, built for tests that feed them to the SDK client or the stream reader."""

from __future__ import annotations

from typing import Any


def message(*middle: dict[str, Any]) -> list[dict[str, Any]]:
    """An Anthropic message's events around ``middle``: its start, then its end with ``stop_reason`` tool_use."""
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "claude-sonnet-4-6",
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        },
    }
    end = [
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 1},
        },
        {"type": "message_stop"},
    ]
    return [start, *middle, *end]


def tool_use(index: int, call_id: str, given: dict[str, Any] | None = None) -> dict[str, Any]:
    """The start of block ``index``: a ``get_weather`` tool use with ID ``call_id`` and input ``given``."""
    block = {"type": "tool_use", "id": call_id, "name": "get_weather", "input": {} if given is None else given}
    return {"type": "content_block_start", "index": index, "content_block": block}


def json_delta(index: int, piece: Any) -> dict[str, Any]:
    """A piece of block ``index``'s input JSON."""
    return {"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}


def block_stop(index: int) -> dict[str, Any]:
    """The end of block ``index``."""
    return {"type": "content_block_stop", "index": index}
