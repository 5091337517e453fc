"""Every tool call as an OpenTelemetry span: `execute_tool {name}` under a batch span under yours.

`otel.instrument(executor)` is the whole setup; spans follow the GenAI
semantic conventions and metrics count calls, errors by kind and latency.
This script keeps spans in memory and prints them as a tree; in an
application, install your exporter (OTLP, console, ...) on the tracer provider
instead. Run, with `opentelemetry-sdk` installed beside `toolsched[otel]`:
`python examples/otel_tracing.py`.
"""

from __future__ import annotations

import anyio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import toolsched as ts
from toolsched.integrations import otel


@ts.tool(read_only=True, concurrency_safe=True)
async def read_file(path: str) -> str:
    """Read a text file."""
    await anyio.sleep(0.01)
    return f"contents of {path}"


@ts.tool
async def write_file(path: str, text: str) -> str:
    """Write a text file."""
    return f"wrote {len(text)} characters to {path}"


def print_tree(spans: list[ReadableSpan]) -> None:
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        children.setdefault(span.parent.span_id if span.parent else None, []).append(span)

    def show(parent: int | None, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: (s.start_time or 0, s.name)):
            attributes = span.attributes or {}
            detail = ""
            if "gen_ai.tool.call.id" in attributes:
                detail = f" id={attributes['gen_ai.tool.call.id']}"
            if "error.type" in attributes:
                detail += f" error.type={attributes['error.type']}"
            print(f"{'  ' * depth}{span.name}{detail}")
            assert span.context is not None
            show(span.context.span_id, depth + 1)

    show(None, 0)


async def main() -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])

    executor = otel.instrument(
        ts.Executor([read_file, write_file]), tracer_provider=tracer_provider, meter_provider=meter_provider
    )
    with tracer_provider.get_tracer("example").start_as_current_span("agent turn"):
        await executor.run(
            [
                ts.ToolCall("c1", "read_file", {"path": "a.txt"}),
                ts.ToolCall("c2", "read_file", {"path": "b.txt"}),
                ts.ToolCall("c3", "write_file", {"path": "c.txt", "text": "hello"}),
                ts.ToolCall("c4", "delete_file", {"path": "c.txt"}),
            ]
        )
    print_tree(list(exporter.get_finished_spans()))
    data = reader.get_metrics_data()
    assert data is not None
    for metric in data.resource_metrics[0].scope_metrics[0].metrics:
        if metric.name == "toolsched.tool.calls":
            for point in sorted(metric.data.data_points, key=lambda p: str(sorted(p.attributes.items()))):
                attributes = dict(point.attributes or {})
                outcome = attributes.get("error.type", "ok")
                print(f"toolsched.tool.calls {attributes['gen_ai.tool.name']} {outcome}: {point.value}")


if __name__ == "__main__":
    anyio.run(main)
