"""Events: progress, partial updates, and the stream, on both backends."""

from __future__ import annotations

import functools
from contextlib import aclosing

import anyio
import anyio.lowlevel
import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio


@ts.tool(concurrency_safe=True)
async def crawl(pages: int, ctx: ts.ToolContext) -> int:
    for page in range(pages):
        ctx.report_progress((page + 1) / pages, f"page {page + 1}")
        ctx.update({"page": page})
        await anyio.lowlevel.checkpoint()
    return pages


@ts.tool
def count(n: int, ctx: ts.ToolContext) -> int:
    ctx.report_progress(0.5, "halfway")
    return n


async def test_progress_reaches_on_progress_from_async_and_thread_tools() -> None:
    seen: list[ts.ToolProgress] = []
    executor = ts.Executor([crawl, count], on_progress=seen.append)
    await executor.run([ts.ToolCall("a", "crawl", {"pages": 2}), ts.ToolCall("b", "count", {"n": 1})])
    assert [(p.call_id, p.fraction, p.message) for p in seen] == [
        ("a", 0.5, "page 1"),
        ("a", 1.0, "page 2"),
        ("b", 0.5, "halfway"),
    ]


async def test_async_event_callbacks_get_every_event_in_order() -> None:
    seen: list[ts.Event] = []

    async def record(event: ts.Event) -> None:
        await anyio.lowlevel.checkpoint()
        seen.append(event)

    await ts.Executor([crawl], on_event=record).run([ts.ToolCall("a", "crawl", {"pages": 1})])
    kinds = [type(e).__name__ for e in seen]
    assert kinds == ["BatchStarted", "ToolStarted", "ToolProgress", "ToolUpdated", "ToolFinished", "BatchFinished"]


class AsyncRecorder:
    """A stateful listener whose ``__call__`` is async: the usual shape of an exporter."""

    def __init__(self) -> None:
        self.kinds: list[str] = []

    async def __call__(self, event: ts.Event) -> None:
        await anyio.lowlevel.checkpoint()
        self.kinds.append(type(event).__name__)


async def record_into(kinds: list[str], event: ts.Event) -> None:
    await anyio.lowlevel.checkpoint()
    kinds.append(type(event).__name__)


async def test_async_callable_objects_and_partials_get_every_event() -> None:
    recorder = AsyncRecorder()
    partial_kinds: list[str] = []
    sinks = [recorder, functools.partial(record_into, partial_kinds), functools.partial(AsyncRecorder())]
    await ts.Executor([crawl], on_event=sinks).run([ts.ToolCall("a", "crawl", {"pages": 1})])
    expected = ["BatchStarted", "ToolStarted", "ToolProgress", "ToolUpdated", "ToolFinished", "BatchFinished"]
    assert recorder.kinds == expected
    assert partial_kinds == expected
    assert sinks[2].func.kinds == expected  # type: ignore[attr-defined]


async def test_a_failing_callback_does_not_break_the_run() -> None:
    def explode(event: ts.Event) -> None:
        raise RuntimeError("observer bug")

    outcome = await ts.Executor([crawl], on_event=explode).run([ts.ToolCall("a", "crawl", {"pages": 1})])
    assert outcome.results[0].output == 1


async def test_the_stream_yields_one_start_and_one_finish_per_call_then_the_outcome() -> None:
    executor = ts.Executor([crawl])
    calls = [
        ts.ToolCall("a", "crawl", {"pages": 2}),
        ts.ToolCall("b", "crawl", {"pages": 1}),
        ts.ToolCall("c", "missing", {}),
    ]
    events = [event async for event in executor.stream(calls)]
    starts = [e.call_id for e in events if isinstance(e, ts.ToolStarted)]
    finishes = [e.result.call_id for e in events if isinstance(e, ts.ToolFinished)]
    assert sorted(starts) == ["a", "b", "c"]
    assert sorted(finishes) == ["a", "b", "c"]
    assert isinstance(events[-1], ts.RunFinished)
    assert [r.call_id for r in events[-1].outcome.results] == ["a", "b", "c"]
    assert any(isinstance(e, ts.ToolUpdated) for e in events)


async def test_leaving_the_stream_early_cancels_the_run() -> None:
    finished: list[int] = []

    @ts.tool
    async def slow(n: int) -> int:
        await anyio.sleep(0.05)
        finished.append(n)
        return n

    executor = ts.Executor([slow], strategy=ts.Sequential())
    with anyio.fail_after(5):
        async with aclosing(executor.stream([ts.ToolCall(str(i), "slow", {"n": i}) for i in range(10)])) as events:
            async for event in events:
                if isinstance(event, ts.ToolFinished):
                    break
    assert len(finished) < 10


async def test_stream_errors_reach_the_consumer() -> None:
    @ts.tool
    async def boom() -> None:
        raise RuntimeError("bad")

    executor = ts.Executor([boom], on_error="raise")
    with pytest.raises(ts.ToolCallFailed):
        async for _ in executor.stream([ts.ToolCall("1", "boom")]):
            pass


async def test_an_async_callable_object_as_on_progress_gets_the_progress() -> None:
    recorder = AsyncRecorder()
    await ts.Executor([crawl], on_progress=recorder).run([ts.ToolCall("a", "crawl", {"pages": 1})])
    assert recorder.kinds == ["ToolProgress"]


# -- bad values given to the context -----------------------------------------------------


@pytest.mark.parametrize(
    ("act", "shown_value"),
    [
        (lambda ctx: ctx.report_progress(None), "None"),
        (lambda ctx: ctx.report_progress("0.5"), "'0.5'"),
        (lambda ctx: ctx.report_progress(True), "True"),
        (lambda ctx: ctx.report_progress(float("nan")), "nan"),
        (lambda ctx: ctx.report_progress(-0.1), "-0.1"),
        (lambda ctx: ctx.report_progress(1.5), "1.5"),
        (lambda ctx: ctx.report_progress(0.5, 5), "5"),
        (lambda ctx: ctx.report_progress(0.5, b"half"), "b'half'"),
        (lambda ctx: ctx.cancel(5), "5"),
        (lambda ctx: ctx.cancel(["why"]), "['why']"),
    ],
)
async def test_bad_values_given_to_the_context_are_refused_readably(act: object, shown_value: str) -> None:
    """ctx.report_progress(None) ended its call with "TypeError: '<=' not supported between instances of
    'float' and 'NoneType'", a message or a cancel reason that is not text went on into the events and the
    result. Each is an OptionError naming the method, the argument and the rule, and the value given."""
    caught: list[BaseException] = []

    @ts.tool
    async def reporting(ctx: ts.ToolContext) -> str:
        try:
            act(ctx)  # type: ignore[operator]
        except Exception as exc:
            caught.append(exc)
        return "done"

    seen: list[ts.ToolProgress] = []
    outcome = await ts.Executor([reporting], on_progress=seen.append).run([ts.ToolCall("a", "reporting", {})])
    assert outcome.results[0].output == "done"
    assert len(caught) == 1 and isinstance(caught[0], ts.OptionError), caught
    message = str(caught[0])
    assert ("ctx.report_progress(" in message or "ctx.cancel(" in message) and message.endswith(f"got {shown_value}")
    assert seen == []


async def test_a_bad_progress_value_ends_its_call_with_the_readable_error() -> None:
    @ts.tool
    async def reporting(ctx: ts.ToolContext) -> str:
        ctx.report_progress(None)  # type: ignore[arg-type]
        return "never"

    result = (await ts.Executor([reporting]).run([ts.ToolCall("a", "reporting", {})])).results[0]
    assert result.error_kind == "execution_error"
    assert "ctx.report_progress(fraction=...) must be a number from 0 to 1, got None" in (result.error or "")


async def test_good_values_given_to_the_context_are_taken() -> None:
    """The edges of the range, an int, and a reason or message of None."""
    seen: list[ts.ToolProgress] = []

    @ts.tool
    async def reporting(ctx: ts.ToolContext) -> str:
        ctx.report_progress(0)
        ctx.report_progress(1, None)
        ctx.report_progress(0.25, "a quarter")
        ctx.cancel(None)
        return "done"

    result = (await ts.Executor([reporting], on_progress=seen.append).run([ts.ToolCall("a", "reporting", {})])).results[
        0
    ]
    assert result.error_kind == "cancelled"
    assert [(p.fraction, type(p.fraction), p.message) for p in seen] == [
        (0.0, float, None),
        (1.0, float, None),
        (0.25, float, "a quarter"),
    ]
