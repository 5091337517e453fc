"""A LangGraph ``ToolNode`` that runs the calls through toolsched.

::

    from toolsched.integrations.langgraph import ToolNode   # was: from langgraph.prebuilt import ToolNode

    graph.add_node("tools", ToolNode([search, calculator], permissions=ts.Permissions(deny=["shell"])))

It accepts what LangGraph's prebuilt ``ToolNode`` accepts and returns what it
returns:

- input: a state holding messages (a dict, or an object with the messages
  attribute; ``messages_key`` names it), a list of messages, a list of tool
  calls, or a ``tool_call_with_context`` payload (the ``Send`` API); the calls
  are those of the last ``AIMessage``;
- output: ``{messages_key: [ToolMessage, ...]}`` for a state, a list of
  ``ToolMessage`` for a list, one message per unique call ID, in the model's
  order; with tools that return a ``Command``, a list of updates and commands;
- tools: LangChain tools (``BaseTool``; plain functions are made into LangChain
  tools as LangGraph does), tools wrapped with ``from_langchain(tool, **flags)``
  to give them toolsched's metadata, and toolsched tools (``@ts.tool``);
- injection as LangGraph does it: ``InjectedState`` (whole state or one
  field), ``InjectedStore``, ``ToolRuntime``; ``InjectedToolCallId`` and
  LangChain's callbacks work because tools are invoked with the tool call.

Behind it is a ``ts.Executor`` (``node.executor``) built with the keyword
options given (``strategy``, ``permissions``, ``hooks``, ``approver``,
``input_guardrails``, ``on_event``, ...), so every call is validated against
its JSON Schema, admitted by the permission rules and hooks, scheduled
(``concurrency_safe`` calls together, the rest one at a time), timed out and
shaped. Errors are handled as LangGraph's node handles them
(``handle_tool_errors``: by default invalid arguments answer the model with
LangGraph's own message and a tool's exception propagates out of the graph
once the turn's calls have settled; ``True``, a string, exception types or a
handler function as in LangGraph), with LangGraph's texts; unknown tools are
answered with LangGraph's message, denied calls with toolsched's.
``interrupt()`` inside a tool always propagates. ``invoke`` works from
synchronous code even where an event loop already runs in the thread (a
notebook): the calls then run on a loop in a worker thread. Calls that ask
for approval need ``approver=``: without one they are answered as not approved. Needs ``langgraph``
(``pip install 'toolsched[langgraph]'``).
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import dataclasses
import inspect
import json
import logging
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, get_args, get_origin

import anyio
import anyio.from_thread
import anyio.to_thread
import pydantic
import sniffio

from toolsched._executor.executor import Executor
from toolsched._tools.tools import Tool
from toolsched._values.calls import ToolCall
from toolsched._values.results import ToolResult
from toolsched.errors import OptionError, ResponseFormatError, ToolCallFailed
from toolsched.integrations.langchain import LangChainTool

try:
    from langchain_core.messages import AIMessage, RemoveMessage, ToolMessage, convert_to_messages
    from langchain_core.runnables import Runnable, RunnableConfig
    from langchain_core.tools import BaseTool
    from langchain_core.tools import tool as make_langchain_tool
    from langgraph.errors import GraphBubbleUp

    try:
        from langgraph.errors import is_invalid_resume
    except ImportError:  # a langgraph without typed interrupts marks no resume errors

        def is_invalid_resume(error: BaseException) -> bool:
            return False

    from langgraph.graph.message import REMOVE_ALL_MESSAGES
    from langgraph.prebuilt import ToolNode as StockToolNode
    from langgraph.prebuilt.tool_node import ToolCallRequest, ToolInvocationError
    from langgraph.types import Command, Send
except ModuleNotFoundError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "toolsched.integrations.langgraph needs the `langgraph` package: pip install 'toolsched[langgraph]'"
    ) from exc

from toolsched.integrations._langgraph_state import (
    GraphTurn,
    Injections,
    current_runtime,
    injections_of_tool,
    sent_state,
    tool_runtime,
)

__all__ = ["ToolNode"]


logger = logging.getLogger("toolsched.langgraph")

# LangGraph's texts, so that prompts and evaluations written against its node read the same.
INVALID_TOOL_NAME_TEMPLATE = "Error: {requested_tool} is not a valid tool, try one of [{available_tools}]."
TOOL_CALL_ERROR_TEMPLATE = "Error: {error}\n Please fix your mistakes."

ErrorHandling = bool | str | Callable[..., str] | type[Exception] | tuple[type[Exception], ...]


class _Default:
    """LangGraph's default error handling: invalid arguments answer the model, a tool's exception propagates."""

    def __repr__(self) -> str:
        return "<default: handle invalid arguments, raise tool errors>"


DEFAULT_ERROR_HANDLING: Any = _Default()


def _handled_types(handler: Callable[..., Any]) -> tuple[type[Exception], ...]:
    """The exception types a handler function declares by its first parameter's annotation (Exception if none)."""
    try:
        parameters = [p for p in inspect.signature(handler).parameters.values() if p.name not in ("self", "cls")]
        # An object with ``__call__`` (not a function or method) declares its types on that method.
        annotated = handler if inspect.isroutine(handler) else type(handler).__call__
        hints = typing.get_type_hints(annotated)
    except (TypeError, ValueError, NameError):
        return (Exception,)
    if not parameters or parameters[0].name not in hints:
        return (Exception,)
    annotation = hints[parameters[0].name]
    options = get_args(annotation) if get_origin(annotation) in (typing.Union, types.UnionType) else (annotation,)
    if not all(isinstance(option, type) and issubclass(option, Exception) for option in options):
        raise OptionError(
            f"handle_tool_errors: the handler's first parameter must be annotated with exception types, "
            f"got {annotation!r}"
        )
    return tuple(options)


InputKind = Literal["list", "dict", "tool_calls"]


def _named(value: Any, name: str) -> Any:
    """``value`` with every ToolMessage in it (a command's update, a list) named ``name`` where it has no name."""
    if isinstance(value, ToolMessage):
        return value.model_copy(update={"name": name}) if value.name is None else value
    if isinstance(value, list):
        return [_named(item, name) for item in value]
    if isinstance(value, Command):
        update = value.update
        if isinstance(update, dict):
            update = {key: _named(item, name) for key, item in update.items()}
        elif isinstance(update, list):
            update = [_named(item, name) for item in update]
        return dataclasses.replace(value, update=update) if update is not value.update else value
    return value


def _model_errors(error: pydantic.ValidationError, hidden: frozenset[str]) -> list[Any]:
    """The details of ``error`` about arguments the model gives, as LangGraph reports them (those about
    ``hidden`` arguments, and those about no argument, left out; hidden values left out of the inputs)."""
    details = []
    for detail in error.errors():
        if not detail["loc"] or detail["loc"][0] in hidden:
            continue
        copied: dict[str, Any] = {**detail}
        if isinstance(copied.get("input"), dict):
            copied["input"] = {k: v for k, v in copied["input"].items() if k not in hidden}
        details.append(copied)
    return details


def _own_error(response: Any) -> bool:
    """Whether a LangChain tool answered with an error message of its own (its ``handle_tool_error``)."""
    return isinstance(response, ToolMessage) and response.status == "error"


def _content(output: Any) -> str | list[Any]:
    """A toolsched output as ``ToolMessage`` content: text and content blocks as they are, else JSON."""
    if isinstance(output, str):
        return output
    if isinstance(output, list) and all(isinstance(item, dict) and "type" in item for item in output):
        return output
    try:
        return json.dumps(output, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(output)


class ToolNode(Runnable[Any, Any]):
    """Runs the tool calls of the last ``AIMessage`` through toolsched; returns LangGraph's ``ToolMessage``s.

    ``tools``: LangChain tools, plain functions, ``from_langchain(...)``
    wrappers or toolsched tools. ``executor_options`` go to ``ts.Executor``.
    """

    def __init__(
        self,
        tools: Sequence[BaseTool | Tool | Callable[..., Any]],
        *,
        name: str = "tools",
        tags: list[str] | None = None,
        messages_key: str = "messages",
        handle_tool_errors: ErrorHandling = DEFAULT_ERROR_HANDLING,
        wrap_tool_call: Callable[..., Any] | None = None,
        awrap_tool_call: Callable[..., Any] | None = None,
        **executor_options: Any,
    ) -> None:
        if not isinstance(messages_key, str) or not messages_key:
            raise OptionError(f"messages_key must be a non-empty string, got {messages_key!r}")
        handled_types: tuple[type[Exception], ...] | None = None
        if isinstance(handle_tool_errors, type) and issubclass(handle_tool_errors, Exception):
            handled_types = (handle_tool_errors,)
        elif isinstance(handle_tool_errors, tuple):
            if not all(isinstance(t, type) and issubclass(t, Exception) for t in handle_tool_errors):
                raise OptionError(f"handle_tool_errors: a tuple must hold exception types, got {handle_tool_errors!r}")
            handled_types = handle_tool_errors
        elif callable(handle_tool_errors) and handle_tool_errors is not DEFAULT_ERROR_HANDLING:
            handled_types = _handled_types(handle_tool_errors)
        elif not isinstance(handle_tool_errors, (bool, str, _Default)):
            raise OptionError(
                "handle_tool_errors must be True, False, a message, exception types or a handler function, "
                f"got {handle_tool_errors!r}"
            )
        self._handled_types = handled_types
        for label, interceptor in (("wrap_tool_call", wrap_tool_call), ("awrap_tool_call", awrap_tool_call)):
            if interceptor is not None and not callable(interceptor):
                raise OptionError(f"{label} must be a callable (request, execute), got {interceptor!r}")
        self._wrap_tool_call = wrap_tool_call
        self._awrap_tool_call = awrap_tool_call
        members: list[Tool] = []
        for position, item in enumerate(tools):
            if isinstance(item, Tool):
                members.append(item)
            elif isinstance(item, BaseTool):
                # LangGraph's node runs every call of a turn at once: a tool that declares nothing keeps
                # that (from_langchain(tool, concurrency_safe=...) says otherwise where it must).
                members.append(LangChainTool(item, concurrency_safe=True))
            elif callable(item):
                members.append(LangChainTool(make_langchain_tool(item), concurrency_safe=True))
            else:
                raise OptionError(f"tools[{position}] must be a tool or a function, got {type(item).__name__}")
        self.executor = Executor(members, **executor_options)
        self._executor_options = executor_options
        # Tools an interceptor supplies that are not among the node's (``request.override(tool=...)``):
        # each runs through an executor of its own with the node's options, made once.
        self._supplied: dict[int, tuple[BaseTool, Executor, Injections]] = {}
        self.name = name
        self.tags = tags
        self.messages_key = messages_key
        self.handle_tool_errors = handle_tool_errors
        self._langchain_tools = [member.tool for member in members if isinstance(member, LangChainTool)]
        self.injections_of_tool = {
            member.name: injections_of_tool(member.tool) for member in members if isinstance(member, LangChainTool)
        }

    @property
    def tools_by_name(self) -> dict[str, Any]:
        """The node's tools by name, as LangGraph's node gives them: the LangChain tools as they were given
        (``create_react_agent`` binds them to the model), toolsched's own tools as they are."""
        return {
            member.name: member.tool if isinstance(member, LangChainTool) else member
            for member in self.executor.registry
        }

    @property
    def toolsched_tools(self) -> dict[str, Tool]:
        """The node's tools by name as toolsched runs them (a wrapped LangChain tool's ``.tool`` is the original)."""
        return {member.name: member for member in self.executor.registry}

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Runs the calls from synchronous code (a graph run with ``invoke``), on an event loop of its own.

        Where an event loop already runs in this thread (a notebook, sync code called from async code),
        that loop is left alone: the calls run on a loop of their own in a worker thread, in a copy of
        this context (the graph's runtime and config go with them).
        """
        try:
            sniffio.current_async_library()
            in_async_context = True
        except sniffio.AsyncLibraryNotFoundError:
            in_async_context = False
        if not in_async_context:
            return anyio.run(self._run_node, input, config)
        context = contextvars.copy_context()

        def run_on_its_own_loop() -> Any:
            # The copied context says which library the caller's loop is; this thread runs a loop of its own.
            sniffio.current_async_library_cvar.set(None)
            return anyio.run(self._run_node, input, config)

        with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="toolsched-node") as pool:
            return pool.submit(context.run, run_on_its_own_loop).result()

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Runs the calls of ``input`` and returns the ToolMessages (or commands) LangGraph expects."""
        return await self._run_node(input, config)

    async def _run_node(self, input: Any, config: RunnableConfig | None) -> Any:
        tool_calls, kind, state = self._read_input(input)
        if kind == "tool_calls" and state is None:
            state = sent_state(config)
        if not tool_calls:
            return [] if kind == "list" else {self.messages_key: []}
        if self._wrap_tool_call is not None or self._awrap_tool_call is not None:
            outputs = await self._intercepted(tool_calls, state, config, kind)
        else:
            outputs = await self._answers(tool_calls, state, config, kind)
        return self._combine(outputs, kind)

    def _supplied_executor(self, supplied: Any) -> Executor:
        """The executor of a tool an interceptor supplies (a LangChain tool), made on first use."""
        if not isinstance(supplied, BaseTool):
            raise OptionError(
                f"ToolCallRequest.tool must be a LangChain tool (BaseTool), got {type(supplied).__name__}"
            )
        known = self._supplied.get(id(supplied))
        if known is None or known[0] is not supplied:
            member = LangChainTool(supplied, concurrency_safe=True)
            known = (supplied, Executor([member], **self._executor_options), injections_of_tool(supplied))
            self._supplied[id(supplied)] = known
        return known[1]

    def injections_of(self, tool: LangChainTool) -> Injections | None:
        """Where a tool's injected arguments come from: one of the node's, or one an interceptor supplied."""
        known = self._supplied.get(id(tool.tool))
        if known is not None and known[0] is tool.tool:
            return known[2]
        return self.injections_of_tool.get(tool.name)

    async def _answers(
        self,
        tool_calls: list[Mapping[str, Any]],
        state: Any,
        config: RunnableConfig | None,
        kind: InputKind,
        executor: Executor | None = None,
    ) -> list[Any]:
        """Runs the calls through toolsched; one ToolMessage (or command) per unique call ID, in order."""
        calls = self._calls(tool_calls)
        turn = GraphTurn(
            self.messages_key, self.injections_of, self._langchain_tools, state, config, current_runtime(config)
        )
        outcome = await (executor or self.executor).run(calls, context=turn)
        answered = {result.call_id: result for result in outcome.results}
        order = list(dict.fromkeys(call.id for call in calls))
        names = {call.id: call.name for call in reversed(calls)}
        arguments = {call.id: call.args for call in reversed(calls)}
        errors = {
            call_id: self._error_of(answered[call_id], names[call_id], arguments[call_id], turn)
            for call_id in order
            if call_id in answered and answered[call_id].is_error
        }
        self._propagate(order, answered, turn, errors)
        outputs: list[Any] = []
        for call_id in order:
            result = answered.get(call_id)
            if result is None:
                # Held for approval: a ToolNode has no one to ask, so the call is answered as not run.
                logger.warning(
                    "call %s (%s) asks for approval, but the ToolNode has no approver", call_id, names[call_id]
                )
                message = f"`{names[call_id]}` needs approval before it runs, and no approver was given; it did not run"
                outputs.append(self._message(call_id, names[call_id], message, error=True))
            else:
                outputs.append(self._answer(result, names[call_id], turn, errors.get(call_id), kind))
        return outputs

    async def _intercepted(
        self, tool_calls: list[Mapping[str, Any]], state: Any, config: RunnableConfig | None, kind: InputKind
    ) -> list[Any]:
        """Each call through the node's interceptor (``awrap_tool_call``, else ``wrap_tool_call``), all at once.

        The interceptor gets LangGraph's ``ToolCallRequest`` and an ``execute`` that runs a request
        through toolsched (it may change the request, call it again, or answer without it).
        """
        runtime = current_runtime(config)
        outputs: list[Any] = [None] * len(tool_calls)
        tools = self.tools_by_name

        async def execute(request: ToolCallRequest) -> Any:
            tool_call = dict(request.tool_call)
            supplied = request.tool
            if supplied is None or supplied is tools.get(str(tool_call.get("name"))):
                answers = await self._answers([tool_call], request.state, config, kind)
            else:
                # A tool the interceptor supplies: it runs under its own name, answering the call's ID.
                executor = self._supplied_executor(supplied)
                tool_call["name"] = supplied.name
                answers = await self._answers([tool_call], request.state, config, kind, executor)
            return answers[0]

        def execute_in_thread(request: ToolCallRequest) -> Any:
            return anyio.from_thread.run(execute, request)

        async def intercept(position: int, tool_call: Mapping[str, Any]) -> None:
            name = str(tool_call.get("name"))
            request = ToolCallRequest(
                tool_call=dict(tool_call),  # type: ignore[arg-type]
                tool=tools.get(name) if isinstance(tools.get(name), BaseTool) else None,
                state=state,
                runtime=tool_runtime(state, config, runtime, tool_call.get("id"), self._langchain_tools),
            )
            try:
                if self._awrap_tool_call is not None:
                    outputs[position] = await self._awrap_tool_call(request, execute)
                else:
                    wrap = self._wrap_tool_call
                    assert wrap is not None
                    outputs[position] = await anyio.to_thread.run_sync(wrap, request, execute_in_thread)
            except GraphBubbleUp:
                raise
            except Exception as exc:
                text = self._handling(exc)
                if text is None:
                    raise
                outputs[position] = self._message(str(tool_call.get("id")), name, text, error=True)

        try:
            async with anyio.create_task_group() as group:
                for position, tool_call in enumerate(tool_calls):
                    group.start_soon(intercept, position, tool_call)
        except BaseExceptionGroup as failures:
            # One call's exception leaves the graph as itself, as from LangGraph's node.
            raise failures.exceptions[0] from None
        return outputs

    # -- input ----------------------------------------------------------------------

    def _read_input(self, input: Any) -> tuple[list[Mapping[str, Any]], InputKind, Any]:
        key = self.messages_key
        kind: InputKind
        messages: Any
        state: Any
        if isinstance(input, list):
            if not input:
                raise ResponseFormatError("ToolNode got an empty list: give it messages or tool calls")
            last = input[-1]
            if isinstance(last, Mapping) and last.get("type") == "tool_call":
                return list(input), "tool_calls", None
            messages = input
            kind, state = "list", input
        elif isinstance(input, Mapping) and input.get("__type") == "tool_call_with_context":
            return [input["tool_call"]], "tool_calls", input.get("state", {})
        elif isinstance(input, Mapping):
            messages = input.get(key)
            if not messages:
                present = ", ".join(sorted(map(str, input))) or "none"
                raise ResponseFormatError(
                    f"ToolNode input has no messages: the state's `{key}` is missing or empty "
                    f"(keys present: {present}); set messages_key= if the messages live elsewhere"
                )
            kind, state = "dict", input
        else:
            messages = getattr(input, key, None)
            if not messages:
                raise ResponseFormatError(
                    f"ToolNode input has no messages: {type(input).__name__} has no non-empty `{key}` attribute "
                    "(give it a state with messages, a list of messages, or a list of tool calls)"
                )
            kind, state = "dict", input
        if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
            raise ResponseFormatError(
                f"ToolNode input: `{key}` must be a list of messages, got {type(messages).__name__}"
            )
        last_ai = next((message for message in reversed(messages) if isinstance(message, AIMessage)), None)
        if last_ai is None:
            raise ResponseFormatError(f"ToolNode input: `{key}` holds no AIMessage, so there are no tool calls")
        return [dict(tool_call) for tool_call in last_ai.tool_calls], kind, state

    @staticmethod
    def _calls(tool_calls: list[Mapping[str, Any]]) -> list[ToolCall]:
        calls = []
        for position, tool_call in enumerate(tool_calls):
            if not isinstance(tool_call, Mapping):
                raise ResponseFormatError(
                    f"tool call {position} must be a dict with name, args and id, got {type(tool_call).__name__}"
                )
            name = tool_call.get("name")
            call_id = tool_call.get("id")
            if not isinstance(name, str):
                # An empty name is a tool the node does not have, answered as such; no name at all is no call.
                raise ResponseFormatError(f"tool call {position} has no tool name")
            if not isinstance(call_id, str) or not call_id:
                raise ResponseFormatError(
                    f"tool call {position} (`{name}`) has no id: every call needs one so that its "
                    "ToolMessage can answer it"
                )
            args = tool_call.get("args")
            if args is None:
                args = {}
            if not isinstance(args, (Mapping, str)):
                raise ResponseFormatError(
                    f"tool call {position} (`{name}`): args must be a dict, got {type(args).__name__}"
                )
            calls.append(ToolCall(call_id, name, args))
        return calls

    # -- output ---------------------------------------------------------------------

    def _error_of(self, result: ToolResult, name: str, args: Any, turn: GraphTurn) -> BaseException | None:
        """The exception LangGraph's node would have met for a failed call (None when it would have met none)."""
        if result.error_kind == "invalid_input":
            kwargs = dict(args) if isinstance(args, Mapping) else {}
            details = self._pydantic_errors(name, kwargs)
            if details is not None:
                return ToolInvocationError(name, details[0], kwargs, details[1])
            return ToolInvocationError(name, ValueError(result.error or "invalid arguments"), kwargs)  # type: ignore[arg-type]
        if result.error_kind == "execution_error":
            raised = turn.raised.get(result.call_id)
            if isinstance(raised, pydantic.ValidationError) and not is_invalid_resume(raised):
                # As LangGraph's node reads it: a validation error out of the tool's invocation (its argument
                # model's validators, or the tool's own code) is about the arguments, for the model to fix.
                kwargs = dict(args) if isinstance(args, Mapping) else {}
                member = self.toolsched_tools.get(name)
                injections = self.injections_of(member) if isinstance(member, LangChainTool) else None
                injected = set()
                if injections is not None:
                    injected = {*injections.state, *(a for a in (injections.store, injections.runtime) if a)}
                return ToolInvocationError(name, raised, kwargs, _model_errors(raised, frozenset(injected)))
            return raised
        return None

    def _pydantic_errors(self, name: str, kwargs: dict[str, Any]) -> tuple[Any, list[Any]] | None:
        """For a LangChain tool, its own argument model's account of why ``kwargs`` are invalid, as LangGraph
        reports it: the errors about arguments the model gives (injected ones left out)."""
        member = self.toolsched_tools.get(name)
        if not isinstance(member, LangChainTool):
            return None
        model = getattr(member.tool, "args_schema", None)
        if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
            return None
        try:
            model.model_validate(kwargs)
        except pydantic.ValidationError as exc:
            return exc, _model_errors(exc, member.hidden_arguments)
        return None

    def _handling(self, error: BaseException) -> str | None:
        """What the model is told of ``error`` under ``handle_tool_errors``; None when it propagates.

        A bad answer to a typed ``interrupt()`` is never handled: the model cannot fix it, and the
        interrupt must stay pending for a better answer.
        """
        if is_invalid_resume(error):
            return None
        flag = self.handle_tool_errors
        if isinstance(flag, _Default):
            return error.message if isinstance(error, ToolInvocationError) else None
        if flag is False or flag == "":
            # An empty message is no handling, as for LangGraph's node (which tests the flag's truth).
            return None
        if flag is True:
            return TOOL_CALL_ERROR_TEMPLATE.format(error=repr(error))
        if isinstance(flag, str):
            return flag
        if self._handled_types is None or not isinstance(error, self._handled_types):
            return None
        if callable(flag) and not isinstance(flag, (type, tuple)):
            return str(flag(error))
        return TOOL_CALL_ERROR_TEMPLATE.format(error=repr(error))

    def _propagate(
        self,
        order: list[str],
        answered: dict[str, ToolResult],
        turn: GraphTurn,
        errors: dict[str, BaseException | None],
    ) -> None:
        """Re-raises what must leave the graph: an ``interrupt()``, or a tool error its handling does not take."""
        for call_id in order:
            error = turn.raised.get(call_id)
            if isinstance(error, GraphBubbleUp):
                raise error
        for call_id in order:
            if call_id in turn.uninjectable:
                raise turn.uninjectable[call_id]
        results = [answered[call_id] for call_id in order if call_id in answered]
        for result in results:
            error = errors.get(result.call_id)
            if error is not None and self._handling(error) is None:
                raise error
        if self.handle_tool_errors is False or self.handle_tool_errors == "":
            # Failures of toolsched's own tools, which raise nothing LangGraph knows.
            # A LangChain tool's own error message (its ``handle_tool_error``) answers the model, as in LangGraph.
            failed = [
                r
                for r in results
                if r.error_kind in ("execution_error", "timeout")
                and errors.get(r.call_id) is None
                and not _own_error(turn.responses.get(r.call_id))
            ]
            if failed:
                raise ToolCallFailed(failed[0], failed[1:], results)

    @staticmethod
    def _message(call_id: str, name: str, content: Any, *, error: bool) -> ToolMessage:
        return ToolMessage(content=content, name=name, tool_call_id=call_id, status="error" if error else "success")

    def _answer(
        self, result: ToolResult, name: str, turn: GraphTurn, error: BaseException | None, kind: InputKind
    ) -> Any:
        response = turn.responses.get(result.call_id)
        if result.is_error:
            if _own_error(response) and result.error_kind == "execution_error":
                # The tool's own error message, as the tool wrote it.
                return response
            if result.error_kind == "unknown_tool":
                available = ", ".join(member.name for member in self.executor.registry)
                text = INVALID_TOOL_NAME_TEMPLATE.format(requested_tool=name, available_tools=available)
                return self._message(result.call_id, name, text, error=True)
            handled = self._handling(error) if error is not None else None
            return self._message(result.call_id, name, handled or result.error or result.error_kind, error=True)
        if isinstance(response, ToolMessage):
            update: dict[str, Any] = {}
            content = _content(result.output if result.truncated else response.content)
            if content != response.content:
                update["content"] = content
            if response.name is None:
                update["name"] = name
            return response.model_copy(update=update) if update else response
        if response is not None:
            # A Command, or a list of commands and messages: LangGraph applies it as the tool returned it,
            # its ToolMessages named after the tool as LangGraph's node names them, and checked as its
            # node checks them: every call answered by exactly one ToolMessage, updates shaped as the input.
            try:
                if isinstance(response, list):
                    return self._checked_list(response, result.call_id, name, kind)
                if isinstance(response, Command):
                    return self._checked_command(response, result.call_id, name, kind, require_answer=True)
            except ResponseFormatError as exc:
                # What the tool returned is its own failure, handled as its exceptions are.
                handled = self._handling(exc)
                if handled is None:
                    raise
                return self._message(result.call_id, name, handled, error=True)
            return _named(response, name)
        return self._message(result.call_id, name, _content(result.output), error=False)

    def _checked_command(self, command: Any, call_id: str, name: str, kind: InputKind, *, require_answer: bool) -> Any:
        """A tool's ``Command``: its update shaped as the node's input, and (sent to this graph) answering its call."""
        update = command.update
        if isinstance(update, dict):
            if kind == "list":
                raise ResponseFormatError(
                    f"tool `{name}` returned a Command whose update is a dict; with a list of messages as the node's "
                    "input, give the update as a list of messages"
                )
            messages = convert_to_messages(update.get(self.messages_key, []))
        elif isinstance(update, list):
            if kind != "list":
                raise ResponseFormatError(
                    f"tool `{name}` returned a Command whose update is a list; with a state as the node's input, give "
                    f"the update as a dict with `{self.messages_key}`"
                )
            messages = convert_to_messages(update)
        else:
            return command
        if len(messages) == 1 and isinstance(messages[0], RemoveMessage) and messages[0].id == REMOVE_ALL_MESSAGES:
            return command
        answered = False
        for message in messages:
            if isinstance(message, ToolMessage) and message.tool_call_id == call_id:
                message.name = name
                answered = True
        if require_answer and command.graph is None and not answered:
            raise ResponseFormatError(
                f"tool `{name}` returned a Command without a ToolMessage for its call {call_id!r}: every tool call "
                "needs one (return Command(update=... ToolMessage(..., tool_call_id=tool_call_id) ...))"
            )
        new_update: Any = messages
        if isinstance(update, dict):
            new_update = {**update, self.messages_key: messages} if self.messages_key in update else update
        return dataclasses.replace(command, update=new_update)

    def _checked_list(self, items: list[Any], call_id: str, name: str, kind: InputKind) -> list[Any]:
        """A tool's list of commands and messages: exactly one ToolMessage answers the call, across the list."""
        answers = 0
        for item in items:
            if isinstance(item, ToolMessage) and item.tool_call_id == call_id:
                answers += 1
            elif isinstance(item, Command) and isinstance(item.update, dict):
                answers += sum(
                    1
                    for message in item.update.get(self.messages_key, [])
                    if isinstance(message, ToolMessage) and message.tool_call_id == call_id
                )
        if answers != 1:
            # LangGraph's wording, which its users' checks look for.
            raise ResponseFormatError(
                f"Tool {name} returned a list with {answers} messages bound to tool_call_id {call_id!r}; "
                "expected exactly one terminating ToolMessage."
            )
        return [
            self._checked_command(item, call_id, name, kind, require_answer=False)
            if isinstance(item, Command)
            else _named(item, name)
            for item in items
        ]

    def _combine(self, outputs: list[Any], kind: InputKind) -> Any:
        flat: list[Any] = []
        for output in outputs:
            flat.extend(output if isinstance(output, list) else [output])
        # As LangGraph's node does: whatever is not a Command (a ToolMessage, or what an interceptor
        # answered, None included) is a message of the update.
        if not any(isinstance(item, Command) for item in flat):
            return flat if kind == "list" else {self.messages_key: flat}
        combined: list[Any] = []
        # The parent-graph commands that only send are merged into one, last.
        sends: list[Any] | None = None
        for item in flat:
            if not isinstance(item, Command):
                combined.append([item] if kind == "list" else {self.messages_key: [item]})
            elif (
                isinstance(item, Command)
                and item.graph is Command.PARENT
                and isinstance(item.goto, list)
                and all(isinstance(send, Send) for send in item.goto)
            ):
                sends = [*(sends or []), *item.goto]
            else:
                combined.append(item)
        if sends is not None:
            combined.append(Command(graph=Command.PARENT, goto=sends))
        return combined


# Code that accepts LangGraph's node (``create_react_agent(model, node)`` checks ``isinstance(tools,
# ToolNode)``) accepts this one: it answers as LangGraph's does.
StockToolNode.register(ToolNode)
