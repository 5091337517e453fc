"""The tool: a typed function plus the metadata the executor schedules and guards by.

Every flag defaults to the fail-closed choice: not read-only, not
concurrency-safe, unknown resources (conflicts with everything).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import json
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, SupportsIndex, TypeVar, cast, overload

import anyio
import anyio.lowlevel
import anyio.to_thread
import pydantic

from toolsched._backends.isolation import function_invoker, method_invoker
from toolsched._backends.threads import run_in_thread
from toolsched._executor.strategies import MAX_SIZE
from toolsched._policy.resilience import CircuitBreaker, RateLimit, Resilience, Retry
from toolsched._tools.context import ToolContext
from toolsched._tools.exact_integers import exact_step, mark_plain, with_exact_integers
from toolsched._tools.resources import ResourceFactory, RunScope, open_close, with_run_resource
from toolsched._tools.schema import (
    SCHEMA_DEPTH,
    IntegerFix,
    JsonSchema,
    function_schema,
    inline_refs,
    model_schema,
    nests_deeper_than,
)
from toolsched._values.decisions import Decision
from toolsched._values.effects import Reconciled
from toolsched._values.event_loops import LoopValues, of_this_loop
from toolsched._values.numeric_options import numeric_fault, shown
from toolsched.errors import SchemaError, ToolDefinitionError, UnknownOptionError, UnpicklableError

__all__ = [
    "Access",
    "ArgumentsRefused",
    "FunctionTool",
    "Tool",
    "ToolFacts",
    "argument_parser",
    "keyword_builder",
    "tool",
    "tool_fingerprint",
]


class ArgumentsRefused(Exception):
    """The tool's own model refused arguments its schema let through (a ``date`` given ``"2024-13-45"``: the
    schema's ``format`` only describes it): the call is answered ``invalid_input``, as a schema refusal is,
    not as the tool failing. Raised only by the argument check (``argument_parser``, ``keyword_builder``),
    which runs in the executor's process before the body starts, also for a body run in a worker process
    or on Ray (a body's own exception of the same name is not this class)."""


def _refused(name: str, model: type[pydantic.BaseModel], args: Any) -> Any:
    """``model.model_validate(args)``, or ``ArgumentsRefused`` saying which argument and why."""
    try:
        return model.model_validate(args)
    except pydantic.ValidationError as exc:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": str(exc)}
        where = ".".join(str(part) for part in first.get("loc", ())) or "the arguments"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ArgumentsRefused(
            f"arguments for `{name}` refused by its parameters: `{where}`: {first['msg']}{more}"
        ) from None


Truncate = Literal["head", "tail", "middle", "offload"]
Isolation = Literal["none", "process"]
InterruptBehavior = Literal["block", "cancel"]
TimeoutBehavior = Literal["error", "raise"]
Args = Mapping[str, Any]
Flag = bool | Callable[[Args], bool]

DEFAULT_MAX_RESULT_CHARS = 100_000


@dataclass(frozen=True, slots=True)
class Access:
    """What a call reads and writes: keys such as paths (a directory key covers what is below it)."""

    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()

    def __init__(self, reads: Iterable[str] = (), writes: Iterable[str] = ()) -> None:
        for label, keys in (("reads", reads), ("writes", writes)):
            if isinstance(keys, str):
                raise TypeError(f"Access({label}=...) takes a collection of keys, not a single string")
        object.__setattr__(self, "reads", tuple(reads))
        object.__setattr__(self, "writes", tuple(writes))
        for key in (*self.reads, *self.writes):
            if not isinstance(key, str) or not key:
                raise TypeError(f"resource keys must be non-empty strings, got {key!r}")


def _judge(flag: Any, args: Args) -> bool:
    """Evaluates a flag that is a bool or a callable of the parsed arguments."""
    return bool(flag(args)) if callable(flag) else bool(flag)


def _choice(tool: str, field: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ToolDefinitionError(f"tool `{tool}`: {field} must be one of {', '.join(allowed)}; got {value!r}")


def _in_range(
    tool: str, field: str, value: Any, *, integer: bool, zero: bool, at_most: int | None, finite: bool = False
) -> None:
    """Checks a numeric tool option by ``numeric_fault``'s rule (a count at most a machine word unless
    ``at_most`` says less; a number in seconds may be ``inf``, no limit, unless ``finite``)."""
    fault = numeric_fault(value, integer=integer, above=not zero, most=at_most, infinite=not integer and not finite)
    if fault is not None:
        raise ToolDefinitionError(f"tool `{tool}`: {field} must be {fault}; got {shown(value)}")


def _non_negative(tool: str, field: str, value: Any, *, integer: bool, finite: bool = False) -> None:
    if value is not None:
        _in_range(tool, field, value, integer=integer, zero=True, at_most=None, finite=finite)


def _positive(tool: str, field: str, value: Any, *, optional: bool, integer: bool, at_most: int | None = None) -> None:
    if value is not None or not optional:
        _in_range(tool, field, value, integer=integer, zero=False, at_most=at_most)


def _boolean(tool: str, field: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ToolDefinitionError(f"tool `{tool}`: {field} must be True or False; got {value!r}")


def _flag(tool: str, field: str, value: Any, takes: str) -> None:
    if not isinstance(value, bool) and not callable(value):
        raise ToolDefinitionError(f"tool `{tool}`: {field} must be True, False or a callable {takes}; got {value!r}")


class ToolFacts:
    """What the executor needs of a tool, computed once at registration."""

    __slots__ = (
        "_limiter",
        "_resilience",
        "_retries_only",
        "checks_permissions",
        "exact_integers",
        "external",
        "input_schema",
        "invoke",
        "max_concurrency",
        "policies",
        "reconciles",
        "run_resource",
        "scoped",
        "static_needs_approval",
        "static_read_only",
        "static_safe",
        "takes_context",
        "validates_input",
    )

    def __init__(
        self,
        input_schema: JsonSchema,
        invoke: Callable[[Args, ToolContext | None], Awaitable[Any]],
        takes_context: bool,
        static_safe: bool | None,
        static_read_only: bool | None,
        validates_input: bool,
        max_concurrency: int | None,
        scoped: bool = False,
        checks_permissions: bool = False,
        static_needs_approval: bool | None = False,
        run_resource: ResourceFactory | None = None,
        policies: tuple[Retry | None, RateLimit | None, CircuitBreaker | None] | None = None,
        exact_integers: IntegerFix | None = None,
        external: bool = False,
        reconciles: bool = False,
    ) -> None:
        self.input_schema = input_schema
        # An external tool's calls are handed out, never run here (``toolsched._executor.call.hand_out``).
        self.external = external
        # Whether ``recover`` asks the tool's ``reconcile`` about a call that started and did not finish.
        self.reconciles = reconciles
        # What hands the tool ints where its schema says ``integer`` (``invoke`` takes it already; a backend
        # that runs the body elsewhere is handed arguments it has taken): None when the schema has none.
        self.exact_integers = exact_integers
        self.max_concurrency = max_concurrency
        self._limiter: LoopValues[anyio.CapacityLimiter] = {}
        self.invoke = invoke
        self.takes_context = takes_context
        self.static_safe = static_safe
        self.static_read_only = static_read_only
        self.validates_input = validates_input
        # Whether each call runs in its own cancel scope, so that it can be stopped
        # while it runs (its timeout, an interrupt, a cancellation). Only tools
        # that declare one of those get it: a scope costs more than all the rest
        # of a call's bookkeeping.
        self.scoped = scoped
        # Whether admission must ask the tool: check_permissions overridden, needs_approval not a constant.
        self.checks_permissions = checks_permissions
        self.static_needs_approval = static_needs_approval
        # The factory of the tool's per-run resource, if it has one (``invoke`` then opens it first).
        self.run_resource = run_resource
        # The tool's retry, rate limit and circuit policies (None: it has none), and their state per event loop.
        self.policies = policies
        self._resilience: LoopValues[Resilience] = {}
        self._retries_only: LoopValues[Resilience] = {}

    def resilience(self) -> Resilience:
        """The tool's retries, rate limit and circuit, shared by every run on the current event loop."""
        policies = self.policies
        assert policies is not None
        return of_this_loop(self._resilience, Resilience, *policies)

    def retries_only(self) -> Resilience:
        """The tool's retries alone, on the current event loop (its rate limit and circuit are the fleet's)."""
        policies = self.policies
        assert policies is not None
        return of_this_loop(self._retries_only, Resilience, policies[0], None, None)

    def limiter(self) -> anyio.CapacityLimiter:
        """The tool's cap on calls in flight, shared by every run on the current event loop."""
        return of_this_loop(self._limiter, anyio.CapacityLimiter, self.max_concurrency or 1)


class Tool:
    """Base class of tools. Subclasses set the metadata as class attributes and define ``call``.

    ``async def call(self, args, ctx)`` (or a plain ``def``, run in a worker
    thread) receives the validated arguments — the ``input_model`` instance
    when one is set — and a ``ToolContext``.
    """

    name: str = ""
    description: str = ""
    input_schema: Mapping[str, Any] | None = None
    input_model: type[pydantic.BaseModel] | None = None
    aliases: tuple[str, ...] = ()
    read_only: Flag = False
    concurrency_safe: Flag = False
    destructive: Flag = False
    needs_approval: Flag = False
    rule_subject: str | None = None
    requires_user_interaction: bool = False
    isolation: Isolation = "none"
    interrupt_behavior: InterruptBehavior = "block"
    timeout: float | None = None
    timeout_behavior: TimeoutBehavior = "error"
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS
    max_result_lines: int | None = None
    truncate: Truncate = "tail"
    max_concurrency: int | None = None
    abort_siblings_on_error: bool = False
    enabled: bool | Callable[[], bool] = True
    should_defer: bool = False
    always_load: bool = False
    idempotent: bool = False
    # How many ``model_retry``, ``invalid_input`` and ``semantic_error`` answers a run gives this tool
    # before its calls are answered ``retries_exhausted`` (``toolsched._policy.limits``).
    max_model_retries: int = 3
    # Resilience for shared downstreams (``toolsched._policy.resilience``): retries need ``idempotent=True``.
    retry: Retry | None = None
    rate_limit: RateLimit | None = None
    circuit: CircuitBreaker | None = None
    backend: str | None = None
    run_resource: ResourceFactory | None = None
    # What one call needs where a remote backend runs it (Ray's task options);
    # the local backend ignores them. Retries rerun a call whose worker died,
    # so they need ``idempotent=True``.
    num_cpus: float | None = None
    num_gpus: float | None = None
    memory: int | None = None
    max_retries: int | None = None
    # Calls of an external tool are validated, permitted and scheduled, then handed out to be answered from
    # outside (``ExternalCall``); the tool has no body.
    external: bool = False

    _facts_cache: ToolFacts | None = None

    def is_read_only(self, args: Args) -> bool:
        """Whether this call changes no persistent state."""
        return _judge(self.read_only, args)

    def is_concurrency_safe(self, args: Args) -> bool:
        """Whether this call may share a batch with other safe calls."""
        return _judge(self.concurrency_safe, args)

    def is_destructive(self, args: Args) -> bool:
        """Whether this call is irreversible (delete, send, overwrite)."""
        return _judge(self.destructive, args)

    def requires_approval(self, args: Args) -> bool:
        """Whether this call must be approved before it runs (``needs_approval``)."""
        return _judge(self.needs_approval, args)

    def resources(self, args: Args) -> Access | None:
        """What this call reads and writes; None means unknown (conflicts with everything)."""
        return None

    def is_enabled(self) -> bool:
        """Whether the tool is offered (and callable) this turn."""
        return bool(self.enabled()) if callable(self.enabled) else bool(self.enabled)

    async def validate_input(self, args: Args, ctx: ToolContext) -> None:
        """Semantic checks after the schema passed; raise ``SemanticError`` to refuse."""

    async def check_permissions(self, args: Args, ctx: ToolContext) -> Decision:
        """The tool's own say on whether this call may run: allow, deny (with a reason) or ask.

        Merged with the permission rules, the mode and the hooks (deny > ask > allow).
        """
        return Decision.allow()

    async def reconcile(self, args: Args, ctx: ToolContext) -> Reconciled:
        """Settles a call in doubt: ``recover`` asks it about a call that started and did not finish.

        Return ``ts.Done(output)`` when the call's effect happened (the call is
        answered with ``output`` and never runs), ``ts.NotDone()`` when it did
        not (the call runs now), or None when it cannot tell. Look the effect
        up by ``ctx.idempotency_key``. Override it (or give ``reconcile=`` to
        ``@tool``) to have ``recover`` ask; the default is never asked. It gets a
        copy of the arguments and is bounded by the tool's ``timeout`` (60
        seconds without one); a plain function runs in a worker thread.
        """
        return None

    async def open(self, run: RunScope) -> Any:
        """Opens this tool's per-run resource; override (with ``close``) to have one.

        Called once per run, by the first call of the tool in that run; every
        call of the tool in the run then finds the value as ``ctx.resource``.
        """
        return None

    async def close(self, run: RunScope) -> None:
        """Closes the per-run resource (``run.resource``) when the run ends: with results, an error, or cancelled.

        ``run.error`` is the exception the run ended with, if any.
        """

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    def replica(self) -> Tool:
        """A shallow copy without what this process caches about the tool (for a worker elsewhere)."""
        return copy.copy(self)

    def __getstate__(self) -> Any:
        """What a copy (``copy.copy``, ``copy.deepcopy``) or a pickle of the tool carries: its attributes,
        without what this process caches about it (its per-loop concurrency cap and resilience state, which
        cannot be copied). Registered, a copy is a tool of its own, its attributes read afresh."""
        state: Any = super().__getstate__()
        attributes = state[0] if isinstance(state, tuple) else state
        if attributes and "_facts_cache" in attributes:
            attributes = {key: value for key, value in attributes.items() if key != "_facts_cache"}
            state = (attributes, state[1]) if isinstance(state, tuple) else attributes
        return state

    def _resource_factory(self) -> ResourceFactory | None:
        """The per-run resource the tool declares: ``run_resource``, or ``open``/``close`` overridden."""
        cls = type(self)
        methods = cls.open is not Tool.open or cls.close is not Tool.close
        factory = self.run_resource
        if factory is None:
            return open_close(self.open, self.close) if methods else None
        if methods:
            raise ToolDefinitionError(f"tool `{self.name}`: declare open()/close() or run_resource, not both")
        if not callable(factory):
            raise ToolDefinitionError(
                f"tool `{self.name}`: run_resource must be a callable (RunScope) -> async context manager"
            )
        return factory

    # -- registration ---------------------------------------------------------

    def _describe_input(self) -> JsonSchema:
        if self.input_model is not None and self.input_schema is not None:
            raise ToolDefinitionError(f"tool `{self.name}`: set input_model or input_schema, not both")
        if self.input_model is not None:
            return model_schema(self.input_model)
        if self.input_schema is not None:
            if not isinstance(self.input_schema, Mapping):
                raise ToolDefinitionError(f"tool `{self.name}`: input_schema must be a mapping")
            return dict(self.input_schema)
        raise ToolDefinitionError(f"tool `{self.name}`: set input_model or input_schema")

    def _invoker(self) -> Callable[[Args, ToolContext | None], Awaitable[Any]]:
        call = getattr(self, "call", None)
        if call is None or not callable(call):
            raise ToolDefinitionError(f"tool class {type(self).__name__} must define call(self, args, ctx)")
        model = self.input_model
        parse = argument_parser(self)
        if self.isolation == "process":
            return method_invoker(self, parse)
        if inspect.iscoroutinefunction(call):
            if model is None:
                # The method's coroutine is awaited as it is: no frame of ours around it.
                return cast(Callable[[Args, ToolContext | None], Awaitable[Any]], call)

            def invoke_async(args: Args, ctx: ToolContext | None) -> Awaitable[Any]:
                return cast(Awaitable[Any], call(parse(args), ctx))

            return invoke_async

        async def invoke_in_thread(args: Args, ctx: ToolContext | None) -> Any:
            # A thread cannot be stopped: see ``toolsched._backends.threads`` for what a cancelled call reports.
            return await run_in_thread(call, parse(args), ctx)

        return invoke_in_thread

    def _takes_context(self) -> bool:
        return True

    def _check_placement(self) -> None:
        """Checks where the body may run: the backend's name and what a remote worker needs."""
        name = self.name
        if self.backend is not None and (not isinstance(self.backend, str) or not self.backend):
            raise ToolDefinitionError(f"tool `{name}`: backend must be a backend's name; got {self.backend!r}")
        # A share of a machine: no scheduler places a call that asks for infinitely many.
        _non_negative(name, "num_cpus", self.num_cpus, integer=False, finite=True)
        _non_negative(name, "num_gpus", self.num_gpus, integer=False, finite=True)
        _positive(name, "memory", self.memory, optional=True, integer=True)
        _non_negative(name, "max_retries", self.max_retries, integer=True)
        if self.max_retries and not self.idempotent:
            raise ToolDefinitionError(
                f"tool `{name}`: max_retries={self.max_retries} would run a call again after its worker died; "
                "declare idempotent=True if running it twice is safe"
            )

    def _reconciles(self) -> bool:
        """Whether the tool settles calls in doubt: ``reconcile`` overridden, or given to ``@tool``."""
        given = self.__dict__.get("reconcile")
        if given is not None:
            if not callable(given):
                raise ToolDefinitionError(
                    f"tool `{self.name}`: reconcile must be a callable (args, ctx) -> ts.Done | ts.NotDone | None; "
                    f"got {given!r}"
                )
            return True
        return type(self).reconcile is not Tool.reconcile

    def _check_external(self, reconciles: bool, factory: ResourceFactory | None) -> None:
        """An external tool has no body here: the options that shape how a body runs are refused."""
        name = self.name
        body_options = {
            "isolation='process'": self.isolation == "process",
            "backend": self.backend is not None,
            "retry": self.retry is not None,
            "rate_limit": self.rate_limit is not None,
            "circuit": self.circuit is not None,
            "max_concurrency": self.max_concurrency is not None,
            "a per-run resource": factory is not None,
            "reconcile": reconciles,
            "max_retries": bool(self.max_retries),
        }
        refused = [option for option, given in body_options.items() if given]
        if refused:
            raise ToolDefinitionError(
                f"tool `{name}`: an external tool's calls are answered from outside and never run here, so it "
                f"takes no {', '.join(refused)}"
            )

    def _policies(self) -> tuple[Retry | None, RateLimit | None, CircuitBreaker | None] | None:
        """The tool's resilience policies, checked: a retry needs an idempotent tool."""
        name = self.name
        for field, kind in (("retry", Retry), ("rate_limit", RateLimit), ("circuit", CircuitBreaker)):
            value = getattr(self, field)
            if value is not None and not isinstance(value, kind):
                raise ToolDefinitionError(
                    f"tool `{name}`: {field} must be a ts.{kind.__name__} or None; got {type(value).__name__}"
                )
        if self.retry is not None and not self.idempotent:
            raise ToolDefinitionError(
                f"tool `{name}`: retry=... would run a call again after it failed; "
                "declare idempotent=True if running it twice is safe"
            )
        if self.retry is None and self.rate_limit is None and self.circuit is None:
            return None
        return (self.retry, self.rate_limit, self.circuit)

    @property
    def facts(self) -> ToolFacts:
        """What the executor needs of this tool (internal to toolsched): the metadata, checked once and cached."""
        if self._facts_cache is not None:
            return self._facts_cache
        name = self.name
        if not isinstance(name, str) or not name:
            raise ToolDefinitionError(f"{type(self).__name__} has no name")
        if not isinstance(self.description, str):
            raise ToolDefinitionError(f"tool `{name}`: description must be a string")
        if isinstance(self.aliases, str):
            raise ToolDefinitionError(f"tool `{name}`: aliases must be a collection of names, not a string")
        for field in ("read_only", "concurrency_safe", "destructive", "needs_approval"):
            _flag(name, field, getattr(self, field), "of the arguments")
        _flag(name, "enabled", self.enabled, "taking no arguments")
        for field in (
            "requires_user_interaction",
            "abort_siblings_on_error",
            "should_defer",
            "always_load",
            "idempotent",
            "external",
        ):
            _boolean(name, field, getattr(self, field))
        for field in ("isolation", "interrupt_behavior", "timeout_behavior", "truncate"):
            value = getattr(self, field)
            if isinstance(value, str) and type(value) is not str:
                # Plain text: a subclass's own equality could make "none" equal to "process".
                setattr(self, field, str.__str__(value))
        _choice(name, "isolation", self.isolation, ("none", "process"))
        _choice(name, "interrupt_behavior", self.interrupt_behavior, ("block", "cancel"))
        _choice(name, "timeout_behavior", self.timeout_behavior, ("error", "raise"))
        _choice(name, "truncate", self.truncate, ("head", "tail", "middle", "offload"))
        _positive(name, "timeout", self.timeout, optional=True, integer=False)
        _positive(name, "max_result_chars", self.max_result_chars, optional=False, integer=True)
        _positive(name, "max_result_lines", self.max_result_lines, optional=True, integer=True)
        _in_range(name, "max_model_retries", self.max_model_retries, integer=True, zero=True, at_most=None)
        # A cap on calls in flight is held to the strategies' own (``Partitioned(max_concurrency=...)``).
        _positive(name, "max_concurrency", self.max_concurrency, optional=True, integer=True, at_most=MAX_SIZE)
        self._check_placement()
        cls = type(self)
        static_safe = (
            bool(self.concurrency_safe)
            if cls.is_concurrency_safe is Tool.is_concurrency_safe and not callable(self.concurrency_safe)
            else None
        )
        static_read_only = (
            bool(self.read_only) if cls.is_read_only is Tool.is_read_only and not callable(self.read_only) else None
        )
        external = self.external
        reconciles = self._reconciles()
        invoke = _handed_out_only(name) if external else self._invoker()
        takes_context = self._takes_context()
        factory = self._resource_factory()
        if external:
            self._check_external(reconciles, factory)
        if factory is not None:
            if self.isolation == "process":
                raise ToolDefinitionError(
                    f"tool `{name}`: a per-run resource cannot reach a process-isolated tool; use isolation='none'"
                )
            if not takes_context:
                raise ToolDefinitionError(
                    f"tool `{name}`: a tool with a per-run resource takes a `ctx` parameter (it finds the "
                    "resource as ctx.resource)"
                )
            invoke = with_run_resource(self, name, factory, invoke)
        input_schema = self._describe_input()
        if nests_deeper_than(input_schema, SCHEMA_DEPTH):
            # Refused before anything walks it recursively (the engine would refuse it too, past its limit).
            raise SchemaError(
                f"tool `{name}` has an invalid input schema: it nests deeper than the limit of {SCHEMA_DEPTH} levels"
            )
        # Exports inline every reference: one that cannot be (recursive, or not to `$defs`) is refused now.
        inline_refs(input_schema)
        policies = self._policies()
        exact_integers, integer_key = exact_step(input_schema)
        if exact_integers is not None:
            invoke = with_exact_integers(invoke, exact_integers, integer_key)
        facts = ToolFacts(
            input_schema=input_schema,
            invoke=invoke,
            takes_context=takes_context,
            static_safe=static_safe,
            static_read_only=static_read_only,
            validates_input=cls.validate_input is not Tool.validate_input,
            max_concurrency=self.max_concurrency,
            # A call that may wait for a token or a retry is stoppable while it waits.
            scoped=self.timeout is not None
            or self.interrupt_behavior == "cancel"
            or self.isolation == "process"
            or (policies is not None and (policies[0] is not None or policies[1] is not None)),
            checks_permissions=cls.check_permissions is not Tool.check_permissions,
            static_needs_approval=(
                bool(self.needs_approval)
                if cls.requires_approval is Tool.requires_approval and not callable(self.needs_approval)
                else None
            ),
            run_resource=factory,
            policies=policies,
            exact_integers=exact_integers,
            external=external,
            reconciles=reconciles,
        )
        self._facts_cache = facts
        return facts


def _handed_out_only(name: str) -> Callable[[Args, ToolContext | None], Awaitable[Any]]:
    """The invoker of an external tool: never called (its calls are handed out), so calling it is a bug."""

    async def invoke_external(args: Args, ctx: ToolContext | None) -> Any:
        raise RuntimeError(f"`{name}` is an external tool: its calls are answered from outside, not run")

    return invoke_external


F = TypeVar("F", bound=Callable[..., Any])


def _pickled_by_value(module_name: str) -> bool:
    """Whether a tool defined in ``module_name`` travels by value: one of ``__main__`` (a script, a notebook),
    or of a module registered with cloudpickle (``register_pickle_by_value``, standalone or Ray's)."""
    if module_name == "__main__":
        return True
    module = sys.modules.get(module_name)
    if module is None:
        return False
    for pickler in ("cloudpickle.cloudpickle", "ray.cloudpickle.cloudpickle"):
        registered = getattr(sys.modules.get(pickler), "_is_registered_pickle_by_value", None)
        try:
            if registered is not None and registered(module):
                return True
        except Exception:  # a release whose private check reads otherwise: by reference, as before
            continue
    return False


class FunctionTool(Tool):
    """A tool made from a function by ``@tool``. Calling it calls the function."""

    # Tells a process worker that imports this object by name to run ``fn``, the function it wraps.
    is_function_tool = True

    # Parameters (besides ``ctx``) that the tool fills in itself: not part of the input schema.
    _injected: frozenset[str] = frozenset()

    def __init__(self, fn: Callable[..., Any], **metadata: Any) -> None:
        if not callable(fn):
            raise ToolDefinitionError(f"@tool needs a function, got {fn!r}")
        self.fn = fn
        refuse_unknown_options("@tool", metadata)
        for key, value in metadata.items():
            if value is not None:
                setattr(self, key, value)
        if not metadata.get("name"):
            self.name = getattr(fn, "__name__", "")
        if metadata.get("description") is None:
            self.description = inspect.getdoc(fn) or ""
        self.aliases = tuple(metadata.get("aliases") or ())
        functools.update_wrapper(self, fn, updated=())
        self._schema, self._coerce_model, self._wants_ctx = function_schema(fn, injected=self._injected)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __reduce_ex__(self, protocol: SupportsIndex) -> str | tuple[Any, ...]:
        """Pickled by reference, as a function is: the module-level name the decorated function was bound to,
        looked up again where it is loaded. ``UnpicklableError`` for a tool that name does not reach (one made
        inside a function, or by ``tool(fn)`` under another name). A tool of a script or a notebook
        (``__main__``), or of a module registered with cloudpickle to travel by value, is pickled by value."""
        module_name = str(getattr(self, "__module__", ""))
        if _pickled_by_value(module_name):
            # A script's or a notebook's tool, or one of a module registered with cloudpickle to travel by value:
            # its name means nothing where it is loaded (a Ray worker), so its attributes travel, the function
            # among them (cloudpickle, as Ray uses it, sends such a function by value).
            return object.__reduce_ex__(self, protocol)
        qualname = str(getattr(self, "__qualname__", ""))
        found: Any = sys.modules.get(module_name)
        for part in qualname.split("."):
            found = getattr(found, part, None)
        if found is not self:
            raise UnpicklableError(
                f"tool `{self.name}` cannot be pickled: a @tool function is pickled by reference (its module and "
                f"name), and {module_name}.{qualname} is not this tool; define it at module level, decorated "
                "where it is defined"
            )
        return qualname

    def __copy__(self) -> FunctionTool:
        copied = object.__new__(type(self))
        copied.__dict__.update(self.__getstate__())
        return copied

    def __deepcopy__(self, memo: dict[int, Any]) -> FunctionTool:
        copied = object.__new__(type(self))
        memo[id(self)] = copied
        copied.__dict__.update(copy.deepcopy(self.__getstate__(), memo))
        return copied

    @property
    def argument_model(self) -> type[pydantic.BaseModel] | None:
        """The pydantic model that coerces the arguments before the call (None when they are plain JSON)."""
        return self._coerce_model

    @property
    def takes_ctx(self) -> bool:
        """Whether the function takes a ``ctx`` parameter."""
        return self._wants_ctx

    def _describe_input(self) -> JsonSchema:
        return self._schema

    def _takes_context(self) -> bool:
        return self._wants_ctx

    def _invoker(self) -> Callable[[Args, ToolContext | None], Awaitable[Any]]:
        fn = self.fn
        model = self._coerce_model
        wants_ctx = self._wants_ctx
        keywords = keyword_builder(self, with_ctx=wants_ctx)
        if self.isolation == "process":
            if wants_ctx:
                raise ToolDefinitionError(
                    f"tool `{self.name}`: a process-isolated tool cannot take ctx "
                    "(a ToolContext does not cross into the worker process)"
                )
            return function_invoker(self.name, fn, lambda args: keywords(args, None))
        if inspect.iscoroutinefunction(fn):
            # These return the function's own coroutine, awaited by the caller: no frame of ours around it.
            if model is None and not wants_ctx:

                def invoke_plain(args: Args, ctx: ToolContext | None) -> Awaitable[Any]:
                    return fn(**args)  # type: ignore[no-any-return]

                # The plain call of ``fn``: the one-integer step may take its place (``Tool.facts``).
                mark_plain(invoke_plain, fn)
                return invoke_plain

            def invoke_async(args: Args, ctx: ToolContext | None) -> Awaitable[Any]:
                return cast(Awaitable[Any], fn(**keywords(args, ctx)))

            return invoke_async

        async def invoke_in_thread(args: Args, ctx: ToolContext | None) -> Any:
            return await run_in_thread(functools.partial(fn, **keywords(args, ctx)))

        return invoke_in_thread


def argument_parser(tool: Tool) -> Callable[[Args], Any]:
    """What a class-form tool's ``call`` receives for a call's arguments: an instance of its ``input_model``
    (``ArgumentsRefused`` when the model refuses them), or the arguments as given when it has none."""
    model = tool.input_model
    name = tool.name

    def parse(args: Args) -> Any:
        return _refused(name, model, args) if model else args

    return parse


def keyword_builder(tool: FunctionTool, *, with_ctx: bool) -> Callable[[Args, ToolContext | None], dict[str, Any]]:
    """How a call's arguments become a ``@tool`` function's keyword arguments: coerced by its parameters'
    model (``ArgumentsRefused`` when the model refuses them), plus what the model's defaults make, plus
    ``ctx`` when ``with_ctx``."""
    model = tool.argument_model
    name = tool.name

    # Parameters whose default the model makes (``Field(default_factory=...)``): the function's own
    # default is the ``FieldInfo`` itself, so the model's value is passed when the call leaves them out.
    made = tuple(
        key
        for key, parameter in inspect.signature(tool.fn).parameters.items()
        if isinstance(parameter.default, pydantic.fields.FieldInfo)
    )

    # The parameter each argument fills: its own name, or the alias the schema shows in its place.
    fills = {} if model is None else {info.alias: field for field, info in model.model_fields.items() if info.alias}

    def keywords(args: Args, ctx: ToolContext | None) -> dict[str, Any]:
        if model is None:
            kwargs = dict(args)
        else:
            parsed = _refused(name, model, args)
            kwargs = {(field := fills.get(key, key)): getattr(parsed, field) for key in args}
            for parameter in made:
                if parameter not in kwargs:
                    kwargs[parameter] = getattr(parsed, parameter)
        if with_ctx:
            kwargs["ctx"] = ctx
        return kwargs

    return keywords


# Every keyword ``@tool`` accepts (integrations that wrap other frameworks' tools accept the same).
TOOL_OPTIONS = frozenset(
    {
        "name",
        "description",
        "aliases",
        "read_only",
        "concurrency_safe",
        "destructive",
        "needs_approval",
        "resources",
        "rule_subject",
        "requires_user_interaction",
        "isolation",
        "interrupt_behavior",
        "timeout",
        "timeout_behavior",
        "max_result_chars",
        "max_result_lines",
        "truncate",
        "max_concurrency",
        "abort_siblings_on_error",
        "enabled",
        "should_defer",
        "always_load",
        "idempotent",
        "max_model_retries",
        "backend",
        "run_resource",
        "num_cpus",
        "num_gpus",
        "memory",
        "max_retries",
        "retry",
        "rate_limit",
        "circuit",
        "external",
        "reconcile",
    }
)


def refuse_unknown_options(caller: str, metadata: Mapping[str, Any]) -> None:
    """Raises ``UnknownOptionError`` naming every keyword in ``metadata`` that is not a tool option."""
    unknown = set(metadata) - TOOL_OPTIONS
    if unknown:
        raise UnknownOptionError(f"{caller} got unknown option(s): {', '.join(sorted(unknown))}")


@overload
def tool(fn: F, /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    aliases: Iterable[str] = (),
    read_only: Flag | None = None,
    concurrency_safe: Flag | None = None,
    destructive: Flag | None = None,
    needs_approval: Flag | None = None,
    resources: Callable[[Args], Access | None] | None = None,
    rule_subject: str | None = None,
    requires_user_interaction: bool | None = None,
    isolation: Isolation | None = None,
    interrupt_behavior: InterruptBehavior | None = None,
    timeout: float | None = None,
    timeout_behavior: TimeoutBehavior | None = None,
    max_result_chars: int | None = None,
    max_result_lines: int | None = None,
    truncate: Truncate | None = None,
    max_concurrency: int | None = None,
    abort_siblings_on_error: bool | None = None,
    enabled: bool | Callable[[], bool] | None = None,
    should_defer: bool | None = None,
    always_load: bool | None = None,
    idempotent: bool | None = None,
    max_model_retries: int | None = None,
    backend: str | None = None,
    run_resource: ResourceFactory | None = None,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    memory: int | None = None,
    max_retries: int | None = None,
    retry: Retry | None = None,
    rate_limit: RateLimit | None = None,
    circuit: CircuitBreaker | None = None,
    external: bool | None = None,
    reconcile: Callable[[Args, ToolContext], Awaitable[Reconciled] | Reconciled] | None = None,
) -> Callable[[F], FunctionTool]: ...


def tool(fn: Callable[..., Any] | None = None, /, **metadata: Any) -> Any:
    """Makes a tool of a function: ``@tool`` or ``@tool(read_only=True, ...)``.

    The parameters' type hints give the input schema (through pydantic); the
    docstring gives the description. A parameter named ``ctx`` receives the
    ``ToolContext``. Sync functions run in a worker thread. ``run_resource``
    is a per-run resource: a callable ``(RunScope) -> async context manager``
    whose value the function finds as ``ctx.resource`` (see ``toolsched._tools.resources``).
    ``reconcile`` is ``async (args, ctx) -> ts.Done(output) | ts.NotDone() | None``, asked by
    ``recover`` about a call that started and did not finish; ``external=True`` makes a tool whose
    calls are handed out to be answered from outside (the function gives only the schema).
    """
    if fn is not None:
        if metadata:
            raise TypeError("use @tool or @tool(**options), not both")
        return FunctionTool(fn)

    def decorate(fn: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(fn, **metadata)

    return decorate


def tool_fingerprint(tool: Tool) -> str:
    """What makes a tool the same tool across processes: name, description, schema, subject, implementation.

    An approval is bound to it: a call is asked again when its tool changed since.
    """
    body = getattr(tool, "fn", None)
    implementation = body if body is not None else type(tool)
    module = getattr(implementation, "__module__", "?")
    qualname = getattr(implementation, "__qualname__", "?")
    identity = {
        "name": tool.name,
        "description": tool.description,
        "input_schema": tool.facts.input_schema,
        "rule_subject": tool.rule_subject,
        "implementation": f"{module}.{qualname}",
    }
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()
