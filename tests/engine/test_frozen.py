"""Values made on the hot path are the same frozen dataclasses the public constructors make."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

import toolsched as ts
from toolsched.fastpath import positional_builder
from toolsched.hooks import HookEvent, new_hook_event
from toolsched.outcome import new_outcome
from toolsched.results import new_result

pytestmark = pytest.mark.anyio


def test_a_built_result_equals_the_constructed_one_and_stays_frozen() -> None:
    fields = ("c1", "read", {"n": 1}, None, None, False, 1.5, True, 0, False, None, 2)
    built = new_result(*fields)
    assert type(built) is ts.ToolResult
    assert built == ts.ToolResult(*fields)
    assert dataclasses.astuple(built) == fields
    assert dataclasses.replace(built, batch=3).batch == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.output = "changed"  # type: ignore[misc]


def test_outcome_and_hook_event_builders_fill_every_field() -> None:
    result = new_result("c1", "read", "x", None, None, False, 0.0, False, 0, False, None, 1)
    outcome = new_outcome([result], [], [], False, [], None, None)
    assert outcome == ts.Outcome([result])
    assert outcome.state is None and outcome.run_id is None
    event = new_hook_event("c1", "read", {"path": "a"}, 0, result, "ctx")
    assert event == HookEvent("c1", "read", {"path": "a"}, 0, result, "ctx")


def test_a_builder_refuses_classes_it_cannot_build_faithfully() -> None:
    @dataclasses.dataclass(slots=True)
    class Mutable:
        value: int

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        value: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        value: int

        def __post_init__(self) -> None:
            if self.value < 0:
                raise ValueError("negative")

    for cls, message in ((Mutable, "not a frozen dataclass"), (NoSlots, "no slots"), (Checked, "__post_init__")):
        with pytest.raises(TypeError, match=message):
            positional_builder(cls)


async def test_results_of_a_run_are_frozen_tool_results() -> None:
    @ts.tool
    async def read(path: str) -> str:
        """Read."""
        return path.upper()

    outcome = await ts.Executor([read]).run([ts.ToolCall("c1", "read", '{"path": "a"}')])
    (result,) = outcome.results
    assert result == ts.ToolResult("c1", "read", "A", None, None, False, result.duration_ms, False, 0, False, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.is_error = True  # type: ignore[misc]


def test_calls_and_results_survive_replace_pickle_and_copy() -> None:
    call = ts.ToolCall("c1", "read", {"path": "a"})
    result = new_result("c1", "read", {"n": [1]}, None, None, False, 1.5, True, 0, False, None, 1)
    for value in (call, result):
        assert pickle.loads(pickle.dumps(value)) == value
        assert copy.copy(value) == value
        assert copy.deepcopy(value) == value
    assert dataclasses.replace(call, args='{"path": "b"}') == ts.ToolCall("c1", "read", '{"path": "b"}')
    assert ts.ToolCall("c1", "read").args == {}
    with pytest.raises(ValueError, match="non-empty"):
        dataclasses.replace(call, id="")


def test_a_dataclass_subclass_of_tool_call_is_validated_too() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class TracedCall(ts.ToolCall):
        trace: str = ""

    assert TracedCall("c1", "read", {}, "t").trace == "t"
    with pytest.raises(ValueError, match="non-empty"):
        TracedCall("", "read")
    with pytest.raises(TypeError, match="mapping or JSON text"):
        TracedCall("c1", "read", 3)  # type: ignore[arg-type]
