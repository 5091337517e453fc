"""OpenTelemetry for toolsched: a span per call and per batch, and metrics.

::

    from toolsched.integrations import otel

    executor = otel.instrument(ts.Executor(tools))   # global tracer and meter providers
    outcome = await executor.run(calls)               # spans under the caller's current span

Spans follow the OpenTelemetry GenAI semantic conventions for tool execution:

- one ``execute_tool {tool name}`` span per call (kind INTERNAL) with
  ``gen_ai.operation.name`` = ``execute_tool``, ``gen_ai.tool.name``,
  ``gen_ai.tool.call.id``, ``gen_ai.tool.type`` = ``function``,
  ``gen_ai.tool.description``, and on failure ``error.type`` (the result's
  ``error_kind``) with an ERROR status carrying the message;
- the call span is the current span while the tool runs, so spans the tool
  makes itself (an HTTP client, a nested run) are its children;
- one ``toolsched.batch`` span per batch, parent of its calls' spans, with
  ``toolsched.batch.index``, ``toolsched.batch.size`` and
  ``toolsched.batch.concurrent``; batches are children of whatever span was
  current when ``run`` was called;
- a call answered without running (unknown tool, invalid input, denied)
  still gets its span, with ``toolsched.call.ran`` false;
- progress reports become ``progress`` span events.

Arguments (``gen_ai.tool.call.arguments``) and outputs
(``gen_ai.tool.call.result``) are recorded only with ``record_arguments=True``
/ ``record_outputs=True``: they may hold personal or secret data. Arguments
are those of ``run`` and ``stream`` calls, as the model sent them.

Metrics (meter ``toolsched``):

- ``toolsched.tool.calls`` (counter): every answered call, by
  ``gen_ai.tool.name`` and, for failures, ``error.type``;
- ``toolsched.tool.errors`` (counter): failed calls, by ``gen_ai.tool.name``
  and ``error.type``;
- ``toolsched.tool.duration`` (histogram, seconds): how long calls that ran
  took, by ``gen_ai.tool.name`` (and ``error.type`` for failures).

Everything attaches through the executor's ``on_event`` callbacks and a thin
wrapper around ``run``, ``resume``, ``recover``, ``stream`` and ``turn`` (which keeps
concurrent runs and streamed turns on one executor apart, and ends the spans
of a cancelled run with ``error.type`` = ``cancelled``); nothing is added to the call path when an
executor is not instrumented. Needs ``opentelemetry-api``
(``pip install 'toolsched[otel]'``); install an SDK to export.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import weakref
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Iterable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

import anyio

from toolsched._executor.executor import Executor
from toolsched._executor.shaping import shown_as_text
from toolsched._executor.streaming import StreamingTurn
from toolsched._values.calls import ToolCall
from toolsched._values.content import content_parts, content_text
from toolsched._values.events import (
    BatchFinished,
    BatchStarted,
    Event,
    ToolFinished,
    ToolProgress,
    ToolRetrying,
    ToolStarted,
)
from toolsched._values.results import ToolResult
from toolsched.errors import OptionError

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, TracerProvider

__all__ = ["OtelObserver", "instrument", "is_instrumented", "uninstrument"]

logger = logging.getLogger("toolsched.otel")

OPERATION = "execute_tool"
# Upper bounds (seconds) suited to tool calls: from sub-millisecond lookups to minutes-long jobs.
DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


def _require_otel() -> None:
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "toolsched.integrations.otel needs the `opentelemetry-api` package: pip install 'toolsched[otel]'"
        ) from exc


@dataclass(slots=True)
class _OpenCall:
    span: Span
    token: Token[Context] | None
    task: int | None


@dataclass(slots=True)
class _RunSpans:
    """The open spans of one run (internal): keyed by the event's parent call path (None for the run's own
    calls and batches; a nested run's have their own batch numbers and call IDs) and the batch or call."""

    batches: dict[tuple[str | None, int], Span] = field(default_factory=dict)
    calls: dict[tuple[str | None, str], _OpenCall] = field(default_factory=dict)
    # The arguments of the run's own calls (``record_arguments``), by call ID.
    arguments: dict[str, Any] = field(default_factory=dict)


# The run whose events the current task emits; set by the wrappers around run, resume, recover and stream (and by
# a traced turn).
_CURRENT_RUN: ContextVar[_RunSpans | None] = ContextVar("toolsched_otel_run", default=None)


def _as_text(value: Any) -> str:
    """Arguments or an output as an attribute's text: text as it is, images described, anything else JSON.

    Never raises (an attribute that failed would lose its span): what JSON cannot hold (tuple keys, an int past
    Python's digit limit, nesting past the recursion limit), or what fails as its images are looked for (an
    array-like entry), is its ``str()``, or a stand-in naming its type.
    """
    if isinstance(value, str):
        return value
    try:
        # Looking for images compares the value's ``type`` entry, which an array-like value answers with no truth.
        parts = content_parts(value)
        if parts is not None:
            return content_text(parts)
        return json.dumps(value, ensure_ascii=False, default=str)
    except Exception:  # a value that fails to show itself (even its str()) is named, never the span's loss
        return shown_as_text(value)


class OtelObserver:
    """Turns a run's events into spans and metrics; ``instrument`` installs one.

    A plain (not async) event callback, so each span starts and ends when its
    event happens. Used on its own as ``on_event``, it keeps one set of open
    spans for the executor: concurrent runs then need ``instrument``, which
    gives each run its own.
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        record_arguments: bool = False,
        record_outputs: bool = False,
        descriptions: Mapping[str, str] | None = None,
    ) -> None:
        _require_otel()
        from opentelemetry import metrics, trace

        from toolsched import __version__

        self.record_arguments = record_arguments
        self.record_outputs = record_outputs
        self._descriptions = dict(descriptions or {})
        self._tracer = trace.get_tracer("toolsched", __version__, tracer_provider=tracer_provider)
        meter = metrics.get_meter("toolsched", __version__, meter_provider=meter_provider)
        self._calls = meter.create_counter("toolsched.tool.calls", unit="{call}", description="Tool calls answered")
        self._errors = meter.create_counter(
            "toolsched.tool.errors", unit="{call}", description="Tool calls answered with an error, by error.type"
        )
        self._duration = meter.create_histogram(
            "toolsched.tool.duration",
            unit="s",
            description="How long tool calls ran",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self._loose = _RunSpans()

    # -- events -----------------------------------------------------------------

    def __call__(self, event: Event) -> None:
        run = _CURRENT_RUN.get() or self._loose
        if isinstance(event, ToolStarted):
            self._started(run, event)
        elif isinstance(event, ToolFinished):
            self._finished(run, event.result, event.parent_call_id)
        elif isinstance(event, BatchStarted):
            self._batch_started(run, event)
        elif isinstance(event, BatchFinished):
            span = run.batches.pop((event.parent_call_id, event.batch), None)
            if span is not None:
                span.end()
        elif isinstance(event, ToolProgress):
            open_call = run.calls.get((event.parent_call_id, event.call_id))
            if open_call is not None:
                attributes: dict[str, Any] = {"toolsched.progress.fraction": event.fraction}
                if event.message is not None:
                    attributes["toolsched.progress.message"] = event.message
                open_call.span.add_event("progress", attributes)
        elif isinstance(event, ToolRetrying):
            open_call = run.calls.get((event.parent_call_id, event.call_id))
            if open_call is not None:
                open_call.span.add_event(
                    "retry",
                    {
                        "toolsched.retry.attempt": event.attempt,
                        "toolsched.retry.delay_s": event.delay,
                        "toolsched.retry.error": event.error,
                    },
                )

    def _batch_started(self, run: _RunSpans, event: BatchStarted) -> None:
        span = self._tracer.start_span(
            "toolsched.batch",
            attributes={
                "toolsched.batch.index": event.batch,
                "toolsched.batch.size": len(event.call_ids),
                "toolsched.batch.concurrent": event.concurrent,
            },
        )
        run.batches[event.parent_call_id, event.batch] = span

    def _started(self, run: _RunSpans, event: ToolStarted) -> None:
        from opentelemetry import context, trace

        parent: Context | None = None
        batch_span = run.batches.get((event.parent_call_id, event.batch)) if event.batch is not None else None
        if batch_span is not None:
            parent = trace.set_span_in_context(batch_span)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": OPERATION,
            "gen_ai.tool.name": event.tool_name,
            "gen_ai.tool.call.id": event.call_id,
            "gen_ai.tool.type": "function",
            "toolsched.call.ran": event.ran,
        }
        description = self._descriptions.get(event.tool_name)
        if description:
            attributes["gen_ai.tool.description"] = description
        if event.batch is not None:
            attributes["toolsched.batch.index"] = event.batch
        if self.record_arguments and event.parent_call_id is None and event.call_id in run.arguments:
            attributes["gen_ai.tool.call.arguments"] = _as_text(run.arguments[event.call_id])
        span = self._tracer.start_span(
            f"{OPERATION} {event.tool_name}", context=parent, kind=trace.SpanKind.INTERNAL, attributes=attributes
        )
        token: Token[Context] | None = None
        task: int | None = None
        if event.ran:
            # The tool runs in this task next: its own spans become children of this one.
            token = context.attach(trace.set_span_in_context(span))
            task = _task_id()
        run.calls[event.parent_call_id, event.call_id] = _OpenCall(span, token, task)

    def _finished(self, run: _RunSpans, result: ToolResult, parent_call_id: str | None = None) -> None:
        from opentelemetry import context
        from opentelemetry.trace import Status, StatusCode

        open_call = run.calls.pop((parent_call_id, result.call_id), None)
        if parent_call_id is None:
            run.arguments.pop(result.call_id, None)
        attributes: dict[str, Any] = {"gen_ai.tool.name": result.tool_name, "gen_ai.operation.name": OPERATION}
        if result.is_error:
            attributes["error.type"] = result.error_kind or "execution_error"
            # Cut short (its timeout, a cancellation), the call leaves the nested runs it ran with spans open.
            self._end_nested(run, result.call_id if parent_call_id is None else f"{parent_call_id}/{result.call_id}")
        if open_call is not None:
            span = open_call.span
            if open_call.token is not None and open_call.task == _task_id():
                context.detach(open_call.token)
            if result.is_error:
                span.set_attribute("error.type", attributes["error.type"])
                span.set_status(Status(StatusCode.ERROR, result.error or None))
            elif self.record_outputs:
                span.set_attribute("gen_ai.tool.call.result", _as_text(result.output))
            if result.truncated:
                span.set_attribute("toolsched.result.truncated", True)
            span.end()
        self._calls.add(1, attributes)
        if result.is_error:
            self._errors.add(1, attributes)
        if open_call is None or open_call.token is not None:
            self._duration.record(result.duration_ms / 1000.0, attributes)

    # -- runs that end without their events ------------------------------------

    def _abandon(self, run: _RunSpans, error_type: str, message: str) -> None:
        """Ends the spans a run left open when it was cancelled or raised.

        Never raises: the run's own exception (its cancellation) is what reaches the caller; a span that
        cannot be ended (a failing span processor) is logged, and the others are still ended.
        """
        calls, batches = list(run.calls.values()), list(run.batches.values())
        run.calls.clear()
        run.batches.clear()
        run.arguments.clear()
        self._end_open(calls, batches, error_type, message)

    def _end_nested(self, run: _RunSpans, path: str) -> None:
        """Ends the spans still open of the runs nested in the call at ``path`` (``"c1"``, ``"c1/s2"``), which
        ended first: no event of theirs is to come."""
        prefix = path + "/"

        def inside(parent: str | None) -> bool:
            return parent is not None and (parent == path or parent.startswith(prefix))

        calls = [run.calls.pop(key) for key in [key for key in run.calls if inside(key[0])]]
        batches = [run.batches.pop(key) for key in [key for key in run.batches if inside(key[0])]]
        if calls or batches:
            # Their contexts are not detached: they were attached in the tool's own context, gone with it (the
            # parent call's detach gives the task back the context it had before the call).
            self._end_open(
                calls, batches, "cancelled", "the call that ran this nested run ended before it", detach=False
            )

    def _end_open(
        self, calls: list[_OpenCall], batches: list[Span], error_type: str, message: str, *, detach: bool = True
    ) -> None:
        """Ends open call and batch spans with ``error_type`` and an ERROR status; never raises (a span that
        cannot be ended is logged, and the others are still ended)."""
        from opentelemetry import context
        from opentelemetry.trace import Status, StatusCode

        current = _task_id()
        # Latest first: each context a call attached in this task gives back the one before it.
        for open_call in reversed(calls) if detach else ():
            if open_call.token is not None and open_call.task == current:
                context.detach(open_call.token)
        for span in [*(open_call.span for open_call in calls), *batches]:
            try:
                span.set_attribute("error.type", error_type)
                span.set_status(Status(StatusCode.ERROR, message))
                span.end()
            except Exception:
                logger.exception("could not end the span %r of a run that ended without it", span)


def _task_id() -> int | None:
    try:
        return anyio.get_current_task().id
    except RuntimeError:
        return None


def _failure(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, (anyio.get_cancelled_exc_class(), GeneratorExit)):
        return "cancelled", "the run was cancelled"
    return type(exc).__qualname__, str(exc) or type(exc).__qualname__


_INSTRUMENTED: weakref.WeakKeyDictionary[Executor, tuple[OtelObserver, Any]] = weakref.WeakKeyDictionary()


def instrument(
    executor: Executor,
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    record_arguments: bool = False,
    record_outputs: bool = False,
) -> Executor:
    """Makes ``executor`` report its calls and batches as spans and metrics; returns it.

    Providers default to the global ones (``opentelemetry.trace`` /
    ``opentelemetry.metrics``). The executor's own ``on_event`` callbacks keep
    working. Instrumenting again replaces the earlier options;
    ``uninstrument`` undoes it.
    """
    if not isinstance(executor, Executor):
        raise OptionError(f"instrument() takes a toolsched.Executor, got {type(executor).__name__}")
    for label, flag in (("record_arguments", record_arguments), ("record_outputs", record_outputs)):
        if not isinstance(flag, bool):
            raise OptionError(f"{label} must be True or False, got {flag!r}")
    if executor in _INSTRUMENTED:
        uninstrument(executor)
    observer = OtelObserver(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        record_arguments=record_arguments,
        record_outputs=record_outputs,
        descriptions={member.name: member.description for member in executor.registry},
    )
    previous = executor.on_event
    if previous is None:
        executor.on_event = observer
    elif isinstance(previous, tuple):
        executor.on_event = (*previous, observer)
    else:
        executor.on_event = (previous, observer)
    _INSTRUMENTED[executor] = (observer, previous)
    executor.run = _traced_run(observer, executor.run, record_arguments)  # type: ignore[method-assign]
    executor.resume = _traced_run(observer, executor.resume, False)  # type: ignore[method-assign]
    executor.recover = _traced_run(observer, executor.recover, False)  # type: ignore[method-assign]
    executor.stream = _traced_stream(observer, executor.stream, record_arguments)  # type: ignore[method-assign]
    executor.turn = _traced_turn(observer, executor.turn)  # type: ignore[method-assign]
    return executor


def uninstrument(executor: Executor) -> None:
    """Removes what ``instrument`` added to ``executor`` (nothing happens if it was not instrumented)."""
    installed = _INSTRUMENTED.pop(executor, None)
    if installed is None:
        return
    _, previous = installed
    executor.on_event = previous
    for name in ("run", "resume", "recover", "stream", "turn"):
        executor.__dict__.pop(name, None)


def is_instrumented(executor: Executor) -> bool:
    """Whether ``instrument`` was applied to ``executor`` (and not undone)."""
    return executor in _INSTRUMENTED


def _remember_arguments(run: _RunSpans, calls: Any) -> Any:
    """``calls`` as the run gets them, their arguments kept for the spans: a list, or (for an async iterable, whose
    calls arrive over time) an iterator that keeps each call's as it passes."""
    if isinstance(calls, AsyncIterable):
        return _remembering(run, calls)
    if not isinstance(calls, Iterable) or isinstance(calls, (str, bytes, Mapping)):
        return calls  # not calls: the method refuses it with its own error
    listed = calls if isinstance(calls, list) else list(calls)
    for call in listed:
        if isinstance(call, ToolCall):
            run.arguments.setdefault(call.id, call.args)
    return listed


def _with_remembered_calls(
    run: _RunSpans, arguments: tuple[Any, ...], options: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments of ``run`` or ``stream`` (the calls given by position or as ``calls=``), the calls' own
    arguments kept for the spans; anything else is passed on as it is, for the method to judge."""
    if arguments:
        return (_remember_arguments(run, arguments[0]), *arguments[1:]), options
    if "calls" in options:
        return arguments, {**options, "calls": _remember_arguments(run, options["calls"])}
    return arguments, options


async def _remembering(run: _RunSpans, calls: AsyncIterable[ToolCall]) -> AsyncIterator[ToolCall]:
    async for call in calls:
        if isinstance(call, ToolCall):
            run.arguments.setdefault(call.id, call.args)
        yield call


def _traced_run(observer: OtelObserver, method: Callable[..., Any], record_arguments: bool) -> Callable[..., Any]:
    @functools.wraps(method)
    async def traced(*arguments: Any, **options: Any) -> Any:
        run = _RunSpans()
        if record_arguments:
            arguments, options = _with_remembered_calls(run, arguments, options)
        token = _CURRENT_RUN.set(run)
        try:
            return await method(*arguments, **options)
        except BaseException as exc:
            observer._abandon(run, *_failure(exc))
            raise
        finally:
            _CURRENT_RUN.reset(token)

    return traced


class _TracedTurn(StreamingTurn):
    """A streamed turn whose events are traced as one run of their own (internal; ``instrument`` makes the
    executor's turns of this class, so that they stay ``StreamingTurn``s)."""

    _otel_observer: OtelObserver
    _otel_run: _RunSpans
    _otel_token: Token[_RunSpans | None] | None

    async def __aenter__(self) -> StreamingTurn:
        # Set before the turn starts its tasks, which copy the caller's context: its events find this run.
        self._otel_token = _CURRENT_RUN.set(self._otel_run)
        try:
            return await super().__aenter__()
        except BaseException as exc:
            self._otel_end(exc)
            raise

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        ended = error
        try:
            await super().__aexit__(kind, error, traceback)
        except BaseException as exc:
            ended = exc
            raise
        finally:
            self._otel_end(ended)

    def _otel_end(self, error: BaseException | None) -> None:
        """Ends what the turn left open (nothing, unless it was cancelled or failed) and leaves its run."""
        run = self._otel_run
        if run.calls or run.batches:
            self._otel_observer._abandon(run, *(_failure(error) if error is not None else _NOT_FINISHED))
        token, self._otel_token = self._otel_token, None
        if token is not None:
            try:
                _CURRENT_RUN.reset(token)
            except ValueError:
                # Left from another context than the one it was entered in: nothing to restore there.
                pass


_NOT_FINISHED = ("cancelled", "the turn ended before the call finished")


def _traced_turn(observer: OtelObserver, method: Callable[..., StreamingTurn]) -> Callable[..., StreamingTurn]:
    @functools.wraps(method)
    def traced(**options: Any) -> StreamingTurn:
        turn = method(**options)
        # The turn the executor made, traced: its class is swapped for the subclass that adds the run.
        turn.__class__ = _TracedTurn
        assert isinstance(turn, _TracedTurn)
        turn._otel_observer = observer
        turn._otel_run = _RunSpans()
        turn._otel_token = None
        return turn

    return traced


def _traced_stream(
    observer: OtelObserver, method: Callable[..., AsyncIterator[Event]], record_arguments: bool
) -> Callable[..., AsyncGenerator[Event, None]]:
    @functools.wraps(method)
    async def traced(*arguments: Any, **options: Any) -> AsyncGenerator[Event, None]:
        run = _RunSpans()
        if record_arguments:
            arguments, options = _with_remembered_calls(run, arguments, options)
        token = _CURRENT_RUN.set(run)
        try:
            async with contextlib.aclosing(cast(AsyncGenerator[Event, None], method(*arguments, **options))) as events:
                async for event in events:
                    yield event
        except BaseException as exc:
            observer._abandon(run, *_failure(exc))
            raise
        finally:
            try:
                _CURRENT_RUN.reset(token)
            except ValueError:
                # Closed from another context (a garbage-collected generator): nothing to restore there.
                pass

    return traced
