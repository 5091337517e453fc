"""Running a tool's body in a worker process (``isolation="process"``).

The body runs in one of anyio's worker processes. The tool's model checks the
call's arguments in the caller first (a refusal is answered ``invalid_input``
and nothing is sent); the checked arguments and the body's return value (or
exception) are pickled across; the function itself
travels by reference (module and qualified name) and is imported in the
worker, so it must live at module level. A cancelled call (a timeout, an
interrupt, a cancelled run) kills its worker process; a worker that dies
(a crash, ``os._exit``, a signal) fails only the call it was running.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pickle
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.to_process

from toolsched._policy.limits import ModelRetry
from toolsched._policy.resilience import Transient, retry_after_of
from toolsched.errors import ToolDefinitionError, WorkerLostError

if TYPE_CHECKING:
    from toolsched._tools.context import ToolContext


class _NamedTool(Protocol):
    """What process isolation needs of a class-form tool: its name (its class and state are pickled)."""

    name: str


__all__ = ["function_invoker", "method_invoker"]

Invoker = Callable[[Mapping[str, Any], "ToolContext | None"], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class _ModuleFunction:
    """A function named by its module and qualified name, imported again in the worker."""

    module: str
    qualname: str

    def resolve(self) -> Callable[..., Any]:
        target: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            if not hasattr(target, part):
                raise LookupError(f"the worker process cannot find {self.module}.{self.qualname}")
            target = getattr(target, part)
        # ``@tool`` leaves a FunctionTool under the function's name: run the function it wraps.
        body: Callable[..., Any] = target.fn if getattr(target, "is_function_tool", False) else target
        return body


@dataclass(frozen=True, slots=True)
class _ToolMethod:
    """A class-form tool's ``call``: the class by reference, the instance's attributes by value."""

    cls: type[Any]
    state: dict[str, Any]

    def resolve(self) -> Callable[..., Any]:
        instance = object.__new__(self.cls)
        instance.__dict__.update(self.state)
        return instance.call  # type: ignore[no-any-return]


def _call_in_worker(target: _ModuleFunction | _ToolMethod, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Runs in the worker process: resolve the body and call it (an async body on its own loop)."""
    body = target.resolve()
    try:
        if inspect.iscoroutinefunction(body):
            return anyio.run(functools.partial(body, *args, **kwargs))
        return body(*args, **kwargs)
    except (ModelRetry, Transient) as exc:
        raise _portable(exc) from None
    except Exception as exc:
        # What cannot be pickled back (a class defined inside a function, one holding a lock) would break the
        # worker process as it sends it, and the call would be told the worker was lost: told what it raised.
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception as unsent:
            text = f"{type(exc).__qualname__}: {exc}" if str(exc) else type(exc).__qualname__
            raise RuntimeError(
                f"{text} (its exception could not be sent back from the worker process: {unsent})"
            ) from None
        raise


def _portable(exc: ModelRetry | Transient) -> Exception:
    """``exc`` as it can travel back to the caller: itself when it survives pickling, else what it means there, a
    plain ``ModelRetry`` with the model's message or a plain ``Transient`` with its wait. (A subclass whose
    ``__init__`` takes other arguments is rebuilt from its message alone and fails: the caller would see that
    ``TypeError`` instead of the message for the model, or a failure not to retry.)"""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        if isinstance(exc, ModelRetry):
            return ModelRetry(exc.message)
        return Transient(str(exc), retry_after=retry_after_of(exc))
    return exc


async def _run_in_worker(
    tool_name: str, target: _ModuleFunction | _ToolMethod, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    try:
        return await anyio.to_process.run_sync(_call_in_worker, target, args, kwargs, cancellable=True)
    except anyio.BrokenWorkerProcess as exc:
        raise WorkerLostError(f"the worker process running `{tool_name}` exited before returning a result") from exc


def _importable(tool_name: str, what: str, qualname: str) -> None:
    if "<locals>" in qualname:
        raise ToolDefinitionError(
            f"tool `{tool_name}`: isolation='process' needs {what} defined at module level "
            f"(the worker process imports it), not inside a function"
        )


def function_invoker(
    tool_name: str, fn: Callable[..., Any], keywords: Callable[[Mapping[str, Any]], dict[str, Any]]
) -> Invoker:
    """The invoker of a process-isolated ``@tool`` function; ``keywords`` builds its arguments."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if not module or not qualname:
        raise ToolDefinitionError(f"tool `{tool_name}`: isolation='process' needs a named module-level function")
    _importable(tool_name, "the function", qualname)
    target = _ModuleFunction(module, qualname)

    async def invoke_in_process(args: Mapping[str, Any], ctx: ToolContext | None) -> Any:
        return await _run_in_worker(tool_name, target, (), keywords(args))

    return invoke_in_process


def method_invoker(tool: _NamedTool, parse: Callable[[Mapping[str, Any]], Any]) -> Invoker:
    """The invoker of a process-isolated class-form tool: ``call(args, None)`` in the worker."""
    cls = type(tool)
    _importable(tool.name, "the tool class", cls.__qualname__)
    tool_name = tool.name

    async def invoke_in_process(args: Mapping[str, Any], ctx: ToolContext | None) -> Any:
        state = {key: value for key, value in vars(tool).items() if key != "_facts_cache"}
        return await _run_in_worker(tool_name, _ToolMethod(cls, state), (parse(args), None), {})

    return invoke_in_process
