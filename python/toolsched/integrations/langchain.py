"""LangChain tools as toolsched tools.

::

    from toolsched.integrations.langchain import from_langchain

    executor = ts.Executor([from_langchain(search, read_only=True, concurrency_safe=True), my_tool])

``from_langchain(tool, **metadata)`` wraps any LangChain ``BaseTool`` (``@tool``
functions, ``StructuredTool``, subclasses, tools from toolkits). The schema the
model sees is the tool's ``tool_call_schema`` (injected arguments left out) as
JSON Schema, validated by the engine before LangChain sees the call; a tool
whose schema cannot be written as JSON Schema is refused when it is wrapped
(``ToolDefinitionError`` naming the tool and the argument). The keywords are
those of ``@ts.tool`` (``read_only``, ``concurrency_safe``, ``timeout``,
``max_result_chars``, ...): LangChain tools carry no such flags, so without them a
tool is treated as writing and unsafe to run beside others.

A call invokes the tool as LangGraph does, with a tool call (so
``InjectedToolCallId`` arguments receive the call's ID and LangChain's callbacks
and tracing see the run); async tools are awaited (on trio, where LangChain's
async code cannot run, on an asyncio loop in a worker thread, where a cancelled
call's task is cancelled and a timeout abandons it), sync ones run in a worker
thread. The output is the ``ToolMessage``'s content. A message the tool marks
as an error (its ``handle_tool_error``) becomes an ``execution_error`` whose
message is the tool's text (``LangChainToolError``). Model-supplied values for
injected arguments are dropped. Needs ``langchain-core``
(``pip install 'toolsched[langgraph]'``).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import anyio
import anyio.to_thread
import pydantic
import sniffio

from toolsched._backends.threads import run_in_thread
from toolsched._tools.context import ToolContext
from toolsched._tools.schema import inline_refs, model_schema
from toolsched._tools.tools import Tool, refuse_unknown_options
from toolsched.errors import ToolDefinitionError, ToolschedError

try:
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import BaseTool
    from langchain_core.utils.function_calling import convert_to_openai_function
except ModuleNotFoundError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "toolsched.integrations.langchain needs the `langchain-core` package: pip install 'toolsched[langgraph]'"
    ) from exc

__all__ = ["LangChainTool", "LangChainToolError", "from_langchain"]


class LangChainToolError(ToolschedError):
    """A LangChain tool answered its call with an error message (its own error handling); the text is the tool's."""


class InvocationScope(Protocol):
    """What a caller such as ``ToolNode`` passes as the run's ``context`` to give LangChain tools graph values."""

    def invocation(self, tool: LangChainTool, call_id: str) -> tuple[dict[str, Any], Any]:
        """The injected arguments for this call and the ``RunnableConfig`` to invoke with."""
        ...

    def keep(self, call_id: str, response: Any, error: BaseException | None) -> None:
        """Receives the tool's whole response (a ``ToolMessage``, ``Command`` or list) or the exception it raised."""
        ...


def _failing_argument(model: type[pydantic.BaseModel]) -> str | None:
    for name, info in model.model_fields.items():
        try:
            pydantic.TypeAdapter(Any if info.annotation is None else info.annotation).json_schema()
        except Exception:
            annotation = getattr(info.annotation, "__name__", None) or repr(info.annotation)
            return f"argument `{name}` ({annotation})"
    return None


def tool_call_json_schema(tool: BaseTool) -> dict[str, Any]:
    """The JSON Schema of the arguments the model supplies to ``tool``; ``ToolDefinitionError`` if there is none."""
    schema = tool.tool_call_schema
    try:
        if isinstance(schema, Mapping):
            described = dict(schema)
        elif isinstance(schema, type) and issubclass(schema, pydantic.BaseModel):
            described = model_schema(schema)
        else:
            described = inline_refs(dict(convert_to_openai_function(tool)["parameters"]))
    except Exception as exc:
        culprit = None
        if isinstance(schema, type) and issubclass(schema, pydantic.BaseModel):
            culprit = _failing_argument(schema)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        where = f"{culprit} " if culprit else ""
        raise ToolDefinitionError(
            f"LangChain tool `{tool.name}`: {where}cannot be described as JSON Schema ({reason}); "
            "give the tool arguments of JSON types (or pydantic models of them)"
        ) from exc
    if described.get("type", "object") != "object":
        raise ToolDefinitionError(f"LangChain tool `{tool.name}`: its argument schema must describe an object")
    described.setdefault("type", "object")
    described.setdefault("properties", {})
    return described


def _hidden_arguments(tool: BaseTool, visible: Mapping[str, Any]) -> frozenset[str]:
    """Arguments of the tool that the model does not supply (injected ones)."""
    try:
        full = tool.get_input_schema()
    except Exception:
        return frozenset()
    fields = getattr(full, "model_fields", None)
    if not isinstance(fields, Mapping):
        return frozenset()
    return frozenset(name for name in fields if name not in visible)


def _runs_async(tool: BaseTool) -> bool:
    coroutine = getattr(tool, "coroutine", None)
    if coroutine is not None:
        return True
    if hasattr(tool, "func") or hasattr(tool, "coroutine"):
        # StructuredTool / Tool with only a sync function.
        return False
    return type(tool)._arun is not BaseTool._arun


class LangChainTool(Tool):
    """A LangChain ``BaseTool`` run by toolsched (``tool`` is the LangChain object)."""

    input_schema: dict[str, Any]

    def __init__(self, tool: BaseTool, **metadata: Any) -> None:
        if not isinstance(tool, BaseTool):
            raise ToolDefinitionError(f"from_langchain() takes a LangChain BaseTool, got {type(tool).__name__}")
        refuse_unknown_options("from_langchain()", metadata)
        self.tool = tool
        self.name = tool.name
        self.description = tool.description or ""
        for key, value in metadata.items():
            if value is not None:
                setattr(self, key, value)
        self.aliases = tuple(metadata.get("aliases") or ())
        self.input_schema = tool_call_json_schema(tool)
        self._hidden = _hidden_arguments(tool, self.input_schema.get("properties") or {})
        self._async = _runs_async(tool)

    @property
    def hidden_arguments(self) -> frozenset[str]:
        """The tool's arguments the model never gives (injected: state, store, runtime, call ID)."""
        return frozenset(self._hidden)

    async def call(self, args: Mapping[str, Any], ctx: ToolContext | None) -> Any:
        """Invokes the LangChain tool with a tool call; the output is the content of its ``ToolMessage``."""
        call_id = ctx.call_id if ctx is not None else ""
        scope: InvocationScope | None = None
        if ctx is not None and hasattr(ctx.context, "invocation") and hasattr(ctx.context, "keep"):
            scope = ctx.context
        arguments = {key: value for key, value in args.items() if key not in self._hidden}
        config: Any = None
        if scope is not None:
            injected, config = scope.invocation(self, call_id)
            arguments.update(injected)
        tool_call = {"name": self.tool.name, "args": arguments, "id": call_id or None, "type": "tool_call"}
        try:
            if self._async and sniffio.current_async_library() == "asyncio":
                response = await self.tool.ainvoke(tool_call, config)
            elif self._async:
                # LangChain's async machinery needs asyncio: elsewhere (trio) the call gets an asyncio loop
                # of its own in a worker thread.
                ainvoke = functools.partial(self.tool.ainvoke, tool_call, config)
                response = await _on_asyncio_loop(ainvoke, abandon=self.timeout is not None)
            else:
                # In a worker thread as toolsched's own sync tools run (``toolsched._backends.threads``): a
                # cancellation of the run goes on at once, a cancelled call reports what the body really did.
                response = await run_in_thread(self.tool.invoke, tool_call, config)
        except Exception as exc:
            if scope is not None:
                scope.keep(call_id, None, exc)
            raise
        if scope is not None:
            scope.keep(call_id, response, None)
        if isinstance(response, ToolMessage):
            if response.status == "error":
                raise LangChainToolError(str(response.content))
            return response.content
        return response


class _AsyncioCall:
    """A coroutine function run on an asyncio loop of its own (``run``, in a worker thread); ``cancel`` cancels
    its task from any thread, before or while it runs."""

    def __init__(self, function: Callable[[], Awaitable[Any]]) -> None:
        self._function = function
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._cancelled = False
        self._started = False
        self.done = threading.Event()

    def run(self) -> Any:
        try:
            with self._lock:
                if self._cancelled:
                    # Cancelled before its thread took it: it never runs.
                    raise asyncio.CancelledError
                self._started = True
            return anyio.run(self._main, backend="asyncio")
        finally:
            self.done.set()

    async def _main(self) -> Any:
        with self._lock:
            if self._cancelled:
                raise asyncio.CancelledError
            self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        return await self._function()

    def cancel(self) -> bool:
        """Cancels the call; whether it had started in its thread (if not, it never will, and ``done`` may
        never be set: the thread may never take it)."""
        with self._lock:
            self._cancelled = True
            loop, task, started = self._loop, self._task, self._started
        if loop is not None and task is not None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # the loop has closed: the call is over
                pass
        return started


async def _on_asyncio_loop(function: Callable[[], Awaitable[Any]], *, abandon: bool) -> Any:
    """``function()`` awaited on an asyncio loop in a worker thread. When the caller is cancelled, so is the
    call's task; the caller then waits for it to end, unless ``abandon`` (a timeout: the call is left to end)."""
    call = _AsyncioCall(function)
    try:
        return await anyio.to_thread.run_sync(call.run, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        if call.cancel() and not abandon:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(call.done.wait)
        raise


def from_langchain(tool: BaseTool, **metadata: Any) -> LangChainTool:
    """Wraps a LangChain ``BaseTool`` as a toolsched tool; ``metadata`` takes the ``@ts.tool`` keywords."""
    return LangChainTool(tool, **metadata)
