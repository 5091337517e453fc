"""The engine's slot builder: the per-call values built in C, slot by slot, held to what their classes make."""

from __future__ import annotations

import abc
import dataclasses
import functools
import gc
import re
import sys
import weakref
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolsched as ts
from toolsched import _core
from toolsched._executor.turn import Job, Plan, Turn, new_job, new_plan, new_turn
from toolsched._policy.tool_rules import UNDECIDED
from toolsched._tools.tools import Tool, ToolFacts
from toolsched._values.fastpath import positional_builder, slot_builder


@dataclasses.dataclass(frozen=True, slots=True)
class Pair:
    left: Any
    right: Any = None


class Marker:
    pass


class Plain:
    __slots__ = ("a", "b", "c")

    def __init__(self, a: Any, b: Any = None) -> None:
        self.a = a
        self.b = b
        self.c = 0


def test_a_miscounted_call_names_the_class_and_its_slots() -> None:
    build = positional_builder(Pair)
    for values in ((), (1, 2, 3)):
        with pytest.raises(TypeError, match=r"Pair takes 2 positional values \(left, right\), \d given"):
            build(*values)
    with_defaults = _core.SlotBuilder(Plain, ("a", "b", "c"), (None, 0))
    assert with_defaults(1).a == 1 and with_defaults(1).b is None and with_defaults(1).c == 0
    # Some of the defaulted slots given: the rest take their own defaults, the last ones.
    partly = _core.SlotBuilder(Plain, ("a", "b", "c"), (10, 20)).function()(1, 2)
    assert (partly.a, partly.b, partly.c) == (1, 2, 20)
    with pytest.raises(TypeError, match=r"Plain takes 1 to 3 positional values \(a, b, c\), 0 given"):
        with_defaults.function()()
    with pytest.raises(TypeError, match="keyword"):
        build(left=1, right=2)


def test_only_own_slots_of_plain_python_classes_are_built() -> None:
    class WithProperty:
        __slots__ = ("a",)

        @property
        def b(self) -> int:
            return 1

    class Child(Plain):
        __slots__ = ("d",)

    with pytest.raises(TypeError, match="not a slot"):
        _core.SlotBuilder(WithProperty, ("b",))
    with pytest.raises(TypeError, match='no slot "missing" of its own'):
        _core.SlotBuilder(Plain, ("missing",))

    class Abstract(metaclass=abc.ABCMeta):
        __slots__ = ("a",)

        @abc.abstractmethod
        def run(self) -> None: ...

    # Built-in and extension types (C or PyO3 classes, heap types on object too), classes on another base and
    # abstract classes may need more than their slots set: refused before any is made (built, these crashed).
    refused: list[tuple[type, tuple[str, ...]]] = [(slice, ("start",)), (Child, ("d",)), (ValueError, ("args",))]
    refused += [(kind, ()) for kind in (functools.partial, _core.SlotBuilder, _core.RuleTable, _core.ToolTable)]
    refused += [(type(re.match("a", "a")), ()), (Abstract, ("a",))]
    for cls, names in refused:
        with pytest.raises(TypeError, match="not a class defined in Python directly on object"):
            _core.SlotBuilder(cls, names)
    with pytest.raises(TypeError, match="more defaults than slots"):
        _core.SlotBuilder(Plain, ("a",), (1, 2))


def test_a_positional_builder_refuses_classes_whose_construction_does_more_than_set_fields() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        value: int

        def __init__(self, value: int) -> None:
            if value < 0:
                raise ValueError("negative")
            object.__setattr__(self, "value", value)

    @dataclasses.dataclass(frozen=True, slots=True)
    class Made:
        value: int

        def __new__(cls, value: int) -> Made:
            return super().__new__(cls)

    class Meta(type):
        pass

    @dataclasses.dataclass(frozen=True, slots=True)
    class Measured(metaclass=Meta):
        value: int

    for cls in (Checked, Made, Measured):
        with pytest.raises(TypeError, match="metaclass, a __new__ or an __init__ of its own"):
            positional_builder(cls)


def test_defaults_a_slot_builder_takes_must_be_shareable() -> None:
    class Holder:
        __slots__ = ("items", "name")

        def __init__(self, name: str) -> None:
            self.name = name
            self.items: list[int] = []

    with pytest.raises(TypeError, match=r"Holder\.items defaults to a list, which instances cannot share"):
        slot_builder(Holder, ("name",), Holder("x"))
    with pytest.raises(TypeError, match="no slot 'other'"):
        slot_builder(Plain, ("other",), Plain(1))
    with pytest.raises(TypeError, match="prototype is not one of it"):
        slot_builder(Plain, ("a",), cast(Plain, Pair(1)))


def test_values_are_held_once_and_released_with_the_instance() -> None:
    """No reference is leaked or lost: by a built instance, a refused call, or the builder's defaults."""
    marker = object()
    build = positional_builder(Pair)
    plain = _core.SlotBuilder(Plain, ("a", "b", "c"), (None, 0))
    before = sys.getrefcount(marker)
    built = [build(marker, marker) for _ in range(100)] + [plain(marker) for _ in range(100)]
    built += [plain.function()(marker, marker, marker) for _ in range(100)]
    assert sys.getrefcount(marker) == before + 200 + 100 + 300
    for _ in range(100):
        with pytest.raises(TypeError):
            build(marker, marker, marker)
        with pytest.raises(TypeError):
            plain.function()(marker, marker, marker, marker)
    del built
    assert sys.getrefcount(marker) == before


def test_built_instances_and_builders_are_seen_by_the_cyclic_collector() -> None:
    def make() -> tuple[weakref.ref[type], Any]:
        @dataclasses.dataclass(frozen=True, slots=True)
        class Node:
            link: Any

        build = positional_builder(Node)
        # A cycle through the builder (class -> its namespace -> builder -> class), and one through an instance.
        Node.build = build  # type: ignore[attr-defined]
        held = Marker()
        looped = build([held])
        looped.link.append(looped)
        return weakref.ref(Node), weakref.ref(held)

    gc.collect()
    cls, instance = make()
    assert gc.is_tracked(positional_builder(Pair)(1, 2))
    gc.collect()
    assert cls() is None and instance() is None


def test_a_job_built_per_call_is_the_job_its_class_makes() -> None:
    """``new_job`` gives every slot it is not handed the value ``Job.__init__`` gives it."""
    call = ts.ToolCall("c1", "read", {"path": "a"})
    tool = cast(Tool, object())
    facts = cast(ToolFacts, object())
    args = {"path": "a"}
    made = Job(3, call, tool, facts, args, 2, "ruling")
    built = new_job(3, call, tool, facts, args, 2, "ruling", args)
    for name in Job.__slots__:
        assert getattr(built, name) == getattr(made, name), name
    assert built.ruled is args and new_job(0, call, tool, facts, args, 0, UNDECIDED, args).ruling is UNDECIDED
    # The job stays a mutable job of its own: nothing a call changes on it reaches another.
    built.attempts += 1
    built.cancel_reason = "stop"
    again = new_job(3, call, tool, facts, args, 2, "ruling", args)
    assert again.attempts == 1 and again.cancel_reason is None


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_turns_jobs_built_in_one_crossing_are_the_jobs_built_one_by_one(data: st.DataObject) -> None:
    """``_core.turn_jobs`` gives for each slot the job ``new_job`` makes of that slot's rows, in order."""
    from toolsched._executor.turn import _JOB_BUILDER

    tools = tuple(cast(Tool, Marker()) for _ in range(data.draw(st.integers(1, 4))))
    facts = tuple(cast(ToolFacts, Marker()) for _ in tools)
    count = data.draw(st.integers(0, 12))
    rows = data.draw(st.lists(st.integers(0, len(tools) - 1), min_size=count, max_size=count))
    args = [data.draw(st.one_of(st.none(), st.dictionaries(st.text(max_size=3), st.integers()))) for _ in rows]
    rulings = [data.draw(st.sampled_from([UNDECIDED, None, ("allow", "r"), ("deny", "r")])) for _ in rows]
    calls = [ts.ToolCall(f"c{slot}", "t", "{}") for slot in range(count)]
    built = _core.turn_jobs(_JOB_BUILDER, calls, tools, facts, rows, args, rulings)
    expected = [
        new_job(slot, calls[slot], tools[index], facts[index], args[slot], index, rulings[slot], args[slot])
        for slot, index in enumerate(rows)
    ]
    assert len(built) == len(expected) and all(type(job) is Job for job in built)
    for job, wanted in zip(built, expected, strict=True):
        for name in Job.__slots__:
            assert getattr(job, name) is getattr(wanted, name) or getattr(job, name) == getattr(wanted, name), name
        assert job.call is wanted.call and job.tool is wanted.tool and job.facts is wanted.facts
        assert job.args is wanted.args and job.ruled is job.args and job.ruling is wanted.ruling


class Index:
    """An object that reads as an index: a tool row must be an int itself, its ``__index__`` never asked."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        raise KeyboardInterrupt


def test_a_turns_jobs_refuse_rows_that_do_not_fit_and_hold_on_to_nothing() -> None:
    """Rows of other lengths, an index past the tools, a row that is not an index, a builder of another
    class: a ``TypeError`` naming what is wrong, no job made, no reference kept."""
    from toolsched._executor.turn import _JOB_BUILDER

    marker = Marker()
    tools = (cast(Tool, marker),)
    facts = (cast(ToolFacts, marker),)
    call = ts.ToolCall("c", "t", "{}")
    before = sys.getrefcount(marker)
    cases: list[tuple[Any, ...]] = [
        ([call], tools, facts, [0, 0], [marker], [None]),
        ([call], tools, facts, [0], [], [None]),
        ([call], tools, facts, [0], [marker], []),
        ([call], tools, (*facts, marker), [0], [marker], [None]),
        ([call], tools, facts, [1], [marker], [None]),
        ([call], tools, facts, [-1], [marker], [None]),
        ([call], tools, facts, ["0"], [marker], [None]),
        ([call], tools, facts, [True], [marker], [None]),
        ([call], tools, facts, [Index(0)], [marker], [None]),
        ([call], tools, facts, [2**70], [marker], [None]),
        ([call, call], tools, facts, [0, 5], [marker, marker], [None, None]),
    ]
    for case in cases:
        with pytest.raises(TypeError):
            _core.turn_jobs(_JOB_BUILDER, *case)
    with pytest.raises(TypeError):
        _core.turn_jobs(_core.SlotBuilder(Plain, ("a", "b", "c")), [call], tools, facts, [0], [marker], [None])
    del case, cases
    gc.collect()
    assert sys.getrefcount(marker) == before
    jobs = _core.turn_jobs(_JOB_BUILDER, [call, call], tools, facts, [0, 0], [marker, marker], [marker, None])
    # Each job holds its tool, facts, args (twice: ``args`` and ``ruled``) and one ruling of the two.
    assert sys.getrefcount(marker) == before + 2 * 4 + 1
    del jobs
    assert sys.getrefcount(marker) == before


@pytest.mark.anyio
async def test_a_turn_built_per_run_is_the_turn_its_class_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``new_turn``, given what a run gives it, sets every slot as ``Turn.__init__`` does, with new lists of its own."""
    import toolsched._executor.executor as executor_module

    given: list[tuple[Any, ...]] = []

    def spy(*values: Any) -> Turn:
        given.append(values)
        return new_turn(*values)

    @ts.tool
    async def read(path: str) -> str:
        """Read."""
        return path

    monkeypatch.setattr(executor_module, "new_turn", spy)
    await ts.Executor([read]).run([ts.ToolCall("c1", "read", '{"path": "a"}')], context="ctx", run_id="r1")
    (values,) = given
    settings, view, count, context, _, emit, live, _, _, durable, run_id, _, _ = values
    made = Turn(settings, view, count, context, emit, live, durable)
    made.run_id = run_id
    built = cast(Any, new_turn)(*values[:11], [], [])
    for name in Turn.__slots__:
        assert getattr(built, name) == getattr(made, name), name
    other = cast(Any, new_turn)(*values[:11], [], [])
    cast(list[Any], built.completed).append(1)
    built.halt = "stop"
    assert other.completed == [] and other.halt is None and other.completed is not built.completed


def test_a_plan_built_per_turn_holds_what_it_is_given() -> None:
    calls = [ts.ToolCall("c1", "read")]
    made = new_plan(calls, [0], [{}], {}, [], [UNDECIDED], [])
    assert type(made) is Plan and made.calls is calls and made.jobs == [] and len(made) == 1
    assert {name: getattr(made, name) for name in Plan.__slots__} == {
        name: getattr(Plan(calls, [0], [{}], {}, [], [UNDECIDED]), name) for name in Plan.__slots__
    }


def test_slots_written_in_place_are_exactly_the_slots_their_descriptors_write() -> None:
    class Other:
        __slots__ = ("x",)

    class Borrowing:
        # Another class's slot, and a built-in read-only member, under names of this class's dictionary:
        # neither lies in this class's layout, so neither may be written where this class keeps its own.
        __slots__ = ("a",)
        x = Other.__dict__["x"]
        start = slice.__dict__["start"]

    class Wide:
        __slots__ = tuple(f"s{i}" for i in range(40))

    borrowed = _core.SlotBuilder(Borrowing, ("a", "x"))
    with pytest.raises(TypeError, match="doesn't apply to a 'Borrowing' object"):
        borrowed(1, 2)
    read_only = _core.SlotBuilder(Borrowing, ("a", "start"))
    with pytest.raises((AttributeError, TypeError)):
        read_only(1, 2)
    assert _core.SlotBuilder(Borrowing, ("a",))(3).a == 3

    # Every slot of a wide class, in any order, reads back as given.
    names = tuple(reversed(Wide.__slots__))
    values = [object() for _ in names]
    built = _core.SlotBuilder(Wide, names).function()(*values)
    assert all(getattr(built, name) is value for name, value in zip(names, values, strict=True))

    # A slot named twice holds the last value; the first is let go, as the descriptor lets it go.
    first, second = Marker(), Marker()
    before = sys.getrefcount(first)
    twice = _core.SlotBuilder(Plain, ("a", "a", "b", "c")).function()(first, second, None, None)
    assert twice.a is second
    assert sys.getrefcount(first) == before
    del twice
    gc.collect()
    assert sys.getrefcount(first) == before


@settings(max_examples=200, deadline=None)
@given(
    count=st.integers(min_value=1, max_value=30),
    data=st.data(),
)
def test_a_built_instance_is_the_instance_its_descriptors_make(count: int, data: st.DataObject) -> None:
    # Any slotted class, any order of its slots, some names given twice, some defaults: the builder's instance holds
    # what writing each value through its descriptor holds, the collector sees the same values, and every
    # reference the builder took is let go with the instance.
    slots = tuple(f"s{i}" for i in range(count))
    cls = type("Random", (), {"__slots__": slots})
    # Every slot named (a builder leaves none unset), in any order, some twice.
    names = [*data.draw(st.permutations(slots)), *data.draw(st.lists(st.sampled_from(slots), max_size=3))]
    defaults_count = data.draw(st.integers(min_value=0, max_value=len(names)))
    given_count = data.draw(st.integers(min_value=len(names) - defaults_count, max_value=len(names)))
    markers = [Marker() for _ in range(len(names))]
    defaults = tuple(markers[len(names) - defaults_count :])
    values = markers[:given_count]
    before = [sys.getrefcount(marker) for marker in markers]

    built = _core.SlotBuilder(cls, names, defaults).function()(*values)
    expected = object.__new__(cls)
    # The values given, then the defaults of the names left: one marker per name, in order.
    for name, value in zip(names, markers, strict=True):
        cls.__dict__[name].__set__(expected, value)
    for name in slots:
        assert getattr(built, name, None) is getattr(expected, name, None)
    assert sorted(map(id, gc.get_referents(built))) == sorted(map(id, gc.get_referents(expected)))
    del built, expected, value
    # The youngest generation holds everything this example made: collecting it alone is enough, and stays cheap
    # however large the rest of the suite's heap is.
    gc.collect(0)
    # What is left held is this test's own lists and tuple of the values.
    assert [sys.getrefcount(marker) for marker in markers] == before


def test_a_failed_build_holds_on_to_nothing() -> None:
    """A refused call of a builder's function lets go of its error at once (it was kept until the engine's next
    entry by another way: about 100 B per refused call: 104 B traced by tracemalloc over 20,000)."""
    import tracemalloc

    build = _core.SlotBuilder(Plain, ("a", "b", "c"), ("d1", "d2")).function()

    def refused() -> None:
        with pytest.raises(TypeError):
            build()

    for _ in range(1000):
        refused()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(20_000):
            refused()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # About 2 MB before; what is left is the test's own tracebacks, freed as they go (a few bytes a call).
    assert grown < 200_000, grown


def test_every_slot_of_the_class_is_written_or_the_builder_is_refused() -> None:
    with pytest.raises(TypeError, match='Plain has a slot "c" the builder does not write'):
        _core.SlotBuilder(Plain, ("a", "b"))


def test_builders_refuse_what_construction_does_beyond_setting_the_fields() -> None:
    class Made:
        __slots__ = ("value",)

        def __new__(cls) -> Made:
            made = super().__new__(cls)
            made.value = 1
            return made

    class Meta(type):
        pass

    class Measured(metaclass=Meta):
        __slots__ = ("value",)

        def __init__(self) -> None:
            self.value = 1

    class Posted:
        __slots__ = ("value",)

        def __init__(self) -> None:
            self.value = 1

        def __post_init__(self) -> None:
            raise AssertionError("never")

    for cls in (Made, Measured, Posted):
        with pytest.raises(TypeError, match="a metaclass, a __new__ or a __post_init__"):
            slot_builder(cls, (), cls())

    @dataclasses.dataclass(frozen=True, slots=True)
    class Derived:
        value: int
        total: int = dataclasses.field(init=False, default=0)

    @dataclasses.dataclass(frozen=True, slots=True)
    class Keyword:
        value: int
        _: dataclasses.KW_ONLY
        flag: bool = False

    @dataclasses.dataclass(frozen=True, slots=True)
    class Seeded:
        value: int
        seed: dataclasses.InitVar[int] = 0

    for cls in (Derived, Keyword, Seeded):
        with pytest.raises(TypeError, match="an InitVar, a field left out of __init__ or a keyword-only field"):
            positional_builder(cls)


def test_a_positional_builder_given_fewer_fields_gives_the_rest_their_defaults() -> None:
    build = positional_builder(Pair, given=1)
    made = build(1)
    assert (made.left, made.right) == (1, None) and made == Pair(1)
    assert build(1, 2) == Pair(1, 2)
    # A field with no default (or one instances cannot share) cannot be left out.
    with pytest.raises(TypeError, match="no default instances can share"):
        positional_builder(Pair, given=0)

    @dataclasses.dataclass(frozen=True, slots=True)
    class Listed:
        items: list[int] = dataclasses.field(default_factory=list)

    with pytest.raises(TypeError, match="no default instances can share"):
        positional_builder(Listed, given=0)


def test_a_result_is_built_not_repaired_unless_marked() -> None:
    from toolsched._values.results import error_result, new_result, repaired_result

    result = new_result("c", "t", 1, None, None, False, 0.0, False, None, False, None, 1)
    assert result == ts.ToolResult("c", "t", 1) and result.repaired is False
    marked = repaired_result(error_result("c", "t", "invalid_input", "bad"))
    assert marked.repaired and marked.error_kind == "invalid_input"
    assert repaired_result(marked) is marked
