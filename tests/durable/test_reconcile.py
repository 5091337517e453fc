"""Calls in doubt are settled, not guessed: ``recover`` asks a tool's ``reconcile``, against SQLite and PostgreSQL.

The crash tests run a turn of ``charge`` calls in a child process (tests/support/effects_child.py), kill it
with SIGKILL at every point of a call, and recover the run. ``charge`` sends its idempotency key to a
downstream that applies each key once; its ``reconcile`` asks the downstream about the key. Whatever the
point, every charge is applied exactly once, every call is answered with its charge, and a call the
downstream applied never runs again.
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from crashes import kill_at
from effects_child import CHILD, POINTS, TURN, Downstream, executor
from journal_child import Store, store_in

import toolsched as ts

pytestmark = pytest.mark.anyio

KILLS_PER_RUN = 3
CHARGED = [("c0", "charged 10", None), ("c1", "charged 20", None), ("c2", "charged 30", None)]


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_in(request.param, tmp_path, "reconcile_test")


async def crash_at(store: Store, backend: str, command: str, run_id: str, world: Path, point: str) -> None:
    """Runs (``run``) or recovers (``recover``) the turn in a child process and kills it with SIGKILL once it
    reaches ``point``."""
    await kill_at([sys.executable, str(CHILD), store.spec(), backend, command, run_id, str(world), point], point)


def summary(outcome: ts.Outcome) -> list[tuple[str, Any, str | None]]:
    return [(r.call_id, r.output, r.error_kind) for r in outcome.results]


def check_settled(world: Downstream, context: str) -> Counter[str]:
    """Every charge applied exactly once, under one key per call that every run of the call sent; returns how
    many times each call's body ran."""
    runs = world.runs()
    keys: dict[str, set[str]] = {}
    for call_id, key in runs:
        keys.setdefault(call_id, set()).add(key)
    assert all(len(sent) == 1 for sent in keys.values()), context
    assert len({next(iter(sent)) for sent in keys.values()}) == len(keys), context
    effects = world.effects()
    assert sorted(effects) == sorted(next(iter(keys[call.id])) for call in TURN), context
    return Counter(call_id for call_id, _ in runs)


async def test_a_run_killed_at_every_point_of_a_call_is_settled_by_reconcile(
    store: Store, anyio_backend: str, tmp_path: Path
) -> None:
    # A seeded shuffle of every kill point, dealt out so that the four runs of this test
    # (two journals, two event loops) cover each point once.
    shuffled = random.Random(43).sample(POINTS, len(POINTS))
    deal = ["sqlite/asyncio", "sqlite/trio", "postgres/asyncio", "postgres/trio"].index(f"{store.kind}/{anyio_backend}")
    points = shuffled[deal * KILLS_PER_RUN : (deal + 1) * KILLS_PER_RUN]
    runs = {point: (f"run-{index}", tmp_path / f"world-{index}") for index, point in enumerate(points)}
    async with anyio.create_task_group() as group:
        for point, (run_id, world) in runs.items():
            group.start_soon(crash_at, store, anyio_backend, "run", run_id, world, point)
    async with store.open() as journal:
        for point, (run_id, world) in runs.items():
            outcome = await executor(journal).recover(run_id, context=str(world), force=True)
            assert not outcome.interrupted, point
            assert summary(outcome) == CHARGED, point
            ran = check_settled(Downstream(world), point)
            stage, call_id = point.split()
            # Killed before anything was sent: the call runs again (reconcile says NotDone). Killed once the
            # downstream applied it: it never runs again (Done). Before it started, or once it was journaled
            # finished, there is nothing in doubt.
            assert ran[call_id] == (2 if stage == "inside" else 1), point
            assert all(ran[call.id] == 1 for call in TURN if call.id != call_id), point
            # A finished run recovers from the journal alone: nothing runs, nothing is asked again.
            again = await executor(journal).recover(run_id, context=str(world))
            assert again.results == outcome.results
            assert Counter(call_id for call_id, _ in Downstream(world).runs()) == ran, point
            assert (await journal.load(run_id)).complete


async def test_a_recovery_killed_while_it_reconciles_is_recovered_again(
    store: Store, anyio_backend: str, tmp_path: Path
) -> None:
    world = tmp_path / "world"
    await crash_at(store, anyio_backend, "run", "doubt", world, "effected c1")
    # Each recovery is killed while it asks reconcile, and once reconcile has its answer but before the
    # answer is journaled: c1 stays in doubt, and the next recovery asks again.
    await crash_at(store, anyio_backend, "recover", "doubt", world, "reconciling c1")
    await crash_at(store, anyio_backend, "recover", "doubt", world, "reconciled c1")
    async with store.open() as journal:
        outcome = await executor(journal).recover("doubt", context=str(world), force=True)
        record = await journal.load("doubt")
    assert summary(outcome) == CHARGED
    ran = check_settled(Downstream(world), "recovered after two killed recoveries")
    assert ran == Counter({"c0": 1, "c1": 1, "c2": 1})
    # Done was journaled as c1's result: its starts are the one run before the crash.
    assert record.complete and record.call("c1").starts == 1


# -- reconcile's answers, in one process ----------------------------------------------------------


async def left_started(store: Store, run_id: str, calls: list[ts.ToolCall]) -> None:
    """A run that crashed with each of ``calls`` started and not finished."""
    async with store.open(owner="crashed") as crashed:
        await crashed.begin_run(run_id, calls)
        for call in calls:
            assert not isinstance(call.args, str)
            await crashed.record(run_id, call.id, "started", {"args": dict(call.args)})


def settling(answer: Any, ran: list[str], asked: list[tuple[str, str]], **options: Any) -> ts.FunctionTool:
    async def settle(args: dict[str, Any], ctx: ts.ToolContext) -> Any:
        asked.append((ctx.call_id, ctx.idempotency_key))
        if isinstance(answer, Exception):
            raise answer
        return answer

    @ts.tool(name="send", reconcile=settle, **options)
    async def send(text: str, ctx: ts.ToolContext) -> str:
        ran.append(ctx.call_id)
        return f"sent {text}"

    return send


@pytest.mark.parametrize(
    ("answer", "doubt"),
    [
        (None, "its reconcile could not tell whether it took effect"),
        (RuntimeError("ledger down"), "its reconcile failed (RuntimeError: ledger down)"),
        ("yes", "its reconcile returned 'yes', not ts.Done, ts.NotDone or None"),
    ],
)
async def test_a_reconcile_that_cannot_tell_leaves_the_call_interrupted(store: Store, answer: Any, doubt: str) -> None:
    await left_started(store, "unsure", [ts.ToolCall("s1", "send", {"text": "hi"})])
    ran: list[str] = []
    asked: list[tuple[str, str]] = []
    async with store.open() as journal:
        outcome = await ts.Executor([settling(answer, ran, asked)], journal=journal).recover("unsure", force=True)
    result = outcome.results[0]
    assert result.error_kind == "interrupted" and ran == []
    assert doubt in (result.error or "")
    assert [call_id for call_id, _ in asked] == ["s1"]


async def test_done_answers_the_call_with_its_output_journaled_and_never_runs_it(store: Store) -> None:
    await left_started(store, "settled", [ts.ToolCall("s1", "send", {"text": "hi"})])
    ran: list[str] = []
    asked: list[tuple[str, str]] = []
    found = "x" * 500
    tool = settling(ts.Done(found), ran, asked, max_result_chars=100)
    async with store.open() as journal:
        outcome = await ts.Executor([tool], journal=journal).recover("settled", force=True)
        record = await journal.load("settled")
        again = await ts.Executor([tool], journal=journal).recover("settled")
    result = outcome.results[0]
    # Shaped to the tool's budget as any output is, and counted as the one run that had started.
    assert not result.is_error and result.truncated and len(result.output) < len(found)
    assert result.attempts == 1 and ran == []
    assert record.complete and record.call("s1").result == result
    assert again.results == outcome.results and len(asked) == 1


async def test_not_done_runs_the_call_once_more_with_the_arguments_it_started_with(store: Store) -> None:
    await left_started(store, "redo", [ts.ToolCall("s1", "send", {"text": "hi"})])
    ran: list[str] = []
    asked: list[tuple[str, str]] = []
    async with store.open() as journal:
        outcome = await ts.Executor([settling(ts.NotDone(), ran, asked)], journal=journal).recover("redo", force=True)
        record = await journal.load("redo")
    assert (outcome.results[0].output, outcome.results[0].attempts) == ("sent hi", 2)
    assert ran == ["s1"] and record.call("s1").starts == 2


async def test_reconcile_sees_the_key_the_call_ran_with(store: Store) -> None:
    keys: list[str] = []

    @ts.tool(name="send")
    async def send(text: str, ctx: ts.ToolContext) -> str:
        keys.append(ctx.idempotency_key)
        return text

    async with store.open() as journal:
        await ts.Executor([send], journal=journal).run([ts.ToolCall("s1", "send", {"text": "a"})], run_id="keyed")
    await left_started(store, "other", [ts.ToolCall("s1", "send", {"text": "a"})])
    asked: list[tuple[str, str]] = []
    async with store.open() as journal:
        await ts.Executor([settling(ts.Done("a"), [], asked)], journal=journal).recover("other", force=True)
    # The same call ID in another run: another key.
    assert asked[0][1] != keys[0]


async def test_an_idempotent_tool_whose_reconcile_cannot_tell_runs_again(store: Store) -> None:
    await left_started(store, "again", [ts.ToolCall("s1", "send", {"text": "hi"})])
    ran: list[str] = []
    async with store.open() as journal:
        tool = settling(None, ran, [], idempotent=True)
        outcome = await ts.Executor([tool], journal=journal).recover("again", force=True)
    assert outcome.results[0].output == "sent hi" and ran == ["s1"]


async def test_a_reconcile_method_of_a_tool_class_is_asked(store: Store) -> None:
    class Send(ts.Tool):
        name = "send"
        input_schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}

        async def call(self, args: dict[str, Any], ctx: ts.ToolContext) -> str:
            raise AssertionError("a call the downstream saw never runs again")

        async def reconcile(self, args: dict[str, Any], ctx: ts.ToolContext) -> ts.Done:
            return ts.Done(f"already sent {args['text']}")

    await left_started(store, "classy", [ts.ToolCall("s1", "send", {"text": "hi"})])
    async with store.open() as journal:
        outcome = await ts.Executor([Send()], journal=journal).recover("classy", force=True)
    assert outcome.results[0].output == "already sent hi"


async def test_a_reconcile_that_hangs_is_bounded_by_the_tool_s_timeout(store: Store) -> None:
    async def hang(args: dict[str, Any], ctx: ts.ToolContext) -> ts.Done:
        await anyio.sleep_forever()
        raise AssertionError

    @ts.tool(name="send", reconcile=hang, timeout=0.05)
    async def send(text: str) -> str:
        return text

    await left_started(store, "hung", [ts.ToolCall("s1", "send", {"text": "hi"})])
    async with store.open() as journal:
        outcome = await ts.Executor([send], journal=journal).recover("hung", force=True)
    assert outcome.results[0].error_kind == "interrupted"
    assert "did not answer within 0.05 seconds" in (outcome.results[0].error or "")


def test_a_reconcile_that_is_not_callable_is_refused_when_the_tool_is_registered() -> None:
    with pytest.raises(ts.ToolDefinitionError, match="reconcile must be a callable"):

        @ts.tool(reconcile="yes")  # type: ignore[arg-type]
        async def send(text: str) -> str:
            return text

        ts.ToolRegistry([send])
