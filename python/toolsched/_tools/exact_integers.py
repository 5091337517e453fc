"""The exact-integer step: JSON Schema's ``integer`` accepts ``1.0``, and a tool's ``int`` parameter (or
``list[int]``, ``dict[str, int]``, ``int | None`` ...) gets ``1`` (the schema already refused any fraction).

A tool's invoker takes the step (``Tool.facts``), and so does a backend's invoker, which runs the body without
the tool's own (``backends.assign_backends``). For a plain function tool with one integer parameter, the step
takes the place of the function's plain invoker rather than wrapping it: one Python frame a call less
(``python benches/instructions.py 1000 6``).
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from toolsched._tools.context import ToolContext
from toolsched._tools.schema import IntegerFix, integer_fix, integer_scalar

__all__ = ["exact_step", "mark_plain", "with_exact_integers"]

Args = Mapping[str, Any]
Invoker = Callable[[Args, ToolContext | None], Awaitable[Any]]

# Each invoker made as the plain call of a function (``mark_plain``), and that function. Told by identity: an
# attribute would be answered by a mock's ``__getattr__``, and copied onto a wrapper by ``functools.wraps``.
_PLAIN_INVOKERS: weakref.WeakKeyDictionary[Callable[..., Any], Callable[..., Awaitable[Any]]] = (
    weakref.WeakKeyDictionary()
)


def mark_plain(invoke: Invoker, fn: Callable[..., Awaitable[Any]]) -> None:
    """Notes ``invoke`` as calling ``fn`` with the arguments as keywords and nothing else."""
    _PLAIN_INVOKERS[invoke] = fn


def exact_step(schema: Any) -> tuple[IntegerFix | None, str | None]:
    """The step for arguments of ``schema`` (None when nothing in it is an integer), and the one top-level
    integer property when nothing else in it is an integer (None otherwise)."""
    fix = integer_fix(schema)
    if fix is None:
        return None, None
    key = integer_scalar(schema)
    return (fix, None) if key is None else (_one_integer(key), key)


def with_exact_integers(invoke: Invoker, step: IntegerFix, key: str | None = None) -> Invoker:
    """``invoke`` handed the arguments after ``step`` (``exact_step``'s, with its ``key``)."""
    plain = _PLAIN_INVOKERS.get(invoke) if key is not None and type(invoke) is types.FunctionType else None
    if plain is not None and key is not None:
        return _plain_with_integer(plain, key)

    def invoke_with_integers(args: Args, ctx: ToolContext | None) -> Awaitable[Any]:
        return invoke(step(args), ctx)

    return invoke_with_integers


def _one_integer(key: str) -> IntegerFix:
    """The step of a schema whose one integer is the top-level property ``key``: one lookup, no walk; the
    arguments themselves when ``key`` holds no float, else a copy with ``key`` an int."""

    def one_integer(args: Args) -> Args:
        value = args.get(key)
        if type(value) is float:
            fixed = dict(args)
            fixed[key] = int(value)
            return fixed
        return args

    return one_integer


def _plain_with_integer(fn: Callable[..., Awaitable[Any]], key: str) -> Invoker:
    """A plain invoker of ``fn`` that takes ``_one_integer(key)``'s step itself, written out: calling it would
    be the frame this saves."""

    def invoke_plain_with_integer(args: Args, ctx: ToolContext | None) -> Awaitable[Any]:
        value = args.get(key)
        if type(value) is float:
            fixed = dict(args)
            fixed[key] = int(value)
            return fn(**fixed)
        return fn(**args)

    return invoke_plain_with_integer
