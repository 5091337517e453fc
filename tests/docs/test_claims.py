"""The lists the concept pages give of the library's own names (every tool option, every field of a
result, every error kind, every part of an outcome) are the library's lists: nothing missing, nothing
that is not there."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import toolsched as ts
from toolsched._tools.tools import TOOL_OPTIONS

THE_TURN = (Path(__file__).resolve().parents[2] / "docs" / "concepts" / "the-turn.md").read_text(encoding="utf-8")


def named_between(start: str, end: str) -> set[str]:
    """The plain names in backticks from ``start`` to ``end`` on the page (links' targets aside)."""
    text = THE_TURN[THE_TURN.index(start) + len(start) :]
    text = text[: text.index(end)] if end in text else text
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return set(re.findall(r"`([a-z_]+)`", text))


def test_the_turn_lists_every_tool_option() -> None:
    assert named_between("The options of `@ts.tool`", "The [API reference]") == set(TOOL_OPTIONS)


def test_the_turn_lists_every_field_of_a_result() -> None:
    fields = {field.name for field in dataclasses.fields(ts.ToolResult)}
    assert named_between("`ts.ToolResult` is frozen:", "`error_kind` is one") == fields


def test_the_turn_lists_every_error_kind() -> None:
    assert named_between("`error_kind` is one", "`ts.Outcome` holds") == set(typing.get_args(ts.ErrorKind))


def test_the_turn_lists_every_part_of_an_outcome() -> None:
    public = {name for name in dir(ts.Outcome) if not name.startswith("_")}
    assert named_between("`ts.Outcome` holds", "\n\n") == public
