"""Values made on the hot path are the same frozen dataclasses the public constructors make."""

from __future__ import annotations

import copy
import dataclasses
import gc
import pickle
from typing import Any

import pytest

import toolsched as ts
from toolsched._policy.hooks import HookEvent, new_hook_event
from toolsched._values.events import new_tool_started
from toolsched._values.fastpath import positional_builder
from toolsched._values.outcome import new_outcome
from toolsched._values.results import new_result

pytestmark = pytest.mark.anyio


def test_a_built_result_equals_the_constructed_one_and_stays_frozen() -> None:
    fields = ("c1", "read", {"n": 1}, None, None, False, 1.5, True, 0, False, None, 2)
    built = new_result(*fields)
    assert type(built) is ts.ToolResult
    assert built == ts.ToolResult(*fields)
    # The fields after ``attempts`` take their defaults (``repaired=False``).
    assert dataclasses.astuple(built) == (*fields, False)
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


@pytest.mark.parametrize(
    ("build", "fields"),
    [
        (new_result, ("c1", "read", {"n": 1}, None, None, False, 1.5, True, 0, False, None, 2)),
        (new_hook_event, ("c1", "read", {"path": "a"}, 0, None, "ctx")),
        (new_tool_started, ("c1", "read", 0, True, None)),
        (new_outcome, ([], [], [], False, [], None, None)),
    ],
)
def test_a_built_value_is_of_its_frozen_class_in_every_way(build: Any, fields: tuple[Any, ...]) -> None:
    """Built by the engine, slot by slot, without ``__init__``: nothing may tell it from a constructed one."""
    built = build(*fields)
    cls = type(built)
    assert cls.__module__.startswith("toolsched.") and not cls.__name__.startswith("_")
    assert isinstance(built, cls) and built.__class__ is cls
    assert built == cls(*fields)
    assert dataclasses.astuple(built) == dataclasses.astuple(cls(*fields))
    assert repr(built) == repr(cls(*fields))
    assert gc.is_tracked(built)
    assert pickle.loads(pickle.dumps(built)) == built
    assert copy.copy(built) == built
    name = dataclasses.fields(cls)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(built, name, "changed")
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(built, name)
    for value in (built, cls(*fields)):
        # Refused as on a constructed value (TypeError on Python 3.11, whose frozen slotted dataclasses
        # call super() with the class before slots were added; AttributeError later).
        with pytest.raises((AttributeError, TypeError)):
            value.extra = 1


def test_a_builder_refuses_classes_whose_slots_are_not_all_its_fields() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Base:
        value: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Derived(Base):
        more: int = 0

    @dataclasses.dataclass(frozen=True, slots=True, weakref_slot=True)
    class Weak:
        value: int

    for cls in (Derived, Weak):
        with pytest.raises(TypeError, match="slots other than its fields, or a base class"):
            positional_builder(cls)
    assert positional_builder(Base)(3) == Base(3)


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


class _Text(str):
    pass


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        (("", "read"), ValueError, "non-empty"),
        ((1, "read"), ValueError, "non-empty"),
        ((None, "read"), ValueError, "non-empty"),
        (("c1", 1), TypeError, "name must be a string"),
        (("c1", b"read"), TypeError, "name must be a string"),
        (("c1", "read", 3), TypeError, "mapping or JSON text"),
        (("c1", "read", ["a"]), TypeError, "mapping or JSON text"),
        (("c1", "read", b"{}"), TypeError, "mapping or JSON text"),
    ],
)
def test_a_tool_call_of_other_types_is_refused_by_name(fields: tuple[Any, ...], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        ts.ToolCall(*fields)


def test_a_tool_call_takes_subclasses_of_text_and_other_mappings() -> None:
    import collections
    import types

    for args in (collections.OrderedDict(a=1), _Text('{"a": 1}')):
        call = ts.ToolCall(_Text("c1"), _Text("read"), args)
        assert call.args is args and call.id == "c1" and call.name == "read"
    # A mapping that is not a dict is held as the dict it reads as: what the engine reads and checks.
    proxied = ts.ToolCall("c1", "read", types.MappingProxyType({"a": 1}))
    assert type(proxied.args) is dict and proxied.args == {"a": 1}
    assert ts.ToolCall("c1", "read").args == {}
