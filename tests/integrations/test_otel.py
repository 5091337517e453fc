"""OpenTelemetry: spans per call and per batch (GenAI conventions) and metrics, read from in-memory exporters."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import toolsched as ts
from tests.conftest import InFlight
from toolsched.integrations import otel

pytestmark = pytest.mark.anyio


@dataclass
class Telemetry:
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.spans() if span.name == name]

    def named_like(self, prefix: str) -> list[ReadableSpan]:
        return [span for span in self.spans() if span.name.startswith(prefix)]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, [span.name for span in self.spans()]
        return found[0]

    def instrument(self, executor: ts.Executor, **options: Any) -> ts.Executor:
        return otel.instrument(
            executor, tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **options
        )

    def metric_points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Telemetry(tracer_provider, meter_provider, exporter, reader)
    tracer_provider.shutdown()
    meter_provider.shutdown()


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def make_tools(in_flight: InFlight) -> list[ts.Tool]:
    @ts.tool(read_only=True, concurrency_safe=True)
    async def read(path: str) -> str:
        """Read a file."""
        await in_flight.hold(path)
        return f"contents of {path}"

    @ts.tool
    async def write(path: str, text: str) -> str:
        """Write a file."""
        await in_flight.hold(path)
        return f"wrote {path}"

    @ts.tool
    async def explode() -> str:
        """Always fails."""
        raise RuntimeError("disk on fire")

    return [read, write, explode]


async def test_call_spans_sit_under_batch_spans_under_the_callers_span(
    telemetry: Telemetry, in_flight: InFlight
) -> None:
    executor = telemetry.instrument(ts.Executor(make_tools(in_flight)))
    tracer = telemetry.tracer_provider.get_tracer("agent")
    calls = [
        ts.ToolCall("c1", "read", {"path": "a"}),
        ts.ToolCall("c2", "read", {"path": "b"}),
        ts.ToolCall("c3", "write", {"path": "c", "text": "x"}),
    ]
    with tracer.start_as_current_span("agent turn"):
        outcome = await executor.run(calls)
    assert [result.call_id for result in outcome.results] == ["c1", "c2", "c3"]

    root = telemetry.one("agent turn")
    batches = sorted(telemetry.named("toolsched.batch"), key=lambda span: attrs(span)["toolsched.batch.index"])
    assert [attrs(batch)["toolsched.batch.size"] for batch in batches] == [2, 1]
    assert [attrs(batch)["toolsched.batch.concurrent"] for batch in batches] == [True, False]
    assert all(parent_id(batch) == span_id(root) for batch in batches)

    reads = telemetry.named("execute_tool read")
    (write,) = telemetry.named("execute_tool write")
    assert sorted(attrs(span)["gen_ai.tool.call.id"] for span in reads) == ["c1", "c2"]
    assert all(parent_id(span) == span_id(batches[0]) for span in reads)
    assert parent_id(write) == span_id(batches[1])
    assert attrs(write) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "write",
        "gen_ai.tool.call.id": "c3",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.description": "Write a file.",
        "toolsched.call.ran": True,
        "toolsched.batch.index": 1,
    }
    assert write.kind is trace.SpanKind.INTERNAL
    assert write.status.status_code is StatusCode.UNSET
    # Every span lies within its parent, and the two reads (run concurrently) overlap in time.
    for child, parent in [*((span, batches[0]) for span in reads), (write, batches[1]), *((b, root) for b in batches)]:
        assert parent.start_time is not None and child.start_time is not None
        assert parent.end_time is not None and child.end_time is not None
        assert parent.start_time <= child.start_time <= child.end_time <= parent.end_time
    assert in_flight.peak == 2
    first, second = sorted(reads, key=lambda span: span.start_time or 0)
    assert second.start_time is not None and first.end_time is not None
    assert second.start_time < first.end_time
    assert batches[0].end_time is not None and batches[1].start_time is not None
    assert batches[0].end_time <= batches[1].start_time


async def test_failures_carry_error_type_and_status(telemetry: Telemetry, in_flight: InFlight) -> None:
    executor = telemetry.instrument(ts.Executor(make_tools(in_flight)))
    calls = [
        ts.ToolCall("c1", "explode"),
        ts.ToolCall("c2", "nope"),
        ts.ToolCall("c3", "read", {"path": 42}),
        ts.ToolCall("c4", "read", {"path": "fine"}),
    ]
    with telemetry.tracer_provider.get_tracer("agent").start_as_current_span("agent turn"):
        outcome = await executor.run(calls)
    assert [result.error_kind for result in outcome.results] == [
        "execution_error",
        "unknown_tool",
        "invalid_input",
        None,
    ]
    root = telemetry.one("agent turn")
    by_id = {attrs(span)["gen_ai.tool.call.id"]: span for span in telemetry.named_like("execute_tool ")}
    assert set(by_id) == {"c1", "c2", "c3", "c4"}
    exploded = by_id["c1"]
    assert attrs(exploded)["error.type"] == "execution_error"
    assert exploded.status.status_code is StatusCode.ERROR
    assert exploded.status.description == "RuntimeError: disk on fire"
    unknown = by_id["c2"]
    assert unknown.name == "execute_tool nope"
    assert attrs(unknown)["error.type"] == "unknown_tool"
    assert attrs(unknown)["toolsched.call.ran"] is False
    # Answered before any batch: a child of the caller's span.
    assert parent_id(unknown) == span_id(root)
    assert attrs(by_id["c3"])["error.type"] == "invalid_input"
    assert "error.type" not in attrs(by_id["c4"])


async def test_arguments_and_outputs_are_recorded_only_when_asked(telemetry: Telemetry, in_flight: InFlight) -> None:
    calls = [
        ts.ToolCall("c1", "read", '{"path": "secret.txt"}'),
        ts.ToolCall("c2", "write", {"path": "p", "text": "t"}),
    ]
    quiet = telemetry.instrument(ts.Executor(make_tools(in_flight)))
    await quiet.run(calls)
    for span in telemetry.spans():
        assert "gen_ai.tool.call.arguments" not in attrs(span)
        assert "gen_ai.tool.call.result" not in attrs(span)
    telemetry.exporter.clear()

    loud = telemetry.instrument(ts.Executor(make_tools(in_flight)), record_arguments=True, record_outputs=True)
    await loud.run(calls)
    read = attrs(telemetry.one("execute_tool read"))
    write = attrs(telemetry.one("execute_tool write"))
    assert read["gen_ai.tool.call.arguments"] == '{"path": "secret.txt"}'
    assert read["gen_ai.tool.call.result"] == "contents of secret.txt"
    assert write["gen_ai.tool.call.arguments"] == '{"path": "p", "text": "t"}'


async def test_a_tools_own_spans_are_children_of_its_call_span(telemetry: Telemetry) -> None:
    tracer = telemetry.tracer_provider.get_tracer("tool code")

    @ts.tool(concurrency_safe=True)
    async def fetch(url: str) -> str:
        """Fetch a page (async, on the event loop)."""
        with tracer.start_as_current_span(f"GET {url}"):
            await anyio.sleep(0.01)
        return "ok"

    @ts.tool(concurrency_safe=True)
    def crunch(n: int) -> int:
        """Crunch numbers (sync, in a worker thread)."""
        assert threading.current_thread() is not threading.main_thread()
        with tracer.start_as_current_span("crunching"):
            return n * 2

    executor = telemetry.instrument(ts.Executor([fetch, crunch]))
    calls = [
        ts.ToolCall("c1", "fetch", {"url": "/a"}),
        ts.ToolCall("c2", "fetch", {"url": "/b"}),
        ts.ToolCall("c3", "crunch", {"n": 21}),
    ]
    outcome = await executor.run(calls)
    assert [result.output for result in outcome.results] == ["ok", "ok", 42]
    calls_by_id = {attrs(span)["gen_ai.tool.call.id"]: span for span in telemetry.named_like("execute_tool ")}
    assert parent_id(telemetry.one("GET /a")) == span_id(calls_by_id["c1"])
    assert parent_id(telemetry.one("GET /b")) == span_id(calls_by_id["c2"])
    assert parent_id(telemetry.one("crunching")) == span_id(calls_by_id["c3"])
    # After the run the caller's context is its own again.
    assert not trace.get_current_span().get_span_context().is_valid


async def test_metrics_count_calls_errors_by_kind_and_time_calls_that_ran(
    telemetry: Telemetry, in_flight: InFlight
) -> None:
    executor = telemetry.instrument(ts.Executor(make_tools(in_flight)))
    await executor.run(
        [
            ts.ToolCall("c1", "read", {"path": "a"}),
            ts.ToolCall("c2", "read", {"path": "b"}),
            ts.ToolCall("c3", "explode"),
            ts.ToolCall("c4", "nope"),
        ]
    )
    counts = {
        (point.attributes["gen_ai.tool.name"], point.attributes.get("error.type")): point.value
        for point in telemetry.metric_points("toolsched.tool.calls")
    }
    assert counts == {("read", None): 2, ("explode", "execution_error"): 1, ("nope", "unknown_tool"): 1}
    errors = {
        (point.attributes["gen_ai.tool.name"], point.attributes["error.type"]): point.value
        for point in telemetry.metric_points("toolsched.tool.errors")
    }
    assert errors == {("explode", "execution_error"): 1, ("nope", "unknown_tool"): 1}
    durations = {
        point.attributes["gen_ai.tool.name"]: point for point in telemetry.metric_points("toolsched.tool.duration")
    }
    # The unknown tool never ran: it has no duration.
    assert set(durations) == {"read", "explode"}
    assert durations["read"].count == 2
    assert durations["read"].sum > 0


async def test_concurrent_runs_on_one_executor_keep_their_spans_apart(
    telemetry: Telemetry, in_flight: InFlight
) -> None:
    executor = telemetry.instrument(ts.Executor(make_tools(in_flight)))
    tracer = telemetry.tracer_provider.get_tracer("agent")

    async def conversation(name: str, path: str) -> None:
        with tracer.start_as_current_span(name):
            # Same call IDs and batch numbers in both runs.
            await executor.run([ts.ToolCall("c1", "write", {"path": path, "text": "x"})])

    async with anyio.create_task_group() as group:
        group.start_soon(conversation, "alice", "alice.txt")
        group.start_soon(conversation, "bob", "bob.txt")
    assert in_flight.peak == 2
    for name in ("alice", "bob"):
        root = telemetry.one(name)
        (batch,) = [span for span in telemetry.named("toolsched.batch") if parent_id(span) == span_id(root)]
        (call,) = [span for span in telemetry.named("execute_tool write") if parent_id(span) == span_id(batch)]
        assert attrs(call)["gen_ai.tool.call.id"] == "c1"


async def test_a_cancelled_run_still_ends_its_spans(telemetry: Telemetry) -> None:
    started = anyio.Event()

    @ts.tool
    async def slow() -> str:
        """Takes forever."""
        started.set()
        await anyio.sleep_forever()
        return "never"

    executor = telemetry.instrument(ts.Executor([slow]))

    async def cancel_once_started(scope: anyio.CancelScope) -> None:
        await started.wait()
        scope.cancel()

    with telemetry.tracer_provider.get_tracer("agent").start_as_current_span("agent turn"):
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as group:
                group.start_soon(cancel_once_started, scope)
                # A single call runs in the calling task itself.
                await executor.run([ts.ToolCall("c1", "slow")])
        assert scope.cancelled_caught
        # The cancelled call's span is no longer current in this task.
        assert trace.get_current_span().name == "agent turn"  # type: ignore[attr-defined]
    call = telemetry.one("execute_tool slow")
    batch = telemetry.one("toolsched.batch")
    for span in (call, batch):
        assert attrs(span)["error.type"] == "cancelled"
        assert span.status.status_code is StatusCode.ERROR
    assert parent_id(call) == span_id(batch)


async def test_progress_reports_become_span_events(telemetry: Telemetry) -> None:
    @ts.tool
    async def build(ctx: ts.ToolContext) -> str:
        """Build the project."""
        ctx.report_progress(0.5, "compiling")
        return "built"

    executor = telemetry.instrument(ts.Executor([build]))
    await executor.run([ts.ToolCall("c1", "build")])
    (event,) = telemetry.one("execute_tool build").events
    assert event.name == "progress"
    assert dict(event.attributes or {}) == {
        "toolsched.progress.fraction": 0.5,
        "toolsched.progress.message": "compiling",
    }


async def test_retries_become_span_events_of_the_one_call_span(telemetry: Telemetry) -> None:
    tries: list[int] = []

    @ts.tool(idempotent=True, retry=ts.Retry(attempts=3, backoff=0.001, jitter=False))
    async def fetch() -> str:
        """Fetch a page."""
        tries.append(1)
        if len(tries) < 3:
            raise ts.Transient("busy")
        return "page"

    executor = telemetry.instrument(ts.Executor([fetch]))
    outcome = await executor.run([ts.ToolCall("c1", "fetch")])
    assert outcome.results[0].attempts == 3
    events = telemetry.one("execute_tool fetch").events
    assert [event.name for event in events] == ["retry", "retry"]
    assert [dict(event.attributes or {})["toolsched.retry.attempt"] for event in events] == [1, 2]
    assert dict(events[0].attributes or {})["toolsched.retry.error"] == "Transient: busy"


async def test_stream_is_traced_and_leaving_early_cancels_the_open_spans(telemetry: Telemetry) -> None:
    release = anyio.Event()

    @ts.tool(concurrency_safe=True)
    async def quick() -> str:
        """Returns at once."""
        return "done"

    @ts.tool(concurrency_safe=True)
    async def stuck() -> str:
        """Waits for a release that never comes."""
        await release.wait()
        return "released"

    executor = telemetry.instrument(ts.Executor([quick, stuck]))
    async for event in executor.stream([ts.ToolCall("c1", "quick")]):
        assert not isinstance(event, ts.ToolStarted) or event.call_id == "c1"
    assert telemetry.one("execute_tool quick").status.status_code is StatusCode.UNSET
    telemetry.exporter.clear()

    events = executor.stream([ts.ToolCall("c1", "quick"), ts.ToolCall("c2", "stuck")])
    async for event in events:
        if isinstance(event, ts.ToolFinished):
            break
    await events.aclose()  # type: ignore[attr-defined]
    assert telemetry.one("execute_tool quick").status.status_code is StatusCode.UNSET
    stuck_span = telemetry.one("execute_tool stuck")
    assert attrs(stuck_span)["error.type"] == "cancelled"
    assert attrs(telemetry.one("toolsched.batch"))["error.type"] == "cancelled"


async def test_the_executors_own_callbacks_keep_working_and_uninstrument_undoes_it(
    telemetry: Telemetry, in_flight: InFlight
) -> None:
    seen: list[str] = []
    received: list[str] = []

    async def on_event_async(event: ts.Event) -> None:
        received.append(type(event).__name__)

    executor = ts.Executor(make_tools(in_flight), on_event=lambda event: seen.append(type(event).__name__))
    telemetry.instrument(executor)
    assert otel.is_instrumented(executor)
    await executor.run([ts.ToolCall("c1", "read", {"path": "a"})])
    assert seen == ["BatchStarted", "ToolStarted", "ToolFinished", "BatchFinished"]
    assert len(telemetry.named("execute_tool read")) == 1

    otel.uninstrument(executor)
    assert not otel.is_instrumented(executor)
    assert "run" not in vars(executor)
    await executor.run([ts.ToolCall("c2", "read", {"path": "b"})])
    assert len(telemetry.named("execute_tool read")) == 1
    assert len(seen) == 8

    both = telemetry.instrument(ts.Executor(make_tools(in_flight), on_event=[on_event_async]))
    await both.run([ts.ToolCall("c3", "read", {"path": "c"})])
    assert received == ["BatchStarted", "ToolStarted", "ToolFinished", "BatchFinished"]
    assert len(telemetry.named("execute_tool read")) == 2


async def test_bad_options_are_refused_by_name(telemetry: Telemetry, in_flight: InFlight) -> None:
    with pytest.raises(ts.OptionError, match="record_outputs must be True or False"):
        telemetry.instrument(ts.Executor(make_tools(in_flight)), record_outputs="yes")
    with pytest.raises(ts.OptionError, match=r"takes a toolsched\.Executor"):
        otel.instrument(object())  # type: ignore[arg-type]
    with pytest.raises(ts.OptionError, match="on_event must be a callable or a list of callables"):
        ts.Executor(make_tools(in_flight), on_event=["not callable"])  # type: ignore[list-item]
