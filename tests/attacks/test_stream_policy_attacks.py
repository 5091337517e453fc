"""Attacks on streamed turns combined with the policy features: argument repair, hooks, retries and rate limits,
batch hooks, a stream that breaks meanwhile. Every call is answered once, in model order, with the error kind
that says what happened to it; nothing runs that was not admitted."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio


class StreamDropped(Exception):
    """The model's stream broke (the test's own error)."""


async def test_a_repaired_call_whose_hook_waits_when_the_stream_breaks_is_skipped_not_called_invalid() -> None:
    ran: list[str] = []
    hook_entered = anyio.Event()
    events: list[Any] = []

    @ts.tool
    async def read(key: str) -> str:
        ran.append(key)
        return f"read {key}"

    async def repair(call: ts.ToolCall, error: ts.ToolResult) -> dict[str, Any]:
        return {"key": "fixed"}

    async def waiting_hook(event: ts.HookEvent) -> None:
        hook_entered.set()
        await anyio.sleep_forever()

    hooks = ts.Hooks().pre_tool_use("*", waiting_hook)
    executor = ts.Executor([read], repair_arguments=repair, hooks=hooks, on_event=events.append)
    with pytest.raises(ts.StreamFailed) as raised:
        async with executor.turn() as turn:
            turn.submit(ts.ToolCall("c1", "read", {"key": 7}))
            turn.submit(ts.ToolCall("c2", "read", {"key": "b"}))
            with anyio.fail_after(10):
                await hook_entered.wait()
            raise StreamDropped("connection reset")
    results = raised.value.outcome.results
    assert [result.call_id for result in results] == ["c1", "c2"]
    # The repair gave valid arguments: the call was not run because the stream broke, as the call behind it.
    assert [result.error_kind for result in results] == ["skipped", "skipped"]
    assert results[0].repaired and "the stream of calls broke" in (results[0].error or "")
    assert ran == []
    finished = [event.result.call_id for event in events if isinstance(event, ts.ToolFinished)]
    assert finished == ["c1", "c2"]
