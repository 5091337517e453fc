"""Repaired calls in durable runs, on SQLite and on the PostgreSQL server `make test` starts.

The journal keeps the text the model sent and the arguments that ran; ``recover`` and ``resume`` run a
repaired call with the arguments the journal holds, never asking the repair again (a repair callable may
answer differently the second time); and a recovered run given no ``Limits`` keeps its retry budget.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from journal_child import Store, store_in

import toolsched as ts

pytestmark = pytest.mark.anyio

HOPELESS = "read notes.txt, three lines please"
FENCED = "```json\n{'path': 'fenced',}\n```"


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_in(request.param, tmp_path, "repaired_test")


def reader(ran: list[str], **options: Any) -> ts.FunctionTool:
    @ts.tool(name="read", **options)
    async def read(path: str) -> str:
        ran.append(path)
        return f"read {path}"

    return read


class Repair:
    """A repair callable answering ``path`` each time, remembering the calls it was asked about."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.asked: list[str] = []

    async def __call__(self, call: ts.ToolCall, error: ts.ToolResult) -> dict[str, Any]:
        self.asked.append(call.id)
        return {"path": self.path}


async def test_the_journal_keeps_the_models_text_and_the_arguments_that_ran(store: Store) -> None:
    ran: list[str] = []
    calls = [ts.ToolCall("1", "read", HOPELESS), ts.ToolCall("2", "read", FENCED)]
    async with store.open() as journal:
        executor = ts.Executor([reader(ran)], journal=journal, repair_arguments=Repair("fixed"))
        outcome = await executor.run(calls, run_id="kept")
        record = await journal.load("kept")
    assert [r.repaired for r in outcome.results] == [True, True]
    assert [call.args for call in record.turn] == [HOPELESS, FENCED]
    assert [(entry.run_with or {}).get("args") for entry in record.calls] == [{"path": "fixed"}, {"path": "fenced"}]
    assert [result.repaired for result in record.results] == [True, True]
    assert sorted(ran) == ["fenced", "fixed"]


async def test_recover_runs_a_started_repaired_call_with_the_journaled_arguments(store: Store) -> None:
    ran: list[str] = []
    async with store.open(owner="crashed") as crashed:
        await crashed.begin_run("started", [ts.ToolCall("1", "read", HOPELESS)])
        await crashed.record("started", "1", "started", {"args": {"path": "journaled"}})
    repair = Repair("different")
    async with store.open() as journal:
        executor = ts.Executor([reader(ran, idempotent=True)], journal=journal, repair_arguments=repair)
        outcome = await executor.recover("started", force=True)
    result = outcome.results[0]
    assert (result.output, result.repaired, result.attempts) == ("read journaled", True, 2)
    assert ran == ["journaled"] and repair.asked == []


async def test_a_held_repaired_call_resumes_with_the_journaled_arguments(store: Store) -> None:
    ran: list[str] = []
    first = Repair("approved")
    async with store.open() as journal:
        executor = ts.Executor([reader(ran, needs_approval=True)], journal=journal, repair_arguments=first)
        outcome = await executor.run([ts.ToolCall("1", "read", HOPELESS)], run_id="held")
    assert outcome.interrupted and [dict(r.args) for r in outcome.pending] == [{"path": "approved"}]
    # Another process recovers the run: its repair would answer otherwise, and is never asked.
    second = Repair("other")
    async with store.open() as journal:
        executor = ts.Executor([reader(ran, needs_approval=True)], journal=journal, repair_arguments=second)
        recovered = await executor.recover("held", force=True)
        state = recovered.state
        assert recovered.interrupted and state is not None
        assert [dict(r.args) for r in recovered.pending] == [{"path": "approved"}]
        state.approve("1")
        resumed = await executor.resume(state)
    result = resumed.results[0]
    assert (result.output, result.repaired) == ("read approved", True)
    assert ran == ["approved"]
    assert first.asked == ["1"] and second.asked == []


async def test_a_recovered_call_never_admitted_is_repaired_as_a_new_call(store: Store) -> None:
    ran: list[str] = []
    async with store.open(owner="crashed") as crashed:
        await crashed.begin_run("planned", [ts.ToolCall("1", "read", HOPELESS), ts.ToolCall("2", "read", FENCED)])
    repair = Repair("repaired now")
    async with store.open() as journal:
        executor = ts.Executor([reader(ran)], journal=journal, repair_arguments=repair)
        outcome = await executor.recover("planned", force=True)
    assert [(r.output, r.repaired) for r in outcome.results] == [("read repaired now", True), ("read fenced", True)]
    assert repair.asked == ["1"]


async def test_a_recovered_run_without_limits_keeps_its_retry_budget(store: Store) -> None:
    ran: list[str] = []

    @ts.tool(max_model_retries=0)  # the first mistake is its last
    async def send(to: str) -> str:
        ran.append(to)
        return f"sent to {to}"

    refused = ts.ToolResult("1", "send", error="bad arguments", error_kind="invalid_input", is_error=True, attempts=0)
    async with store.open(owner="crashed") as crashed:
        await crashed.begin_run("budget", [ts.ToolCall("1", "send", "{bad"), ts.ToolCall("2", "send", {"to": "bob"})])
        await crashed.record("budget", "1", "finished", refused)
    async with store.open() as journal:
        outcome = await ts.Executor([send], journal=journal).recover("budget", force=True)
    assert [r.error_kind for r in outcome.results] == ["invalid_input", "retries_exhausted"]
    assert ran == []


async def test_a_deny_rule_in_force_at_recover_stops_a_repaired_call_held_before(store: Store) -> None:
    ran: list[str] = []
    async with store.open() as journal:
        executor = ts.Executor(
            [reader(ran, needs_approval=True, rule_subject="path")],
            journal=journal,
            repair_arguments=Repair("secret/key"),
        )
        outcome = await executor.run([ts.ToolCall("1", "read", HOPELESS)], run_id="denied")
    assert outcome.interrupted
    rules = ts.Permissions(root="/repo", deny=["read(secret/**)"], allow=["read"])
    async with store.open() as journal:
        executor = ts.Executor(
            [reader(ran, needs_approval=True, rule_subject="path")],
            journal=journal,
            repair_arguments=Repair("elsewhere"),
            permissions=rules,
        )
        recovered = await executor.recover("denied", force=True)
    result = recovered.results[0]
    assert (result.error_kind, result.repaired) == ("permission_denied", True)
    assert ran == []


async def test_without_a_repair_callable_a_refused_text_is_answered_as_it_would_be_now(store: Store) -> None:
    ran: list[str] = []
    async with store.open(owner="crashed") as crashed:
        await crashed.begin_run("now", [ts.ToolCall("1", "read", HOPELESS)])
        await crashed.record("now", "1", "approved", {"args": {"path": "journaled"}})
    async with store.open() as journal:
        executor = ts.Executor([reader(ran, needs_approval=True)], journal=journal, repair_arguments=True)
        outcome = await executor.recover("now", force=True)
    result = outcome.results[0]
    assert (result.error_kind, result.repaired) == ("invalid_input", False)
    assert ran == []
