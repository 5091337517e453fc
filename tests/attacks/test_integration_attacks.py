"""Attacks on the integrations as their users meet them: LangGraph's ``ToolNode`` fed what LangGraph's own
node is fed (and compared with it, answer for answer), LangChain tools of every shape, and the OpenTelemetry
spans of calls that are refused, time out, are cancelled or retried."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
import anyio.to_thread
import pydantic
import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import ToolException, tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState
from langgraph.prebuilt import ToolNode as StockToolNode
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.trace import StatusCode
from scripted_models import tool_calls_message

import toolsched as ts
from toolsched.integrations import otel
from toolsched.integrations.langchain import from_langchain
from toolsched.integrations.langgraph import ToolNode

pytestmark = pytest.mark.anyio


# -- LangGraph: ToolNode against LangGraph's own node ------------------------------------------------------


async def one_node_outcome(make: Any, tools: list[Any], message: AIMessage, **options: Any) -> Any:
    """What a one-node graph answers: its ToolMessages (id, name, status, content), or the exception that left it."""
    graph = StateGraph(MessagesState)
    graph.add_node("tools", make(tools, **options))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    try:
        out = await graph.compile().ainvoke({"messages": [message]})
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc).splitlines()[0])
    return [(m.tool_call_id, m.name, m.status, m.content) for m in out["messages"] if isinstance(m, ToolMessage)]


class NonNegative(pydantic.BaseModel):
    n: int

    @pydantic.field_validator("n")
    @classmethod
    def not_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError("n must not be negative")
        return value


@tool(args_schema=NonNegative)
def square_root(n: int) -> float:
    """The square root of n."""
    return float(n) ** 0.5


class Reading(pydantic.BaseModel):
    celsius: float


@tool
def parse_reading(raw: str) -> str:
    """Parses a sensor reading (its own code validates it with pydantic)."""
    return str(Reading.model_validate_json(raw).celsius)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # LangGraph runs on asyncio only
@pytest.mark.parametrize("handling", ["default", "true", "types"])
@pytest.mark.parametrize(
    "call",
    [("c1", "square_root", {"n": -4}), ("c1", "parse_reading", {"raw": '{"celsius": "warm"}'})],
    ids=["argument-validator", "tool-body"],
)
async def test_a_validation_error_out_of_the_tool_answers_the_model_as_in_langgraph(
    handling: str, call: tuple[str, str, dict[str, Any]]
) -> None:
    """A pydantic ValidationError raised while the tool is invoked (a validator JSON Schema cannot express, or
    the tool's own parsing) is, for LangGraph's node, a ``ToolInvocationError``: the model is told, under the
    default handling too. It used to leave the graph as the raw ValidationError."""
    from langgraph.prebuilt.tool_node import ToolInvocationError

    options: dict[str, Any] = {
        "default": {},
        "true": {"handle_tool_errors": True},
        "types": {"handle_tool_errors": (ToolInvocationError,)},
    }[handling]
    message = tool_calls_message(call)
    stock = await one_node_outcome(StockToolNode, [square_root, parse_reading], message, **options)
    ours = await one_node_outcome(ToolNode, [square_root, parse_reading], message, **options)
    assert isinstance(stock, list) and stock[0][2] == "error"
    assert ours == stock


@dataclasses.dataclass
class Conversation:
    messages: list[Any]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_dataclass_state_given_to_a_tool_wanting_a_dict_is_answered_as_in_langgraph() -> None:
    """A tool whose injected state is typed ``dict`` in a graph whose state is not one: LangGraph's node answers
    the model with the (filtered, empty) invocation error; the ValidationError used to leave the graph."""

    @tool
    def summarize(limit: int, state: Annotated[dict[str, Any], InjectedState]) -> str:
        """Summarizes the conversation."""
        return "summary"

    message = tool_calls_message(("c1", "summarize", {"limit": 3}))
    outcomes = []
    for make in (StockToolNode, ToolNode):
        graph = StateGraph(Conversation)
        graph.add_node("tools", make([summarize]))
        graph.add_edge(START, "tools")
        graph.add_edge("tools", END)
        out = await graph.compile().ainvoke(Conversation([message]))
        outcomes.append([(m.tool_call_id, m.status, m.content) for m in out["messages"] if isinstance(m, ToolMessage)])
    assert outcomes[0][0][1] == "error"
    assert outcomes[1] == outcomes[0]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_tools_own_error_message_is_kept_when_the_node_handles_no_errors() -> None:
    """A LangChain tool that handles its own ``ToolException`` answers with its error message; with
    ``handle_tool_errors=False`` LangGraph's node passes that message on. It used to raise ToolCallFailed."""

    @tool
    def flaky(n: int) -> str:
        """Fails in its own way."""
        raise ToolException("the sensor is offline")

    flaky.handle_tool_error = True
    message = tool_calls_message(("c1", "flaky", {"n": 1}))
    stock = await one_node_outcome(StockToolNode, [flaky], message, handle_tool_errors=False)
    ours = await one_node_outcome(ToolNode, [flaky], message, handle_tool_errors=False)
    assert stock == [("c1", "flaky", "error", "the sensor is offline")]
    assert ours == stock


# -- OpenTelemetry -----------------------------------------------------------------------------------------------


class EndedSpans(SpanProcessor):
    """Records the spans as they end."""

    def __init__(self) -> None:
        self.ended: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span)


class BrokenExporter(SpanProcessor):
    """A span processor that fails on every span it is handed (an exporter gone wrong)."""

    def on_end(self, span: ReadableSpan) -> None:
        raise RuntimeError("the exporter is broken")


def broken_tracing() -> tuple[TracerProvider, EndedSpans]:
    provider = TracerProvider()
    ended = EndedSpans()
    provider.add_span_processor(ended)
    provider.add_span_processor(BrokenExporter())
    return provider, ended


def waiting_tool(calls: int) -> tuple[ts.Tool, anyio.Event]:
    """A tool that waits until cancelled, and an event set once ``calls`` calls of it have started."""
    started: list[int] = []
    all_started = anyio.Event()

    @ts.tool(read_only=True, concurrency_safe=True)
    async def wait_forever(n: int) -> str:
        """Waits until cancelled."""
        started.append(n)
        if len(started) == calls:
            all_started.set()
        await anyio.sleep_forever()
        return "never"

    return wait_forever, all_started


async def test_a_failing_span_processor_never_replaces_a_cancelled_runs_own_exception() -> None:
    """A run cancelled by its caller ends as a cancellation (absorbed by the caller's cancel scope), even when the
    spans it leaves open cannot be ended cleanly (the span processor raises); every open span is still ended.
    The processor's RuntimeError reached the caller in place of the cancellation, and the later spans stayed open."""
    provider, ended = broken_tracing()
    tool, all_started = waiting_tool(2)
    executor = otel.instrument(ts.Executor([tool]), tracer_provider=provider)
    calls = [ts.ToolCall("c1", "wait_forever", {"n": 1}), ts.ToolCall("c2", "wait_forever", {"n": 2})]
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(executor.run, calls)
            await all_started.wait()
            scope.cancel()
    assert scope.cancelled_caught
    assert sorted(span.name for span in ended.ended) == [
        "execute_tool wait_forever",
        "execute_tool wait_forever",
        "toolsched.batch",
    ]
    assert {(span.attributes or {}).get("error.type") for span in ended.ended} == {"cancelled"}


async def test_a_failing_span_processor_never_breaks_closing_a_stream_early() -> None:
    """Leaving ``stream`` early (its ``aclose``) ends the open spans without raising the processor's error."""
    provider, ended = broken_tracing()
    tool, _ = waiting_tool(1)
    executor = otel.instrument(ts.Executor([tool]), tracer_provider=provider)
    events = executor.stream([ts.ToolCall("c1", "wait_forever", {"n": 1})])
    async for event in events:
        if isinstance(event, ts.ToolStarted):
            break
    await events.aclose()
    assert [span.name for span in ended.ended] == ["execute_tool wait_forever", "toolsched.batch"]


class GatedPages:
    """A ``fetch`` tool whose calls all wait for ``release``; ``all_started`` is set once ``count`` of them began."""

    def __init__(self, count: int) -> None:
        self.all_started = anyio.Event()
        self.release = anyio.Event()
        started: list[str] = []

        @ts.tool(read_only=True, concurrency_safe=True)
        async def fetch(url: str) -> str:
            """Fetches a page."""
            started.append(url)
            if len(started) == count:
                self.all_started.set()
            await self.release.wait()
            return f"page {url}"

        self.fetch = fetch


def fetches_by_batch(ended: EndedSpans) -> list[list[str]]:
    """The call IDs of the ended ``fetch`` spans, grouped by the batch span each sits under (two batches of four
    calls, every call under one of them)."""
    batches = [span for span in ended.ended if span.name == "toolsched.batch"]
    calls = [span for span in ended.ended if span.name == "execute_tool fetch"]
    assert len(batches) == 2 and len(calls) == 4
    parents = {span.context.span_id: span for span in batches if span.context is not None}
    under: dict[int, set[str]] = {}
    for span in calls:
        assert span.parent is not None and span.parent.span_id in parents
        under.setdefault(span.parent.span_id, set()).add(str((span.attributes or {})["gen_ai.tool.call.id"]))
    return sorted(map(sorted, under.values()))


async def test_concurrent_streamed_turns_on_one_executor_keep_their_spans_apart() -> None:
    """Two ``turn()``s at once on one instrumented executor: each has its batch 0, and each call span sits under
    its own turn's batch span; every span ends. The turns shared one set of open spans: the second batch 0
    replaced the first, which never ended, and the first turn's calls were put under the second's batch."""
    ended = EndedSpans()
    provider = TracerProvider()
    provider.add_span_processor(ended)
    pages = GatedPages(4)
    executor = otel.instrument(ts.Executor([pages.fetch]), tracer_provider=provider)

    async def one_turn(prefix: str) -> None:
        async with executor.turn() as turn:
            for n in (1, 2):
                turn.submit(ts.ToolCall(f"{prefix}{n}", "fetch", {"url": f"{prefix}{n}"}))
            turn.close()
            await turn.outcome()

    async with anyio.create_task_group() as group:
        group.start_soon(one_turn, "a")
        group.start_soon(one_turn, "b")
        await pages.all_started.wait()
        pages.release.set()
    assert fetches_by_batch(ended) == [["a1", "a2"], ["b1", "b2"]]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_call_with_an_empty_tool_name_is_answered_as_an_unknown_tool_as_in_langgraph() -> None:
    """A model that emits a call with an empty name gets LangGraph's "not a valid tool" answer, beside the turn's
    other calls, so that it can try again; the node used to refuse the whole turn (ResponseFormatError)."""
    message = tool_calls_message(("c1", "", {"n": 4}), ("c2", "square_root", {"n": 4}))
    stock = await one_node_outcome(StockToolNode, [square_root], message)
    ours = await one_node_outcome(ToolNode, [square_root], message)
    assert stock == [
        ("c1", "", "error", "Error:  is not a valid tool, try one of [square_root]."),
        ("c2", "square_root", "success", "2.0"),
    ]
    assert ours == stock


@tool
def lookup(key: str) -> str:
    """Looks a key up."""
    if key == "missing":
        raise KeyError(key)
    raise ValueError(f"bad key {key}")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("key", ["missing", "other", 7], ids=["key-error", "value-error", "invalid-arguments"])
async def test_an_empty_error_message_handles_nothing_as_in_langgraph(key: object) -> None:
    """``handle_tool_errors=""`` is, for LangGraph's node, no handling (the flag is tested for its truth): the
    tool's error leaves the graph. The node answered the model with the error's text instead."""
    message = tool_calls_message(("c1", "lookup", {"key": key}))
    stock = await one_node_outcome(StockToolNode, [lookup], message, handle_tool_errors="")
    ours = await one_node_outcome(ToolNode, [lookup], message, handle_tool_errors="")
    assert stock[0] == "raised"
    assert ours == stock


class KeyErrorsOnly:
    """An error handler that is an object: the annotation of its ``__call__`` names what it handles."""

    def __call__(self, error: KeyError) -> str:
        return f"no such key: {error}"


def key_errors_only(error: KeyError) -> str:
    return f"no such key: {error}"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("key", ["missing", "other"], ids=["key-error", "value-error"])
async def test_an_error_handler_object_handles_only_what_its_call_annotation_names(key: str) -> None:
    """A handler object is read as LangGraph reads a handler function (LangGraph's own node cannot read an object's
    annotation at all): a ``KeyError`` handler answers the model for a KeyError and lets a ValueError leave the
    graph. It handled every exception."""
    message = tool_calls_message(("c1", "lookup", {"key": key}))
    stock = await one_node_outcome(StockToolNode, [lookup], message, handle_tool_errors=key_errors_only)
    ours = await one_node_outcome(ToolNode, [lookup], message, handle_tool_errors=KeyErrorsOnly())
    assert ours == stock
    assert (stock[0] == "raised") == (key == "other")


# -- LangChain tools in an executor ------------------------------------------------------------------------------


async def test_cancelling_a_run_cancels_a_langchain_async_tool_on_any_event_loop() -> None:
    """An async LangChain tool (run on trio on an asyncio loop of its own in a worker thread) is cancelled when
    its run is: the caller's cancellation returns once the tool has unwound. On trio the tool was left to run
    to its end, and the caller's cancellation waited for it (a tool that never ends held it for good)."""
    started = threading.Event()
    seen: list[str] = []

    @tool
    async def crawl(url: str) -> str:
        """Crawls a site (for a long time)."""
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        seen.append("finished")
        return "crawled"

    executor = ts.Executor([from_langchain(crawl)])
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(executor.run, [ts.ToolCall("c1", "crawl", {"url": "https://example.org"})])
            await anyio.to_thread.run_sync(started.wait)
            scope.cancel()
    assert scope.cancelled_caught
    assert seen == ["cancelled"]


def recording_provider() -> tuple[TracerProvider, EndedSpans]:
    provider = TracerProvider()
    ended = EndedSpans()
    provider.add_span_processor(ended)
    return provider, ended


def span_name_and_id(span: ReadableSpan) -> str:
    attributes = span.attributes or {}
    return f"{span.name} {attributes.get('gen_ai.tool.call.id', attributes.get('toolsched.batch.index'))}"


def parent_name(span: ReadableSpan, ended: dict[int, ReadableSpan]) -> str:
    """The parent's name and ID; "" for a root span, "open" for a parent that never ended."""
    if span.parent is None:
        return ""
    parent = ended.get(span.parent.span_id)
    return "open" if parent is None else span_name_and_id(parent)


async def test_a_nested_run_keeps_its_batches_and_call_ids_apart_from_its_parents() -> None:
    """An ``agent_tool``'s child run numbers its batches from 0 and may reuse the parent's call IDs: its spans
    nest under the parent call, and the parent's batch and call spans all end. The child's batch 0 replaced
    the parent's (which never ended), and a child call named as a parent call replaced that call's span."""
    provider, ended = recording_provider()

    @ts.tool(read_only=True, concurrency_safe=True)
    async def lookup(query: str) -> str:
        """Looks a query up."""
        return f"found {query}"

    @ts.agent_tool(ts.Executor([lookup]), description="Researches a topic.")
    async def research(topic: str, child: ts.ChildRun) -> str:
        found = await child.run(
            [ts.ToolCall("c1", "lookup", {"query": topic}), ts.ToolCall("c2", "lookup", {"query": topic})]
        )
        return ", ".join(str(result.output) for result in found.results)

    executor = otel.instrument(ts.Executor([research, lookup]), tracer_provider=provider)
    outcome = await executor.run(
        [ts.ToolCall("c1", "research", {"topic": "otters"}), ts.ToolCall("c2", "lookup", {"query": "seals"})]
    )
    assert [result.output for result in outcome.results] == ["found otters, found otters", "found seals"]
    by_id = {span.context.span_id: span for span in ended.ended if span.context is not None}
    tree = sorted((span_name_and_id(span), parent_name(span, by_id)) for span in ended.ended)
    assert tree == [
        ("execute_tool lookup c1", "toolsched.batch 0"),
        ("execute_tool lookup c2", "toolsched.batch 0"),
        ("execute_tool lookup c2", "toolsched.batch 1"),
        ("execute_tool research c1", "toolsched.batch 0"),
        ("toolsched.batch 0", ""),
        ("toolsched.batch 0", "execute_tool research c1"),
        ("toolsched.batch 1", ""),
    ]


@pytest.mark.parametrize("calls", [1, 2], ids=["alone", "beside another call"])
@pytest.mark.parametrize("cut", ["timeout", "cancel"])
async def test_a_nested_run_cut_short_by_its_parent_call_ends_its_open_spans(
    cut: str, calls: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Promise (docs/integrations/opentelemetry.md): a nested run's calls and batches sit under the span of the
    call that runs it, and a run that is cancelled ends its open spans with ``error.type`` = ``cancelled``. An
    ``agent_tool`` call that timed out, or was cancelled by ``executor.cancel``, ended its own span, but its
    child run's batch and call spans (cancelled with it) were never ended: the trace lost them."""
    provider, ended = recording_provider()
    started = anyio.Event()

    @ts.tool(read_only=True, concurrency_safe=True)
    async def stuck(n: int) -> str:
        """Waits until cancelled."""
        started.set()
        await anyio.sleep_forever()
        return "never"

    cut_by: dict[str, Any] = {"timeout": 0.2} if cut == "timeout" else {"interrupt_behavior": "cancel"}

    @ts.agent_tool(ts.Executor([stuck]), read_only=True, concurrency_safe=True, **cut_by)
    async def research(topic: str, child: ts.ChildRun) -> str:
        """Researches a topic."""
        await child.run([ts.ToolCall("s1", "stuck", {"n": 1}), ts.ToolCall("s2", "stuck", {"n": 2})])
        return "done"

    @ts.tool(read_only=True, concurrency_safe=True)
    async def noted() -> str:
        """Notes that the research began."""
        return "noted"

    executor = otel.instrument(ts.Executor([research, noted]), tracer_provider=provider)

    async def cancel_once_started() -> None:
        await started.wait()
        executor.cancel("c1")

    given = [ts.ToolCall("c1", "research", {"topic": "otters"}), ts.ToolCall("c2", "noted", {})][:calls]
    with provider.get_tracer("agent").start_as_current_span("agent turn") as turn:
        async with anyio.create_task_group() as group:
            if cut == "cancel":
                group.start_soon(cancel_once_started)
            outcome = await executor.run(given)
        # No span of the run is left current in the caller's task.
        assert trace.get_current_span() is turn
    cut_kind = "timeout" if cut == "timeout" else "cancelled"
    assert [result.error_kind for result in outcome.results] == [cut_kind, None][:calls]
    by_id = {span.context.span_id: span for span in ended.ended if span.context is not None}
    tree = sorted((span_name_and_id(span), parent_name(span, by_id)) for span in ended.ended if span.parent)
    assert tree == [
        *([("execute_tool noted c2", "toolsched.batch 0")] if calls == 2 else []),
        ("execute_tool research c1", "toolsched.batch 0"),
        ("execute_tool stuck s1", "toolsched.batch 0"),
        ("execute_tool stuck s2", "toolsched.batch 0"),
        ("toolsched.batch 0", "agent turn None"),
        ("toolsched.batch 0", "execute_tool research c1"),
    ]
    nested = [
        span
        for span in ended.ended
        if span.name == "execute_tool stuck" or parent_name(span, by_id) == ("execute_tool research c1")
    ]
    assert [(span.attributes or {}).get("error.type") for span in nested] == ["cancelled"] * 3
    assert all(span.status.status_code is StatusCode.ERROR for span in nested)
    # Nothing went wrong in OpenTelemetry itself (a context detached where it was not attached is logged).
    assert not [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]


async def test_recorded_arguments_of_calls_that_arrive_from_an_async_iterable() -> None:
    """``run`` and ``stream`` take an async iterable of calls; with ``record_arguments=True`` the instrumented
    executor raised TypeError (it listed the calls as a plain iterable) instead of running them."""
    provider, ended = recording_provider()

    @ts.tool(read_only=True, concurrency_safe=True)
    async def lookup(query: str) -> str:
        """Looks a query up."""
        return f"found {query}"

    async def streamed(*queries: str) -> AsyncIterator[ts.ToolCall]:
        for number, query in enumerate(queries):
            yield ts.ToolCall(f"c{number}", "lookup", {"query": query})

    executor = otel.instrument(ts.Executor([lookup]), tracer_provider=provider, record_arguments=True)
    outcome = await executor.run(streamed("otters"))
    assert [result.output for result in outcome.results] == ["found otters"]
    events = [event async for event in executor.stream(streamed("seals"))]
    assert isinstance(events[-1], ts.RunFinished)
    recorded = [
        (span.attributes or {}).get("gen_ai.tool.call.arguments")
        for span in ended.ended
        if span.name == "execute_tool lookup"
    ]
    assert recorded == ['{"query": "otters"}', '{"query": "seals"}']


@pytest.mark.parametrize("record_arguments", [False, True], ids=["plain", "recording"])
async def test_an_instrumented_executor_takes_its_arguments_by_keyword_as_before(record_arguments: bool) -> None:
    """``run(calls=...)``, ``stream(calls=...)`` and ``resume(state=...)`` are the executor's own signatures;
    instrumented, each raised TypeError (the wrappers took their first argument by position only)."""
    provider, ended = recording_provider()

    @ts.tool(needs_approval=True)
    async def deploy(service: str) -> str:
        """Deploys a service."""
        return f"deployed {service}"

    executor = otel.instrument(ts.Executor([deploy]), tracer_provider=provider, record_arguments=record_arguments)
    waiting = await executor.run(calls=[ts.ToolCall("c1", "deploy", {"service": "api"})])
    state = waiting.state
    assert state is not None
    state.approve("c1")
    resumed = await executor.resume(state=state)
    assert [result.output for result in resumed.results] == ["deployed api"]
    events = [event async for event in executor.stream(calls=[ts.ToolCall("c2", "deploy", {"service": "web"})])]
    assert isinstance(events[-1], ts.RunFinished)
    # The resumed call ran (a span); the streamed one waits for approval, as the first did (no span yet).
    assert [span.name for span in ended.ended if span.name.startswith("execute_tool")] == ["execute_tool deploy"]


async def crashed_run(path: str, run_id: str, calls: list[ts.ToolCall]) -> None:
    """Journals a run as a process that died before any call started would have left it."""
    async with ts.SqliteJournal(path, owner="crashed") as crashed:
        await crashed.begin_run(run_id, calls)


async def test_a_cancelled_recover_ends_its_spans_as_cancelled(tmp_path: Any) -> None:
    """``recover`` cancelled by its caller while its calls run ends every span it opened, with ``error.type`` =
    ``cancelled``, as a cancelled ``run`` does. It was not wrapped as run/resume/stream/turn are: its spans
    were left open in the observer's shared set."""
    ended = EndedSpans()
    provider = TracerProvider()
    provider.add_span_processor(ended)
    tool, all_started = waiting_tool(2)
    path = str(tmp_path / "journal.db")
    await crashed_run(path, "r1", [ts.ToolCall(f"c{n}", "wait_forever", {"n": n}) for n in (1, 2)])
    executor = otel.instrument(ts.Executor([tool], journal=ts.SqliteJournal(path)), tracer_provider=provider)
    with anyio.fail_after(10), anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(functools.partial(executor.recover, "r1", force=True))
            await all_started.wait()
            scope.cancel()
    assert scope.cancelled_caught
    assert sorted(span.name for span in ended.ended) == [
        "execute_tool wait_forever",
        "execute_tool wait_forever",
        "toolsched.batch",
    ]
    assert {(span.attributes or {}).get("error.type") for span in ended.ended} == {"cancelled"}


async def test_concurrent_recovers_on_one_executor_keep_their_spans_apart(tmp_path: Any) -> None:
    """Two runs recovered at once on one instrumented executor: each has its own batch 0, each call span sits
    under its own run's batch span, and every span ends. The recovered runs shared the observer's one set of open
    spans: the second batch 0 replaced the first, which never ended, and the first run's calls were put under the
    second's batch."""
    ended = EndedSpans()
    provider = TracerProvider()
    provider.add_span_processor(ended)
    pages = GatedPages(4)
    path = str(tmp_path / "journal.db")
    for prefix in ("a", "b"):
        await crashed_run(path, prefix, [ts.ToolCall(f"{prefix}{n}", "fetch", {"url": f"{prefix}{n}"}) for n in (1, 2)])
    executor = otel.instrument(ts.Executor([pages.fetch], journal=ts.SqliteJournal(path)), tracer_provider=provider)
    outcomes: list[ts.Outcome] = []

    async def recover(run_id: str) -> None:
        outcomes.append(await executor.recover(run_id, force=True))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(recover, "a")
            group.start_soon(recover, "b")
            await pages.all_started.wait()
            pages.release.set()
    assert sorted(result.output for outcome in outcomes for result in outcome.results) == [
        "page a1",
        "page a2",
        "page b1",
        "page b2",
    ]
    assert fetches_by_batch(ended) == [["a1", "a2"], ["b1", "b2"]]


async def test_uninstrument_gives_back_the_executors_own_recover(tmp_path: Any) -> None:
    executor = ts.Executor([], journal=ts.SqliteJournal(str(tmp_path / "journal.db")))
    otel.instrument(executor, tracer_provider=TracerProvider())
    assert "recover" in vars(executor)
    otel.uninstrument(executor)
    assert "recover" not in vars(executor)


def nested(depth: int) -> list[Any]:
    """A list ``depth`` lists deep: deeper than JSON encoding can go."""
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "output",
    [10**5000, nested(3000)],
    ids=["an int past the digit limit", "lists nested past the recursion limit"],
)
async def test_an_output_json_cannot_show_still_ends_its_span_when_outputs_are_recorded(output: Any) -> None:
    """Promise (docs/integrations/opentelemetry.md): each call is a span; outputs are recorded when asked. With
    ``record_outputs=True`` an output that neither JSON nor ``str()`` could show (an int past Python's digit limit)
    made the observer raise before the span ended: the call's span was lost. One nested past the recursion limit
    raised ``RecursionError``, which reached the caller in place of the run's outcome."""
    provider, ended = recording_provider()

    @ts.tool
    def report() -> Any:
        """Returns what JSON cannot show."""
        return output

    executor = otel.instrument(ts.Executor([report]), tracer_provider=provider, record_outputs=True)
    outcome = await executor.run([ts.ToolCall("c1", "report", {})])
    assert [(result.call_id, result.is_error) for result in outcome.results] == [("c1", False)]
    (span,) = [span for span in ended.ended if span.name == "execute_tool report"]
    recorded = (span.attributes or {}).get("gen_ai.tool.call.result")
    assert isinstance(recorded, str) and recorded


async def test_arguments_json_cannot_show_still_give_the_call_its_span_when_arguments_are_recorded() -> None:
    """The same for ``record_arguments=True``: a call whose arguments hold an int past the digit limit (answered
    ``invalid_input``, unrun) had no span at all, since the observer raised before starting it."""
    provider, ended = recording_provider()

    @ts.tool
    def count(n: int) -> str:
        """Counts to n."""
        return "counted"

    executor = otel.instrument(ts.Executor([count]), tracer_provider=provider, record_arguments=True)
    outcome = await executor.run([ts.ToolCall("c1", "count", {"n": 10**5000}), ts.ToolCall("c2", "count", {"n": 3})])
    assert [result.error_kind for result in outcome.results] == ["invalid_input", None]
    spans = {(span.attributes or {}).get("gen_ai.tool.call.id"): span for span in ended.ended}
    assert (spans["c1"].attributes or {}).get("error.type") == "invalid_input"
    assert isinstance((spans["c1"].attributes or {}).get("gen_ai.tool.call.arguments"), str)
    assert (spans["c2"].attributes or {}).get("gen_ai.tool.call.arguments") == '{"n": 3}'


@tool
async def lookup_async(q: str) -> str:
    """Look up q."""
    return "found " + q


@ts.tool(concurrency_safe=True)
def occupies_the_thread() -> str:
    """Holds the one worker thread for a second."""
    time.sleep(1.0)
    return "done"


def test_a_langchain_async_tool_cancelled_before_its_thread_starts_does_not_hang_the_run() -> None:
    """Promise: a run's cancellation goes on at once, never a hang. On trio an async LangChain tool runs on an
    asyncio loop in a worker thread; cancelled before that thread took it (here it waits for the one thread
    token another call holds), its caller waited, shielded, for an end that never came: the run hung for good.
    The run goes in a thread of its own here, so that a regression fails the test rather than hanging it."""
    executor = ts.Executor([occupies_the_thread, from_langchain(lookup_async, concurrency_safe=True)])
    ended: list[str] = []

    async def run() -> None:
        anyio.to_thread.current_default_thread_limiter().total_tokens = 1
        try:
            with anyio.fail_after(0.2):
                await executor.run(
                    [ts.ToolCall("b", "occupies_the_thread", {}), ts.ToolCall("l", "lookup_async", {"q": "x"})]
                )
        except TimeoutError:
            ended.append("timed out")

    runner = threading.Thread(target=anyio.run, args=(run,), kwargs={"backend": "trio"}, daemon=True)
    runner.start()
    runner.join(20)
    assert ended == ["timed out"]


@tool
def slow_lookup(q: str) -> str:
    """Look up q, slowly."""
    time.sleep(1.5)
    return "found " + q


async def test_a_langchain_sync_tool_lets_the_runs_cancellation_go_on_at_once(anyio_backend: str) -> None:
    """Promise (docs/concepts/failures.md): cancelling a run propagates at once and never becomes a result. A
    sync LangChain tool without a timeout was waited for in its thread, and the run's cancellation was lost:
    the run returned the tool's answer after the caller's deadline."""
    executor = ts.Executor([from_langchain(slow_lookup)])
    with pytest.raises(TimeoutError):
        with anyio.fail_after(0.3):
            await executor.run([ts.ToolCall("c1", "slow_lookup", {"q": "x"})])
