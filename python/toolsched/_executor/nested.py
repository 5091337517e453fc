"""Nested runs: a tool whose body runs its own executor (a sub-agent).

``@agent_tool(child_executor)`` makes a tool of an async function that takes
a ``child: ChildRun`` parameter besides the model's arguments. Its body runs
turns on the child executor with ``await child.run(calls)``:

- the child run's events reach the parent run's listeners (and the child
  executor's own) with ``parent_call_id`` naming the parent call;
- the child run happens inside the parent call, so cancelling the parent
  call — its ``timeout``, or the parent run being cancelled — cancels it;
- when a child turn ends waiting for approvals, the parent call waits too:
  the child's requests appear in the parent's ``Outcome.pending`` under
  prefixed call IDs (``"p1/c2"``), and the parent's ``RunState`` carries the
  child's. ``parent_executor.resume(state)`` calls the body again: child
  turns that completed before are replayed from the state (their tools do
  not run again), the interrupted one is resumed, and the body carries on.

Because the body is called again on resume, it must reach the interrupted
turn the same way: the same child turns, in the same order, with the same
calls. Work between turns that must not be repeated (a model request, say)
goes through ``await child.step(fn, ...)``, whose value is recorded and
replayed. A body that strays from its record fails with ``StateError``.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import anyio

from toolsched._executor.executor import Executor, Steering
from toolsched._policy.holds import NestedHold, resuming
from toolsched._policy.runstate import CallSignature, ChildRecord, StepEntry, TurnEntry, call_signature
from toolsched._tools.context import ToolContext
from toolsched._tools.tools import FunctionTool, keyword_builder
from toolsched._values.calls import ToolCall, call_list
from toolsched._values.digest import args_digest
from toolsched._values.effects import child_identity
from toolsched._values.outcome import Outcome
from toolsched._values.results import shown_result
from toolsched.errors import MalformedCallError, StateError, ToolDefinitionError

__all__ = ["AgentTool", "ChildRun", "agent_tool"]


_PARENT_CONTEXT: Any = object()


def _describe(signature: CallSignature) -> str:
    return "[" + ", ".join(f"{call_id} {name}" for call_id, name, _ in signature) + "]"


class ChildRun:
    """The child executor as the body of an agent tool sees it (its ``child`` parameter).

    ``await child.run(calls)`` runs one child turn and returns its ``Outcome``;
    ``await child.step(fn, *args)`` runs a step whose value is replayed on
    resume; ``child.ctx`` is the parent call's ``ToolContext``.
    """

    __slots__ = ("_ctx", "_executor", "_held", "_journal", "_replay", "_waiting")

    def __init__(self, executor: Executor, ctx: ToolContext, resumed: ChildRecord | None) -> None:
        self._executor = executor
        self._ctx = ctx
        self._replay: list[TurnEntry | StepEntry] = list(resumed.journal) if resumed is not None else []
        self._waiting = resumed
        self._journal: list[TurnEntry | StepEntry] = []
        self._held: NestedHold | None = None

    @property
    def executor(self) -> Executor:
        """The child executor."""
        return self._executor

    @property
    def ctx(self) -> ToolContext:
        """The parent call's context (its ``call_id``, ``update``, ``report_progress``, ...)."""
        return self._ctx

    @property
    def parent_call_id(self) -> str:
        """The ID of the parent call: what the child run's events carry as ``parent_call_id``."""
        return self._ctx.call_id

    def _check_open(self) -> None:
        if self._held is not None:
            # The body caught the hold and went on: the parent call waits all the same.
            raise self._held

    def _replayed(self, kind: str, signature: CallSignature | None) -> TurnEntry | StepEntry | None:
        """The next recorded entry, checked against what the body does now; None past the record."""
        if not self._replay:
            if kind == "step" and self._waiting is not None:
                raise StateError(
                    f"`{self._ctx.tool_name}` took a new step on resume where its interrupted child turn "
                    f"{_describe(self._waiting.waiting)} was expected"
                )
            return None
        entry = self._replay.pop(0)
        if kind == "step":
            if not isinstance(entry, StepEntry):
                raise StateError(
                    f"`{self._ctx.tool_name}` took a step on resume where it had run the child turn "
                    f"{_describe(entry.calls)}"
                )
            return entry
        if not isinstance(entry, TurnEntry):
            raise StateError(f"`{self._ctx.tool_name}` ran a child turn on resume where it had taken a step")
        if entry.calls != signature:
            assert signature is not None
            raise StateError(
                f"`{self._ctx.tool_name}` ran the child turn {_describe(signature)} on resume where it had run "
                f"{_describe(entry.calls)}; the nested run cannot be resumed"
            )
        return entry

    async def run(
        self,
        calls: Iterable[ToolCall],
        *,
        steering: Steering | None = None,
        context: Any = _PARENT_CONTEXT,
    ) -> Outcome:
        """Runs one child turn on the child executor; returns its outcome.

        ``context`` defaults to the parent run's. A child turn that ends
        waiting for approvals does not return: the parent call waits (see
        the module's documentation).
        """
        self._check_open()
        calls = call_list(calls)
        for position, call in enumerate(calls):
            if not isinstance(call, ToolCall):
                raise MalformedCallError(f"calls[{position}] must be a ToolCall, got {type(call).__name__}")
        signature = call_signature(calls)
        entry = self._replayed("turn", signature)
        if entry is not None:
            assert isinstance(entry, TurnEntry)
            self._journal.append(entry)
            # Copies of the recorded outputs: what the body changes in them is replayed on no later resume.
            results = [shown_result(result) for result in entry.results]
            return Outcome(results, list(entry.duplicates), list(entry.steering_messages))
        ctx = self._ctx
        state = None
        waiting = self._waiting
        if waiting is not None:
            if signature != waiting.waiting:
                raise StateError(
                    f"`{ctx.tool_name}` ran the child turn {_describe(signature)} on resume where its interrupted "
                    f"turn {_describe(waiting.waiting)} was expected; the nested run cannot be resumed"
                )
            state = waiting.state
            self._waiting = None
        run_context = ctx.context if context is _PARENT_CONTEXT else context
        # The child turn's calls' idempotency keys: from the parent call's key and the turn's place in the body,
        # so that every attempt of the parent call (a resume, a recover) gives the same keys.
        identity = child_identity(ctx.idempotency_key, len(self._journal))
        token = resuming.set(None)
        try:
            outcome = await self._executor.run_nested(
                calls if state is None else None,
                state,
                steering=steering,
                context=run_context,
                sink=ctx.event_sink,
                parent_call_id=ctx.call_id,
                identity=identity,
            )
        finally:
            resuming.reset(token)
        flush = getattr(ctx.event_sink, "flush", None)
        if flush is not None:
            await flush()
        if outcome.interrupted:
            child_state = outcome.state
            assert child_state is not None
            self._held = NestedHold(ChildRecord(child_state, tuple(self._journal), signature))
            raise self._held
        # The record's own copy of each output: the body is handed the results themselves.
        self._journal.append(
            TurnEntry(
                signature,
                tuple(shown_result(result) for result in outcome.results),
                tuple(outcome.duplicates),
                tuple(outcome.steering_messages),
            )
        )
        return outcome

    async def step(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Runs ``fn(*args, **kwargs)`` (plain or async) once: on resume its recorded value is returned instead.

        Use it for work between child turns that must not be repeated, such
        as a request to a model. The value must be JSON-compatible for the
        run state to be saved with ``to_json``.
        """
        self._check_open()
        entry = self._replayed("step", None)
        if entry is not None:
            assert isinstance(entry, StepEntry)
            self._journal.append(entry)
            return copy.deepcopy(entry.value)
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = await value
        self._journal.append(StepEntry(copy.deepcopy(value)))
        return value


class AgentTool(FunctionTool):
    """A tool whose body runs a child executor (made by ``agent_tool``)."""

    _injected = frozenset({"child"})

    def __init__(
        self, fn: Callable[..., Awaitable[Any]], executor: Executor | Callable[[], Executor], **metadata: Any
    ) -> None:
        if not inspect.iscoroutinefunction(fn):
            raise ToolDefinitionError(f"agent_tool needs an async function, got {fn!r}")
        if "child" not in inspect.signature(fn).parameters:
            raise ToolDefinitionError(
                f"agent tool function {getattr(fn, '__name__', fn)}: add a `child` parameter (it receives the ChildRun)"
            )
        if not isinstance(executor, Executor) and not callable(executor):
            raise ToolDefinitionError(
                f"agent_tool takes the child Executor (or a callable making one per call), got {executor!r}"
            )
        self.executor = executor
        super().__init__(fn, **metadata)

    def _takes_context(self) -> bool:
        return True

    def _child_executor(self) -> Executor:
        executor = self.executor
        if isinstance(executor, Executor):
            return executor
        made = executor()
        if not isinstance(made, Executor):
            raise TypeError(f"the executor factory of `{self.name}` returned {type(made).__name__}, not an Executor")
        return made

    def _resumed(self, call_id: str, args: Mapping[str, Any]) -> ChildRecord | None:
        """The nested run this call resumes, if the run being resumed holds one for it."""
        records = resuming.get()
        record = records.get(call_id) if records else None
        if record is None or record.child is None:
            return None
        if record.tool != self.name or record.digest != args_digest(args):
            raise StateError(
                f"call {call_id}: the tool or its input changed since its nested run was interrupted; "
                "the nested run is not resumed"
            )
        return record.child

    def _invoker(self) -> Callable[[Any, ToolContext | None], Awaitable[Any]]:
        fn = self.fn
        # As for any ``@tool`` function: arguments its parameters refuse are ``invalid_input``.
        keywords = keyword_builder(self, with_ctx=self._wants_ctx)

        async def invoke_agent(args: Any, ctx: ToolContext | None) -> Any:
            assert ctx is not None
            kwargs = keywords(args, ctx)
            child = ChildRun(self._child_executor(), ctx, self._resumed(ctx.call_id, args))
            kwargs["child"] = child
            try:
                output = await fn(**kwargs)
            except NestedHold:
                raise
            except anyio.get_cancelled_exc_class():
                raise
            except BaseException:
                # A hold the body let escape wrapped (say, from a task group) is still a hold.
                child._check_open()
                raise
            child._check_open()
            return output

        return invoke_agent


def agent_tool(
    executor: Executor | Callable[[], Executor], /, **metadata: Any
) -> Callable[[Callable[..., Awaitable[Any]]], AgentTool]:
    """Makes a tool of an async function that runs turns on a child executor (a sub-agent).

    ``executor`` is the child ``Executor``, or a callable making one per call.
    The function takes the model's arguments (they give the input schema, as
    with ``@tool``), a ``child: ChildRun`` parameter, and optionally ``ctx``.
    ``metadata`` takes the keywords of ``@tool`` (``name``, ``description``,
    ``timeout``, ``needs_approval``, ...)::

        @ts.agent_tool(research_executor, timeout=120)
        async def research(question: str, child: ts.ChildRun) -> str:
            outcome = await child.run([ts.ToolCall("s1", "search", {"query": question})])
            return outcome.results[0].output
    """

    def decorate(fn: Callable[..., Awaitable[Any]]) -> AgentTool:
        return AgentTool(fn, executor, **metadata)

    return decorate
