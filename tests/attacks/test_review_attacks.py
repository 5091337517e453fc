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


class _Elementwise:
    """An array-like value (as a NumPy array is) whose comparison is taken element by element: its result has no
    truth value."""

    def __init__(self, *items: str) -> None:
        self.items = items

    def __eq__(self, other: object) -> Any:
        return _NoTruth()

    def __ne__(self, other: object) -> Any:
        return _NoTruth()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"array({list(self.items)!r})"


class _NoTruth:
    def __bool__(self) -> bool:
        raise ValueError("the truth value of an array with more than one element is ambiguous")


async def test_arguments_holding_an_array_like_type_still_give_the_call_its_span() -> None:
    """Promise (``otel._as_text``): it never raises, since an attribute that failed would lose its span. Arguments
    given by a caller with a ``type`` entry that is array-like (its comparison has no truth value) made it raise
    while looking for image parts, before its fallback: the call had no span."""
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

    from toolsched.integrations import otel

    ended: list[ReadableSpan] = []

    class Ended(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            ended.append(span)

    provider = TracerProvider()
    provider.add_span_processor(Ended())

    @ts.tool
    def classify(type: str) -> str:
        """Classifies by type."""
        return type

    executor = otel.instrument(ts.Executor([classify]), tracer_provider=provider, record_arguments=True)
    outcome = await executor.run(
        [ts.ToolCall("c1", "classify", {"type": _Elementwise("a", "b")}), ts.ToolCall("c2", "classify", {"type": "x"})]
    )
    assert [result.error_kind for result in outcome.results] == ["invalid_input", None]
    spans = {(span.attributes or {}).get("gen_ai.tool.call.id"): span for span in ended}
    assert (spans["c1"].attributes or {}).get("error.type") == "invalid_input"
    assert isinstance((spans["c1"].attributes or {}).get("gen_ai.tool.call.arguments"), str)
