"""The speed tricks of the hot path, in one place: each is paid per call, and each names its benchmark.

- ``positional_builder`` and ``slot_builder``: the values made once per call (``ToolResult``,
  ``ToolStarted``, ``ToolFinished``, ``HookEvent``, ``Outcome``, each call's ``Job``, a run's ``Turn`` and
  ``Plan``) are built by the engine's ``SlotBuilder``: a new instance of the class, each value written
  in C where the class keeps that slot (as its member descriptor writes it), with no ``__init__`` frame.
  A frozen dataclass's generated ``__init__`` sets each field through ``object.__setattr__``, a name
  lookup per field, which for a twelve-field ``ToolResult`` costs more than running a no-op tool
  (``python benches/pieces.py`` counts both; the figures are in docs/performance.md).
- ``call_init``: ``ToolCall.__init__`` in C for the usual call (ID, name and arguments given positionally,
  as exact text, exact text and exact text or an exact dict, the ID not empty): no Python frame, the
  three slots written in place as the builders write theirs; any other call of it goes to the Python
  ``__init__``, which checks, converts or refuses it. A turn makes one ``ToolCall`` per model call
  (``python benches/pieces.py``: ``ToolCall(id, name, text)``).
- ``run_until_suspended`` / ``Resume``: a worker of the pool
  (``_executor/pool.py``) steps a call's coroutine itself up to its first suspension, in the
  call's own copy of the context (as a task would run it), so a call that never waits costs no
  task and no wrapper (``python benches/compare.py``: a task costs more than a whole no-op call).
  The step is the engine's (``_core.start``): the context copied, entered and left and the
  coroutine sent to in C, and a coroutine that finishes told apart without the ``StopIteration``
  a Python-level ``send`` raises (``python benches/instructions.py 10 400 --full``). A call that waits
  is awaited through the engine's ``Resume``, each later step in C as well (no generator, no Python
  frame; ``python benches/instructions.py 3 10 --runs 100 --wait``).
- ``WorkerGroup`` (``toolsched/_backends/workers.py``): the pool's workers as plain asyncio tasks, stopped
  as anyio stops a cancelled scope's tasks, instead of anyio task-group tasks or tasks each in a
  cancel scope of its own (``python benches/platform_runs.py --sleep 0.001``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

from toolsched import _core

__all__ = ["Resume", "call_init", "positional_builder", "run_until_suspended", "slot_builder"]

T = TypeVar("T")


def positional_builder(cls: type[T], given: int | None = None) -> Callable[..., T]:
    """A function taking every field of ``cls`` (a frozen slotted dataclass) positionally, in declaration
    order, and returning the instance; what ``__init__`` would do beyond setting the fields is refused.
    With ``given``, it takes the first ``given`` fields, each later one taking its default (which must be
    a value instances can share, as for ``slot_builder``)."""
    if not (dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen):  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__name__} is not a frozen dataclass")
    if "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} has no slots")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__, which a builder would skip")
    init = getattr(cls.__init__, "__code__", None)
    if type(cls) is not type or cls.__new__ is not object.__new__ or init is None or init.co_filename != "<string>":
        # A metaclass, a ``__new__`` or a hand-written ``__init__`` (the generated one is compiled from text) may do
        # more than set the fields.
        raise TypeError(
            f"{cls.__name__} has a metaclass, a __new__ or an __init__ of its own, which a builder would skip"
        )
    fields = dataclasses.fields(cls)
    if len(fields) != len(cls.__dataclass_fields__) or any(not field.init or field.kw_only for field in fields):
        # An ``InitVar``, a field ``__init__`` does not take, or one it takes by keyword only: not what a
        # builder taking every field positionally would give.
        raise TypeError(f"{cls.__name__} has an InitVar, a field left out of __init__ or a keyword-only field")
    names = tuple(field.name for field in fields)
    if tuple(cls.__dict__["__slots__"]) != names or cls.__bases__ != (object,):
        # Every slot is a field, each set: no slot of a base class left unset.
        raise TypeError(f"{cls.__name__} has slots other than its fields, or a base class")
    if given is None or given == len(names):
        build: Callable[..., T] = _core.SlotBuilder(cls, names).function()
        return build
    defaults = tuple(field.default for field in fields[given:])
    for field, value in zip(fields[given:], defaults, strict=True):
        if not (type(value) in _SHAREABLE or (type(value) is tuple and not value)):
            raise TypeError(f"{cls.__name__}.{field.name} has no default instances can share")
    build = _core.SlotBuilder(cls, names, defaults).function()
    return build


# Values a builder may give every instance it makes (and the empty tuple): shared, so never a mutable one.
_SHAREABLE = frozenset({type(None), bool, int, float, str})


def slot_builder(cls: type[T], given: tuple[str, ...], prototype: T) -> Callable[..., T]:
    """A function taking the slots ``given`` positionally and giving each other slot of ``cls`` the value it
    has in ``prototype``: an instance made by the class's own ``__init__``, which stays the one place the
    defaults are written. Each default must be a value instances can share (None, a bool, a number, text, ``()``)."""
    # A ``__dict__`` among the slots is the instance's own dictionary, made when first written: not a slot to fill.
    slots = tuple(name for name in cls.__dict__.get("__slots__", ()) if name != "__dict__")
    if cls.__bases__ != (object,) or not slots or type(prototype) is not cls:
        raise TypeError(f"{cls.__name__} is not a slotted class of its own, or the prototype is not one of it")
    if type(cls) is not type or cls.__new__ is not object.__new__ or hasattr(cls, "__post_init__"):
        # A builder runs neither ``__new__`` nor ``__init__``: a class whose instances need either is built as written.
        raise TypeError(f"{cls.__name__} has a metaclass, a __new__ or a __post_init__, which a builder would skip")
    unknown = [name for name in given if name not in slots]
    if unknown:
        raise TypeError(f"{cls.__name__} has no slot {unknown[0]!r}")
    rest = tuple(name for name in slots if name not in given)
    defaults = tuple(getattr(prototype, name) for name in rest)
    for name, value in zip(rest, defaults, strict=True):
        if not (type(value) in _SHAREABLE or (type(value) is tuple and not value)):
            raise TypeError(f"{cls.__name__}.{name} defaults to a {type(value).__name__}, which instances cannot share")
    build: Callable[..., T] = _core.SlotBuilder(cls, given + rest, defaults).function()
    return build


def call_init(cls: type[T], python_init: Callable[..., None]) -> Callable[..., None]:
    """``cls.__init__`` for ``ToolCall``: the engine's C ``__init__`` for the usual call, ``python_init`` for any
    other; ``python_init`` itself where the engine's is made for another class already (a reloaded module)."""
    try:
        fast: Callable[..., None] = _core.call_init(cls, python_init)
    except TypeError:
        return python_init
    return fast


# ``run_until_suspended(coroutine, base=None)``: runs ``coroutine`` up to its first suspension in a copy
# of the current context (or of ``base``), as a new task would; None when it finished, else the ``Resume``
# that awaits the rest of it in the same copy. Whatever the coroutine does to context variables stays in
# its copy. Both are the engine's (``_core.start``, ``_core.Resume``): no Python frame on any step.
Resume = _core.Resume
run_until_suspended = _core.start
