"""The argument reader against Python's own: ``json.loads`` then ``jsonschema``, through ``ToolTable.prepare``.

A call's arguments reach the tool as ``json.loads`` builds them from the text, or as the mapping given,
and are accepted exactly when the ``jsonschema`` package accepts that value under the tool's schema, in
both forms (text and mapping) and on both of the engine's paths for text (the one-pass reader of
``rust/direct.rs``, and the full path: a schema with ``allOf: [true]`` added always takes it).

The reference differs from ``json.loads`` only where the engine refuses on purpose, each refusal a
readable ``invalid_input`` (see ``parse_arguments`` in ``rust/validate.rs``): ``NaN`` and ``Infinity``
(not JSON), a number past the float range (``1e400``, which ``json.loads`` reads as infinity), an integer
past 64 bits, an escape leaving a lone surrogate (not Unicode), text that is not an object, and empty
text (no arguments: ``{}``). Depth is counted the same way for text and mappings: the arguments object
is level 1, each array or object inside one level more, a scalar none.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from types import MappingProxyType, SimpleNamespace
from typing import Any

import jsonschema
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import toolsched as ts
from toolsched import _core

BYTES = 16 * 1024 * 1024
LIMITS = _core.Limits(BYTES, 64, 10)
MAX_DEPTH = _core.Limits.MAX_INPUT_DEPTH


class Refused(Exception):
    """What the engine refuses on purpose where ``json.loads`` builds a value."""


def _no_constant(name: str) -> Any:
    raise Refused(f"{name} is not JSON")


def _int64(literal: str) -> int:
    number = int(literal)
    if not -(2**63) <= number < 2**64:
        raise Refused("an integer past 64 bits")
    return number


def _finite(literal: str) -> float:
    number = float(literal)
    if math.isinf(number):
        raise Refused("a number past the float range")
    return number


def _unicode(value: Any) -> None:
    if isinstance(value, str):
        value.encode("utf-8")  # a lone surrogate raises UnicodeEncodeError
    elif isinstance(value, dict):
        for key, item in value.items():
            _unicode(key)
            _unicode(item)
    elif isinstance(value, list):
        for item in value:
            _unicode(item)


def loads(text: str) -> Any:
    """``json.loads``, less the engine's deliberate refusals (raised as ``Refused``)."""
    if not text.strip(" \t\n\r"):
        return {}
    value = json.loads(text, parse_constant=_no_constant, parse_int=_int64, parse_float=_finite)
    try:
        _unicode(value)
    except UnicodeEncodeError:
        raise Refused("a lone surrogate") from None
    if not isinstance(value, dict):
        raise Refused("not an object")
    return value


def depth_of(value: Any) -> int:
    """Nesting depth as the engine counts it: containers only, the outermost at level 1."""
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    if isinstance(value, (list, tuple)):
        return 1 + max(map(depth_of, value), default=0)
    return 0


def same(a: Any, b: Any) -> bool:
    """Equal in value and type, all the way down (an int is not a float, -0.0 is not 0.0), keys in order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return bool(a == b)


def tables(schema: dict[str, Any]) -> tuple[_core.ToolTable, _core.ToolTable]:
    """The schema's table (its direct path, when it has one) and one that always takes the full path."""
    full = _core.ToolTable([("t", [], {**schema, "allOf": [True]})])
    assert not full.has_direct_path(0)
    return _core.ToolTable([("t", [], schema)]), full


def prepared(table: _core.ToolTable, args: Any, limits: _core.Limits = LIMITS) -> tuple[Any, str | None]:
    """The arguments the tool would get, or None, and the refusal's message."""
    _, built, failures, _, _, _ = table.prepare([SimpleNamespace(id="1", name="t", args=args)], [], limits)
    assert len(failures) <= 1
    if failures:
        assert built[0] is None and failures[0][1] == "invalid_input"
        return None, failures[0][2]
    return built[0], None


def assert_reads_as_python(
    schema: dict[str, Any], text: str, both: tuple[_core.ToolTable, _core.ToolTable] | None = None
) -> Any:
    """Both paths accept ``text`` exactly when json.loads + jsonschema do, building json.loads's value;
    and the value as a mapping gets the same answer."""
    direct, full = both or tables(schema)
    try:
        expected: Any = loads(text)
        valid = jsonschema.Draft202012Validator(schema).is_valid(expected)
    except (Refused, ValueError):  # json.JSONDecodeError is a ValueError
        expected, valid = None, False
    (direct_args, direct_error), (full_args, full_error) = prepared(direct, text), prepared(full, text)
    assert direct_error == full_error, (schema, text)
    assert same(direct_args, full_args), (schema, text, direct_args, full_args)
    assert (full_error is None) == valid, (schema, text, expected, full_error)
    if valid:
        assert same(full_args, expected), (schema, text, full_args, expected)
        # The value given as a mapping is read as the same value, with the same verdict.
        assert same(prepared(full, expected)[0], expected), (schema, expected)
        assert same(prepared(direct, expected)[0], expected), (schema, expected)
    return full_args


# -- numbers ----------------------------------------------------------------------------------------------

# Literals, then integers at and past the 64-bit bounds, then text that is no number (an Arabic-Indic one).
SPELLINGS = [
    *"""0 -0 0.0 -0.0 -0e0 -0E-0 0e5 1e2 1E2 1e+2 1E+2 1e-2 1.0 1.5 -1.5 100 1e0 10e-1 1.000000000000000000001
    0.1 0.30000000000000004 4.9e-324 5e-324 2.4703282292062327e-324 2.4703282292062328e-324 -1e-400 1e-400 1e308
    1.7976931348623157e308 1.7976931348623158e308 1.7976931348623159e308 1e309 1e400 -1e400 1e99999999999999999999
    1e-99999999999999999999 0e99999999999999999999 9007199254740993.0 1e007 1E-007 123456789012345678901234567890e-10
    """.split(),
    *map(str, [2**53, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**400, -(10**400)]),
    *"NaN Infinity -Infinity 01 -01 1. .5 +1 1e 1e+ - 0x10 1_000 \u0661".split(),
]

NUMBER_SCHEMAS: list[dict[str, Any]] = [
    {},
    {"type": "number"},
    {"type": "integer"},
    {"type": ["integer", "null"]},
    {"type": "number", "minimum": 0},
    {"type": "number", "maximum": 0},
    {"type": "integer", "exclusiveMinimum": -1, "maximum": 100},
    {"type": "number", "maximum": 1},
    {"type": "number", "exclusiveMaximum": 1e308},
    {"type": "integer", "minimum": 9007199254740992},
    {"type": "number", "maximum": 9007199254740993},
    {"type": "integer", "maximum": 18446744073709551615},
    {"type": "number", "minimum": -9223372036854775808},
    {"anyOf": [{"type": "integer"}, {"type": "string"}]},
]


def number_schema(part: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"n": part}, "required": ["n"]}


@st.composite
def spellings(draw: st.DrawFn) -> str:
    """A JSON number literal of any shape: sign, zero or digits, fraction, exponent of any case and sign."""
    sign = draw(st.sampled_from(["", "-"]))
    whole = draw(st.one_of(st.just("0"), st.from_regex(r"[1-9][0-9]{0,30}", fullmatch=True)))
    fraction = draw(st.one_of(st.just(""), st.from_regex(r"\.[0-9]{1,30}", fullmatch=True)))
    exponent = draw(
        st.one_of(
            st.just(""),
            st.tuples(
                st.sampled_from("eE"), st.sampled_from(["", "+", "-"]), st.integers(0, 400).map(str), st.integers(0, 2)
            ).map(lambda e: e[0] + e[1] + "0" * e[3] + e[2]),
        )
    )
    return sign + whole + fraction + exponent


@pytest.mark.parametrize("part", NUMBER_SCHEMAS, ids=json.dumps)
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_number_spelling_reads_as_json_loads_reads_it(spelling: str, part: dict[str, Any]) -> None:
    assert_reads_as_python(number_schema(part), '{"n": ' + spelling + "}")


@settings(max_examples=300, deadline=None)
@given(spelling=spellings(), part=st.sampled_from(NUMBER_SCHEMAS), spaced=st.booleans())
@example(spelling="-0", part={"type": "number"}, spaced=False)
@example(spelling="-0", part={"type": "integer"}, spaced=True)
def test_generated_number_spellings_read_as_json_loads_reads_them(
    spelling: str, part: dict[str, Any], spaced: bool
) -> None:
    schema = number_schema(part)
    text = '{\n "n" : ' + spelling + ' ,"m": [' + spelling + "]}" if spaced else '{"n":' + spelling + "}"
    schema = {**schema, "properties": {**schema["properties"], "m": {"type": "array", "items": part}}}
    assert_reads_as_python(schema, text)


def test_minus_zero_reaches_the_tool_as_the_int_zero() -> None:
    """``-0`` is the int 0 for ``json.loads`` (serde_json reads it as the float -0.0, which the tool got)."""
    for part in ({"type": "number"}, {"type": "integer"}, {}):
        args = assert_reads_as_python(number_schema(part), '{"n": -0}')
        assert type(args["n"]) is int and args["n"] == 0
    args = assert_reads_as_python(number_schema({"type": "number"}), '{"n": -0.0}')
    assert type(args["n"]) is float and math.copysign(1, args["n"]) == -1


def test_numbers_json_loads_reads_but_json_does_not_hold_are_refused_readably() -> None:
    table = _core.ToolTable([("t", [], number_schema({"type": "number"}))])
    for spelling, says in [
        ("1e400", "the number 1e400 (at line 1 column 11) is outside the range of a 64-bit float"),
        ("-1.5E+999", "the number -1.5E+999 (at line 1 column 15) is outside the range of a 64-bit float"),
        (str(10**30), f"the integer {10**30} is outside the 64-bit range"),
        ("NaN", "not valid JSON: expected value at line 1 column 7"),
        ("Infinity", "not valid JSON: expected value at line 1 column 7"),
    ]:
        args, error = prepared(table, '{"n": ' + spelling + "}")
        assert args is None and error is not None and error.endswith(says), (spelling, error)
    # The same values given in a mapping are refused as well.
    for value in (math.inf, -math.inf, math.nan, 10**30):
        assert prepared(table, {"n": value})[0] is None


def test_a_lone_surrogate_is_refused_as_not_unicode_in_either_form() -> None:
    """``json.loads`` keeps ``"\\ud800"`` as a lone surrogate, which no UTF-8 text holds: refused as text (an
    escape, or the character itself) and in a mapping, each saying so (the escape was 'not valid JSON:
    unexpected end of hex escape')."""
    for table in tables({"type": "object"}):
        for args, says in (
            ('{"s": "\\ud800"}', "not JSON values: an escape at line 1 column 14 leaves a lone surrogate"),
            ('{"s": "a\\udc00"}', "not JSON values: an escape at line 1 column 14 leaves a lone surrogate"),
            ('{"s": "\\ud800\\u0041"}', "not JSON values: an escape at line 1 column 19 leaves a lone surrogate"),
            ('{"s": "\ud800"}', "not JSON values: the text holds a lone surrogate"),
            ({"s": "\ud800"}, "not JSON values: the text holds a lone surrogate"),
        ):
            built, error = prepared(table, args)
            assert built is None and error is not None and says in error and "Unicode" in error, (args, error)


# -- depth --------------------------------------------------------------------------------------------------


def nested(kinds: list[str], leaf: Any = 1) -> dict[str, Any]:
    """Arguments nesting ``len(kinds) + 1`` levels: the arguments object, then an array (``"["``) or an
    object (``"{"``) for each kind, innermost last, holding ``leaf``."""
    value = leaf
    for kind in reversed(kinds):
        value = [value] if kind == "[" else {"k": value}
    return {"a": value}


DEPTHS = [1, 2, 3, 63, 64, 65, 127, MAX_DEPTH]


@st.composite
def deep_arguments(draw: st.DrawFn) -> tuple[int, dict[str, Any]]:
    """A depth limit, and arguments of arrays and objects nesting from two levels under it to two over it."""
    limit = draw(st.sampled_from(DEPTHS) | st.integers(1, MAX_DEPTH))
    leaf = draw(st.sampled_from([1, "s", None, [], {}, -0.0]))
    inner = max(limit + draw(st.integers(-2, 2)) - 1 - depth_of(leaf), 0)
    return limit, nested(draw(st.lists(st.sampled_from("[{"), min_size=inner, max_size=inner)), leaf)


@settings(max_examples=150, deadline=None)
@given(
    case=deep_arguments(),
    schema=st.sampled_from([{"type": "object"}, {"type": "object", "properties": {"a": {}}}]),
    indent=st.sampled_from([None, 0, 1]),
)
@example(case=(MAX_DEPTH, nested(["["] * (MAX_DEPTH - 1))), schema={"type": "object"}, indent=None)
@example(case=(MAX_DEPTH, nested(["{"] * (MAX_DEPTH - 2), [])), schema={"type": "object"}, indent=None)
@example(case=(MAX_DEPTH, nested(["["] * MAX_DEPTH)), schema={"type": "object"}, indent=None)
@example(case=(127, nested(["{"] * 126)), schema={"type": "object"}, indent=1)
@example(case=(1, {}), schema={"type": "object"}, indent=None)
@example(case=(1, {"a": []}), schema={"type": "object"}, indent=None)
def test_text_and_mappings_are_held_to_the_depth_limit_alike(
    case: tuple[int, dict[str, Any]], schema: dict[str, Any], indent: int | None
) -> None:
    """At every limit, arguments exactly that deep run and one level deeper are refused, with the same
    message, whether they come as text (either path) or as a mapping."""
    limit, args = case
    limits = _core.Limits(BYTES, limit, 10)
    depth = depth_of(args)
    text = json.dumps(args, indent=indent)
    answers = [prepared(table, form, limits) for table in tables(schema) for form in (text, args)]
    if depth <= limit:
        assert all(same(built, args) and error is None for built, error in answers), (limit, depth, answers)
    else:
        refusal = f"arguments for `t` nest deeper than the limit of {limit} levels"
        assert all(built is None and error == refusal for built, error in answers), (limit, depth, answers)


@pytest.mark.parametrize("limit", [1, 64, 127, 128])
def test_tuples_nest_as_lists_do(limit: int) -> None:
    limits = _core.Limits(BYTES, limit, 10)
    table = _core.ToolTable([("t", [], {"type": "object"})])
    value: Any = 1
    for _ in range(limit - 1):
        value = (value,)
    assert prepared(table, {"a": value}, limits)[1] is None
    assert prepared(table, {"a": (value,)}, limits)[1] is not None


@pytest.mark.parametrize("limit", [129, 500, 10_000, 2**64])
def test_a_limit_past_what_the_engine_walks_is_refused_for_every_form(limit: int) -> None:
    """No limit above ``MAX_INPUT_DEPTH`` (128) is taken, by the executor or the engine: past it the engine's
    walks of a value would recurse deeper than it bounds. Under it, text and mappings agree (above)."""
    with pytest.raises(ts.OptionError, match=f"max_input_depth must be at most {MAX_DEPTH}"):
        ts.Executor([], max_input_depth=limit)
    if limit < 2**64:
        with pytest.raises(ts.OptionError, match=f"max_input_depth must be at most {MAX_DEPTH}, got {limit}"):
            _core.Limits(BYTES, limit, 10)


def test_text_far_deeper_than_any_limit_is_refused_without_a_crash() -> None:
    """A million brackets, as text: refused by the depth scan before any parser recursion."""
    table = _core.ToolTable([("t", [], {"type": "object"})])
    limits = _core.Limits(BYTES, MAX_DEPTH, 10)
    for text in ("[" * 1_000_000 + "]" * 1_000_000, '{"a": ' + '{"a": [' * 500_000, "{" * 2_000_000):
        for table_ in tables({"type": "object"}):
            assert prepared(table_, text, limits) == (
                None,
                f"arguments for `t` nest deeper than the limit of {MAX_DEPTH} levels",
            )
    # Brackets in strings do not nest.
    text = json.dumps({"a": "[" * 100_000 + "{" * 100_000})
    assert prepared(table, text, _core.Limits(BYTES, 1, 10))[1] is None


def test_a_checked_rewrite_is_held_to_the_depth_limit_as_a_call_is() -> None:
    """``ToolTable.check`` (a hook's rewrite) reads text and mappings as ``prepare`` does."""
    table = _core.ToolTable([("t", [], {"type": "object"})])
    limits = _core.Limits(BYTES, MAX_DEPTH, 10)
    for depth, runs in ((MAX_DEPTH, True), (MAX_DEPTH + 1, False)):
        args = nested(["["] * (depth - 1))
        for form in (args, json.dumps(args)):
            built, error = table.check(0, form, limits)
            assert (error is None) == runs and (built == args) == runs, (depth, type(form), error)


# -- what nobody tried -------------------------------------------------------------------------------------

HOSTILE = [
    # Escapes: a lone surrogate (json.loads keeps it; no UTF-8 text holds it), pairs, NUL, every short escape.
    '{"s": "\\ud800"}',
    '{"s": "\\udc00"}',
    '{"s": "\\ude00\\ud83d"}',
    '{"s": "\\ud800\\u0041"}',
    '{"s": "\\ud83d\\ude00"}',
    '{"s": "\\u0000\\b\\f\\n\\r\\t\\/\\\\\\""}',
    '{"s": "\\x41"}',
    '{"s": "\\u12"}',
    '{"\\u0073": "key by escape"}',
    '{"s": "\\u00E9\\u00e9"}',
    '{"s": "plain", "\\u0073": "the same key, escaped, last"}',
    '{"n": 1, "\\u006e": 2, "n": 3}',
    # Raw control characters are refused by both (json.loads is strict by default); DEL is not one.
    '{"s": "a\x01b"}',
    '{"s": "a\tb"}',
    '{"s": "a\x7fb"}',
    # Repeated keys: the last value, the first place (json.loads and a dict alike).
    '{"s": "first", "n": 1, "s": "last"}',
    '{"n": "wrong type first", "n": 2}',
    '{"n": 2, "n": "wrong type last"}',
    # A byte order mark, and whitespace JSON has and has not.
    '\ufeff{"n": 1}',
    ' \t\r\n{ "n" :\n1 }\n\t ',
    '{"n":\x0c1}',
    '{"n":\x0b1}',
    '{"n":\u00a01}',
    '{"n": 1}\u2028',
    "",
    "   ",
    # NaN and Infinity literals, which json.loads takes.
    '{"n": NaN}',
    '{"n": -Infinity}',
    '{"n": [Infinity]}',
    # Not an object, or more than one value.
    "[]",
    "1",
    "null",
    '"{}"',
    "{}{}",
    "{} 1",
    # Other broken text.
    '{"n": 1,}',
    "{'n': 1}",
    '{"n": tRue}',
    '{"n": 1',
    "{n: 1}",
    '{"n" 1}',
    '{"a": [1, 2,]}',
]


@pytest.mark.parametrize("text", HOSTILE)
@pytest.mark.parametrize(
    "part",
    [{}, {"type": "integer"}, {"type": "string"}, {"type": ["string", "integer"], "minLength": 1}],
    ids=json.dumps,
)
def test_hostile_text_reads_as_python_reads_it(text: str, part: dict[str, Any]) -> None:
    schema = {"type": "object", "properties": {"n": part, "s": {"type": "string"}}}
    assert_reads_as_python(schema, text)


@pytest.mark.parametrize("size", [1, 1_000, 1_000_000])
def test_long_strings_and_many_members_read_as_python_reads_them(size: int) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 1_000}}}
    assert_reads_as_python(schema, json.dumps({"s": "é" * size}))
    assert_reads_as_python(schema, json.dumps({"s": "\\" * size}))
    members = min(size, 100_000)  # a million members would pass max_input_bytes
    assert_reads_as_python({"type": "object"}, json.dumps({f"k{i}": i for i in range(members)}))
    assert_reads_as_python({"type": "object"}, json.dumps({"a": list(range(members))}))


def test_mappings_of_other_kinds_and_non_string_keys() -> None:
    """A mapping's values are read as ``json.dumps`` writes them, with two deliberate differences: a key that
    is not a string is refused (``json.dumps`` writes ``1`` as ``"1"``, so the tool would get another key),
    and so is a value that is no JSON value (``json.dumps`` raises for it, a set, bytes)."""
    table = _core.ToolTable([("t", [], {"type": "object"})])
    for args in (
        OrderedDict(a=1, b=[1, 2]),
        {"a": (1, (2, 3))},
        {"a": OrderedDict(b=(1,))},
        {"a": [True, None, 1.5, -0.0, "x"]},
    ):
        built, error = prepared(table, args)
        assert error is None and same(built, json.loads(json.dumps(args))), (args, built)
        assert type(built) is dict
    for args, says in (
        ({1: "a"}, "object keys must be strings, got int"),
        ({"a": {None: 1}}, "object keys must be strings, got NoneType"),
        ({"a": {("t",): 1}}, "object keys must be strings, got tuple"),
        ({"a": {1, 2}}, "a value of type `set` is not JSON"),
        ({"a": b"x"}, "a value of type `bytes` is not JSON"),
        ({"a": MappingProxyType({"b": 1})}, "a value of type `mappingproxy` is not JSON"),
        ({"a": "\ud800"}, "lone surrogate"),
        ({"\ud800": 1}, "lone surrogate"),
    ):
        built, error = prepared(table, args)
        assert built is None and error is not None and says in error, (args, error)


def test_a_mapping_that_holds_itself_is_refused_as_too_deep() -> None:
    """``json.dumps`` raises for a cycle; the engine stops at the depth limit, never looping."""
    table = _core.ToolTable([("t", [], {"type": "object"})])
    cyclic: dict[str, Any] = {}
    cyclic["a"] = cyclic
    looped: list[Any] = []
    looped.append(looped)
    for args in (cyclic, {"a": looped}):
        assert prepared(table, args, _core.Limits(BYTES, MAX_DEPTH, 10)) == (
            None,
            f"arguments for `t` nest deeper than the limit of {MAX_DEPTH} levels",
        )


def test_duplicate_calls_spelled_apart_are_the_same_arguments() -> None:
    """``-0`` and ``0``, ``1E2`` and ``100.0``: equal once read, as ``json.loads`` reads them."""
    table = _core.ToolTable([("t", [], {"type": "object"})])
    calls = [
        SimpleNamespace(id="1", name="t", args='{"n": 0, "x": 100.0}'),
        SimpleNamespace(id="1", name="t", args='{"n": -0, "x": 1E2}'),
        SimpleNamespace(id="1", name="t", args='{"n": -0.0, "x": 1E2}'),
    ]
    duplicates = table.prepare(calls, [], LIMITS)[4]
    assert duplicates == [(1, 0, False), (2, 0, True)]


@pytest.mark.anyio
async def test_a_mapping_of_another_kind_runs_as_the_dict_it_reads_as() -> None:
    seen: list[Any] = []

    @ts.tool
    async def keep(a: Any, b: Any = None) -> str:
        seen.append((a, b))
        return "ok"

    calls = [
        ts.ToolCall("1", "keep", MappingProxyType({"a": [1], "b": (2,)})),
        ts.ToolCall("2", "keep", OrderedDict(a={"x": -0.0}, b=None)),
    ]
    outcome = await ts.Executor([keep]).run(calls)
    assert [result.output for result in outcome.results] == ["ok", "ok"]
    assert same(seen, [([1], [2]), ({"x": -0.0}, None)])


@pytest.mark.anyio
async def test_a_tool_gets_what_json_loads_builds_from_the_text() -> None:
    """Through a run: ``-0`` reaches an untyped parameter as the int 0 and a float parameter as 0.0 (not
    -0.0), a 128-level argument runs at ``max_input_depth=128``, and one level more is refused."""
    seen: list[Any] = []

    @ts.tool
    async def take(n: Any, x: float = 1.0, deep: Any = None) -> str:
        seen.append((n, x))
        return "ok"

    deep = json.dumps(nested(["["] * (MAX_DEPTH - 1))["a"])  # 127 levels: 128 as an argument
    outcome = await ts.Executor([take], max_input_depth=MAX_DEPTH).run(
        [
            ts.ToolCall("1", "take", '{"n": -0, "x": -0}'),
            ts.ToolCall("2", "take", '{"n": [-0, -0.0], "deep": ' + deep + "}"),
            ts.ToolCall("3", "take", '{"n": 1, "deep": [' + deep + "]}"),
        ]
    )
    results = outcome.results
    assert [result.error_kind for result in results] == [None, None, "invalid_input"], results
    assert same(seen, [(0, 0.0), ([0, -0.0], 1.0)])
    assert "nest deeper than the limit of 128 levels" in (results[2].error or "")
