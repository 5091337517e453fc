"""Tool calls as the model emitted them: ``ToolCall``, the plain copy the executor holds, and ``Duplicate``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from toolsched import _core
from toolsched._values.exception_text import described
from toolsched._values.fastpath import call_init
from toolsched._values.numeric_options import shown
from toolsched.errors import MalformedCallError

__all__ = ["Duplicate", "ToolCall", "args_copy", "call_list", "init_in_python", "plain_call", "plain_calls"]


class _NoArgs:
    """The default of ``ToolCall.args``: a fresh empty mapping for each call."""

    def __repr__(self) -> str:
        return "{}"


_NO_ARGS: Any = _NoArgs()


def _check_call(id: str, name: str, args: Any) -> None:
    # Told by the real type: an object can claim to be text through its ``__class__``.
    # Told empty by its text: a subclass's ``__len__`` or ``__bool__`` may say otherwise.
    if not issubclass(type(id), str) or not str.__len__(id):
        raise MalformedCallError(f"ToolCall.id must be a non-empty string, got {shown(id)}")
    if not issubclass(type(name), str):
        raise MalformedCallError(f"ToolCall.name must be a string, got {type(name).__name__}")
    if not issubclass(type(args), (str, Mapping)):
        raise MalformedCallError(f"ToolCall.args must be a mapping or JSON text, got {type(args).__name__}")


def _read_mapping(args: Mapping[str, Any]) -> dict[str, Any]:
    """A mapping's items as a dict; a mapping that raises when read is refused by name."""
    try:
        return dict(args)
    except Exception as exc:
        detail = described(exc)
        raise MalformedCallError(
            f"ToolCall.args must be a mapping that can be read, but reading the {type(args).__name__} raised {detail}"
        ) from exc


@dataclass(frozen=True, slots=True, init=False)
class ToolCall:
    """One tool call as the model emitted it.

    ``args`` is a mapping, or JSON text as OpenAI sends it (an empty mapping when not given).
    """

    id: str
    name: str
    args: Mapping[str, Any] | str = field(default_factory=dict)

    # Written out rather than generated: a turn builds one per call, and setting the
    # slots directly costs half of what the generated ``__init__`` does.
    def __init__(self, id: str, name: str, args: Mapping[str, Any] | str = _NO_ARGS) -> None:
        if args is _NO_ARGS:
            args = {}
        if not (type(id) is str and id and type(name) is str and (type(args) is str or type(args) is dict)):
            # Anything but the usual call (told by exact types) is checked in full.
            _check_call(id, name, args)
            # An ID or name of a text subclass is kept as plain text: its own equality and hash
            # could make one ID two, or two IDs one, wherever calls are told apart by their IDs.
            id, name = str.__str__(id), str.__str__(name)
            if not isinstance(args, (str, dict)):
                # A mapping of another kind (a ``MappingProxyType``, a ``Mapping`` class) as the dict it reads as:
                # what the engine reads and checks.
                args = _read_mapping(args)
        _set_call_id(self, id)
        _set_call_name(self, name)
        _set_call_args(self, args)

    def __post_init__(self) -> None:
        # Not called by the ``__init__`` above; a dataclass subclass's generated ``__init__`` calls it.
        _check_call(self.id, self.name, self.args)


_set_call_id = vars(ToolCall)["id"].__set__
_set_call_name = vars(ToolCall)["name"].__set__
_set_call_args = vars(ToolCall)["args"].__set__
# The usual call (ID, name and arguments given positionally, of the exact types) is made in C, every other
# one by the ``__init__`` above (``fastpath.call_init``).
init_in_python = ToolCall.__init__
setattr(ToolCall, "__init__", call_init(ToolCall, init_in_python))  # noqa: B010 (mypy: no method assignment)


def plain_call(call: Any, position: int) -> ToolCall:
    """``call`` as a plain ``ToolCall``, each of its fields read once: the call the executor holds from then on.

    A subclass may compute its fields on every read, or change them after it
    was handed over; the executor reads a call once, when it takes it, so that
    its result carries the ID it was taken with. ``MalformedCallError`` names the
    call's position (``calls[position]``) when it is not a ToolCall, when
    reading a field raises, or when a field is not what a ToolCall holds.
    """
    if type(call) is ToolCall:
        return call
    if not isinstance(call, ToolCall):
        raise MalformedCallError(f"calls[{position}] must be a ToolCall, got {type(call).__name__}")
    fields: list[Any] = []
    for field_name in ("id", "name", "args"):
        try:
            fields.append(getattr(call, field_name))
        except Exception as exc:
            detail = described(exc)
            raise MalformedCallError(
                f"calls[{position}]: reading {type(call).__name__}.{field_name} raised {detail}"
            ) from exc
    try:
        return ToolCall(*fields)
    except MalformedCallError as exc:
        raise MalformedCallError(f"calls[{position}]: {exc}") from exc


def call_list(calls: Iterable[Any]) -> list[Any]:
    """A turn's calls as a list: ``calls`` itself when it is one, else what the iterable gives.

    ``MalformedCallError`` for what is not a collection of calls: text, a mapping and a lone ``ToolCall`` (each
    would be read as something else: its characters, its keys) and anything that is not iterable.
    """
    if type(calls) is list:
        return calls
    if isinstance(calls, (str, bytes, bytearray, Mapping, ToolCall)) or not isinstance(calls, Iterable):
        raise MalformedCallError(f"calls must be a list (or another iterable) of ToolCall, got {type(calls).__name__}")
    return list(calls)


def plain_calls(calls: list[Any]) -> list[ToolCall]:
    """The turn's calls with each one that is not exactly a ``ToolCall`` replaced by its ``plain_call``."""
    return [plain_call(call, position) for position, call in enumerate(calls)]


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A call dropped because an earlier call of the turn had the same ID."""

    call_id: str
    index: int
    first_index: int
    args_differ: bool


# ``args_copy(args)``: a copy of a call's input that shares nothing mutable with the original. A dict whose
# values are each exactly text, an int, a float, a bool or None is copied shallowly, anything else deep-copied.
# Made in the engine: each hook's event takes one per call, and the engine's type checks and copy cost less than
# the same loop in Python (``python benches/pieces.py``).
args_copy: Callable[[Any], Any] = _core.detached
