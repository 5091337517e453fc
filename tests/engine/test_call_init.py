"""``ToolCall.__init__`` in C for the usual call, held to the Python ``__init__`` it stands in for."""

from __future__ import annotations

import collections
import dataclasses
import inspect
import subprocess
import sys
import textwrap
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolsched as ts
from toolsched import _core
from toolsched._values.calls import init_in_python


class _Text(str):
    pass


def _made(init: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, Any]:
    """What ``init`` makes of a new ToolCall: its fields, or the error it raised (type and message)."""
    call = object.__new__(ts.ToolCall)
    try:
        init(call, *args, **kwargs)
    except Exception as exc:
        return "raised", (type(exc), str(exc).replace("init_in_python", "__init__"))
    return "made", tuple((type(getattr(call, name)), getattr(call, name)) for name in ("id", "name", "args"))


_values = st.one_of(
    st.text(max_size=3),
    st.builds(_Text, st.text(max_size=3)),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.builds(collections.OrderedDict, st.dictionaries(st.text(max_size=2), st.integers(), max_size=2)),
    st.builds(types.MappingProxyType, st.dictionaries(st.text(max_size=2), st.integers(), max_size=2)),
    st.none(),
    st.integers(),
    st.binary(max_size=2),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_values, max_size=5),
    st.dictionaries(st.sampled_from(["id", "name", "args", "other"]), _values, max_size=3),
)
def test_the_c_init_makes_or_refuses_what_the_python_init_does(args: list[Any], kwargs: dict[str, Any]) -> None:
    """Any values, positionally or by keyword, of any type: the same fields of the same types, or the same error."""
    assert _made(ts.ToolCall.__init__, tuple(args), kwargs) == _made(init_in_python, tuple(args), kwargs)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        pytest.param({"id": 1, "name": "read"}, r"^ToolCall\.id must be a non-empty string, got 1$", id="id-int"),
        pytest.param({"id": "", "name": "read"}, r"^ToolCall\.id must be a non-empty string, got ''$", id="id-empty"),
        pytest.param({"id": None, "name": "read"}, r"^ToolCall\.id must be .* got None$", id="id-none"),
        pytest.param({"id": "c1", "name": None}, r"^ToolCall\.name must be a string, got NoneType$", id="name-none"),
        pytest.param({"id": "c1", "name": b"read"}, r"^ToolCall\.name must be a string, got bytes$", id="name-bytes"),
        pytest.param(
            {"id": "c1", "name": "read", "args": 5},
            r"^ToolCall\.args must be a mapping or JSON text, got int$",
            id="args-int",
        ),
        pytest.param(
            {"id": "c1", "name": "read", "args": ["x"]},
            r"^ToolCall\.args must be a mapping or JSON text, got list$",
            id="args-list",
        ),
    ],
)
@pytest.mark.parametrize("given", ["by-keyword", "positionally"])
def test_a_field_of_the_wrong_kind_raises_malformed_call_error(
    fields: dict[str, Any], message: str, given: str
) -> None:
    """Named field and rule, as toolsched's own error; still a ValueError and a TypeError for code catching those."""
    with pytest.raises(ts.MalformedCallError, match=message) as raised:
        if given == "by-keyword":
            ts.ToolCall(**fields)
        else:
            ts.ToolCall(*fields.values())
    assert isinstance(raised.value, ts.ToolschedError)
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, TypeError)


def test_the_usual_call_is_made_in_c_and_every_other_by_python() -> None:
    assert type(ts.ToolCall.__init__).__name__ == "method_descriptor"
    args = {"path": "a"}
    call = ts.ToolCall("c1", "read", args)
    assert call.args is args and type(call.id) is str
    assert ts.ToolCall("c1", "read").args == {} and ts.ToolCall("c1", "read").args is not ts.ToolCall("c1", "r").args
    subclassed = ts.ToolCall(_Text("c1"), _Text("read"), _Text("{}"))
    assert type(subclassed.id) is str and type(subclassed.name) is str and type(subclassed.args) is _Text
    with pytest.raises(ValueError, match="non-empty"):
        ts.ToolCall("", "read")
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        ts.ToolCall("c1", "read", nope=1)  # type: ignore[call-arg]
    assert str(inspect.signature(ts.ToolCall)) == "(id, name, args={})"
    assert str(inspect.signature(ts.ToolCall.__init__)) == "(self, /, id, name, args={})"


def test_subclasses_show_their_own_signatures() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Tagged(ts.ToolCall):
        tag: int = 0

    class Numbered(ts.ToolCall):
        def __init__(self, number: int) -> None:
            super().__init__(f"c{number}", "read")

    class Plain(ts.ToolCall):
        pass

    assert "tag: 'int' = 0" in str(inspect.signature(Tagged))
    assert str(inspect.signature(Numbered)) == "(number: 'int') -> 'None'"
    assert str(inspect.signature(Plain)) == "(id, name, args={})"
    assert Numbered(3).id == "c3" and Plain("c1", "read").args == {} and Tagged("c1", "read", {}, 2).tag == 2


def test_the_c_init_refuses_what_is_not_a_tool_call() -> None:
    with pytest.raises(TypeError):
        ts.ToolCall.__init__(object(), "c1", "read")  # type: ignore[arg-type]
    # Made for one class: asked for another (or another Python __init__), refused, and that class keeps its own.
    with pytest.raises(TypeError, match="one class"):
        _core.call_init(ts.Decision, init_in_python)
    with pytest.raises(TypeError, match="one class"):
        _core.call_init(ts.ToolCall, lambda *args: None)


def test_the_c_init_keeps_every_reference_it_should_and_no_other() -> None:
    text = "".join(["{", "}"])
    ident = "".join(["c", "1"])
    before = sys.getrefcount(text), sys.getrefcount(ident)
    calls = [ts.ToolCall(ident, "read", text) for _ in range(100)]
    assert (sys.getrefcount(text), sys.getrefcount(ident)) == (before[0] + 100, before[1] + 100)
    for _ in range(100):
        with pytest.raises(TypeError):
            ts.ToolCall(ident, 3, text)  # type: ignore[arg-type]
    del calls
    assert (sys.getrefcount(text), sys.getrefcount(ident)) == before
    # Made again in place (``__init__`` called on a made call, here of a subclass): the first values let go.
    again = type("Again", (ts.ToolCall,), {"__slots__": ()})(ident, "read", text)
    ts.ToolCall.__init__(again, "c2", "write", {"path": "a"})
    assert (again.id, again.name, again.args) == ("c2", "write", {"path": "a"})
    assert (sys.getrefcount(text), sys.getrefcount(ident)) == before


def test_a_reloaded_calls_module_keeps_a_working_tool_call() -> None:
    """A second ToolCall class (the module reloaded) keeps its Python __init__: both classes make calls."""
    script = textwrap.dedent(
        """
        import importlib
        import toolsched._values.calls as calls
        first = calls.ToolCall
        reloaded = importlib.reload(calls)
        assert reloaded.ToolCall is not first
        assert type(reloaded.ToolCall.__init__).__name__ == "function"
        assert reloaded.ToolCall("c1", "read", "{}").args == "{}"
        assert first("c1", "read").args == {}
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.strip() == "ok", done.stderr
