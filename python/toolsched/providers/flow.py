"""The one execute/resume flow every provider adapter shares.

An adapter supplies only what is its own: how calls are read from its
response (``calls_from``) and how the reply is built from the results (its
``results_to_*``). The flow runs the calls, resumes an interrupted run from
its state, and holds the reply back while calls wait for a person.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from toolsched.outcome import Outcome
from toolsched.providers.wire import Execution, resume_outcome
from toolsched.results import ToolCall, ToolResult

if TYPE_CHECKING:
    from toolsched.executor import Executor, Steering
    from toolsched.registry import ToolRegistry

__all__ = ["Flow"]

E = TypeVar("E", bound=Execution)

Reply = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Flow(Generic[E]):
    """One provider's part of the flow: its execution type, its reply builder, and its empty reply.

    ``reply(calls, results, registry=...)`` builds the wire payload;
    ``empty()`` is the payload while the run is interrupted or when the
    response had no calls.
    """

    execution: Callable[[list[ToolCall], Outcome, Any], E]
    reply: Reply
    empty: Callable[[], Any]

    def finish(self, registry: ToolRegistry, calls: list[ToolCall], outcome: Outcome) -> E:
        """The execution of ``calls``: the reply built from the outcome, unless calls still wait."""
        if outcome.interrupted or not calls:
            return self.execution(calls, outcome, self.empty())
        results: Sequence[ToolResult] = outcome.results
        return self.execution(calls, outcome, self.reply(calls, results, registry=registry))

    async def execute(self, executor: Executor, calls: list[ToolCall], *, steering: Steering | None, context: Any) -> E:
        """Runs a response's calls and builds the reply."""
        outcome = await executor.run(calls, steering=steering, context=context)
        return self.finish(executor.registry, calls, outcome)

    async def resume(self, executor: Executor, execution: E, state: Any) -> E:
        """Finishes an interrupted execution from its state (the held calls decided on it)."""
        outcome = await resume_outcome(executor, state)
        return self.finish(executor.registry, execution.calls, outcome)
