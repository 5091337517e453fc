"""Streamed turns read by more than one consumer, and broken by the toolsched errors of the caller's own
code: every consumer sees every result, and a broken stream keeps the outcome of every call received."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

import toolsched as ts
from toolsched.providers import anthropic

pytestmark = pytest.mark.anyio


def _mailer() -> tuple[ts.Tool, list[str], anyio.Event]:
    """A tool with a side effect, what it sent, and an event set once it ran."""
    sent: list[str] = []
    ran = anyio.Event()

    @ts.tool
    async def send_email(to: str) -> str:
        sent.append(to)
        ran.set()
        return f"sent to {to}"

    return send_email, sent, ran


async def test_every_consumer_of_results_sees_every_result() -> None:
    gates = [anyio.Event() for _ in range(3)]

    @ts.tool(read_only=True, concurrency_safe=True)
    async def wait(n: int) -> int:
        await gates[n].wait()
        return n

    executor = ts.Executor([wait])
    got: dict[str, list[str]] = {"a": [], "b": [], "c": []}
    first = anyio.Event()

    async def consume(name: str, turn: Any) -> None:
        async for result in turn.results():
            got[name].append(result.call_id)
            first.set()

    with anyio.fail_after(10):
        async with executor.turn() as turn, anyio.create_task_group() as group:
            group.start_soon(consume, "a", turn)
            await anyio.wait_all_tasks_blocked()
            # "b" starts waiting after "a" did, "c" after the first result was handed out.
            group.start_soon(consume, "b", turn)
            await anyio.wait_all_tasks_blocked()
            for n in range(3):
                turn.submit(ts.ToolCall(f"c{n}", "wait", {"n": n}))
            gates[0].set()
            await first.wait()
            group.start_soon(consume, "c", turn)
            await anyio.wait_all_tasks_blocked()
            gates[1].set()
            gates[2].set()
            turn.close()
    assert got == {"a": ["c0", "c1", "c2"], "b": ["c0", "c1", "c2"], "c": ["c0", "c1", "c2"]}


async def test_a_toolsched_error_of_the_callers_code_breaks_the_stream_with_the_outcome() -> None:
    send_email, sent, ran = _mailer()
    executor = ts.Executor([send_email])
    with pytest.raises(ts.StreamFailed) as failed:
        async with executor.turn() as turn:
            turn.submit(ts.ToolCall("e1", "send_email", {"to": "carol"}))
            await ran.wait()
            raise ts.ResponseFormatError("a garbled chunk")
    assert isinstance(failed.value.__cause__, ts.ResponseFormatError)
    assert sent == ["carol"]
    assert [(result.call_id, result.output) for result in failed.value.outcome.results] == [("e1", "sent to carol")]


async def test_a_garbled_provider_event_after_a_call_ran_keeps_its_result() -> None:
    send_email, sent, ran = _mailer()

    async def events() -> AsyncIterator[dict[str, Any]]:
        yield {"type": "message_start", "message": {"role": "assistant", "content": []}}
        block = {"type": "tool_use", "id": "e1", "name": "send_email", "input": {}}
        yield {"type": "content_block_start", "index": 0, "content_block": block}
        delta = {"type": "input_json_delta", "partial_json": '{"to": "bob"}'}
        yield {"type": "content_block_delta", "index": 0, "delta": delta}
        yield {"type": "content_block_stop", "index": 0}
        await ran.wait()
        yield {"type": "content_block_start", "index": 1, "content_block": None}

    with pytest.raises(ts.StreamFailed) as failed:
        await anthropic.execute_stream(ts.Executor([send_email]), events())
    assert isinstance(failed.value.__cause__, ts.ToolschedError)
    assert sent == ["bob"]
    assert [(result.call_id, result.output) for result in failed.value.outcome.results] == [("e1", "sent to bob")]
