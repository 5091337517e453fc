"""The OpenAI Agents SDK with toolsched running its function tools.

::

    from toolsched.integrations.agents import from_function_tool, scheduled

    agent = scheduled(Agent(name="helper", tools=[search, write_note]),   # was: Agent(...)
                      tools=[from_function_tool(write_note, rule_subject="path")],
                      permissions=ts.Permissions(deny=["write_note(/etc/**)"]))
    result = await Runner.run(agent, "...")

``scheduled(agent, **executor_options)`` returns a copy of the agent whose
function tools run through a ``ts.Executor`` (``executor_options`` are its
keyword options; the executor is the copy's ``toolsched_executor``). The
copy holds the agent's own tool objects (a ``function_tool`` is routed in
place: its body sends a call made for a scheduled agent, known by the SDK's
``ToolContext.agent``, to that agent's executor, and runs any other agent's
call as the SDK does); a tool built around an invoker of one's own is a copy.
The SDK still drives the run and does, with its own code, everything it does
around a call: ``is_enabled`` and name resolution (duplicate names,
namespaces), approval policies (a ``needs_approval`` callable sees what the
SDK's argument preparation lets it see) with the ``RunState`` approve/reject
flow, tool guardrails, hooks, timeouts, tracing, parsing and validating the
arguments, the tool's ``failure_error_function`` (a failure, a
``CancelledError`` the tool raises, arguments that are not a JSON object:
answered and reported as the SDK does; without one the error propagates),
and the output as the tool returned it. Only the invocation goes through
toolsched: its permission rules, hooks, approver and guardrails decide
whether the call runs, and its timeouts and result budgets apply; a call
toolsched refuses is answered with
toolsched's message (calls that ask toolsched for approval need
``approver=``; without one they are answered as not approved).

The SDK starts every function call of a turn at once, and a tool that
declares nothing keeps that. A tool given flags
(``from_function_tool(tool, concurrency_safe=False)``) or a toolsched tool is
scheduled by them: a call that is not concurrency-safe never overlaps another
call of the same run (they wait, in the order they arrived). Hosted tools,
handoffs and MCP servers' tools stay the SDK's.

Tools can also go the other way: ``from_function_tool(tool, **flags)`` makes
an SDK ``FunctionTool`` a toolsched tool (flags as for ``@ts.tool``), and
``function_tools(executor)`` offers an executor's tools to an SDK agent.
Needs ``openai-agents`` (``pip install 'toolsched[agents]'``).
"""

from __future__ import annotations

import contextvars
import copy
import dataclasses
import functools
import inspect
import json
import logging
import operator
import re
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, SupportsIndex

import anyio

from toolsched._executor.executor import Executor
from toolsched._tools.context import ToolContext
from toolsched._tools.tools import Tool, refuse_unknown_options
from toolsched._values.calls import ToolCall
from toolsched.errors import OptionError, ToolDefinitionError, UnpicklableError

try:
    from agents import Agent, FunctionTool
    from agents.tool_context import ToolContext as AgentsToolContext
    from pydantic import BaseModel
except ModuleNotFoundError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "toolsched.integrations.agents needs the `openai-agents` package: pip install 'toolsched[agents]'"
    ) from exc

from toolsched.integrations import _agents_sdk as _sdk

__all__ = ["AgentsFunctionTool", "from_function_tool", "function_tools", "scheduled"]

logger = logging.getLogger("toolsched.agents")

# The SDK tool a scheduled tool stands for, on its invocation (``scheduled`` of a scheduled agent starts from it).
_SOURCE = "__toolsched_source__"
# The schema a scheduled SDK tool's calls are checked against by toolsched: any JSON object. The SDK's
# own preparation parses and validates them (defaults, aliases, coercions, validators), as without toolsched.
_ANY_OBJECT: dict[str, Any] = {"type": "object"}
# The names toolsched's registry takes; an SDK tool named otherwise is known to toolsched by a name made of it.
_REGISTRY_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_MISSING = object()

SdkInvoke = Callable[[Any, str], Awaitable[Any]]


class _Invocation:
    """One SDK call a scheduled agent hands to its executor: the SDK body that runs it, with the model's
    arguments, and what the body left behind (what it raised, the context variables it set)."""

    __slots__ = ("arguments", "body", "given", "raised", "sdk_context", "set_variables")

    def __init__(self, body: SdkInvoke, sdk_context: Any, arguments: str, given: dict[str, Any]) -> None:
        self.body = body
        self.sdk_context = sdk_context
        self.arguments = arguments
        # The arguments toolsched was given: the parsed JSON object, or none when the text is not one.
        self.given = given
        self.raised: BaseException | None = None
        self.set_variables: list[tuple[contextvars.ContextVar[Any], Any]] = []

    async def run(self, args: Mapping[str, Any]) -> Any:
        arguments = self.arguments
        if dict(args) != self.given:
            # A toolsched hook changed the arguments: the SDK tool prepares the new ones itself.
            arguments = json.dumps(dict(args), ensure_ascii=False)
            _sdk.forget_parsed_arguments(self.sdk_context)
        before = contextvars.copy_context()
        try:
            return await self.body(self.sdk_context, arguments)
        except BaseException as exc:
            self.raised = exc
            raise
        finally:
            # In the SDK the body runs in the task that then runs the output guardrails and hooks, which see
            # the context variables it set; toolsched may run it in a task of its own.
            self.set_variables = [
                (variable, value)
                for variable, value in contextvars.copy_context().items()
                if before.get(variable, _MISSING) is not value
            ]

    def carry_variables(self) -> None:
        """Sets, in the calling task, the context variables the body set."""
        for variable, value in self.set_variables:
            variable.set(value)


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
        # Calls of a scheduled agent's run, by the id of the SDK's ToolContext (see ``scheduled``).
        self.invocations: dict[int, _Invocation] = {}

    async def call(self, args: Mapping[str, Any], ctx: ToolContext | None) -> Any:
        """Invokes the SDK tool with its own ``ToolContext`` (the SDK's, when the call comes from a run)."""
        sdk_context = ctx.context if ctx is not None else None
        invocation = self.invocations.get(id(sdk_context)) if sdk_context is not None else None
        if invocation is not None and invocation.sdk_context is sdk_context:
            return await invocation.run(args)
        arguments = json.dumps(dict(args), ensure_ascii=False)
        if not isinstance(sdk_context, AgentsToolContext):
            sdk_context = AgentsToolContext(
                context=sdk_context,
                tool_name=self.tool.name,
                tool_call_id=ctx.call_id if ctx is not None else "",
                tool_arguments=arguments,
            )
        return await self.tool.on_invoke_tool(sdk_context, arguments)


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


def _json_object(arguments: str) -> dict[str, Any] | None:
    """The arguments as the SDK reads them (no text is ``{}``), or None when they are not a JSON object."""
    try:
        parsed = json.loads(arguments) if arguments else {}
    except (TypeError, ValueError):
        return None
    return parsed if isinstance(parsed, dict) else None


def _is_safe(tool: Tool, args: dict[str, Any] | None) -> bool:
    """Whether a call may overlap others, judged on its parsed arguments (anything odd counts as unsafe)."""
    facts = tool.facts
    if facts.static_safe is not None:
        return facts.static_safe
    if args is None:
        return False
    try:
        return bool(tool.is_concurrency_safe(args))
    except Exception:
        return False


def _not_approved_text(call_id: str, name: str) -> str:
    logger.warning("call %s (%s) asks for approval, but no approver was given", call_id, name)
    return f"`{name}` needs approval before it runs, and no approver was given; it did not run"


def _wire_output(output: Any) -> Any:
    """An output as ``function_tools`` hands it over: text and the SDK's own output objects as they are,
    anything else as JSON."""
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

    A failed or refused call answers the model with toolsched's message; an output that is not text
    goes to the model as JSON. ``strict`` asks the model for strict-mode arguments (the schema must
    allow it).
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
                on_invoke_tool=_exported_invoker(executor, member, gates),
                strict_json_schema=strict,
            )
        )
    return made


def _exported_invoker(executor: Executor, member: Tool, gates: _Gates) -> SdkInvoke:
    name = member.name

    async def on_invoke_tool(sdk_context: AgentsToolContext[Any], arguments: str) -> Any:
        call_id = getattr(sdk_context, "tool_call_id", None) or f"{name}-call"
        call = ToolCall(call_id, name, arguments or "{}")
        async with gates.hold(sdk_context, not _is_safe(member, _json_object(arguments))):
            outcome = await executor.run([call], context=sdk_context)
        if not outcome.results:
            return _not_approved_text(call_id, name)
        result = outcome.results[0]
        if result.is_error:
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
    """A copy of ``agent`` whose function tools run through toolsched; the original runs as before.

    The copy's tools are the agent's own objects, in a list of its own (same order), for every tool whose
    invoker is the SDK's failure-handling one (``function_tool``'s): its body is routed in place, once (its
    invoker, and the tool, stay the objects they were), and sends the calls the SDK makes for this copy (or
    an agent made from it) through the executor; the calls of any other agent run as without toolsched.
    Other function tools (an invoker of one's own; every tool whose mode ``strict`` changes) are copies
    whose fields are read from the agent's tool when the SDK reads them, but for a field set on the copy.
    Whenever the SDK asks the copy (or an agent made from it) for its tools, a function tool of a name this
    call knew whose body or invoker was replaced since, or another tool given under that name, is routed
    to that name's toolsched tool; a tool of a name this call did not see runs as in the SDK.
    ``tools`` replaces SDK tools of the same name with toolsched tools (for example
    ``from_function_tool(search, concurrency_safe=True)``) or adds new ones.
    ``strict`` sets every function tool's strict mode (None keeps each tool's own). ``executor_options``
    go to ``ts.Executor``; the executor is the copy's ``toolsched_executor`` attribute, which the copy's
    clones (``copy.clone(...)``, ``dataclasses.replace(copy, ...)``) keep: the copy is an instance of a
    subclass of the agent's class (same name) made for this call, which holds the executor. A scheduled
    agent (or one made from it), and tool copies a ``scheduled`` call made, are refused with
    ``OptionError``: scheduling them again would drop the first call's options.
    """
    if not isinstance(agent, Agent):
        raise OptionError(f"scheduled() takes an Agents SDK Agent, got {type(agent).__name__}")
    replacing = {member.name: member for member in _checked(tools)}
    if isinstance(getattr(agent, _SCHEDULE, None), _Schedule):
        raise OptionError(
            f"scheduled() was given the agent `{agent.name}`, which another scheduled() made (or one made from"
            " it): scheduling it again would drop that call's options (its permissions, hooks, approver,"
            " guardrails), not add to them; call scheduled() once, on the agent as the SDK built it, with every"
            " option"
        )
    again = [item.name for item in agent.tools if _is_scheduled_copy(item)]
    again += [m.name for m in replacing.values() if isinstance(m, AgentsFunctionTool) and _is_scheduled_copy(m.tool)]
    if again:
        names = ", ".join(f"`{name}`" for name in dict.fromkeys(again))
        raise OptionError(
            f"scheduled() was given tools another scheduled() made ({names}): scheduling them again would drop that"
            " call's options (its permissions, hooks, approver, guardrails), not add to them; call scheduled()"
            " once, on the agent as the SDK built it, with every option"
        )
    # One toolsched tool per name: the SDK decides which of two same-named tools a call is for (the last,
    # the enabled one, the one of the call's namespace), and that tool hands over its own body.
    members: dict[str, Tool] = {}
    strict_flags: list[bool] = []
    for item in agent.tools:
        if isinstance(item, FunctionTool):
            strict_flags.append(item.strict_json_schema)
            if item.name not in members:
                members[item.name] = _member(item, replacing.pop(item.name, None))
    added = [
        _member(member.tool, member) if isinstance(member, AgentsFunctionTool) else member
        for member in replacing.values()
    ]
    _registry_names([*members.values(), *added])
    executor = Executor([*members.values(), *added], **executor_options)
    # Calls that are all concurrency-safe never wait for each other: no run gate is needed then.
    all_safe = all(member.facts.static_safe is True for member in [*members.values(), *added])
    gates = None if all_safe else _Gates()
    schedule = _Schedule(executor, strict)
    routes = {id(member): _Route(executor, member, gates) for member in [*members.values(), *added]}
    for item in agent.tools:
        if isinstance(item, FunctionTool):
            schedule.by_name.setdefault(item.name, routes[id(members[item.name])])
    for member in added:
        schedule.by_name.setdefault(
            member.tool.name if isinstance(member, AgentsFunctionTool) else member.name, routes[id(member)]
        )
    made: list[Any] = [
        _scheduled_tool(item, routes[id(members[item.name])], schedule, strict)
        if isinstance(item, FunctionTool)
        else item
        for item in agent.tools
    ]
    use_strict = strict if strict is not None else bool(strict_flags) and all(strict_flags)
    exported = {
        item["name"]: item
        for item in executor.registry.to_openai(strict=use_strict)
        if any(item["name"] == member.name for member in added)
    }
    for member in added:
        if isinstance(member, AgentsFunctionTool):
            made.append(_scheduled_tool(member.tool, routes[id(member)], schedule, strict))
        else:
            made.append(
                FunctionTool(
                    name=member.name,
                    description=member.description,
                    params_json_schema=exported[member.name]["parameters"],
                    on_invoke_tool=_scheduled_invoker(routes[id(member)], None),
                    strict_json_schema=use_strict,
                )
            )
    copy_ = agent.clone(tools=made)
    copy_.__class__ = _scheduled_agent_class(type(copy_), schedule)
    # Its own attributes too: code that copies an agent's state (``vars(agent)``) onto another agent takes them.
    vars(copy_)["toolsched_executor"] = executor
    vars(copy_)[_SCHEDULE] = schedule
    return copy_


def _scheduled_tool(tool: FunctionTool, route: _Route, schedule: _Schedule, strict: bool | None) -> FunctionTool:
    """The scheduled agent's tool for the agent's ``tool``: the tool itself, its body routed (a tool whose
    invoker is the SDK's failure-handling one, as ``function_tool`` makes, when ``strict`` keeps its mode),
    or else a scheduled copy."""
    invoker = tool.on_invoke_tool
    if isinstance(invoker, _sdk.FailureHandlingInvoker) and (strict is None or strict == tool.strict_json_schema):
        routed = _sdk.route_body(invoker, _route_for)
        schedule.add(routed.body, tool.name, route)
        return tool
    return _scheduled_copy(tool, route, strict)


def _scheduled_agent_class(kind: Any, schedule: _Schedule) -> type:
    """The class of one ``scheduled`` call's agent of class ``kind``: a subclass of it (same name and module)
    whose class attributes are the call's executor (``toolsched_executor``) and schedule. Every agent the SDK
    makes from that agent (``clone``, ``dataclasses.replace``: both build ``obj.__class__(**fields)``) is of
    that class, so it has them still, and its scheduled tools run through the executor."""
    while kind.__dict__.get(_SCHEDULED_AGENT, False):
        kind = kind.__bases__[0]
    namespace: dict[str, Any] = {
        "toolsched_executor": schedule.executor,
        _SCHEDULE: schedule,
        "__reduce_ex__": _unpicklable(_agent_refusal),
        "__copy__": _shallow_copy,
        "__deepcopy__": _deep_copy,
        "get_all_tools": _guarded_tools(kind),
        _SCHEDULED_AGENT: True,
        "__module__": kind.__module__,
        "__qualname__": kind.__qualname__,
        "__doc__": kind.__doc__,
    }
    return type(kind.__name__, (kind,), namespace)


_SCHEDULED_AGENT = "_toolsched_scheduled_agent"
# On a scheduled copy's invocation: the route it sends its calls to.
_ROUTED = "_toolsched_route"
# The attribute (of a scheduled agent's class, and of the agent) that holds its ``_Schedule``.
_SCHEDULE = "_toolsched_schedule"


def _guarded_tools(kind: type) -> Callable[..., Awaitable[list[Any]]]:
    """A scheduled agent's ``get_all_tools`` (what the SDK asks for the tools it offers and runs, every turn and
    on a resume): ``kind``'s, with the function tools of the names the agent's ``scheduled`` call knew routed
    through its executor, whatever was done to them or to the agent's list since (see ``_Schedule.guard``)."""

    async def get_all_tools(self: Any, run_context: Any) -> list[Any]:
        # ``kind``'s as it is when called (a test may patch ``Agent.get_all_tools``).
        tools: list[Any] = await kind.get_all_tools(self, run_context)  # type: ignore[attr-defined]
        schedule = getattr(self, _SCHEDULE, None)
        return schedule.guard(tools) if isinstance(schedule, _Schedule) else tools

    get_all_tools.__doc__ = kind.get_all_tools.__doc__  # type: ignore[attr-defined]
    return get_all_tools


def _tool_refusal(tool: Any) -> str:
    return (
        f"the tool {tool.name!r} of a scheduled agent cannot be pickled: its calls run through a toolsched.Executor"
        " of this process (live state, not data); call scheduled() in the process that runs the agent"
    )


def _agent_refusal(agent: Any) -> str:
    return (
        f"the scheduled agent {agent.name!r} cannot be pickled: its function tools run through a"
        " toolsched.Executor of this process (live state, not data); call scheduled() in the process that runs"
        " the agent"
    )


def _unpicklable(refusal: Callable[[Any], str]) -> Callable[[Any, int], Any]:
    """A ``__reduce_ex__`` that refuses pickling with ``UnpicklableError`` (copies have their own hooks)."""

    def __reduce_ex__(self: Any, protocol: int) -> Any:
        raise UnpicklableError(refusal(self))

    return __reduce_ex__


def _shallow_copy(self: Any) -> Any:
    """``copy.copy``: a new object of the class holding the same attributes (what the default copy makes)."""
    made = object.__new__(type(self))
    made.__dict__.update(self.__dict__)
    return made


def _deep_copy(self: Any, memo: dict[int, Any]) -> Any:
    """``copy.deepcopy``: a new object of the class holding deep copies of the attributes (the default's)."""
    made = object.__new__(type(self))
    memo[id(self)] = made
    made.__dict__.update(copy.deepcopy(self.__dict__, memo))
    return made


def _is_scheduled_copy(tool: Any) -> bool:
    """Whether ``tool`` is a tool of a scheduled agent (a live copy ``scheduled`` made)."""
    return isinstance(tool, FunctionTool) and _LIVE_SOURCE in vars(tool)


def _member(tool: FunctionTool, replacement: Tool | None) -> Tool:
    """The toolsched tool that runs ``tool``'s calls in a scheduled agent: with no flags of its own it is
    concurrency-safe (the SDK runs a turn's calls at once); its arguments are left to the SDK to check."""
    member: Tool
    if replacement is None:
        member = AgentsFunctionTool(tool, concurrency_safe=True)
    elif isinstance(replacement, AgentsFunctionTool):
        member = replacement.replica()
        assert isinstance(member, AgentsFunctionTool)
        member.invocations = {}
    else:
        return replacement
    member.input_schema = dict(_ANY_OBJECT)
    return member


def _registry_names(members: Iterable[Tool]) -> None:
    """Names an SDK tool's member whose name toolsched's registry does not take (over 64 characters, or
    characters other than letters, digits, ``_``, ``-``, ``.``) by one made of it, unique among them."""
    taken = {member.name for member in members}
    for member in members:
        if not isinstance(member, AgentsFunctionTool) or _REGISTRY_NAME.fullmatch(member.name):
            continue
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", member.name)[:64] or "tool"
        name, number = base, 1
        while name in taken:
            number += 1
            name = f"{base[: 63 - len(str(number))]}-{number}"
        taken.add(name)
        member.name = name


def _sdk_invoker(tool: FunctionTool) -> SdkInvoke:
    """What invokes ``tool`` in the SDK: its own invoker, or, for a tool ``scheduled`` made, its SDK tool's."""
    invoker = tool.on_invoke_tool
    source = getattr(_sdk.body_of(invoker), _SOURCE, None)
    return source if source is not None else invoker


def _scheduled_copy(tool: FunctionTool, route: _Route, strict: bool | None) -> FunctionTool:
    """A copy of the SDK tool whose invocation goes through ``route``; everything around it stays the SDK's.

    A tool built by ``function_tool`` (and the SDK's other wrapped tools) keeps its invoker's kind: the
    copy's approval policy is asked with the SDK's own argument preparation, and its failures go to the
    tool's failure policy and the SDK's error reporting.
    """
    sdk_invoker = _sdk_invoker(tool)
    invoke = _scheduled_invoker(route, sdk_invoker)
    made = _live_copy(tool)
    invoker: Any
    if isinstance(sdk_invoker, _sdk.FailureHandlingInvoker):
        invoker = _sdk.like_invoker(invoke, sdk_invoker, made)
    else:
        # The SDK hands an invoker the context its first parameter's annotation asks for: the copy's
        # signature is the original's.
        invoker = functools.update_wrapper(invoke, sdk_invoker)
    _sdk.pin_context_choice(invoker)
    made.on_invoke_tool = invoker
    if strict is not None and strict != made.strict_json_schema:
        made.strict_json_schema = strict
        if strict:  # the SDK's normalization of a strict tool's schema
            made.params_json_schema = _sdk.strict_schema(tool.params_json_schema)
    return made


# Where a live copy reads its fields: the tool it copies, or a ``_Layer`` of what was set on the copy over it.
_LIVE_SOURCE = "_toolsched_live_source"
_LAYER_BASE = "_toolsched_layer_base"
# The class of live copies of each tool class, held weakly both ways: a tool class made at run time (one per
# agent, say) and its live class go once neither a tool nor a live copy of one holds them.
_LIVE_CLASSES: weakref.WeakKeyDictionary[type, weakref.ref[type]] = weakref.WeakKeyDictionary()


class _Layer:
    """The fields set on a live copy (its attributes), over the tool it reads the others from. Never changed
    once made: a write makes a new layer, so copies of the copy that share this one keep what they saw."""

    def __init__(self, base: Any, values: Mapping[str, Any]) -> None:
        self.__dict__.update(values)
        self.__dict__[_LAYER_BASE] = base

    def __getattr__(self, name: str) -> Any:
        base = self.__dict__.get(_LAYER_BASE)
        if base is None:
            raise AttributeError(name)
        return getattr(base, name)

    def changed(self, name: str, value: Any = _MISSING) -> _Layer:
        values = {key: item for key, item in self.__dict__.items() if key != _LAYER_BASE and key != name}
        if value is not _MISSING:
            values[name] = value
        return _Layer(self.__dict__.get(_LAYER_BASE), values)


def _live_field(name: str) -> property:
    """A dataclass field of a live copy: read from its source (a C-level attribute path: the SDK reads a
    tool's fields about a hundred times a call); set on the copy, it goes to a new layer over the source."""

    def write(self: Any, value: Any) -> None:
        source = self.__dict__.get(_LIVE_SOURCE)
        layer = source if isinstance(source, _Layer) else _Layer(source, {})
        self.__dict__[_LIVE_SOURCE] = layer.changed(name, value)

    def forget(self: Any) -> None:
        source = self.__dict__.get(_LIVE_SOURCE)
        if isinstance(source, _Layer) and name in source.__dict__:
            self.__dict__[_LIVE_SOURCE] = source.changed(name)

    return property(operator.attrgetter(f"{_LIVE_SOURCE}.{name}"), write, forget)


def _live_class(kind: type) -> type:
    """The class of live copies of ``kind`` tools: a subclass of it whose fields read through."""
    held = _LIVE_CLASSES.get(kind)
    made = held() if held is not None else None
    if made is None:
        namespace: dict[str, Any] = {
            item.name: _live_field(item.name) for item in dataclasses.fields(kind) if item.name != "on_invoke_tool"
        }

        def __getattr__(self: Any, name: str) -> Any:
            # Any other attribute the copy does not hold itself: the source tool's.
            source = self.__dict__.get(_LIVE_SOURCE)
            if source is None:
                raise AttributeError(name)
            return getattr(source, name)

        namespace.update(
            __getattr__=__getattr__,
            __reduce_ex__=_unpicklable(_tool_refusal),
            __copy__=_shallow_copy,
            __deepcopy__=_deep_copy,
            __module__=kind.__module__,
            __qualname__=kind.__qualname__,
            __doc__=kind.__doc__,
        )
        made = type(kind.__name__, (kind,), namespace)
        _LIVE_CLASSES[kind] = weakref.ref(made)
    return made


def _live_copy(tool: FunctionTool) -> FunctionTool:
    """A copy of ``tool`` that reads its fields (and any other attribute) from ``tool`` as they are when
    read, but for what is set on the copy itself; setting one on the copy leaves ``tool`` unchanged.

    The SDK reads a tool's fields (``needs_approval``, ``is_enabled``, ``allowed_callers``...) on every run
    and call, and a change made to the agent's tool after it was built applies from then on: the change
    made to the tool given to ``scheduled`` applies to its copy alike.
    """
    made: FunctionTool = object.__new__(_live_class(type(tool)))
    made.__dict__[_LIVE_SOURCE] = tool
    return made


class _Route:
    """How the calls of one toolsched tool of a scheduled agent run: one executor run per call, whose tool runs
    the SDK body it is handed (behind the run's gate, unless ``gates`` is None: every tool of the agent
    concurrency-safe)."""

    __slots__ = ("executor", "gates", "member", "name")

    def __init__(self, executor: Executor, member: Tool, gates: _Gates | None) -> None:
        self.executor = executor
        self.member = member
        self.gates = gates
        self.name = member.name

    async def __call__(self, body: SdkInvoke | None, sdk_context: Any, arguments: str) -> Any:
        name, member, executor, gates = self.name, self.member, self.executor, self.gates
        call_id = getattr(sdk_context, "tool_call_id", None) or f"{name}-call"
        # Arguments that are not a JSON object reach the SDK body as the model sent them, as in the SDK (a
        # function_tool's parser refuses them, for its failure policy to answer); toolsched sees no arguments.
        parsed = _json_object(arguments)
        given = parsed if parsed is not None else {}
        invocation = None
        key = id(sdk_context)
        if body is not None and isinstance(member, AgentsFunctionTool):
            invocation = member.invocations[key] = _Invocation(body, sdk_context, arguments, given)
        text = arguments if arguments and parsed is not None else "{}"
        try:
            if gates is None:
                outcome = await executor.run([ToolCall(call_id, name, text)], context=sdk_context)
            else:
                async with gates.hold(sdk_context, not _is_safe(member, parsed)):
                    outcome = await executor.run([ToolCall(call_id, name, text)], context=sdk_context)
        finally:
            if invocation is not None and member.invocations.get(key) is invocation:  # type: ignore[attr-defined]
                del member.invocations[key]  # type: ignore[attr-defined]
        if invocation is not None:
            invocation.carry_variables()
        if not outcome.results:
            return _not_approved_text(call_id, name)
        result = outcome.results[0]
        if not result.is_error:
            return result.output
        if invocation is not None and invocation.raised is not None and result.error_kind == "execution_error":
            # The SDK tool's body failed (an exception, or a CancelledError it raised): toolsched recorded
            # the failure; the tool's failure policy answers, or the error propagates, as in the SDK.
            raise invocation.raised
        return result.error or f"`{name}` failed ({result.error_kind})"


class _Schedule:
    """The routes of one ``scheduled`` call's tools, by the SDK body each runs (and, for a body two tools of
    the agent share, by the tool's name). Held by the scheduled agent (and every agent made from it)."""

    __slots__ = ("_copies", "_later", "_routes", "by_name", "executor", "strict")

    def __init__(self, executor: Executor, strict: bool | None) -> None:
        self.executor = executor
        self.strict = strict
        self._routes: dict[int, tuple[SdkInvoke, dict[str, _Route]]] = {}
        # The route of each SDK tool name the ``scheduled`` call knew (a tool given under that name later
        # is re-routed to it: see ``guard``).
        self.by_name: dict[str, _Route] = {}
        # The routes of bodies ``guard`` routed, held weakly: a tool made per request and given to a clone
        # goes with its request.
        self._later: weakref.WeakKeyDictionary[Any, dict[str, _Route]] = weakref.WeakKeyDictionary()
        # Scheduled copies made by the last ``guard``, by the id of the tool: (tool, its invoker then, the copy).
        self._copies: dict[int, tuple[FunctionTool, Any, FunctionTool]] = {}

    def add(self, body: SdkInvoke, name: str, route: _Route) -> None:
        self._routes.setdefault(id(body), (body, {}))[1].setdefault(name, route)

    def _add_later(self, body: SdkInvoke, name: str, route: _Route) -> None:
        try:
            routes = self._later.setdefault(body, {})
        except TypeError:  # a body that takes no weak reference is held as scheduled() holds its own
            self.add(body, name, route)
        else:
            routes.setdefault(name, route)

    def guard(self, tools: list[Any]) -> list[Any]:
        """``tools`` (what the SDK will run for the scheduled agent this turn) with every function tool of a
        name this schedule knows running through its route: a tool whose body or invoker was replaced after
        ``scheduled()``, or a tool of that name given later (``clone(tools=...)``, a list edit), is routed
        now (its body in place, or, for an invoker of one's own, a scheduled copy). A tool of a name the
        schedule never knew is left as it is (the executor has no tool of that name)."""
        guarded = tools
        copies: dict[int, tuple[FunctionTool, Any, FunctionTool]] = {}
        for position, tool in enumerate(tools):
            if not isinstance(tool, FunctionTool):
                continue
            invoker = tool.on_invoke_tool
            if getattr(invoker, _ROUTED, None) is not None:
                continue  # a scheduled copy's invoker
            route = self.by_name.get(tool.name)
            if isinstance(invoker, _sdk.FailureHandlingInvoker):
                body = invoker._invoke_tool_impl
                if getattr(body, _ROUTED, None) is not None:
                    continue  # a scheduled copy's body
                if isinstance(body, _sdk.RoutedBody) and self.route(body.body, tool.name) is not None:
                    continue
                if route is None:
                    continue
                if self.strict is None or self.strict == tool.strict_json_schema:
                    self._add_later(_sdk.route_body(invoker, _route_for).body, tool.name, route)
                    continue
            elif route is None:
                continue
            held = self._copies.get(id(tool))
            if held is None or held[0] is not tool or held[1] is not invoker:
                held = (tool, invoker, _scheduled_copy(tool, route, self.strict))
            copies[id(tool)] = held
            if guarded is tools:
                guarded = list(tools)
            guarded[position] = held[2]
        if copies or self._copies:
            self._copies = copies
        return guarded

    def route(self, body: SdkInvoke, name: Any) -> _Route | None:
        entry = self._routes.get(id(body))
        if entry is not None and entry[0] is body:
            routes = entry[1]
        else:
            try:
                later = self._later.get(body) if self._later else None
            except TypeError:
                later = None
            if not later:
                return None
            routes = later
        found = routes.get(name) if len(routes) > 1 else None
        return found if found is not None else next(iter(routes.values()))

    def __copy__(self) -> _Schedule:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> _Schedule:
        return self

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        raise UnpicklableError(
            "a scheduled agent's schedule cannot be pickled: its calls run through a toolsched.Executor of this"
            " process (live state, not data); call scheduled() in the process that runs the agent"
        )


def _route_for(routed: _sdk.RoutedBody, sdk_context: Any) -> _Route | None:
    """The route of a routed SDK body's call: the one of the scheduled agent the call is made for (the SDK's
    ``ToolContext.agent``), when that agent's ``scheduled`` call routed this body; None otherwise (the body
    runs as in the SDK)."""
    agent = getattr(sdk_context, "agent", None)
    if agent is None:
        return None
    schedule = getattr(agent, _SCHEDULE, None)
    if not isinstance(schedule, _Schedule):
        return None
    return schedule.route(routed.body, getattr(sdk_context, "tool_name", None))


def _scheduled_invoker(route: _Route, sdk_invoker: SdkInvoke | None) -> SdkInvoke:
    """The invocation of a scheduled copy: ``route`` with the SDK body of ``sdk_invoker`` (None: a toolsched
    tool, which runs its own)."""
    body: SdkInvoke | None = _sdk.body_of(sdk_invoker) if sdk_invoker is not None else None

    async def invoke(sdk_context: Any, arguments: str) -> Any:
        return await route(body, sdk_context, arguments)

    setattr(invoke, _ROUTED, route)
    if sdk_invoker is not None:
        setattr(invoke, _SOURCE, sdk_invoker)
    return invoke


def _checked(tools: Iterable[Any]) -> list[Tool]:
    checked = []
    for position, item in enumerate(tools):
        if not isinstance(item, Tool):
            raise OptionError(f"tools[{position}] must be a toolsched tool, got {type(item).__name__}")
        checked.append(item)
    return checked
