"""The one execute/resume flow every provider adapter shares.

An adapter supplies only what is its own: how calls are read from its
response (``calls_from``) and how the reply is built from the results (its
``results_to_*``). The flow runs the calls, resumes an interrupted run from
its state, and holds the reply back while calls wait for a person.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from toolsched._policy.runstate import RunState, run_identity
from toolsched._values.calls import ToolCall
from toolsched._values.outcome import Outcome
from toolsched._values.results import ToolResult
from toolsched.errors import OptionError, ResponseFormatError, StateError, StreamFailed
from toolsched.providers._wire import Execution, check_executor, logger, resume_outcome

if TYPE_CHECKING:
    from toolsched._executor.executor import Executor, Steering
    from toolsched._tools.registry import ToolRegistry

__all__ = ["Assembler", "Flow"]

E = TypeVar("E", bound=Execution)

Reply = Callable[..., Any]


class Assembler(Protocol):
    """One provider's reader of a streamed response: the calls each event completes, and the message it built."""

    def feed(self, event: Any) -> list[ToolCall]:
        """Takes the next event of the stream; returns the calls it completed, in model order."""

    def end(self) -> list[ToolCall]:
        """The stream ended: returns the calls only its end completes; ``IncompleteStreamError`` when the
        stream ended before the provider's final event (a turn cut short)."""

    @property
    def complete(self) -> bool:
        """Whether the provider's final event came: nothing later in the stream changes the turn."""

    def assembled(self) -> Any:
        """What the model said, as the provider takes it back in the next request."""


@dataclass(frozen=True, slots=True)
class Flow(Generic[E]):
    """One provider's part of the flow: its execution type, its reply builder, and its empty reply.

    ``execution(calls, outcome, payload, assistant)`` builds the result;
    ``reply(calls, results, registry=...)`` builds the wire payload;
    ``empty()`` is the payload while the run is interrupted or when the
    response had no calls; ``ids(assembled)`` the call IDs of an assembled
    turn, in the model's order.
    """

    execution: Callable[[list[ToolCall], Outcome, Any, Any], E]
    reply: Reply
    empty: Callable[[], Any]
    ids: Callable[[Any], list[str]]

    def finish(self, registry: ToolRegistry, calls: list[ToolCall], outcome: Outcome, assistant: Any = None) -> E:
        """The execution of ``calls``: the reply built from the outcome, unless calls still wait.

        ``assistant`` is what the model said, as the next request takes it. The outcome's results and
        pending calls are put in the order of ``calls`` (a streamed turn's calls complete in another order).
        """
        outcome = _aligned(outcome, calls)
        if outcome.interrupted or not calls:
            return self.execution(calls, outcome, self.empty(), assistant)
        results: Sequence[ToolResult] = outcome.results
        return self.execution(calls, outcome, self.reply(calls, results, registry=registry), assistant)

    async def execute(
        self, executor: Executor, calls: list[ToolCall], *, steering: Steering | None, context: Any, assistant: Any
    ) -> E:
        """Runs a response's calls and builds the reply."""
        outcome = await executor.run(calls, steering=steering, context=context)
        return self.finish(executor.registry, calls, outcome, assistant)

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

        If the stream breaks (its iterator raises, or the assembler finds it incomplete: an event that is no
        part of a whole turn, or the end before the provider's final event), ``StreamFailed`` carries the
        results of the calls it completed, with the stream's error as its ``__cause__``; a failure after the
        final event changes nothing (the turn is whole) and is logged. An executor whose turns cannot stream
        (batch hooks) reads the whole stream first, then runs the calls; a stream that breaks there runs none
        (each call it completed is answered ``skipped``, or refused as the engine refuses it).
        What is no stream of events (a coroutine not awaited, a stream manager not entered, a whole response)
        is refused with ``OptionError`` before anything is read: no ``StreamFailed``, which asks for a retry.
        """
        _check_stream(events)
        calls: list[ToolCall] = []
        try:
            if not executor.streams:
                # Read whole first, as run() reads an async iterable for such an executor: if the stream breaks,
                # StreamFailed answers every call it completed without running any.
                outcome = await executor.run(_read_whole(events, assembler, calls), steering=steering, context=context)
            else:
                async with executor.turn(steering=steering, context=context) as turn:

                    def submit(call: ToolCall) -> None:
                        calls.append(call)
                        turn.submit(call)

                    await _read(events, assembler, submit)
                    turn.close()
                    outcome = await turn.outcome()
        except StreamFailed as failed:
            # The calls it completed, in the model's order, as a whole turn's results are.
            failed.outcome = _aligned(failed.outcome, self._in_model_order(calls, assembler.assembled()))
            raise
        assistant = assembler.assembled()
        calls = self._in_model_order(calls, assistant)
        return self.finish(executor.registry, calls, outcome, assistant)

    def _in_model_order(self, calls: list[ToolCall], assistant: Any) -> list[ToolCall]:
        """``calls`` in the order the model gave them in ``assistant`` (they may complete in another order)."""
        if len(calls) <= 1:
            # One call has no order to restore.
            return calls
        try:
            order = self.ids(assistant)
        except ResponseFormatError:
            # Parts of the turn that are no calls' (left alone as the stream gave them): the completion order.
            order = [call.id for call in calls]
        return _in_model_order(calls, order)

    async def resume(self, executor: Executor, execution: E, state: Any) -> E:
        """Finishes an interrupted execution from its state (the held calls decided on it).

        A ``RunState`` of another run (another execution's, whose calls may carry the same IDs) is refused
        with ``StateError`` before anything runs: its results would answer this execution's calls.
        """
        check_executor(executor)
        kind = self.execution if isinstance(self.execution, type) else Execution
        if not isinstance(execution, kind):
            raise OptionError(
                f"execution must be the {kind.__name__} that execute returned, got {type(execution).__name__}"
            )
        own = execution.outcome.state
        if isinstance(state, RunState) and own is not None and run_identity(state) != run_identity(own):
            raise StateError(
                "this state is not the one of this execution (it continues another run); resume each execution "
                "with its own outcome.state"
            )
        outcome = await resume_outcome(executor, state)
        return self.finish(executor.registry, execution.calls, outcome, getattr(execution, "assistant", None))


def _check_stream(events: Any) -> None:
    """Refuses what is no stream of events, naming what it is (``OptionError``)."""
    whole = isinstance(events, (str, bytes, bytearray, Mapping)) or hasattr(events, "model_dump")
    if not whole and isinstance(events, (AsyncIterable, Iterable)):
        return
    if inspect.isawaitable(events):
        hint = ": await it first (the SDK's request with stream=True is a coroutine)"
    elif hasattr(events, "__aenter__"):
        hint = ": enter it first (async with ... as stream) and pass the stream"
    elif whole:
        hint = ": a whole response goes to execute()"
    else:
        hint = ""
    raise OptionError(f"execute_stream takes the model's stream of events, got {type(events).__name__}{hint}")


def _in_model_order(calls: list[ToolCall], ids: list[str]) -> list[ToolCall]:
    """``calls`` in the order of ``ids`` (the assembled turn's), from the order the stream completed them: a
    call can be complete before one the model put ahead of it (an earlier block that stops later), and the
    reply answers the turn in its own order (``finish`` puts the outcome in it)."""
    position = {call_id: index for index, call_id in reversed(list(enumerate(ids)))}
    last = len(ids)
    return sorted(calls, key=lambda call: position.get(call.id, last))


def _aligned(outcome: Outcome, calls: list[ToolCall]) -> Outcome:
    """``outcome`` with its results and pending calls in the order of ``calls`` (a nested run's pending call,
    ``"p1/c2"``, at its parent's place)."""
    results_now = outcome.results
    if (
        not outcome.pending
        and len(results_now) == len(calls)
        and all(result.call_id == call.id for result, call in zip(results_now, calls, strict=True))
    ):
        # Already in order, one result a call (the common turn): nothing to sort.
        return outcome
    position = {call.id: index for index, call in reversed(list(enumerate(calls)))}
    last = len(calls)

    def place(call_id: str) -> int:
        found = position.get(call_id)
        return position.get(call_id.split("/", 1)[0], last) if found is None else found

    results = sorted(outcome.results, key=lambda result: place(result.call_id))
    pending = sorted(outcome.pending, key=lambda request: place(request.call_id))
    if all(a is b for a, b in zip(results, outcome.results, strict=True)) and all(
        a is b for a, b in zip(pending, outcome.pending, strict=True)
    ):
        return outcome
    return replace(outcome, results=results, pending=pending)


async def _read(
    events: AsyncIterable[Any] | Iterable[Any], assembler: Assembler, submit: Callable[[ToolCall], None]
) -> None:
    """Feeds every event to ``assembler`` and submits each call the moment it is complete, then the stream's end."""
    try:
        if isinstance(events, AsyncIterable):
            async for event in events:
                for call in assembler.feed(event):
                    submit(call)
        else:
            for event in events:
                for call in assembler.feed(event):
                    submit(call)
    except Exception as error:
        if not assembler.complete:
            # Given up on before its end (a fault in it, or its own failure): closed, not left streaming.
            await _close(events)
            raise
        # The answer was whole before the transport failed (a connection dropped before the body's end).
        logger.warning(
            "the stream failed after its final event; the answer was whole: %s: %s", type(error).__name__, error
        )
    for call in assembler.end():
        submit(call)


async def _read_whole(
    events: AsyncIterable[Any] | Iterable[Any], assembler: Assembler, calls: list[ToolCall]
) -> AsyncIterator[ToolCall]:
    """The calls of the whole stream, given once it is read to its end (or broke: then the calls it completed,
    and its error)."""
    error: Exception | None = None
    try:
        await _read(events, assembler, calls.append)
    except Exception as exc:
        error = exc
    for call in calls:
        yield call
    if error is not None:
        raise error


async def _close(events: AsyncIterable[Any] | Iterable[Any]) -> None:
    """Closes a stream that was not read to its end (an SDK stream's ``close``, a generator's ``aclose``)."""
    close = getattr(events, "aclose", None) or getattr(events, "close", None)
    if close is None:
        return
    try:
        closing = close()
        if inspect.isawaitable(closing):
            await closing
    except Exception as error:
        logger.warning("closing the stream failed: %s: %s", type(error).__name__, error)
