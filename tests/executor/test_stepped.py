"""A waiting call of a concurrent batch stepped by the engine (``toolsched._executor.stepped``) ends exactly as
the same call ends through ``execute``: each way a tool can end, run as the later call of a batch whose first
call waits, once stepped (its task's coroutine is a ``Stepper``) and once through ``execute`` (the executor has
an input guardrail, which a stepped call leaves out), gives the same result, the same events and the same post
hooks' observations. And a call with a part a stepped call leaves out runs through ``execute``."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

import toolsched as ts

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

# What the task running each call of the tool under test was stepping, by call ID.
COROUTINES: dict[str, str] = {}


async def wait() -> str:
    """The batch's first call: it waits, so that the calls after it start in tasks of their own."""
    await asyncio.sleep(0.01)
    return "waited"


async def tool_under_test(mode: str, call: str) -> Any:
    task = asyncio.current_task()
    assert task is not None
    COROUTINES[call] = type(task.get_coro()).__name__
    if mode == "raise_at_once":
        raise ValueError("refused before any wait")
    await asyncio.sleep(0)
    if mode == "value":
        return {"rows": [1, 2, 3], "path": "src/a.py"}
    if mode == "text_over_budget":
        return "line\n" * 400
    if mode == "raise":
        raise ValueError("the file is locked")
    if mode == "model_retry":
        raise ts.ModelRetry("give `path` as a relative path")
    if mode == "stop_iteration":
        raise StopIteration("drained")
    if mode == "own_task_cancelled":
        task.cancel()
        await asyncio.sleep(0)
        return "not reached"
    if mode == "own_task_cancelled_then_returns":
        task.cancel()
        return "returned anyway"
    if mode == "awaited_future_cancelled":
        future = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(future.cancel)
        await future
    if mode == "none":
        return None
    raise AssertionError(mode)


MODES = [
    "value",
    "text_over_budget",
    "raise",
    "raise_at_once",
    "model_retry",
    "stop_iteration",
    "own_task_cancelled",
    "own_task_cancelled_then_returns",
    "awaited_future_cancelled",
    "none",
]


def executor(parts: str = "plain", seen_by: list[Any] | None = None, **options: Any) -> ts.Executor:
    """The executor under test, with ``parts``: none ("plain"), a plain event listener ("events"), an async one
    ("async events"), or a sync and an async post hook ("post hooks"); what they see goes to ``seen_by``."""
    seen_by = [] if seen_by is None else seen_by

    def observed(event: Any) -> None:
        finished = getattr(event, "result", None)
        seen_by.append(
            (type(event).__name__, getattr(event, "call_id", None), None if finished is None else seen(finished))
        )

    async def observed_later(event: Any) -> None:
        await asyncio.sleep(0)
        observed(event)

    def hooked(name: str) -> Any:
        def hook(event: ts.HookEvent) -> None:
            seen_by.append((name, event.call_id, event.args, None if event.result is None else seen(event.result)))

        async def async_hook(event: ts.HookEvent) -> None:
            await asyncio.sleep(0)
            hook(event)

        return async_hook if name.startswith("async") else hook

    if parts == "events":
        options["on_event"] = observed
    elif parts == "async events":
        options["on_event"] = observed_later
    elif parts == "post hooks":
        options["hooks"] = (
            ts.Hooks()
            .post_tool_use("probe", hooked("after"))
            .post_tool_use("probe", hooked("async after"))
            .post_tool_use_failure("probe", hooked("after failure"))
            .post_tool_use_failure("probe", hooked("async after failure"))
        )
    return ts.Executor(
        [
            ts.tool(concurrency_safe=True)(wait),
            ts.tool(name="probe", concurrency_safe=True, max_result_chars=200)(tool_under_test),
        ],
        **options,
    )


def executed(parts: str = "plain", seen_by: list[Any] | None = None, **options: Any) -> ts.Executor:
    """The same executor with an input guardrail that lets every call through: its calls run through ``execute``."""
    return executor(parts, seen_by, input_guardrails=[lambda event: None], **options)


def calls(mode: str, call_id: str) -> list[ts.ToolCall]:
    return [ts.ToolCall(f"wait-{call_id}", "wait", {}), ts.ToolCall(call_id, "probe", {"mode": mode, "call": call_id})]


def seen(result: ts.ToolResult) -> tuple[Any, ...]:
    return (
        result.output,
        result.error,
        result.error_kind,
        result.is_error,
        result.truncated,
        result.was_concurrent,
        result.batch,
        result.attempts,
    )


def unnamed(observed: list[Any], call_id: str) -> list[Any]:
    """What was observed, with the call's own ID (and the arguments naming it) left out."""
    return [repr(entry).replace(call_id, "ID") for entry in observed]


@pytest.mark.parametrize("parts", ["plain", "events", "async events"])
@pytest.mark.parametrize("mode", MODES)
async def test_a_stepped_call_ends_as_the_same_call_through_execute(mode: str, parts: str) -> None:
    stepped_seen: list[Any] = []
    executed_seen: list[Any] = []
    stepped = await executor(parts, stepped_seen).run(calls(mode, f"s-{mode}"))
    assert COROUTINES[f"s-{mode}"] == "Stepper"
    through_execute = await executed(parts, executed_seen).run(calls(mode, f"e-{mode}"))
    assert COROUTINES[f"e-{mode}"] == "coroutine"
    first, second = stepped.results[1], through_execute.results[1]
    assert (first.call_id, second.call_id) == (f"s-{mode}", f"e-{mode}")
    assert seen(first) == seen(second)
    assert first.duration_ms > 0
    assert [result.call_id for result in stepped.results] == [f"wait-s-{mode}", f"s-{mode}"]
    assert unnamed(stepped_seen, f"s-{mode}") == unnamed(executed_seen, f"e-{mode}")
    if parts != "plain":
        assert any(f"s-{mode}" in repr(entry) for entry in stepped_seen)


@pytest.mark.parametrize("mode", ["raise", "own_task_cancelled"])
async def test_a_stepped_failure_raises_from_the_run_as_through_execute(mode: str) -> None:
    with pytest.raises(ts.ToolCallFailed) as stepped:
        await executor(on_error="raise").run(calls(mode, f"rs-{mode}"))
    assert COROUTINES[f"rs-{mode}"] == "Stepper"
    with pytest.raises(ts.ToolCallFailed) as through_execute:
        await executed(on_error="raise").run(calls(mode, f"re-{mode}"))
    assert COROUTINES[f"re-{mode}"] == "coroutine"
    assert str(stepped.value).replace("rs-", "") == str(through_execute.value).replace("re-", "")


@pytest.mark.parametrize("raised", [KeyboardInterrupt, SystemExit])
async def test_an_exception_that_stops_the_process_leaves_the_run_itself(raised: type[BaseException]) -> None:
    async def stops() -> None:
        await asyncio.sleep(0)
        raise raised("stop")

    run = ts.Executor([ts.tool(concurrency_safe=True)(wait), ts.tool(concurrency_safe=True)(stops)])
    with pytest.raises(raised):
        await run.run([ts.ToolCall("w", "wait", {}), ts.ToolCall("s", "stops", {})])
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_a_run_cancelled_while_stepped_calls_wait_stops_them_all() -> None:
    started: list[str] = []
    ended: list[str] = []

    async def long(n: int) -> None:
        started.append(f"long-{n}")
        try:
            await asyncio.sleep(5)
        finally:
            ended.append(f"long-{n}")

    run = ts.Executor([ts.tool(concurrency_safe=True)(long)])
    before = asyncio.all_tasks()
    task = asyncio.ensure_future(run.run([ts.ToolCall(f"c{n}", "long", {"n": n}) for n in range(20)]))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(started) >= 10
    assert sorted(ended) == sorted(started)
    left = [t for t in asyncio.all_tasks() - before if not t.done()]
    assert left == []


async def test_calls_with_a_part_a_stepped_call_leaves_out_run_through_execute() -> None:
    seen_by: dict[str, str] = {}

    async def plain(call: str) -> None:
        await asyncio.sleep(0)
        task = asyncio.current_task()
        assert task is not None
        seen_by[call] = type(task.get_coro()).__name__

    timed = ts.tool(name="timed", concurrency_safe=True, timeout=5)(plain)
    offloads = ts.tool(name="offloads", concurrency_safe=True, truncate="offload")(plain)
    run = ts.Executor([ts.tool(concurrency_safe=True)(wait), ts.tool(concurrency_safe=True)(plain), timed, offloads])
    batch = [ts.ToolCall("w", "wait", {})] + [
        ts.ToolCall(name, name, {"call": name}) for name in ("plain", "timed", "offloads")
    ]
    outcome = await run.run(batch)
    assert not any(result.is_error for result in outcome.results)
    assert seen_by == {"plain": "Stepper", "timed": "coroutine", "offloads": "coroutine"}
    post_hooked = await executor("post hooks").run(calls("value", "hooked"))
    assert COROUTINES["hooked"] == "coroutine" and not post_hooked.results[1].is_error
    guarded = ts.Executor(
        [ts.tool(concurrency_safe=True)(wait), ts.tool(concurrency_safe=True)(plain)],
        input_guardrails=[lambda event: None],
    )
    await guarded.run([ts.ToolCall("w", "wait", {}), ts.ToolCall("guarded", "plain", {"call": "guarded"})])
    assert seen_by["guarded"] == "coroutine"


async def test_a_stepped_call_holds_nothing_once_it_ended() -> None:
    # What a job steps is dropped as its call ends: the tool's coroutine, its frame and what it referenced.
    class Marker:
        pass

    kept: list[Any] = []

    async def holds() -> str:
        marker = Marker()
        kept.append(asyncio.current_task())
        await asyncio.sleep(0)
        return type(marker).__name__

    run = ts.Executor([ts.tool(concurrency_safe=True)(wait), ts.tool(concurrency_safe=True)(holds)])
    outcome = await run.run([ts.ToolCall("w", "wait", {}), ts.ToolCall("h", "holds", {})])
    assert outcome.results[1].output == "Marker"
    stepper = kept[0].get_coro()
    assert type(stepper).__name__ == "Stepper"
    assert stepper.begun and stepper.cr_frame is None
    assert not gc.is_tracked(stepper)
    gc.collect()
    assert not any(isinstance(obj, Marker) for obj in gc.get_objects())


def sync_probe(mode: str) -> Any:
    """A plain function (its body runs in a worker thread)."""
    if mode == "raise":
        raise ValueError("the file is locked")
    return {"mode": mode}


@pytest.mark.parametrize("mode", ["value", "raise"])
async def test_a_stepped_plain_function_ends_as_through_execute(mode: str) -> None:
    def tools() -> list[Any]:
        return [ts.tool(concurrency_safe=True)(wait), ts.tool(concurrency_safe=True)(sync_probe)]

    batch = [ts.ToolCall("w", "wait", {}), ts.ToolCall("p", "sync_probe", {"mode": mode})]
    stepped = await ts.Executor(tools()).run(batch)
    through_execute = await ts.Executor(tools(), input_guardrails=[lambda event: None]).run(batch)
    assert seen(stepped.results[1]) == seen(through_execute.results[1])
