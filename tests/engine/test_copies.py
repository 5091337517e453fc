"""``args_copy``: the copy of a call's input that hooks, guardrails, approvers and saved state get."""

from __future__ import annotations

import copy
import enum
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from toolsched._values.calls import args_copy


class Text(str):
    pass


class Number(int):
    pass


class Level(enum.IntEnum):
    LOW = 1


class Mapping(dict):  # type: ignore[type-arg]
    pass


def containers(value: Any) -> list[Any]:
    """Every mutable container in ``value``, the value itself included."""
    found: list[Any] = []
    if isinstance(value, (dict, list, set, bytearray)):
        found.append(value)
    if isinstance(value, dict):
        for item in value.values():
            found.extend(containers(item))
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            found.extend(containers(item))
    return found


scalars = st.one_of(
    st.text(max_size=5),
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
    st.text(max_size=3).map(Text),
    st.integers().map(Number),
    st.just(Level.LOW),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=3), inner, max_size=3),
        st.dictionaries(st.text(max_size=3), inner, max_size=3).map(Mapping),
        st.binary(max_size=3).map(bytearray),
    ),
    max_leaves=8,
)


@given(args=st.one_of(st.dictionaries(st.text(max_size=4), values, max_size=4), values))
@settings(max_examples=500, deadline=None)
def test_a_copy_equals_the_input_and_shares_no_mutable_part_with_it(args: Any) -> None:
    copied = args_copy(args)
    assert copied == args
    assert type(copied) is type(args)
    if isinstance(args, dict):
        assert list(copied) == list(args)
    originals = {id(part) for part in containers(args)}
    assert not [part for part in containers(copied) if id(part) in originals]


def test_changing_the_copy_leaves_the_input_as_it_was() -> None:
    args: dict[str, Any] = {"path": "a", "limit": 3, "tags": ["x"], "nested": {"deep": [1]}}
    kept = copy.deepcopy(args)
    copied = args_copy(args)
    copied["path"] = "b"
    copied["tags"].append("y")
    copied["nested"]["deep"].append(2)
    copied["new"] = True
    assert args == kept


def test_a_flat_input_of_plain_values_is_a_new_dict_of_the_same_values() -> None:
    args = {"path": "a", "limit": 3, "ratio": 0.5, "force": False, "note": None}
    copied = args_copy(args)
    assert copied == args and copied is not args
    # The values themselves cannot change, so they are shared.
    assert all(copied[key] is args[key] for key in args)


def test_values_of_other_types_are_copied_deeply() -> None:
    """Text or a number of a subclass may hold mutable state: the input is copied in full."""

    class Tagged(str):
        tags: list[str]

    tagged = Tagged("a")
    tagged.tags = ["t"]
    args = {"path": tagged, "level": Level.LOW, "count": Number(2)}
    copied = args_copy(args)
    assert copied == args
    assert copied["path"] is not tagged and copied["path"].tags == ["t"]
    assert copied["path"].tags is not tagged.tags
