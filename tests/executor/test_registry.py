"""The registry: lookup, clashes, per-turn availability and exports for each provider."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest

import toolsched as ts


@ts.tool(aliases=["cat"])
async def read_file(path: str, limit: int = 100) -> str:
    """Read a text file."""
    return path


@ts.tool
async def grep(pattern: str) -> list[str]:
    """Search files."""
    return []


class Point(pydantic.BaseModel):
    x: int
    y: int


class Shape(pydantic.BaseModel):
    corners: list[Point]
    label: str | None = None


class DrawShape(ts.Tool):
    name = "draw"
    description = "Draw a shape."
    input_model = Shape

    async def call(self, args: Shape, ctx: Any) -> int:
        return len(args.corners)


def test_lookup_by_name_and_alias() -> None:
    registry = ts.ToolRegistry([read_file, grep])
    assert registry.get("read_file") is read_file
    assert registry.get("cat") is read_file
    assert registry.get("nope") is None
    assert "cat" in registry and len(registry) == 2


def test_plain_functions_are_wrapped() -> None:
    def shout(text: str) -> str:
        return text.upper()

    registry = ts.ToolRegistry([shout])
    assert registry.get("shout") is not None


def test_clashing_names_are_refused() -> None:
    @ts.tool(name="grep")
    async def other(q: str) -> str:
        return q

    with pytest.raises(ts.ToolNameError, match="grep"):
        ts.ToolRegistry([grep, other])

    @ts.tool(aliases=["grep"])
    async def third(q: str) -> str:
        return q

    with pytest.raises(ts.ToolNameError, match="used twice"):
        ts.ToolRegistry([grep, third])


def test_bad_schemas_and_remote_refs_are_refused_at_registration() -> None:
    class Remote(ts.Tool):
        name = "remote"
        input_schema = {"$ref": "https://example.com/s.json"}

        async def call(self, args: Any, ctx: Any) -> None:
            return None

    with pytest.raises(ts.SchemaError, match=r"example\.com"):
        ts.ToolRegistry([Remote()])

    class Broken(ts.Tool):
        name = "broken"
        input_schema = {"type": "nonsense"}

        async def call(self, args: Any, ctx: Any) -> None:
            return None

    with pytest.raises(ts.SchemaError, match="broken"):
        ts.ToolRegistry([Broken()])


def test_exports_are_sorted_ref_free_and_deterministic() -> None:
    registry = ts.ToolRegistry([read_file, DrawShape(), grep])
    anthropic = registry.to_anthropic()
    assert [t["name"] for t in anthropic] == ["draw", "grep", "read_file"]
    draw = anthropic[0]["input_schema"]
    assert "$ref" not in json.dumps(draw) and "$defs" not in draw
    assert draw["properties"]["corners"]["items"]["properties"]["x"] == {"type": "integer"}
    assert json.dumps(registry.to_openai(), sort_keys=True) == json.dumps(
        ts.ToolRegistry([grep, DrawShape(), read_file]).to_openai(), sort_keys=True
    )


def test_openai_strict_form_closes_objects_and_requires_everything() -> None:
    registry = ts.ToolRegistry([read_file, DrawShape()])
    tools = {t["name"]: t for t in registry.to_openai(strict=True)}
    params = tools["read_file"]["parameters"]
    assert tools["read_file"]["strict"] is True
    assert params["required"] == ["path", "limit"]
    assert params["properties"]["limit"]["type"] == ["integer", "null"]
    point = tools["draw"]["parameters"]["properties"]["corners"]["items"]
    assert point["additionalProperties"] is False
    assert "default" not in json.dumps(tools["draw"]["parameters"])


def test_chat_and_gemini_shapes() -> None:
    registry = ts.ToolRegistry([read_file])
    chat = registry.to_openai_chat()
    assert chat[0]["type"] == "function"
    assert chat[0]["function"]["name"] == "read_file"
    assert chat[0]["function"]["parameters"]["required"] == ["path"]
    gemini = registry.to_gemini()
    declaration = gemini[0]["function_declarations"][0]
    assert declaration["name"] == "read_file"
    assert "additionalProperties" not in json.dumps(declaration)
    assert "default" not in json.dumps(declaration)


def test_disabled_and_deferred_tools_are_not_exported() -> None:
    switch = {"on": False}

    @ts.tool(enabled=lambda: switch["on"])
    async def sometimes(x: int) -> int:
        return x

    @ts.tool(should_defer=True)
    async def hidden(x: int) -> int:
        return x

    @ts.tool(should_defer=True, always_load=True)
    async def pinned(x: int) -> int:
        return x

    registry = ts.ToolRegistry([sometimes, hidden, pinned, grep])
    # A deferred tool brings the built-in tool_search, which is how the model reaches it.
    assert [t["name"] for t in registry.to_anthropic()] == ["grep", "pinned", "tool_search"]
    switch["on"] = True
    assert [t["name"] for t in registry.to_anthropic()] == ["grep", "pinned", "sometimes", "tool_search"]
