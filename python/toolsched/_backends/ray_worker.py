"""What a Ray worker runs for ``RayBackend``: a tool's body as it travels to the cluster, the context the body
sees there, and the task and actors that run it (the caller's side is ``toolsched._backends.backends``).

A worker checks what it sends back: a result over the backend's size limit, or one that cannot be
pickled, is refused in the worker with an error naming the tool (with ``max_result_bytes=None`` a result
is not measured, and one that cannot be pickled fails with Ray's own serialisation error); an exception Ray
could not rebuild on the caller's side comes back as a ``BackendError`` naming its type and message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from toolsched._tools.context import ToolContext
from toolsched._values.events import Event
from toolsched.errors import BackendError, BackendUnavailableError, ResultTooLargeError

__all__ = [
    "AsyncToolWorker",
    "Body",
    "ContextSpec",
    "Packed",
    "SyncToolWorker",
    "pack",
    "ray_package",
    "summary",
    "tool_task",
]

_ray_package: Any = None


def ray_package() -> Any:
    """The ``ray`` module, imported on first use (importing it takes a second or more)."""
    global _ray_package
    if _ray_package is None:
        try:
            import ray
        except ImportError as exc:
            raise BackendUnavailableError("RayBackend needs the `ray` package: pip install 'toolsched[ray]'") from exc
        _ray_package = ray
    return _ray_package


def summary(exc: BaseException) -> str:
    """The first line of an exception's message, kept short."""
    text = ""
    try:
        text = str(exc)
    except Exception:
        text = ""
    for line in text.splitlines():
        if line.strip():
            text = line.strip()
            break
    return text if len(text) <= 300 else text[:297] + "..."


@dataclass(frozen=True, slots=True)
class Body:
    """A tool's body as a Ray worker receives it: the function and how it takes its context."""

    tool_name: str
    fn: Callable[..., Any]
    is_async: bool
    # "keyword": a ``@tool`` function with a ``ctx`` parameter; "positional": a
    # class-form tool's ``call(args, ctx)``; "none": no context.
    context: Literal["keyword", "positional", "none"]
    max_result_bytes: int | None


@dataclass(frozen=True, slots=True)
class ContextSpec:
    """What of a ``ToolContext`` crosses to the worker."""

    call_id: str
    tool_name: str
    context: Any
    interactive: bool


class WorkerContext(ToolContext):
    """The context a body sees on a Ray worker.

    Progress and partial updates are collected and reported by the executor
    when the call returns; ``cancelled`` also reads Ray's cancellation flag
    (set when a timed-out call on a sync actor is cancelled).
    """

    __slots__ = ()

    @property
    def cancelled(self) -> bool:
        if self._cancelled:
            return True
        try:
            return bool(ray_package().get_runtime_context().is_canceled())
        except (RuntimeError, AttributeError):
            return False


def _arguments(
    body: Body, positional: tuple[Any, ...], keywords: dict[str, Any], spec: ContextSpec | None, events: list[Event]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if body.context == "none":
        return positional, keywords
    ctx = (
        None
        if spec is None
        else WorkerContext(spec.call_id, spec.tool_name, spec.context, spec.interactive, events.append)
    )
    if body.context == "keyword":
        return positional, {**keywords, "ctx": ctx}
    return (*positional, ctx), keywords


def _result_bytes(value: Any) -> int:
    """The size of a result as it will be stored: exact for text and bytes, pickled size otherwise."""
    if value is None or isinstance(value, (bool, int, float)):
        return 0
    if isinstance(value, str):
        return len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if isinstance(value, memoryview):
        return value.nbytes
    out_of_band = 0

    def count(buffer: Any) -> bool:
        nonlocal out_of_band
        out_of_band += buffer.raw().nbytes
        return False

    return len(ray_package().cloudpickle.dumps(value, protocol=5, buffer_callback=count)) + out_of_band


def _checked(body: Body, value: Any) -> Any:
    """Refuses, in the worker, a result over the backend's size limit or one that cannot be sent back."""
    if body.max_result_bytes is None:
        return value
    try:
        size = _result_bytes(value)
    except Exception as exc:
        raise BackendError(
            f"the result of `{body.tool_name}` ({type(value).__name__}) cannot be sent back from the Ray worker: "
            f"{type(exc).__name__}: {summary(exc)}"
        ) from None
    if size > body.max_result_bytes:
        raise ResultTooLargeError(
            f"the result of `{body.tool_name}` is {size:,} bytes, over the Ray backend's limit of "
            f"{body.max_result_bytes:,} (RayBackend(max_result_bytes=...)); return less, or store it "
            "and return where it is"
        )
    return value


def _run_body(
    body: Body, positional: tuple[Any, ...], keywords: dict[str, Any], spec: ContextSpec | None
) -> tuple[Any, tuple[Event, ...]]:
    """Runs in a Ray worker: the body (an async one on its own event loop), its result and its events."""
    events: list[Event] = []
    positional, keywords = _arguments(body, positional, keywords, spec, events)
    try:
        if body.is_async:
            # asyncio's own runner: anyio code runs on it as on anyio.run, which costs more per call.
            value = asyncio.run(body.fn(*positional, **keywords))
        else:
            value = body.fn(*positional, **keywords)
    except Exception as exc:
        _refuse_unsendable(body, exc)
        raise
    return _checked(body, value), tuple(events)


def _refuse_unsendable(body: Body, exc: Exception) -> None:
    """Raises a ``BackendError`` naming a body's exception when Ray could not rebuild it on the caller's side."""
    cloudpickle = ray_package().cloudpickle
    try:
        cloudpickle.loads(cloudpickle.dumps(exc))
    except Exception as problem:
        raise BackendError(
            f"`{body.tool_name}` raised {type(exc).__name__}: {summary(exc)} (on a Ray worker; the exception "
            f"cannot be sent back as it is: {type(problem).__name__}: {summary(problem)})"
        ) from exc


# A call's arguments travel to Ray as one value, or none at all: Ray serialises each argument of a
# task on its own, and each one costs the submitting process tens of microseconds
# (``python benches/ray_throughput.py``).
Packed = tuple[tuple[Any, ...], dict[str, Any], ContextSpec | None] | None
_NOTHING: tuple[tuple[Any, ...], dict[str, Any], None] = ((), {}, None)


def pack(positional: tuple[Any, ...], keywords: dict[str, Any], spec: ContextSpec | None) -> tuple[Any, ...]:
    """The arguments of a Ray task or actor call for one tool call: ``()`` when there are none."""
    if not positional and not keywords and spec is None:
        return ()
    return ((positional, keywords, spec),)


def tool_task(body: Body, *, takes_arguments: bool = True) -> Callable[..., tuple[Any, tuple[Event, ...]]]:
    """The Ray task of one tool: its body travels with the function, exported to the cluster once.

    Without ``takes_arguments`` the task takes no parameter at all, for calls that send none (``pack``
    gave ``()``): Ray binds the arguments of a task that has parameters to its signature on every call.
    """
    if not takes_arguments:

        def run_bare_tool() -> tuple[Any, tuple[Event, ...]]:
            return _run_body(body, *_NOTHING)

        return run_bare_tool

    def run_tool(packed: Packed = None) -> tuple[Any, tuple[Event, ...]]:
        return _run_body(body, *(packed or _NOTHING))

    return run_tool


class SyncToolWorker:
    """A Ray actor holding its own copy of a tool with a sync body, one call at a time."""

    def __init__(self, body: Body) -> None:
        self._body = body

    def run(self, packed: Packed = None) -> tuple[Any, tuple[Event, ...]]:
        return _run_body(self._body, *(packed or _NOTHING))


class AsyncToolWorker:
    """A Ray actor holding its own copy of a tool with an async body, on the actor's event loop."""

    def __init__(self, body: Body) -> None:
        self._body = body

    async def run(self, packed: Packed = None) -> tuple[Any, tuple[Event, ...]]:
        body = self._body
        positional, keywords, spec = packed or _NOTHING
        events: list[Event] = []
        positional, keywords = _arguments(body, positional, keywords, spec, events)
        try:
            value = await body.fn(*positional, **keywords)
        except Exception as exc:
            _refuse_unsendable(body, exc)
            raise
        return _checked(body, value), tuple(events)
