"""Attacks on ``reconcile``: one that hangs on a tool without a timeout, one that blocks its thread, one that
changes the arguments it was shown. ``recover`` must answer every call in doubt, never hang, and run a call
it runs with the arguments the call started with. SQLite and PostgreSQL, asyncio and trio."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from journal_child import Store, store_in

import toolsched as ts
from toolsched._executor import recovery
from toolsched._values.effects import idempotency_key

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_in(request.param, tmp_path, "reconcile_attacks")


async def left_started(store: Store, run_id: str, calls: list[ts.ToolCall]) -> None:
    """A run that crashed with each of ``calls`` started and not finished."""
    async with store.open(owner="crashed") as crashed:
        await crashed.begin_run(run_id, calls)
        for call in calls:
            assert not isinstance(call.args, str)
            await crashed.record(run_id, call.id, "started", {"args": dict(call.args)})


async def test_a_reconcile_that_hangs_on_a_tool_without_a_timeout_is_bounded(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tool has no timeout of its own: reconcile is still bounded (RECONCILE_TIMEOUT, shortened here).
    monkeypatch.setattr(recovery, "RECONCILE_TIMEOUT", 0.05, raising=False)

    async def hang(args: dict[str, Any], ctx: ts.ToolContext) -> ts.Done:
        await anyio.sleep_forever()
        raise AssertionError

    @ts.tool(name="send", reconcile=hang)
    async def send(text: str) -> str:
        raise AssertionError("a call in doubt is not run again when reconcile cannot tell")

    await left_started(store, "hung", [ts.ToolCall("s1", "send", {"text": "hi"})])
    async with store.open() as journal:
        with anyio.fail_after(30):
            outcome = await ts.Executor([send], journal=journal).recover("hung", force=True)
    assert outcome.results[0].error_kind == "interrupted"
    assert "did not answer within 0.05 seconds" in (outcome.results[0].error or "")


async def test_a_sync_reconcile_that_blocks_is_bounded_by_the_tool_s_timeout(store: Store) -> None:
    # A plain function doing blocking I/O (urllib, a database driver): it must not stall the event loop,
    # and its timeout must hold. Its thread is let go once the call is answered.
    release = threading.Event()
    asked: list[str] = []

    def settle(args: dict[str, Any], ctx: ts.ToolContext) -> ts.Done:
        asked.append(threading.current_thread().name)
        release.wait(20)
        return ts.Done("too late to count")

    @ts.tool(name="send", reconcile=settle, timeout=0.05)
    async def send(text: str) -> str:
        raise AssertionError("a call in doubt is not run again when reconcile cannot tell")

    await left_started(store, "blocked", [ts.ToolCall("s1", "send", {"text": "hi"})])
    try:
        async with store.open() as journal:
            outcome = await ts.Executor([send], journal=journal).recover("blocked", force=True)
    finally:
        release.set()
    assert len(asked) == 1 and asked[0] != threading.current_thread().name
    assert outcome.results[0].error_kind == "interrupted"
    assert "did not answer within 0.05 seconds" in (outcome.results[0].error or "")


async def test_a_sync_reconcile_answers_from_its_thread(store: Store) -> None:
    def settle(args: dict[str, Any], ctx: ts.ToolContext) -> ts.Done:
        return ts.Done(f"found {args['text']} under {ctx.idempotency_key[:8]}")

    @ts.tool(name="send", reconcile=settle)
    async def send(text: str) -> str:
        raise AssertionError("a call reconcile found done never runs")

    await left_started(store, "sync", [ts.ToolCall("s1", "send", {"text": "hi"})])
    async with store.open() as journal:
        ex = ts.Executor([send], journal=journal)
        outcome = await ex.recover("sync", force=True)
    # Asked in a worker thread with the call's own key: the run's, by its ID.
    assert outcome.results[0].output == f"found hi under {idempotency_key('sync', 's1')[:8]}"


async def test_a_reconcile_that_changes_its_arguments_does_not_change_what_runs(store: Store) -> None:
    ran: list[int] = []

    async def meddle(args: dict[str, Any], ctx: ts.ToolContext) -> ts.NotDone:
        args["amount"] = 1000  # a reconcile only looks; what it does to its copy stays there
        return ts.NotDone()

    @ts.tool(name="charge", reconcile=meddle)
    async def charge(amount: int) -> str:
        ran.append(amount)
        return f"charged {amount}"

    await left_started(store, "meddled", [ts.ToolCall("c1", "charge", {"amount": 5})])
    async with store.open() as journal:
        outcome = await ts.Executor([charge], journal=journal).recover("meddled", force=True)
        record = await journal.load("meddled")
    assert ran == [5]
    assert outcome.results[0].output == "charged 5" and outcome.results[0].attempts == 2
    assert (record.call("c1").run_with or {})["args"] == {"amount": 5}
