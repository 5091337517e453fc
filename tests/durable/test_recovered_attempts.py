"""``ToolResult.attempts`` after ``recover``: the attempts the journal holds as started, on every path.

A crashed run is written into the journal by hand (what the crashed process had journaled), then
recovered on SQLite and on the PostgreSQL server `make test` starts, on asyncio and trio. Whatever
answers a call (run again, interrupted, refused now), its ``attempts`` equals the ``started``
transitions the journal holds for it once the run is recovered.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from journal_child import Store, store_in
from nested_crash_child import CHILD as NESTED_CHILD
from nested_crash_child import executor as nested_executor
from nested_crash_child import turn as nested_turn

import toolsched as ts

pytestmark = pytest.mark.anyio

DSN_VARIABLE = "TOOLSCHED_TEST_POSTGRES_DSN"


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_in(request.param, tmp_path, "attempts_test")


async def crashed_run(store: Store, run_id: str, calls: list[ts.ToolCall], starts: dict[str, int]) -> None:
    """Journals a run as a process that died would have left it: each call started ``starts[id]`` times."""
    async with store.open(owner="crashed") as crashed:
        await crashed.begin_run(run_id, calls)
        for call in calls:
            for _ in range(starts.get(call.id, 0)):
                await crashed.record(run_id, call.id, "started", {"args": dict(call.args)})


async def recovered(store: Store, run_id: str, tools: list[Any], **options: Any) -> dict[str, ts.ToolResult]:
    """Recovers the run; checks every result's attempts against the started transitions journaled for it."""
    async with store.open() as journal:
        outcome = await ts.Executor(tools, journal=journal, **options).recover(run_id, force=True)
        record = await journal.load(run_id)
    results = {result.call_id: result for result in outcome.results}
    for entry in record.calls:
        assert results[entry.call_id].attempts == entry.starts, entry.call_id
    return results


def retried(ran: list[str], *, fails: int = 0, **options: Any) -> ts.FunctionTool:
    """An idempotent tool with a retry policy of three attempts whose first ``fails`` runs fail transiently."""

    @ts.tool(idempotent=True, retry=ts.Retry(attempts=3, backoff=0.001, max_backoff=0.002), **options)
    async def fetch(key: str) -> str:
        ran.append(key)
        if len(ran) <= fails:
            raise ts.Transient("busy")
        return f"{key}: done"

    return fetch


def once(ran: list[str]) -> ts.FunctionTool:
    """A tool that is not idempotent: a call that started is never run again."""

    @ts.tool
    async def send(key: str) -> str:
        ran.append(key)
        return f"{key}: sent"

    return send


def rerunnable(ran: list[str]) -> ts.FunctionTool:
    """An idempotent tool without a retry policy."""

    @ts.tool(idempotent=True)
    async def read(key: str) -> str:
        ran.append(key)
        return f"{key}: read"

    return read


@pytest.mark.parametrize("starts", [3, 5], ids=["all", "more than the policy allows now"])
async def test_a_call_whose_every_attempt_had_started_counts_them(store: Store, starts: int) -> None:
    ran: list[str] = []
    await crashed_run(store, "spent", [ts.ToolCall("f1", "fetch", {"key": "a"})], {"f1": starts})
    result = (await recovered(store, "spent", [retried(ran)]))["f1"]
    spent = "all 3 attempts its retry policy allows" if starts == 3 else "5 attempts (its retry policy allows 3)"
    assert result.error_kind == "interrupted" and f"{spent} had started" in (result.error or "")
    assert result.attempts == starts and ran == []


async def test_a_call_that_is_not_idempotent_counts_the_attempt_that_started(store: Store) -> None:
    ran: list[str] = []
    calls = [ts.ToolCall("s1", "send", {"key": "a"}), ts.ToolCall("s2", "send", {"key": "b"})]
    await crashed_run(store, "sent", calls, {"s1": 1})
    results = await recovered(store, "sent", [once(ran)])
    assert (results["s1"].error_kind, results["s1"].attempts) == ("interrupted", 1)
    # The call that never started runs now, once.
    assert (results["s2"].output, results["s2"].attempts) == ("b: sent", 1)
    assert ran == ["b"]


@pytest.mark.parametrize("starts", [1, 2])
async def test_a_retried_call_run_again_counts_the_journaled_attempts(store: Store, starts: int) -> None:
    ran: list[str] = []
    await crashed_run(store, "again", [ts.ToolCall("f1", "fetch", {"key": "a"})], {"f1": starts})
    result = (await recovered(store, "again", [retried(ran)]))["f1"]
    assert (result.output, result.attempts) == ("a: done", starts + 1)


async def test_a_retried_call_that_fails_again_stops_at_the_policy(store: Store) -> None:
    ran: list[str] = []
    await crashed_run(store, "fails", [ts.ToolCall("f1", "fetch", {"key": "a"})], {"f1": 1})
    result = (await recovered(store, "fails", [retried(ran, fails=5)]))["f1"]
    # Two attempts were left: both ran and failed.
    assert (result.error_kind, result.attempts) == ("execution_error", 3)
    assert ran == ["a", "a"]


async def test_an_idempotent_call_without_a_retry_policy_counts_its_earlier_run(store: Store) -> None:
    ran: list[str] = []
    await crashed_run(store, "read", [ts.ToolCall("r1", "read", {"key": "a"})], {"r1": 1})
    result = (await recovered(store, "read", [rerunnable(ran)]))["r1"]
    assert (result.output, result.attempts) == ("a: read", 2)


async def test_a_started_call_whose_tool_is_gone_counts_its_attempts(store: Store) -> None:
    calls = [ts.ToolCall("g1", "retired", {"key": "a"})]
    await crashed_run(store, "gone", calls, {"g1": 2})
    result = (await recovered(store, "gone", [once([])]))["g1"]
    assert (result.error_kind, result.attempts) == ("interrupted", 2)


async def test_a_started_call_refused_now_counts_its_attempts(store: Store) -> None:
    ran: list[str] = []

    @ts.tool(name="read", rule_subject="path", idempotent=True)
    async def read(path: str) -> str:
        ran.append(path)
        return path

    calls = [ts.ToolCall("denied", "read", {"path": "secret/x"}), ts.ToolCall("bad", "read", {"path": "a"})]
    async with store.open(owner="crashed") as crashed:
        await crashed.begin_run("refused", calls)
        await crashed.record("refused", "denied", "started", {"args": {"path": "secret/x"}})
        # Started with arguments the tool's schema refuses now.
        await crashed.record("refused", "bad", "started", {"args": {"path": 7}})
    rules = ts.Permissions(root="/repo", deny=["read(secret/**)"])
    results = await recovered(store, "refused", [read], permissions=rules)
    assert (results["denied"].error_kind, results["denied"].attempts) == ("permission_denied", 1)
    assert (results["bad"].error_kind, results["bad"].attempts) == ("invalid_input", 1)
    assert ran == []


async def test_a_started_call_an_input_guardrail_refuses_now_counts_its_attempts(store: Store) -> None:
    ran: list[str] = []

    def refuse(event: ts.GuardrailEvent) -> ts.Reject:
        return ts.Reject("not now")

    await crashed_run(store, "guarded", [ts.ToolCall("f1", "fetch", {"key": "a"})], {"f1": 1})
    result = (await recovered(store, "guarded", [retried(ran)], input_guardrails=[refuse]))["f1"]
    assert (result.error_kind, result.attempts) == ("guardrail_rejected", 1)
    assert ran == []


async def test_a_started_call_refused_by_an_open_circuit_counts_its_attempts(store: Store) -> None:
    ran: list[str] = []
    fetch = retried(ran, fails=100, circuit=ts.CircuitBreaker(failures=1, cooldown=60))
    await crashed_run(store, "open", [ts.ToolCall("f1", "fetch", {"key": "a"})], {"f1": 1})
    async with store.open() as journal:
        executor = ts.Executor([fetch], journal=journal)
        # Another run opens the tool's circuit first.
        opened = await executor.run([ts.ToolCall("x", "fetch", {"key": "x"})])
        assert opened.results[0].is_error
        outcome = await executor.recover("open", force=True)
        record = await journal.load("open")
    result = outcome.results[0]
    assert (result.error_kind, result.attempts) == ("unavailable", 1)
    assert record.call("f1").starts == 1
    assert ran == ["x"]


async def test_a_recovered_call_skipped_by_an_interrupt_counts_its_attempts(store: Store) -> None:
    ran: list[str] = []
    gate = anyio.Event()

    @ts.tool(idempotent=True)
    async def first(key: str) -> str:
        gate.set()
        await anyio.sleep(0.05)
        return key

    calls = [ts.ToolCall("a", "first", {"key": "a"}), ts.ToolCall("f1", "fetch", {"key": "b"})]
    await crashed_run(store, "halted", calls, {"a": 1, "f1": 2})
    async with store.open() as journal:
        executor = ts.Executor([first, retried(ran)], journal=journal, strategy=ts.Sequential())
        async with anyio.create_task_group() as group:

            async def interrupt() -> None:
                await gate.wait()
                executor.interrupt("a new message")

            group.start_soon(interrupt)
            outcome = await executor.recover("halted", force=True)
        record = await journal.load("halted")
    results = {result.call_id: result for result in outcome.results}
    assert (results["a"].output, results["a"].attempts) == ("a", 2)
    assert (results["f1"].error_kind, results["f1"].attempts) == ("skipped", 2)
    assert [entry.starts for entry in record.calls] == [2, 2]
    assert ran == []


async def test_a_call_refused_by_an_open_circuit_is_not_journaled_as_started(store: Store) -> None:
    """A call the circuit answers ``unavailable`` never ran: the journal must not hold it as started (after a
    crash, a call journaled started but never run was answered ``interrupted``, its outcome "unknown")."""
    ran: list[str] = []

    @ts.tool(circuit=ts.CircuitBreaker(failures=1, cooldown=60))
    async def send(key: str) -> str:
        ran.append(key)
        raise ts.Transient("busy")

    async with store.open() as journal:
        executor = ts.Executor([send], journal=journal, strategy=ts.Sequential())
        calls = [ts.ToolCall("a", "send", {"key": "a"}), ts.ToolCall("b", "send", {"key": "b"})]
        outcome = await executor.run(calls, run_id="circuit")
        record = await journal.load("circuit")
    assert [(r.error_kind, r.attempts) for r in outcome.results] == [("execution_error", 1), ("unavailable", 0)]
    assert [entry.starts for entry in record.calls] == [1, 0]
    assert ran == ["a"]


async def test_a_call_waiting_for_a_slot_of_its_tool_is_not_journaled_as_started(store: Store) -> None:
    """A call waiting for its tool's ``max_concurrency`` slot has not started: a crash then leaves it
    *planned*, and ``recover`` runs it rather than answering it ``interrupted``."""
    inside = anyio.Event()
    release = anyio.Event()
    seen: dict[str, str] = {}

    @ts.tool(concurrency_safe=True, max_concurrency=1)
    async def send(key: str) -> str:
        inside.set()
        await release.wait()
        return key

    second = anyio.Event()

    def on_event(event: ts.Event) -> None:
        if isinstance(event, ts.ToolStarted) and event.call_id == "b":
            second.set()

    async with store.open() as journal, store.open(owner="observer") as observer:
        executor = ts.Executor([send], journal=journal, on_event=on_event)
        calls = [ts.ToolCall("a", "send", {"key": "a"}), ts.ToolCall("b", "send", {"key": "b"})]
        async with anyio.create_task_group() as group:

            async def look() -> None:
                await inside.wait()
                await second.wait()
                await anyio.sleep(0.05)  # the second call went on to wait for the slot
                record = await observer.load("slots")
                seen.update({entry.call_id: entry.state for entry in record.calls})
                release.set()

            group.start_soon(look)
            outcome = await executor.run(calls, run_id="slots")
    assert seen == {"a": "started", "b": "planned"}
    assert [(r.output, r.attempts) for r in outcome.results] == [("a", 1), ("b", 1)]


async def test_every_attempt_of_a_journaled_run_is_journaled_once(store: Store) -> None:
    """Retried, exhausted, refused by the circuit or interrupted while waiting for a token: each result's
    attempts equals the *started* transitions the journal holds for it."""
    runs: dict[str, int] = {}

    @ts.tool(
        idempotent=True,
        concurrency_safe=True,
        retry=ts.Retry(attempts=3, backoff=0.001, max_backoff=0.002),
        rate_limit=ts.RateLimit(1000),
    )
    async def fetch(key: str, fails: int) -> str:
        runs[key] = runs.get(key, 0) + 1
        if runs[key] <= fails:
            raise ts.Transient("busy")
        return key

    calls = [ts.ToolCall(key, "fetch", {"key": key, "fails": fails}) for key, fails in [("a", 0), ("b", 1), ("c", 9)]]
    async with store.open() as journal:
        outcome = await ts.Executor([fetch], journal=journal).run(calls, run_id="attempts")
        record = await journal.load("attempts")
    assert [(r.call_id, r.attempts) for r in outcome.results] == [("a", 1), ("b", 2), ("c", 3)]
    assert {entry.call_id: entry.starts for entry in record.calls} == {"a": 1, "b": 2, "c": 3}
    assert runs == {"a": 1, "b": 2, "c": 3}


async def test_a_call_interrupted_while_waiting_for_a_token_is_not_journaled_as_started(store: Store) -> None:
    ran: list[str] = []

    @ts.tool(concurrency_safe=True, rate_limit=ts.RateLimit(1, per=60))
    async def send(key: str) -> str:
        ran.append(key)
        return key

    second = anyio.Event()

    def on_event(event: ts.Event) -> None:
        if isinstance(event, ts.ToolStarted) and event.call_id == "b":
            second.set()

    async with store.open() as journal:
        executor = ts.Executor([send], journal=journal, on_event=on_event)
        calls = [ts.ToolCall("a", "send", {"key": "a"}), ts.ToolCall("b", "send", {"key": "b"})]
        async with anyio.create_task_group() as group:

            async def interrupt() -> None:
                await second.wait()
                await anyio.sleep(0.05)  # "b" went on to wait for the next token (a minute away)
                assert executor.interrupt("a new message") == 1

            group.start_soon(interrupt)
            outcome = await executor.run(calls, run_id="token")
        record = await journal.load("token")
    assert [(r.error_kind, r.attempts) for r in outcome.results] == [(None, 1), ("skipped", 0)]
    assert [entry.starts for entry in record.calls] == [1, 0]
    assert ran == ["a"]


# -- nested runs: a call whose nested run waited had started ----------------------------------------


async def test_a_resumed_nested_call_counts_each_start_the_journal_holds(tmp_path: Path) -> None:
    log = str(tmp_path / "ran.log")
    async with ts.SqliteJournal(tmp_path / "journal.db") as journal:
        outcome = await nested_executor(journal).run(nested_turn(["a", "b"])[:1], run_id="nested", context=log)
        # The nested run waits twice (one child turn per path): t1 starts three times in all.
        for waiting in ("t1/x1", "t1/x2"):
            state = outcome.state
            assert state is not None and [request.call_id for request in outcome.pending] == [waiting]
            state.approve(waiting)
            outcome = await nested_executor(journal).resume(state, context=log)
        record = await journal.load("nested")
    result = outcome.results[0]
    assert (result.output, result.attempts) == ("deleted a; deleted b", 3)
    assert record.call("t1").starts == 3


async def test_a_nested_call_recovered_after_its_decision_counts_its_starts(tmp_path: Path) -> None:
    journal_path, log, saved = tmp_path / "journal.db", tmp_path / "ran.log", tmp_path / "state.json"
    async with ts.SqliteJournal(journal_path) as journal:
        outcome = await nested_executor(journal).run(nested_turn(["a"])[:1], run_id="approved", context=str(log))
    state = outcome.state
    assert state is not None
    state.approve("t1/x1")
    saved.write_text(state.to_json(), encoding="utf-8")
    # Another process journals the decision and is killed before t1 starts again.
    arguments = ["asyncio", str(journal_path), str(log), "resume", str(saved), "admitting t1"]
    command = [sys.executable, str(NESTED_CHILD), *arguments]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*sys.path, os.environ.get("PYTHONPATH", "")])}
    process = await anyio.open_process(command, env=env)
    try:
        assert process.stdout is not None
        lines = BufferedByteReceiveStream(process.stdout)
        with anyio.fail_after(60):
            assert (await lines.receive_until(b"\n", 4096)).decode() == "admitting t1"
    finally:
        process.kill()
        with anyio.CancelScope(shield=True):
            await process.wait()
        await process.aclose()
    async with ts.SqliteJournal(journal_path) as journal:
        recovered = await nested_executor(journal).recover("approved", context=str(log), force=True)
        record = await journal.load("approved")
    result = recovered.results[0]
    assert (result.output, result.attempts) == ("deleted a", 2)
    assert record.call("t1").starts == 2


def test_a_recover_stopped_midway_is_recovered_again_counting_every_start(store: Store, anyio_backend: str) -> None:
    """A recover that itself stops (a KeyboardInterrupt in the attempt it runs) leaves one more start in the
    journal; the next recover counts it, and runs only the attempts the policy has left."""
    ran: list[str] = []

    @ts.tool(idempotent=True, retry=ts.Retry(attempts=3, backoff=0.001, max_backoff=0.002))
    async def fetch(key: str) -> str:
        ran.append(key)
        if len(ran) == 1:
            raise KeyboardInterrupt
        return f"{key}: done"

    async def first() -> None:
        await crashed_run(store, "twice", [ts.ToolCall("f1", "fetch", {"key": "a"})], {"f1": 1})
        async with store.open() as journal:
            await ts.Executor([fetch], journal=journal).recover("twice", force=True)

    async def second() -> dict[str, ts.ToolResult]:
        return await recovered(store, "twice", [fetch])

    with pytest.raises(KeyboardInterrupt):
        anyio.run(first, backend=anyio_backend)
    results = anyio.run(second, backend=anyio_backend)
    assert (results["f1"].output, results["f1"].attempts) == ("a: done", 3)
    assert ran == ["a", "a"]
