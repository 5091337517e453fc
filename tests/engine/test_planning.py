"""ToolTable.prepare on turns larger than one chunk: dedup over the whole turn, and the collector left as found."""

from __future__ import annotations

import gc
import json
import random
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

import toolsched as ts
from toolsched import _core

LIMITS = _core.Limits(16 * 1024 * 1024, 64, 10)
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def table() -> _core.ToolTable:
    return _core.ToolTable([("read", ["cat"], SCHEMA), ("write", [], SCHEMA)])


Row = tuple[int, int, Any, str | None, str | None]


def prepare(tools: _core.ToolTable, calls: Any) -> tuple[list[Row], list[tuple[int, int, bool]]]:
    """``prepare``'s columns as ``(index, tool, args, error_kind, message)`` rows, checking the columns agree."""
    tool_rows, arg_rows, failures, positions, duplicates, _ = tools.prepare(calls, [], LIMITS)
    assert len(tool_rows) == len(arg_rows)
    assert (positions is None) == (not duplicates)
    indices = list(range(len(tool_rows))) if positions is None else positions
    assert len(indices) == len(tool_rows)
    columns = zip(indices, tool_rows, arg_rows, strict=True)
    rows: list[Row] = [(index, tool, args, None, None) for index, tool, args in columns]
    assert [slot for slot, _, _ in failures] == sorted({slot for slot, _, _ in failures})
    for slot, kind, message in failures:
        assert arg_rows[slot] is None
        rows[slot] = (indices[slot], tool_rows[slot], None, kind, message)
    return rows, duplicates


def decoded(args: Any) -> Any:
    if not isinstance(args, str):
        return args
    try:
        return json.loads(args) if args.strip() else {}
    except ValueError:
        return None


def same_arguments(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str) and a == b:
        return True
    first, second = decoded(a), decoded(b)
    return first is not None and second is not None and first == second


def large_turn(count: int, seed: int) -> list[ts.ToolCall]:
    """Calls whose IDs repeat far apart, with the same or other arguments, as text or objects."""
    rng = random.Random(seed)
    calls = []
    for _ in range(count):
        key = rng.randrange(count // 2)
        path = f"src/{rng.choice([key, key + 1])}.py"
        args: Any = rng.choice(
            [json.dumps({"path": path}), json.dumps({"path": path}, indent=2), {"path": path}, '{"path": 1}', "{oops"]
        )
        calls.append(ts.ToolCall(f"call_{key}", rng.choice(["read", "cat", "write", "nope"]), args))
    return calls


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_repeated_ids_far_apart_are_dropped_in_favour_of_the_first(seed: int) -> None:
    calls = large_turn(3000, seed)
    planned, duplicates = prepare(table(), calls)

    first_index: dict[str, int] = {}
    expected_duplicates = []
    for index, call in enumerate(calls):
        if call.id in first_index:
            first = first_index[call.id]
            expected_duplicates.append((index, first, not same_arguments(calls[first].args, call.args)))
        else:
            first_index[call.id] = index
    assert [row[0] for row in planned] == list(first_index.values())
    assert duplicates == expected_duplicates
    assert any(index - first > 1000 for index, first, _ in duplicates)
    assert {differ for _, _, differ in duplicates} == {True, False}


def test_every_first_call_gets_the_verdict_it_gets_alone() -> None:
    tools = table()
    calls = large_turn(3000, 4)
    planned, _ = prepare(tools, calls)
    for row in planned:
        alone, no_duplicates = prepare(tools, [calls[row[0]]])
        assert no_duplicates == []
        assert row[1:] == alone[0][1:]


def test_valid_arguments_come_back_decoded_and_objects_as_copies_of_what_was_validated() -> None:
    calls = [
        ts.ToolCall(f"c{i}", "read", json.dumps({"path": f"p{i}"}) if i % 2 else {"path": f"p{i}"}) for i in range(1500)
    ]
    planned, _ = prepare(table(), calls)
    assert [row[2] for row in planned] == [{"path": f"p{i}"} for i in range(1500)]
    # The caller's mapping is not handed on: what runs cannot change with it.
    assert not any(row[2] is calls[row[0]].args for row in planned)


def calls_then_a_bad_one(count: int) -> Iterator[Any]:
    yield from (ts.ToolCall(f"c{i}", "read", '{"path": "a"}') for i in range(count))
    yield SimpleNamespace(id=7, name="read", args='{"path": "a"}')


@pytest.mark.parametrize("enabled", [True, False])
def test_prepare_leaves_the_collector_as_it_found_it(enabled: bool) -> None:
    was_enabled = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        planned, _ = prepare(table(), [ts.ToolCall(f"c{i}", "read", '{"path": "a"}') for i in range(2000)])
        assert len(planned) == 2000
        assert gc.isenabled() is enabled
        with pytest.raises(TypeError):
            table().prepare(calls_then_a_bad_one(1200), [], LIMITS)
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was_enabled else gc.disable()


def test_a_turn_without_repeated_ids_has_no_position_column() -> None:
    calls = [ts.ToolCall(f"c{i}", "read" if i % 3 else "nope", '{"path": "a"}') for i in range(700)]
    tool_rows, arg_rows, failures, positions, duplicates, _ = table().prepare(calls, [], LIMITS)
    assert positions is None and duplicates == []
    assert tool_rows == [0 if i % 3 else -1 for i in range(700)]
    assert [slot for slot, kind, _ in failures] == [i for i in range(700) if i % 3 == 0]
    assert {kind for _, kind, _ in failures} == {"unknown_tool"}
    assert arg_rows == [{"path": "a"} if i % 3 else None for i in range(700)]
