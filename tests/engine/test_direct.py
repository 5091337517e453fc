"""The direct path (one pass: parse, check, build) against the full validator, through ``ToolTable.prepare``.

Every schema here is given twice: as it is, and with ``allOf: [true]`` added, a keyword that changes
nothing but which the direct path does not take, so that the second table always takes the full path
(serde_json, the jsonschema crate, then Python objects). Both must say the same of every text: the
same verdict, the same message, and arguments equal in value and in type (an int is not a float,
-0.0 is not 0.0) to what ``json.loads`` builds. ``test_reader.py`` holds both to ``json.loads`` and
the ``jsonschema`` package.
"""

from __future__ import annotations

import functools
import json
import math
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolsched as ts
from toolsched import _core

LIMITS = _core.Limits(16 * 1024 * 1024, 64, 10)

TYPES = ["string", "integer", "number", "boolean", "null", "array", "object"]
NAMES = ["a", "b", "é", "path", "x y"]
NUMBERS = [0, 1, -1, 2.5, -0.5, 1000, 9007199254740993]


def tables(schema: dict[str, Any]) -> tuple[_core.ToolTable, _core.ToolTable]:
    direct = _core.ToolTable([("t", [], schema)])
    full = _core.ToolTable([("t", [], {**schema, "allOf": [True]})])
    assert not full.has_direct_path(0)
    return direct, full


def same(a: Any, b: Any) -> bool:
    """Equal in value and type, all the way down (and -0.0 apart from 0.0), keys in the same order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return bool(a == b)


def prepared(table: _core.ToolTable, text: str) -> tuple[Any, list[tuple[int, str, str]]]:
    _, args, failures, _, _, _ = table.prepare([SimpleNamespace(id="1", name="t", args=text)], [], LIMITS)
    return args[0], failures


def assert_agree(schema: dict[str, Any], text: str, both: tuple[_core.ToolTable, _core.ToolTable] | None = None) -> Any:
    direct, full = both or tables(schema)
    (direct_args, direct_failures), (full_args, full_failures) = prepared(direct, text), prepared(full, text)
    assert direct_failures == full_failures, (schema, text)
    assert same(direct_args, full_args), (schema, text, direct_args, full_args)
    if direct_args is not None:
        # What json.loads makes too (-0 as the int 0).
        assert same(direct_args, json.loads(text)), (text, direct_args)
    return direct_args


@functools.cache
def parts(depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    typed = st.one_of(
        st.just({}),
        st.sampled_from(TYPES).map(lambda t: {"type": t}),
        st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True).map(lambda ts: {"type": ts}),
        st.lists(st.sampled_from(TYPES), min_size=1, max_size=3).map(lambda ts: {"anyOf": [{"type": t} for t in ts]}),
        st.lists(st.sampled_from(["a", "bb", "é", ""]), min_size=1, max_size=3, unique=True).map(lambda e: {"enum": e}),
        st.sampled_from(["a", "é"]).map(lambda c: {"const": c}),
    )
    extras = st.fixed_dictionaries(
        {},
        optional={
            "minimum": st.sampled_from(NUMBERS),
            "maximum": st.sampled_from(NUMBERS),
            "exclusiveMinimum": st.sampled_from(NUMBERS),
            "exclusiveMaximum": st.sampled_from(NUMBERS),
            "minLength": st.integers(0, 3),
            "maxLength": st.integers(0, 3),
            "minItems": st.integers(0, 3),
            "maxItems": st.integers(0, 3),
            "format": st.sampled_from(["email", "date", "uri"]),
            "description": st.just("annotated"),
            "default": st.just(3),
        },
    )
    nested: st.SearchStrategy[dict[str, Any]] = st.just({})
    if depth < 2:
        nested = st.one_of(
            st.just({}),
            st.deferred(lambda: parts(depth + 1)).map(lambda item: {"items": item}),
            st.deferred(lambda: object_schemas(depth + 1)).map(lambda o: {k: v for k, v in o.items() if k != "type"}),
        )
    return st.tuples(typed, extras, nested).map(lambda t: {**t[0], **t[1], **t[2]})


@st.composite
def objects(draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(NAMES), max_size=4, unique=True))
    part = parts(depth)
    properties = {name: draw(part) for name in names}
    required = [name for name in names if draw(st.booleans())]
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": draw(st.booleans()),
    }


@functools.cache
def object_schemas(depth: int) -> st.SearchStrategy[dict[str, Any]]:
    return objects(depth)


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, 1, -1, 2, 3, 1000, 2**53 + 1, 2**63 - 1, -(2**63), 2**64 - 1, 2**64]),
    st.sampled_from([1.0, 2.5, -0.5, -0.0, 1e3, 1e-2, 1e308]),
    st.sampled_from(["", "a", "bb", "é", "abcd", "😀", "a\nb", 'q"uote', "a@b.c", "2024-13-45", "\ud800"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(NAMES), inner, max_size=3),
    ),
    max_leaves=6,
)


STRINGS = ["", "a", "bb", "é", "abcd", "😀x", "a\nb", 'q"uote', "a@b.c", "2024-13-45", "\ud800"]
INSTANCE_NUMBERS = [0, 1, -1, 2, 3, 2.5, -0.5, 1.0, 1000, 1e3, 2**53 + 1, 2**63 - 1, -(2**63), 2**64 - 1, 2**64]


def allowed_types(part: dict[str, Any]) -> list[str]:
    if "enum" in part or "const" in part:
        return ["string"]
    named = part.get("type", TYPES)
    named = [named] if isinstance(named, str) else list(named)
    if "anyOf" in part:
        named = [branch["type"] for branch in part["anyOf"] if branch["type"] in named]
    return named or TYPES


@st.composite
def instances(draw: st.DrawFn, part: dict[str, Any], depth: int = 0) -> Any:
    """A value for ``part``: mostly one it allows, near its bounds, sometimes anything."""
    if draw(st.integers(0, 9)) == 0:
        return draw(VALUES)
    kind = draw(st.sampled_from(allowed_types(part)))
    if kind == "string":
        members = part.get("enum", [part["const"]] if "const" in part else [])
        return draw(st.sampled_from(members + STRINGS[:2]) if members else st.sampled_from(STRINGS))
    if kind in ("integer", "number"):
        return draw(st.sampled_from(INSTANCE_NUMBERS + NUMBERS))
    if kind == "boolean":
        return draw(st.booleans())
    if kind == "array" and depth < 3:
        return draw(st.lists(instances(part.get("items", {}), depth + 1), max_size=4))
    if kind == "object" and depth < 3:
        value = {}
        for name, sub in part.get("properties", {}).items():
            if draw(st.integers(0, 9)) < (9 if name in part.get("required", []) else 7):
                value[name] = draw(instances(sub, depth + 1))
        if draw(st.integers(0, 4)) == 0:
            value[draw(st.sampled_from(NAMES))] = draw(SCALARS)
        return value
    return None


@st.composite
def texts(draw: st.DrawFn, schema: dict[str, Any]) -> str:
    value = draw(instances(schema))
    if not isinstance(value, dict) and draw(st.integers(0, 9)) > 0:
        value = {}
    try:
        text = json.dumps(value, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 1])))
    except UnicodeEncodeError:
        text = json.dumps(value)
    # Spellings json.dumps does not produce: an exponent for an integer, -0, a repeated key.
    variant = draw(st.sampled_from(["as is", "as is", "exponent", "minus zero", "repeated key"]))
    if variant == "exponent":
        text = text.replace(": 1000", ": 1e3")
    elif variant == "minus zero":
        text = text.replace(": 0", ": -0", 1)
    elif variant == "repeated key" and text.startswith("{") and len(text) > 2:
        text = '{"a": 1, ' + text[1:]
    return text


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_the_direct_path_answers_every_text_as_the_full_path_does(data: st.DataObject) -> None:
    schema = data.draw(object_schemas(0), label="schema")
    both = tables(schema)
    for text in data.draw(st.lists(texts(schema), min_size=1, max_size=8), label="texts"):
        assert_agree(schema, text, both)


@pytest.mark.parametrize(
    "text",
    [
        '{"path": "a.py", "limit": 3}',
        '{"limit": 1e1, "path": "a"}',
        '{"path": "\\u00e9\\n", "limit": -0}',
        '{"path": "a", "limit": 2.0}',
        '{"path": "b", "path": "a"}',
        '{"path": "a", "limit": 18446744073709551615}',
        '{"path": "a", "tags": [{"deep": [1, 2.5, null, true]}]}',
    ],
)
def test_common_arguments_take_the_direct_path_and_match(text: str) -> None:
    schema = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "limit": {"type": "number", "default": 10}},
        "required": ["path"],
    }
    assert _core.ToolTable([("t", [], schema)]).has_direct_path(0)
    assert assert_agree(schema, text) is not None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{}",
        "[1]",
        '{"path": 3}',
        '{"path": "a", "limit": 123456789012345678901234567890}',
        '{"path": "a\\ud800"}',
        '{"path": "a",}',
        '{"path": "a"} trailing',
        '{"path": "a", "limit": 1e400}',
        '{"path": "a", "limit": NaN}',
        '{"path": "a", "deep": ' + "[" * 70 + "]" * 70 + "}",
        '{"path": "a", "deeper": ' + "[" * 200 + "]" * 200 + "}",
    ],
)
def test_what_the_full_path_refuses_is_refused_with_its_message(text: str) -> None:
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    direct, full = tables(schema)
    assert prepared(direct, text)[1] == prepared(full, text)[1] != []


def test_schemas_with_other_keywords_take_the_full_path() -> None:
    table = _core.ToolTable(
        [
            ("plain", [], {"type": "object", "properties": {"p": {"type": "string"}}}),
            ("pattern", [], {"type": "object", "properties": {"p": {"type": "string", "pattern": "^a"}}}),
            ("ref", [], {"type": "object", "properties": {"p": {"$ref": "#/$defs/P"}}, "$defs": {"P": {}}}),
        ]
    )
    assert [table.has_direct_path(i) for i in range(3)] == [True, False, False]
    with pytest.raises(ts.OptionError):
        table.has_direct_path(3)
