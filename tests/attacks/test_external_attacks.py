"""Attacks on external tools and on copies of a paused journaled run, from outside: two webhooks answering the
same call at once, a stale copy of a state resumed in another process after the run moved on, a nested call
answered through the journal. On SQLite and PostgreSQL, asyncio and trio."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from attacks_child import CHILD, confirm, executor, runs
from journal_child import Store, store_in

import toolsched as ts
from toolsched._values.effects import idempotency_key

pytestmark = pytest.mark.anyio

TURN = [
    ts.ToolCall("p1", "pay", {"amount": 1}),
    ts.ToolCall("e1", "confirm", {"order": "A-1"}),
    ts.ToolCall("p2", "pay", {"amount": 2}),
]


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_in(request.param, tmp_path, "external_attacks")


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*sys.path, os.environ.get("PYTHONPATH", "")])}


async def resume_elsewhere(store: Store, backend: str, saved: Path, world: Path, decisions: dict[str, Any]) -> str:
    """Resumes the saved state in another process; its last line of output."""
    command = [sys.executable, str(CHILD), store.spec(), backend, "resume", str(saved), str(world)]
    with anyio.fail_after(120):
        done = await anyio.run_process([*command, json.dumps(decisions)], env=child_env(), check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().splitlines()[-1]


def calls_as_journaled(record: ts.RunRecord) -> list[tuple[str, str]]:
    return [(entry.call_id, entry.state) for entry in record.calls]


@pytest.mark.parametrize(
    "stale",
    [
        {"p1": "approve", "p2": "approve"},  # p2 ran since: an approval of it comes too late
        {"p1": "approve", "p2": "reject"},  # a rejection of a call that ran
        {"p1": "reject", "e1": ["complete", "yes"], "p2": "approve"},
    ],
    ids=["approve-approve", "approve-reject", "reject-complete-approve"],
)
async def test_a_stale_copy_resumed_in_another_process_is_refused_whole_before_anything_is_written(
    store: Store, anyio_backend: str, tmp_path: Path, stale: dict[str, Any]
) -> None:
    # One person approves p2 on the state and resumes: p2 runs, p1 still waits, e1 waits for its answer.
    # The same state, saved before, is decided otherwise and resumed in another process afterwards. It
    # decides p2, which the journal holds answered: the resume is refused with StateError as a whole,
    # before any of its decisions is journaled (p1 stays waiting for a person) and before anything runs.
    world = tmp_path / "world"
    world.mkdir()
    saved = tmp_path / "state.json"
    async with store.open() as journal:
        outcome = await executor(journal).run(TURN, run_id="stale", context=str(world))
        state = outcome.state
        assert state is not None
        saved.write_text(state.to_json())
        state.approve("p2")
        moved_on = await executor(journal).resume(state, context=str(world))
        assert [r.call_id for r in moved_on.results] == ["p2"]
        before = calls_as_journaled(await journal.load("stale"))
    assert before == [("p1", "pending"), ("e1", "started"), ("p2", "finished")]
    refused = await resume_elsewhere(store, anyio_backend, saved, world, stale)
    assert refused.startswith("refused StateError:"), refused
    assert "'p2'" in refused and "answered already" in refused
    async with store.open() as journal:
        record = await journal.load("stale")
        assert calls_as_journaled(record) == before and record.owner is None
        # The run goes on from where it stands: p1 waits for a person, e1 for its answer.
        again = await executor(journal).recover("stale", context=str(world))
    assert [p.call_id for p in again.pending] == ["p1", "e1"]
    assert runs(world) == ["p2"]


async def test_two_webhooks_completing_one_call_at_once_give_it_one_answer(
    store: Store, anyio_backend: str, tmp_path: Path
) -> None:
    world = tmp_path / "world"
    world.mkdir()
    async with store.open() as journal:
        outcome = await executor(journal).run(TURN[1:2], run_id="race", context=str(world))
    assert [p.call_id for p in outcome.pending] == ["e1"]
    processes = []
    try:
        for answer in ("first", "second"):
            command = [sys.executable, str(CHILD), store.spec(), anyio_backend, "complete", "race", "e1"]
            processes.append(await anyio.open_process([*command, json.dumps(answer)], env=child_env(), stderr=None))
        streams = [BufferedByteReceiveStream(p.stdout) for p in processes if p.stdout is not None]
        with anyio.fail_after(60):
            for lines in streams:
                assert await lines.receive_until(b"\n", 65536) == b"ready"
            for process in processes:
                assert process.stdin is not None
                await process.stdin.send(b"go\n")
            said = [(await lines.receive_until(b"\n", 65536)).decode() for lines in streams]
            for process in processes:
                await process.wait()
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                with anyio.CancelScope(shield=True):
                    await process.wait()
            await process.aclose()
    assert sorted(line.split(":")[0] for line in said if line != "completed") in (
        ["refused StateError"],
        ["refused RunClaimedError"],
    ), said
    winner = ["first", "second"][said.index("completed")]
    async with store.open() as journal:
        recovered = await executor(journal).recover("race", context=str(world))
        record = await journal.load("race")
    assert [(r.call_id, r.output) for r in recovered.results] == [("e1", winner)]
    assert record.complete and record.call("e1").starts == 1


async def test_a_nested_external_call_answered_through_the_journal_is_refused_saying_where_to_answer_it(
    store: Store,
) -> None:
    @ts.tool(external=True)
    def sign(document: str) -> str:
        """Signed elsewhere."""

    child = ts.Executor([sign])

    @ts.agent_tool(child)
    async def paperwork(document: str, child: ts.ChildRun) -> str:
        """Files a document once it is signed."""
        signed = await child.run([ts.ToolCall("s1", "sign", {"document": document})])
        return f"filed {signed.results[0].output}"

    async with store.open() as journal:
        ex = ts.Executor([paperwork], journal=journal)
        outcome = await ex.run([ts.ToolCall("p1", "paperwork", {"document": "lease"})], run_id="nested")
        (handed,) = outcome.pending
        assert isinstance(handed, ts.ExternalCall) and handed.call_id == "p1/s1"
        with pytest.raises(ts.StateError, match=r"nested run of call 'p1'.*state\.complete"):
            await ex.complete("nested", "p1/s1", output="signed")
        with pytest.raises(ts.StateError, match="no such call"):
            await ex.complete("nested", "p9/s1", output="signed")
        # Nothing was written: the call is answered on the state and the run resumed, as documented.
        state = outcome.state
        assert state is not None
        state.complete("p1/s1", output="signed")
        finished = await ex.resume(state)
    assert [(r.call_id, r.output) for r in finished.results] == [("p1", "filed signed")]


async def kill_at(store: Store, backend: str, arguments: list[str], point: str, go: bool = False) -> None:
    """Runs attacks_child with ``arguments`` and kills it with SIGKILL once it prints ``point`` (after sending
    it the line it waits for first, with ``go``)."""
    command = [sys.executable, str(CHILD), store.spec(), backend, *arguments]
    process = await anyio.open_process(command, env=child_env(), stderr=None)
    try:
        assert process.stdout is not None and process.stdin is not None
        lines = BufferedByteReceiveStream(process.stdout)
        with anyio.fail_after(60):
            while True:
                line = (await lines.receive_until(b"\n", 65536)).decode()
                assert not line.startswith(("done", "completed", "refused")), f"finished before {point!r}: {line}"
                if line == "ready" and go:
                    await process.stdin.send(b"go\n")
                if line == point:
                    break
        process.kill()
        with anyio.fail_after(30):
            await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()
        await process.aclose()


@pytest.mark.parametrize("point", ["writing finished e1", "wrote finished e1"])
async def test_a_webhook_killed_while_it_completes_leaves_one_answer_or_none(
    store: Store, anyio_backend: str, tmp_path: Path, point: str
) -> None:
    # SIGKILL while executor.complete holds the run: just before the journal writes the answer, or just
    # after. The dead completer's claim is let go (its process is gone), the webhook's retry either lands
    # (killed before the write) or is refused as answered already (after it): one answer either way.
    world = tmp_path / "world"
    world.mkdir()
    async with store.open() as journal:
        await executor(journal).run(TURN[1:2], run_id="killed", context=str(world))
    arguments = ["complete", "killed", "e1", json.dumps("from the killed webhook"), point]
    await kill_at(store, anyio_backend, arguments, point, go=True)
    async with store.open() as journal:
        ex = executor(journal)
        if point.startswith("writing"):
            assert (await journal.load("killed")).call("e1").result is None
            await ex.complete("killed", "e1", output="from the retry")
            expected = "from the retry"
        else:
            with pytest.raises(ts.StateError, match="answered already"):
                await ex.complete("killed", "e1", output="from the retry")
            expected = "from the killed webhook"
        recovered = await ex.recover("killed", context=str(world))
        again = await ex.recover("killed", context=str(world))
    assert [(r.call_id, r.output) for r in recovered.results] == [("e1", expected)]
    assert again.results == recovered.results


async def test_a_state_resumed_after_recover_moved_the_run_on_is_refused(store: Store, tmp_path: Path) -> None:
    # The run's first state, and the state recover gives for the same interruption: the person decides on
    # the second, the run moves on; deciding on the first afterwards is refused, nothing written or run.
    world = tmp_path / "world"
    world.mkdir()
    async with store.open() as journal:
        ex = executor(journal)
        stale = (await ex.run([TURN[0]], run_id="both", context=str(world))).state
        current = (await ex.recover("both", context=str(world))).state
        assert stale is not None and current is not None
        current.approve("p1")
        assert [r.output for r in (await ex.resume(current, context=str(world))).results] == ["paid 1"]
        before = calls_as_journaled(await journal.load("both"))
        stale.reject("p1")
        with pytest.raises(ts.StateError, match="answered already"):
            await ex.resume(stale, context=str(world))
        assert calls_as_journaled(await journal.load("both")) == before == [("p1", "finished")]
    assert runs(world) == ["p1"]


async def test_a_completion_while_a_resume_holds_the_run_is_refused_then_lands_once_it_stops(
    store: Store, tmp_path: Path
) -> None:
    world = tmp_path / "world"
    world.mkdir()
    entered, leave = anyio.Event(), anyio.Event()

    @ts.tool(needs_approval=True)
    async def pack(order: str) -> str:
        """Packs an order (asks first; waits to be let go)."""
        entered.set()
        await leave.wait()
        return f"packed {order}"

    async with store.open() as journal, store.open() as webhook_journal:
        ex = ts.Executor([pack, confirm], journal=journal)
        webhook = executor(webhook_journal)
        calls = [ts.ToolCall("k1", "pack", {"order": "A-1"}), TURN[1]]
        outcome = await ex.run(calls, run_id="held", context=str(world))
        state = outcome.state
        assert state is not None
        state.approve("k1")
        resumed: list[ts.Outcome] = []

        async def resume() -> None:
            resumed.append(await ex.resume(state, context=str(world)))

        async with anyio.create_task_group() as group:
            group.start_soon(resume)
            await entered.wait()
            with pytest.raises(ts.RunClaimedError):
                await webhook.complete("held", "e1", output="too early")
            leave.set()
        assert [p.call_id for p in resumed[0].pending] == ["e1"]
        await webhook.complete("held", "e1", output="confirmed")
        with pytest.raises(ts.StateError, match="answered already"):
            await webhook.complete("held", "e1", output="twice")
        later = resumed[0].state
        assert later is not None
        finished = await ex.resume(later, context=str(world))
    assert [(r.call_id, r.output) for r in finished.results] == [("k1", "packed A-1"), ("e1", "confirmed")]


async def test_an_answer_through_the_journal_is_held_to_its_tool_s_budget_or_refused(store: Store) -> None:
    @ts.tool(external=True, max_result_chars=100)
    def describe(item: str) -> str:
        """Asks a person to describe an item (answered from outside; a short answer)."""

    async with store.open() as journal:
        worker = ts.Executor([describe], journal=journal)
        await worker.run([ts.ToolCall("d1", "describe", {"item": "mug"})], run_id="budget")
        # A webhook built without the tool cannot hold the answer to its budget: refused, nothing written.
        with pytest.raises(ts.OptionError, match="does not have"):
            await ts.Executor([], journal=journal).complete("budget", "d1", output="x" * 100_000)
        assert (await journal.load("budget")).call("d1").result is None
        await ts.Executor([describe], journal=journal).complete("budget", "d1", output="x" * 100_000)
        recovered = await worker.recover("budget")
    (result,) = recovered.results
    assert result.truncated and len(str(result.output)) < 1000


@pytest.mark.parametrize("point", ["writing started e1", "wrote started e1", "writing started e2", "wrote started e2"])
async def test_a_run_killed_while_it_hands_out_hands_each_call_out_once(
    store: Store, anyio_backend: str, tmp_path: Path, point: str
) -> None:
    # SIGKILL just before or just after the journal writes a hand-out. Recover hands out what was not
    # journaled and finds the rest waiting: each call handed out once, under the key it always has.
    world = tmp_path / "world"
    world.mkdir()
    await kill_at(store, anyio_backend, ["handout", "handing", str(world), point], point)
    async with store.open() as journal:
        recovered = await executor(journal).recover("handing", context=str(world), force=True)
        record = await journal.load("handing")
    assert [(p.call_id, p.idempotency_key) for p in recovered.pending if isinstance(p, ts.ExternalCall)] == [
        (call_id, idempotency_key("handing", call_id)) for call_id in ("e1", "e2")
    ]
    assert [(entry.call_id, entry.state, entry.starts) for entry in record.calls] == [
        ("e1", "started", 1),
        ("e2", "started", 1),
    ]


@pytest.mark.parametrize("point", ["writing finished e1", "wrote finished e1"])
async def test_a_resume_killed_while_it_delivers_an_answer_delivers_it_once(
    store: Store, anyio_backend: str, tmp_path: Path, point: str
) -> None:
    # The person's answer is on the saved state. The process resuming it is killed just before or just after
    # the journal writes the answer. The saved state resumed again delivers it (killed before) or is refused
    # as answered already and recover delivers it (killed after): e1 is answered once, with that answer.
    world = tmp_path / "world"
    world.mkdir()
    saved = tmp_path / "state.json"
    async with store.open() as journal:
        outcome = await executor(journal).run(TURN[1:2], run_id="delivering", context=str(world))
    assert outcome.state is not None
    saved.write_text(outcome.state.to_json())
    decisions = json.dumps({"e1": ["complete", "confirmed"]})
    await kill_at(store, anyio_backend, ["resume", str(saved), str(world), decisions, point], point)
    again = ts.RunState.from_json(saved.read_text())
    again.complete("e1", output="confirmed")
    async with store.open() as journal:
        ex = executor(journal)
        if point.startswith("writing"):
            finished = await ex.resume(again, context=str(world))
        else:
            with pytest.raises(ts.StateError, match="answered already"):
                await ex.resume(again, context=str(world))
            finished = await ex.recover("delivering", context=str(world), force=True)
        record = await journal.load("delivering")
    assert [(r.call_id, r.output) for r in finished.results] == [("e1", "confirmed")]
    assert record.complete and record.call("e1").starts == 1
