"""Argument repair in ``ToolTable.prepare``: valid text plans exactly as without it; malformed text is repaired
or refused, never guessed at."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from toolsched import _core

SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "lines": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "extra": {},
    },
    "required": ["path"],
}
PLAIN = _core.Limits(16 * 1024 * 1024, 64, 10)
REPAIRING = _core.Limits(16 * 1024 * 1024, 64, 10, repair=True)


class Call:
    __slots__ = ("args", "id", "name")

    def __init__(self, call_id: str, name: str, args: Any) -> None:
        self.id, self.name, self.args = call_id, name, args


def plan(args: Any, limits: Any) -> tuple[Any, list[tuple[int, tuple[str, ...]]]]:
    table = _core.ToolTable([("read", [], SCHEMA)])
    repairs: list[tuple[int, tuple[str, ...]]] = []
    columns = table.prepare([Call("1", "read", args)], [], limits, None, None, repairs)
    return columns, repairs


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
arguments = st.fixed_dictionaries(
    {"path": st.text()}, optional={"lines": st.integers(), "tags": st.lists(st.text()), "extra": json_values}
)


@settings(max_examples=300, deadline=None)
@given(args=st.one_of(arguments, st.dictionaries(st.text(max_size=6), json_values, max_size=4), json_values))
def test_valid_json_plans_the_same_with_repair_on(args: Any) -> None:
    for text in (json.dumps(args), json.dumps(args, indent=2, ensure_ascii=False)):
        repaired_columns, repairs = plan(text, REPAIRING)
        plain_columns, _ = plan(text, PLAIN)
        if plain_columns[2]:
            # Refused without repair: a JSON-encoded object is the only valid JSON repair may take.
            continue
        assert repaired_columns == plain_columns
        assert repairs == []


def test_malformed_text_is_repaired_and_reported() -> None:
    text = "```json\n{'path': 'a', lines: '3', 'tags': 'x',}\n```"
    (_, args, failures, *_), repairs = plan(text, REPAIRING)
    assert failures == []
    assert args == [{"path": "a", "lines": 3, "tags": ["x"]}]
    assert repairs == [
        (
            0,
            (
                "code_fence",
                "single_quotes",
                "unquoted_key",
                "trailing_comma",
                "number_as_string",
                "single_value_for_array",
            ),
        )
    ]
    (_, args, failures, *_), repairs = plan(text, PLAIN)
    assert args == [None] and failures[0][1] == "invalid_input" and repairs == []


def test_cut_off_text_is_refused_saying_so() -> None:
    (_, args, failures, *_), repairs = plan('{"path": "a", "tags": ["x", "y', REPAIRING)
    assert args == [None] and repairs == []
    assert failures[0][1] == "invalid_input"
    assert "cut off" in failures[0][2] and "send the whole call again" in failures[0][2]


def test_a_missing_required_field_is_not_invented() -> None:
    (_, args, failures, *_), repairs = plan("{'lines': 3}", REPAIRING)
    assert args == [None] and repairs == []
    assert "path" in failures[0][2]


def test_an_object_sent_as_a_json_encoded_string_is_decoded() -> None:
    (_, args, failures, *_), repairs = plan(json.dumps(json.dumps({"path": "a"})), REPAIRING)
    assert (args, failures, repairs) == ([{"path": "a"}], [], [(0, ("encoded_string",))])
    (_, args, failures, *_), repairs = plan(json.dumps("just words"), REPAIRING)
    assert args == [None] and repairs == []
