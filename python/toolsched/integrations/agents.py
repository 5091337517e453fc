"""The OpenAI Agents SDK with toolsched running its function tools.

::

    from toolsched.integrations.agents import scheduled

    agent = scheduled(Agent(name="helper", tools=[search, write_note]),   # was: Agent(...)
                      permissions=ts.Permissions(deny=["write_note(/etc/**)"]))
    result = await Runner.run(agent, "...")

``scheduled(agent, **executor_options)`` returns a copy of the agent whose
function tools run through a ``ts.Executor`` (``executor_options`` are its
keyword options; the executor is the copy's ``toolsched_executor``). The SDK
still drives the run and builds its items: each function call comes back as
the SDK's ``ToolCallOutputItem``, its output what toolsched answered, so
guardrails, hooks, tracing and sessions of the SDK work as before. Other tools
(hosted tools, handoffs, MCP servers) are left to the SDK.

Each call passes toolsched's pipeline: the engine validates the arguments
against the tool's JSON Schema, permission rules, hooks, approver and
guardrails decide whether it runs, and timeouts and result budgets apply. The
SDK starts every call of a turn at once; toolsched keeps its scheduling rule
on top of that: a call that is not concurrency-safe never overlaps another
call of the same run (they wait, in the order they arrived), while
concurrency-safe calls overlap. A failed call answers the model with
toolsched's error message instead of failing the run. Calls that ask for
approval need ``approver=``; without one they are answered as not approved.

Tools can also go the other way: ``from_function_tool(tool, **flags)`` makes
an SDK ``FunctionTool`` a toolsched tool (flags as for ``@ts.tool``), and
``function_tools(executor)`` offers an executor's tools to an SDK agent.
``scheduled`` uses both, so flags given through ``from_function_tool`` are
kept: ``scheduled(agent, tools=[from_function_tool(search, concurrency_safe=True)])``.
Needs ``openai-agents`` (``pip install 'toolsched[agents]'``).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio

from toolsched.context import ToolContext
from toolsched.errors import OptionError, ToolDefinitionError
from toolsched.executor import Executor
from toolsched.results import ToolCall
from toolsched.tools import Tool, refuse_unknown_options

try:
    from agents import Agent, FunctionTool
    from agents.tool import maybe_invoke_function_tool_failure_error_function, set_function_tool_failure_error_function
    from agents.tool_context import ToolContext as AgentsToolContext
    from pydantic import BaseModel
except ModuleNotFoundError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "toolsched.integrations.agents needs the `openai-agents` package: pip install 'toolsched[agents]'"
    ) from exc

__all__ = ["AgentsFunctionTool", "from_function_tool", "function_tools", "scheduled"]

logger = logging.getLogger("toolsched.agents")


class AgentsFunctionTool(Tool):
    """An Agents SDK ``FunctionTool`` run by toolsched (``tool`` is the SDK object)."""

    input_schema: dict[str, Any]

    def __init__(self, tool: FunctionTool, **metadata: Any) -> None:
        if not isinstance(tool, FunctionTool):
            raise ToolDefinitionError(
                f"from_function_tool() takes an Agents SDK FunctionTool, got {type(tool).__name__}"
            )
        refuse_unknown_options("from_function_tool()", metadata)
        if not isinstance(tool.params_json_schema, Mapping):
            raise ToolDefinitionError(f"Agents SDK tool `{tool.name}`: params_json_schema must be a JSON Schema object")
        self.tool = tool
        self.name = tool.name
        self.description = tool.description or ""
        for key, value in metadata.items():
            if value is not None:
                setattr(self, key, value)
        self.aliases = tuple(metadata.get("aliases") or ())
        self.input_schema = dict(tool.params_json_schema)
        # With ``failing_copy``: the SDK tool whose failure policy answers the model, and the
        # exceptions of calls that failed, by call ID, until that answer is made (see ``scheduled``).
        self.sdk_tool: FunctionTool | None = None
        self.failures: dict[str, Exception] = {}

    async def call(self, args: Mapping[str, Any], ctx: ToolContext | None) -> Any:
        """Invokes the SDK tool with its own ``ToolContext`` (the SDK's, when the call comes from a run)."""
        arguments = json.dumps(dict(args), ensure_ascii=False)
        sdk_context = ctx.context if ctx is not None else None
        if not isinstance(sdk_context, AgentsToolContext):
            sdk_context = AgentsToolContext(
                context=sdk_context,
                tool_name=self.tool.name,
                tool_call_id=ctx.call_id if ctx is not None else "",
                tool_arguments=arguments,
            )
        try:
            return await self.tool.on_invoke_tool(sdk_context, arguments)
        except Exception as exc:
            if self.sdk_tool is not None and ctx is not None:
                self.failures[ctx.call_id] = exc
            raise


def from_function_tool(tool: FunctionTool, **metadata: Any) -> AgentsFunctionTool:
    """Wraps an Agents SDK ``FunctionTool`` as a toolsched tool; ``metadata`` takes the ``@ts.tool`` keywords."""
    return AgentsFunctionTool(tool, **metadata)


class _RunGate:
    """Within one SDK run: concurrency-safe calls overlap, any other call runs alone; first come, first served."""

    __slots__ = ("_exclusive", "_shared", "_waiting", "users")

    def __init__(self) -> None:
        self._shared = 0
        self._exclusive = False
        self._waiting: deque[tuple[bool, anyio.Event]] = deque()
        self.users = 0

    def _fits(self, exclusive: bool) -> bool:
        if self._exclusive:
            return False
        return self._shared == 0 if exclusive else True

    @asynccontextmanager
    async def hold(self, exclusive: bool) -> AsyncIterator[None]:
        if self._waiting or not self._fits(exclusive):
            ticket = (exclusive, anyio.Event())
            self._waiting.append(ticket)
            try:
                await ticket[1].wait()
            except BaseException:
                if ticket in self._waiting:
                    self._waiting.remove(ticket)
                    self._wake()
                else:
                    self._release(exclusive)
                raise
        else:
            self._take(exclusive)
        try:
            yield
        finally:
            self._release(exclusive)

    def _take(self, exclusive: bool) -> None:
        if exclusive:
            self._exclusive = True
        else:
            self._shared += 1

    def _release(self, exclusive: bool) -> None:
        if exclusive:
            self._exclusive = False
        else:
            self._shared -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiting and self._fits(self._waiting[0][0]):
            exclusive, event = self._waiting.popleft()
            self._take(exclusive)
            event.set()


class _Gates:
    """One gate per SDK run, found through the run's shared ``Usage`` object (internal)."""

    def __init__(self) -> None:
        self._by_run: dict[int, tuple[object, _RunGate]] = {}

    @asynccontextmanager
    async def hold(self, sdk_context: Any, exclusive: bool) -> AsyncIterator[None]:
        anchor = getattr(sdk_context, "usage", None)
        if anchor is None:
            anchor = sdk_context
        key = id(anchor)
        entry = self._by_run.get(key)
        if entry is None or entry[0] is not anchor:
            entry = self._by_run[key] = (anchor, _RunGate())
        gate = entry[1]
        gate.users += 1
        try:
            async with gate.hold(exclusive):
                yield
        finally:
            gate.users -= 1
            if gate.users == 0 and self._by_run.get(key) is entry:
                del self._by_run[key]


def _is_safe(tool: Tool, arguments: str) -> bool:
    """Whether a call may overlap others, judged on its parsed arguments (anything odd counts as unsafe)."""
    facts = tool.facts
    if facts.static_safe is not None:
        return facts.static_safe
    try:
        args = json.loads(arguments) if arguments else {}
        return isinstance(args, dict) and bool(tool.is_concurrency_safe(args))
    except Exception:
        return False


def _wire_output(output: Any) -> Any:
    """An output as the SDK takes it: text and the SDK's own output objects as they are, anything else as JSON."""
    if isinstance(output, str) or isinstance(output, BaseModel):
        return output
    if isinstance(output, list) and output and all(isinstance(item, BaseModel) for item in output):
        return output
    try:
        return json.dumps(output, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(output)


def function_tools(executor: Executor, *, strict: bool = False) -> list[FunctionTool]:
    """The executor's tools as Agents SDK ``FunctionTool``s; every call runs through ``executor``.

    ``strict`` asks the model for strict-mode arguments (the schema must allow it).
    """
    if not isinstance(executor, Executor):
        raise OptionError(f"function_tools() takes a toolsched.Executor, got {type(executor).__name__}")
    gates = _Gates()
    exported = {item["name"]: item for item in executor.registry.to_openai(strict=strict)}
    made = []
    for member in executor.registry:
        spec = exported.get(member.name)
        schema = spec["parameters"] if spec is not None else dict(member.facts.input_schema)
        made.append(
            FunctionTool(
                name=member.name,
                description=member.description,
                params_json_schema=schema,
                on_invoke_tool=_invoker(executor, member, gates),
                strict_json_schema=strict,
            )
        )
    return made


def _invoker(executor: Executor, member: Tool, gates: _Gates) -> Any:
    name = member.name

    async def on_invoke_tool(sdk_context: AgentsToolContext[Any], arguments: str) -> Any:
        call_id = getattr(sdk_context, "tool_call_id", None) or f"{name}-call"
        call = ToolCall(call_id, name, arguments or "{}")
        async with gates.hold(sdk_context, not _is_safe(member, arguments)):
            outcome = await executor.run([call], context=sdk_context)
        if not outcome.results:
            logger.warning("call %s (%s) asks for approval, but no approver was given", call_id, name)
            return f"`{name}` needs approval before it runs, and no approver was given; it did not run"
        result = outcome.results[0]
        if result.is_error:
            sdk_tool = member.sdk_tool if isinstance(member, AgentsFunctionTool) else None
            failure = member.failures.pop(call_id, None) if isinstance(member, AgentsFunctionTool) else None
            if failure is not None and sdk_tool is not None:
                # toolsched saw the failure (hooks, spans, on_error, sibling abort); the model reads what
                # the SDK tool's own failure_error_function says, and with none the error propagates.
                text = await maybe_invoke_function_tool_failure_error_function(
                    function_tool=sdk_tool, context=sdk_context, error=failure
                )
                if text is None:
                    raise failure
                return text
            return result.error or f"`{name}` failed ({result.error_kind})"
        return _wire_output(result.output)

    # The SDK reads the invoker's signature and type hints on every call (to choose the context it
    # passes): the signature is made once, and the hints are objects, not text compiled each time.
    on_invoke_tool.__annotations__ = {"sdk_context": AgentsToolContext[Any], "arguments": str, "return": Any}
    on_invoke_tool.__signature__ = inspect.signature(on_invoke_tool)  # type: ignore[attr-defined]
    return on_invoke_tool


def scheduled(
    agent: Agent[Any], *, tools: Sequence[Tool] = (), strict: bool | None = None, **executor_options: Any
) -> Agent[Any]:
    """A copy of ``agent`` whose function tools run through toolsched; the original is unchanged.

    ``tools`` replaces SDK tools of the same name with toolsched tools (for
    example ``from_function_tool(search, concurrency_safe=True)``) or adds
    new ones. ``executor_options`` go to ``ts.Executor``; the executor is the
    copy's ``toolsched_executor`` attribute.
    """
    if not isinstance(agent, Agent):
        raise OptionError(f"scheduled() takes an Agents SDK Agent, got {type(agent).__name__}")
    replacing = {member.name: member for member in _checked(tools)}
    members: list[Tool] = []
    others: list[Any] = []
    strict_flags: list[bool] = []
    for item in agent.tools:
        if isinstance(item, FunctionTool):
            replacement = replacing.pop(item.name, None)
            members.append(replacement if replacement is not None else _failing_copy(item))
            strict_flags.append(item.strict_json_schema)
        else:
            others.append(item)
    members.extend(replacing.values())
    executor = Executor(members, **executor_options)
    use_strict = strict if strict is not None else bool(strict_flags) and all(strict_flags)
    originals = {item.name: item for item in agent.tools if isinstance(item, FunctionTool)}
    wrapped = []
    for made in function_tools(executor, strict=use_strict):
        original = originals.get(made.name)
        if original is not None:
            # Everything the SDK does around the call stays the SDK tool's own: needs_approval
            # (and the RunState approve/reject flow), is_enabled, tool guardrails, timeouts and
            # their error functions, failure_error_function. Only the invocation goes through
            # toolsched, with the schema toolsched exports.
            made = dataclasses.replace(
                original,
                on_invoke_tool=made.on_invoke_tool,
                params_json_schema=made.params_json_schema,
                strict_json_schema=made.strict_json_schema,
            )
        wrapped.append(made)
    copy = agent.clone(tools=[*wrapped, *others])
    setattr(copy, "toolsched_executor", executor)  # noqa: B010 - an attribute the SDK's Agent does not declare
    return copy


def _failing_copy(tool: FunctionTool) -> AgentsFunctionTool:
    """The SDK tool as toolsched runs it inside ``scheduled``: a copy whose failures raise, so toolsched
    records them as failures, the original's failure policy still answering the model."""
    copied = dataclasses.replace(tool)
    set_function_tool_failure_error_function(copied, None)
    member = AgentsFunctionTool(copied)
    member.sdk_tool = tool
    return member


def _checked(tools: Iterable[Any]) -> list[Tool]:
    checked = []
    for position, item in enumerate(tools):
        if not isinstance(item, Tool):
            raise OptionError(f"tools[{position}] must be a toolsched tool, got {type(item).__name__}")
        checked.append(item)
    return checked
