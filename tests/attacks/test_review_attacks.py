"""Attacks on today's merged work: each one a promise the code must keep, kept.

A streamed Gemini turn is answered in the model's order: the replies of calls sent without IDs are read back by
their place, so an answer out of order answers another call.
"""

from __future__ import annotations

from typing import Any

import pytest
from weather import weather

import toolsched as ts
from toolsched.providers import gemini as ts_gemini

pytestmark = pytest.mark.anyio


def _chunk_of(parts: list[Any], finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}}
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate]}


async def test_gemini_a_streamed_call_whose_args_are_no_object_keeps_its_place_in_the_reply() -> None:
    ran: list[str] = []
    # Two calls without IDs: the first one's args are text, answered invalid_input; the second one runs.
    first = {"functionCall": {"name": "get_weather", "args": '{"city": "Oslo"}'}}
    second = {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}}
    execution = await ts_gemini.execute_stream(
        ts.Executor(weather(ran)), [_chunk_of([first, second]), _chunk_of([], "STOP")]
    )
    whole = await ts_gemini.execute(
        ts.Executor(weather([])), {"candidates": [{"content": {"role": "model", "parts": [first, second]}}]}
    )
    assert ran == ["Rome"]
    # The model's order, as the whole response's reply gives it: the text args' answer first.
    assert [result.error_kind for result in execution.outcome.results] == ["invalid_input", None]
    assert execution.content == whole.content
    responses = [part["functionResponse"]["response"] for part in execution.content["parts"]]
    assert "error" in responses[0]
    assert responses[1] == {"output": "Rome: 18°C"}
