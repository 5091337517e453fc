"""Running a tool's body in a worker process (``isolation="process"``).

The body runs in one of anyio's worker processes. The tool's model checks the
call's arguments in the caller first (a refusal is answered ``invalid_input``
and nothing is sent); the checked arguments and the body's return value (or
exception) are pickled across; the function itself
travels by reference (module and qualified name) and is imported in the
worker, so it must live at module level. A cancelled call (a timeout, an
interrupt, a cancelled run) kills its worker process; a worker that dies
(a crash, ``os._exit``, a signal) fails only the call it was running. A
return value or exception that cannot be pickled back (or rebuilt in the
caller) fails its call with a ``BackendError`` naming the tool (and what it
raised). The body's standard input and output, down to file descriptors 0
and 1 that the programs it starts inherit, are ``os.devnull``: those
descriptors are the pipes the worker is driven through.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import pickle
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.to_process

from toolsched._policy.limits import ModelRetry
from toolsched._policy.resilience import Transient, retry_after_of
from toolsched._values.exception_text import described
from toolsched.errors import BackendError, ToolDefinitionError, WorkerLostError

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


def _call_in_worker(tool_name: str, payload: bytes) -> tuple[bool, bytes]:
    """Runs in the worker process: read the call (``payload``: the target, its positional and keyword
    arguments, pickled), resolve the body and call it (an async body on its own loop). Returns whether it
    returned, and its value or exception pickled here, so that what cannot travel is told as such (a
    ``BaseException`` that is not an ``Exception`` is raised as it is). The call is read, and the tool's module
    imported, with the standard streams set aside as the body runs: what a module does as it is imported (a
    program it starts, a print) cannot break the answer either."""
    try:
        with _standard_streams_set_aside():
            target, args, kwargs = pickle.loads(payload)
            body = target.resolve()
            if inspect.iscoroutinefunction(body):
                value = anyio.run(functools.partial(body, *args, **kwargs))
            else:
                value = body(*args, **kwargs)
    except (ModelRetry, Transient) as exc:
        return False, pickle.dumps(_portable(exc), pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        try:
            pickled = pickle.dumps(exc, pickle.HIGHEST_PROTOCOL)
            pickle.loads(pickled)  # one whose ``__init__`` takes other arguments than its ``args`` fails here
        except Exception as why:
            cannot = BackendError(
                f"`{tool_name}` raised an exception that cannot be sent back from its worker process "
                f"({described(why)}): {described(exc)}"
            )
            return False, pickle.dumps(cannot, pickle.HIGHEST_PROTOCOL)
        return False, pickled
    try:
        return True, pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
    except Exception as why:
        cannot = BackendError(
            f"the result of `{tool_name}` ({type(value).__name__}) cannot be sent back from its worker process: "
            f"{described(why)}"
        )
        return False, pickle.dumps(cannot, pickle.HIGHEST_PROTOCOL)


@contextmanager
def _standard_streams_set_aside() -> Iterator[None]:
    """While a body runs, the worker's file descriptors 0 and 1, the pipes its parent talks to it through, read
    and write ``os.devnull`` instead (as ``sys.stdin`` and ``sys.stdout`` do): a program the body starts, or an
    ``os.write(1, ...)``, neither reads the next request nor breaks the answer (a crash, or another call's
    answer taken for this one)."""
    saved = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    try:
        os.dup2(null, 0)
        os.dup2(null, 1)
        yield
    finally:
        os.dup2(saved[0], 0)
        os.dup2(saved[1], 1)
        for fd in (*saved, null):
            os.close(fd)


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
        payload = pickle.dumps((target, args, kwargs), pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise BackendError(
            f"the call of `{tool_name}` cannot be sent to its worker process (its arguments, or a class-form "
            f"tool's attributes, must pickle): {described(exc)}"
        ) from exc
    try:
        returned, pickled = await anyio.to_process.run_sync(_call_in_worker, tool_name, payload, cancellable=True)
    except anyio.BrokenWorkerProcess as exc:
        raise WorkerLostError(f"the worker process running `{tool_name}` exited before returning a result") from exc
    try:
        outcome = pickle.loads(pickled)
    except Exception as why:
        what = "result" if returned else "exception"
        raise BackendError(
            f"the {what} of `{tool_name}` sent back from its worker process cannot be rebuilt here: {described(why)}"
        ) from None
    if returned:
        return outcome
    raise outcome


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
    try:
        pickle.dumps(_ToolMethod(cls, _state_of(tool)), pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise ToolDefinitionError(
            f"tool `{tool_name}`: isolation='process' sends the tool's class and attributes to its worker process, "
            f"and they cannot be pickled ({described(exc)}); create what cannot (locks, open files, live clients) "
            "inside call"
        ) from exc

    async def invoke_in_process(args: Mapping[str, Any], ctx: ToolContext | None) -> Any:
        return await _run_in_worker(tool_name, _ToolMethod(cls, _state_of(tool)), (parse(args), None), {})

    return invoke_in_process


def _state_of(tool: _NamedTool) -> dict[str, Any]:
    """What of a class-form tool's attributes its worker's copy gets: all but what this process caches about it."""
    return {key: value for key, value in vars(tool).items() if key != "_facts_cache"}
