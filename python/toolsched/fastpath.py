"""The speed tricks of the hot path, in one place: each is paid per call, and each names its benchmark.

- ``positional_builder``: frozen slotted dataclasses made once per call (``ToolResult``,
  ``ToolStarted``, ``ToolFinished``, ``HookEvent``, ``Outcome``) are built as an instance of an
  unfrozen twin class with the very same slots (plain attribute stores, which the interpreter
  specialises), whose ``__class__`` is then set to the frozen class: Python allows that between
  classes of the same slot layout, and checks it. A frozen dataclass's generated ``__init__``
  sets each field through ``object.__setattr__``, a name lookup per field; for a twelve-field
  ``ToolResult`` that is about 1.7 µs, more than running a no-op tool. Writing each slot through
  its descriptor took about half; the twin takes 4.1k instructions where the descriptors took
  10.2k and the dataclass ``__init__`` 18.2k, and 3.3k against 6.2k and 10.5k for a ``HookEvent``
  (``python benches/pieces.py``). The builders are typed where they are made.
- ``run_until_suspended`` / ``Resume``: a worker of the pool
  (``executor/schedule.py``) steps a call's coroutine itself up to its first suspension, in the
  call's own copy of the context (as a task would run it), so a call that never waits costs no
  task and no wrapper (``python benches/compare.py``: a task costs more than a whole no-op call).
  The step is the engine's (``_core.start``): the context copied, entered and left and the
  coroutine sent to in C, and a coroutine that finishes told apart without the ``StopIteration``
  a Python-level ``send`` raises (full pipeline, N = 10: 53.3k -> 51.1k instructions per call,
  ``python benches/instructions.py 10 400 --full``). A call that waits is awaited through the
  engine's ``Resume``, each later step in C as well (no generator, no Python frame): 100 runs of 3
  waiting calls, 116.5k -> 111.8k instructions per call (``python benches/instructions.py 3 10 --runs
  100 --wait``).
- ``WorkerGroup`` (``toolsched/workers.py``): the pool's workers as plain asyncio tasks, stopped
  as anyio stops a cancelled scope's tasks, instead of anyio task-group tasks (about 15 µs each)
  or tasks each in a cancel scope of its own (about 11 µs; ``python benches/platform_runs.py --sleep 0.001``).
"""

from __future__ import annotations

import dataclasses
import keyword
from collections.abc import Callable
from typing import Any, TypeVar

from toolsched import _core

__all__ = ["Resume", "positional_builder", "run_until_suspended"]

T = TypeVar("T")


def positional_builder(cls: type[T]) -> Callable[..., T]:
    """A function taking every field of ``cls`` positionally, in declaration order, and returning the instance."""
    if not (dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen):  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__name__} is not a frozen dataclass")
    if "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} has no slots")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__, which a builder would skip")
    names = [field.name for field in dataclasses.fields(cls)]
    slots = tuple(cls.__dict__["__slots__"])
    if slots != tuple(names) or cls.__bases__ != (object,):
        # A twin must have the very same layout: the fields as its only slots, on a class of its own.
        raise TypeError(f"{cls.__name__} has slots other than its fields, or a base class")
    if not all(name.isidentifier() and not keyword.iskeyword(name) for name in names):
        raise TypeError(f"{cls.__name__} has a field that is not a plain name")
    twin = type(f"_Unfrozen{cls.__name__}", (), {"__slots__": slots, "__module__": __name__})
    namespace: dict[str, Any] = {"_new": object.__new__, "_twin": twin, "_cls": cls}
    parameters = ", ".join(f"v{position}" for position in range(len(names)))
    body = "".join(f"    self.{name} = v{position}\n" for position, name in enumerate(names))
    source = f"def build({parameters}):\n    self = _new(_twin)\n{body}    self.__class__ = _cls\n    return self\n"
    # The source holds nothing but the fields' names (checked to be plain names) and parameter positions.
    exec(source, namespace)
    build: Callable[..., T] = namespace["build"]
    build.__name__ = build.__qualname__ = f"build_{cls.__name__}"
    build.__doc__ = f"{cls.__name__}({', '.join(names)}), every field given positionally."
    return build


# ``run_until_suspended(coroutine, base=None)``: runs ``coroutine`` up to its first suspension in a copy
# of the current context (or of ``base``), as a new task would; None when it finished, else the ``Resume``
# that awaits the rest of it in the same copy. Whatever the coroutine does to context variables stays in
# its copy. Both are the engine's (``_core.start``, ``_core.Resume``): no Python frame on any step.
Resume = _core.Resume
run_until_suspended = _core.start
