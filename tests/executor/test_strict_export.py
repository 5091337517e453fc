"""OpenAI strict export says only what strict mode can mean, and schemas that cannot be
inlined are refused when the tool is registered."""

from __future__ import annotations

import logging
from typing import Any, Literal

import jsonschema
import pytest

import toolsched as ts


@ts.tool
def pick(color: Literal["red", "blue"] | None = None, size: Literal["s", "m"] = "s", count: int = 1) -> str:
    return f"{color} {size} {count}"


@ts.tool
def tally(counts: dict[str, int]) -> int:
    return sum(counts.values())


def exported(*tools: Any, **options: Any) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in ts.ToolRegistry(list(tools)).to_openai(strict=True, **options)}


@pytest.mark.parametrize("value", [None, "red", "blue"])
def test_an_optional_literal_accepts_null_in_strict_form(value: str | None) -> None:
    parameters = exported(pick)["pick"]["parameters"]
    jsonschema.validate({"color": value, "size": None, "count": None}, parameters)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"color": "green", "size": None, "count": None}, parameters)


def test_a_map_parameter_is_exported_non_strict_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="toolsched"):
        tools = exported(pick, tally)
    assert tools["tally"]["strict"] is False
    # The schema still says what the tool takes: a map of integers, not only {}.
    jsonschema.validate({"counts": {"a": 1, "b": 2}}, tools["tally"]["parameters"])
    assert tools["pick"]["strict"] is True
    assert "`tally` is exported without strict mode" in caplog.text


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"child": {"$ref": "#"}}},
        {
            "type": "object",
            "properties": {"node": {"$ref": "#/$defs/node"}},
            "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
        },
        {"type": "object", "properties": {"a": {"type": "string"}, "b": {"$ref": "#/properties/a"}}},
    ],
    ids=["self", "recursive-defs", "into-properties"],
)
def test_a_schema_whose_references_cannot_be_inlined_is_refused_at_registration(schema: dict[str, Any]) -> None:
    class Raw(ts.Tool):
        name = "raw"
        description = "A raw schema."
        input_schema = schema

        async def call(self, args: Any, ctx: Any) -> None:
            return None

    with pytest.raises(ts.SchemaError):
        ts.ToolRegistry([Raw()])
