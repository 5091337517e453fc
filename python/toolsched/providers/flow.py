"""The one execute/resume flow every provider adapter shares.

An adapter supplies only what is its own: how calls are read from its
response (``calls_from``) and how the reply is built from the results (its
``results_to_*``). The flow runs the calls, resumes an interrupted run from
its state, and holds the reply back while calls wait for a person.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from toolsched.outcome import Outcome
from toolsched.providers.wire import Execution, resume_outcome
from toolsched.results import ToolCall, ToolResult

if TYPE_CHECKING:
    from toolsched.executor import Executor, Steering
    from toolsched.registry import ToolRegistry

__all__ = ["Assembler", "Flow"]

E = TypeVar("E", bound=Execution)

Reply = Callable[..., Any]


class Assembler(Protocol):
    """One provider's reader of a streamed response: the calls each event completes, and the message it built."""

    def feed(self, event: Any) -> list[ToolCall]:
        """Takes the next event of the stream; returns the calls it completed, in model order."""

    def end(self) -> list[ToolCall]:
        """The stream ended: returns the calls only its end completes."""

    def assembled(self) -> Any:
        """What the model said, as the provider takes it back in the next request."""


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

    async def execute_stream(
        self,
        executor: Executor,
        events: AsyncIterable[Any] | Iterable[Any],
        assembler: Assembler,
        *,
        steering: Steering | None,
        context: Any,
    ) -> E:
        """Runs a streamed response's calls, each submitted the moment the stream completes it, and builds the
        reply; the execution's ``assistant`` is what the model said (for the next request).

        If the stream breaks, ``StreamFailed`` carries the results of the calls it completed. An executor
        whose turns cannot stream (batch hooks) reads the whole stream first, then runs the calls.
        """
        calls: list[ToolCall] = []
        if not executor.streams:
            if isinstance(events, AsyncIterable):
                async for event in events:
                    calls += assembler.feed(event)
            else:
                for event in events:
                    calls += assembler.feed(event)
            calls += assembler.end()
            outcome = await executor.run(calls, steering=steering, context=context)
        else:
            async with executor.turn(steering=steering, context=context) as turn:
                if isinstance(events, AsyncIterable):
                    async for event in events:
                        for call in assembler.feed(event):
                            calls.append(call)
                            turn.submit(call)
                else:
                    for event in events:
                        for call in assembler.feed(event):
                            calls.append(call)
                            turn.submit(call)
                for call in assembler.end():
                    calls.append(call)
                    turn.submit(call)
                turn.close()
                outcome = await turn.outcome()
        execution = self.finish(executor.registry, calls, outcome)
        return replace(execution, assistant=assembler.assembled())  # type: ignore[call-arg]

    async def resume(self, executor: Executor, execution: E, state: Any) -> E:
        """Finishes an interrupted execution from its state (the held calls decided on it)."""
        outcome = await resume_outcome(executor, state)
        return self.finish(executor.registry, execution.calls, outcome)
