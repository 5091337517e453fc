"""Bad input gets a clear answer, never a crash: lone surrogates, integers past 64 bits,
floats for integers, and huge values quoted back as short previews."""

from __future__ import annotations

import json
from typing import Any

import pytest

import toolsched as ts
from toolsched.providers import openai_chat

pytestmark = pytest.mark.anyio


@ts.tool
async def count(n: int) -> str:
    return f"{type(n).__name__}:{n}"


@ts.tool
async def total(ns: list[int]) -> str:
    return ",".join(f"{type(n).__name__}:{n}" for n in ns)


@ts.tool
async def echo(text: str) -> str:
    return text


@ts.tool
async def measure(x: float) -> str:
    return f"{type(x).__name__}:{x}"


@ts.tool
async def span(start: int, stop: int, step: int = 1, scale: float = 1.0) -> str:
    return ",".join(f"{type(value).__name__}:{value}" for value in (start, stop, step, scale))


@ts.tool
async def mixed(n: int, ns: list[int]) -> str:
    return ",".join(f"{type(value).__name__}:{value}" for value in (n, *ns))


EXECUTOR = ts.Executor([count, total, echo, measure, span, mixed])


async def one(name: str, args: Any, call_id: str = "1") -> ts.ToolResult:
    return (await EXECUTOR.run([ts.ToolCall(call_id, name, args)])).results[0]


async def test_a_lone_surrogate_in_a_tool_name_is_an_unknown_tool() -> None:
    result = await one("co\ud800unt", {"n": 1})
    assert result.error_kind == "unknown_tool"


@pytest.mark.parametrize("args", ['{"text": "a\ud800"}', {"text": "a\ud800"}, {"a\udfff": "x"}])
async def test_a_lone_surrogate_in_the_arguments_is_invalid_input(args: Any) -> None:
    result = await one("echo", args)
    assert result.error_kind == "invalid_input"
    assert "lone surrogate" in (result.error or "")


async def test_surrogate_call_ids_are_answered_and_kept_apart() -> None:
    outcome = await EXECUTOR.run(
        [ts.ToolCall("a\ud800", "echo", {"text": "x"}), ts.ToolCall("a\ud801", "echo", {"text": "y"})]
    )
    assert [r.output for r in outcome.results] == ["x", "y"]
    assert outcome.duplicates == []


async def test_a_lone_surrogate_from_the_openai_chat_wire_is_that_call_s_error() -> None:
    # What json.loads makes of "\\ud800" on the wire: a str holding a lone surrogate.
    message = json.loads(
        '{"role": "assistant", "content": null, "tool_calls": ['
        '{"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{\\"text\\": \\"\\\\ud800\\"}"}},'
        '{"id": "c2", "type": "function", "function": {"name": "ech\\ud800", "arguments": "{}"}},'
        '{"id": "c3", "type": "function", "function": {"name": "echo", "arguments": "{\\"text\\": \\"fine\\"}"}}]}'
    )
    calls = openai_chat.calls_from(message)
    outcome = await EXECUTOR.run(calls)
    kinds = [r.error_kind for r in outcome.results]
    assert kinds == ["invalid_input", "unknown_tool", None]


@pytest.mark.parametrize("text", ['{"n": 123456789012345678901234567890}', '{"n": -9223372036854775809}'])
async def test_an_integer_past_64_bits_is_refused_as_text_as_it_is_as_an_object(text: str) -> None:
    as_text = await one("count", text)
    as_object = await one("count", json.loads(text))
    assert as_text.error_kind == as_object.error_kind == "invalid_input"
    assert "64-bit" in (as_text.error or "")


async def test_integers_in_range_arrive_exact() -> None:
    assert (await one("count", '{"n": 18446744073709551615}')).output == "int:18446744073709551615"
    assert (await one("count", '{"n": -9223372036854775808}')).output == "int:-9223372036854775808"


@pytest.mark.parametrize("args", ['{"n": 1.0}', {"n": 1.0}, '{"n": 3e2}'])
async def test_an_int_parameter_receives_an_int(args: Any) -> None:
    result = await one("count", args)
    assert result.output in ("int:1", "int:300")


@pytest.mark.parametrize(
    "args",
    ['{"start": 1.0, "stop": 2.0, "step": 3.0, "scale": 4.0}', {"start": 1.0, "stop": 2.0, "step": 3.0, "scale": 4.0}],
)
async def test_every_int_parameter_of_a_tool_receives_an_int(args: Any) -> None:
    assert (await one("span", args)).output == "int:1,int:2,int:3,float:4.0"
    assert (await one("span", '{"start": 1, "stop": 2.0}')).output == "int:1,int:2,int:1,float:1.0"


async def test_int_and_list_of_int_parameters_together_receive_ints() -> None:
    assert (await one("mixed", '{"n": 1.0, "ns": [2.0, 3]}')).output == "int:1,int:2,int:3"


async def test_a_list_of_int_parameter_receives_ints() -> None:
    assert (await one("total", '{"ns": [1.0, 2, 3.0]}')).output == "int:1,int:2,int:3"


async def test_a_fraction_for_an_int_parameter_is_still_refused() -> None:
    assert (await one("count", '{"n": 1.5}')).error_kind == "invalid_input"


async def test_a_float_parameter_keeps_its_float() -> None:
    assert (await one("measure", '{"x": 1.0}')).output == "float:1.0"


async def test_a_huge_bad_value_is_quoted_as_a_short_preview() -> None:
    result = await one("count", {"n": "x" * 10_000_000})
    assert result.error_kind == "invalid_input"
    assert len(result.error or "") < 1_000
    assert "a string of 10000000 characters" in (result.error or "")


async def test_a_huge_unknown_tool_name_is_quoted_as_a_short_preview() -> None:
    result = await one("y" * 1_000_000, {})
    assert result.error_kind == "unknown_tool"
    assert len(result.error or "") < 1_000
