"""External calls of journaled runs: answered from any process through the journal, delivered once, on SQLite
and PostgreSQL; and idempotency keys that are the same in every process."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from effects_child import CHILD, executor
from journal_child import Store, store_in

import toolsched as ts

pytestmark = pytest.mark.anyio

TURN = [
    ts.ToolCall("e1", "confirm", {"order": "A-1"}),
    ts.ToolCall("c1", "charge", {"amount": 10}),
    ts.ToolCall("r1", "refund", {"amount": 5}),
]


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_in(request.param, tmp_path, "external_test")


async def in_child(store: Store | None, backend: str, *args: str) -> str:
    """Runs effects_child with ``args`` in another process; its last line of output."""
    spec = "-" if store is None else store.spec()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*sys.path, os.environ.get("PYTHONPATH", "")])}
    with anyio.fail_after(120):
        done = await anyio.run_process([sys.executable, str(CHILD), spec, backend, *args], env=env, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().splitlines()[-1]


def summary(outcome: ts.Outcome) -> list[tuple[str, Any, str | None]]:
    return [(r.call_id, r.output if not r.is_error else r.error, r.error_kind) for r in outcome.results]


async def test_another_process_completes_an_external_call_and_recover_delivers_it(
    store: Store, anyio_backend: str, tmp_path: Path
) -> None:
    world = str(tmp_path)
    async with store.open() as journal:
        outcome = await executor(journal).run(TURN[:2], run_id="ext", context=world)
        record = await journal.load("ext")
    assert [p.call_id for p in outcome.pending] == ["e1"]
    # Handed out: journaled started, once, with when; the run let go so that anyone may answer it.
    assert (record.call("e1").state, record.call("e1").starts, record.owner) == ("started", 1, None)
    assert await in_child(store, anyio_backend, "complete", "ext", "e1", json.dumps({"ok": True})) == "completed"
    refused = await in_child(store, anyio_backend, "complete", "ext", "e1", json.dumps("twice"))
    assert refused.startswith("refused") and "answered already" in refused
    async with store.open() as journal:
        recovered = await executor(journal).recover("ext", context=world)
        again = await executor(journal).recover("ext", context=world)
        assert (await journal.load("ext")).complete
    assert summary(recovered) == [("e1", {"ok": True}, None), ("c1", "charged 10", None)]
    assert not recovered.interrupted and again.results == recovered.results


async def test_a_completion_through_the_journal_is_refused_for_unknown_or_answered_calls(
    store: Store, tmp_path: Path
) -> None:
    async with store.open() as journal:
        ex = executor(journal)
        outcome = await ex.run(TURN, run_id="refusals", context=str(tmp_path))
        assert [p.call_id for p in outcome.pending] == ["e1", "r1"]
        with pytest.raises(ts.StateError, match="has no such call"):
            await ex.complete("refusals", "nope", output=1)
        with pytest.raises(ts.StateError, match="answered already"):
            await ex.complete("refusals", "c1", output=1)
        with pytest.raises(ts.StateError, match="not a call of an external tool"):
            await ex.fail("refusals", "r1", error="no")
        with pytest.raises(ts.UnknownRunError):
            await ex.complete("no-such-run", "e1", output=1)
        await ex.fail("refusals", "e1", error="the customer declined")
        with pytest.raises(ts.StateError, match="answered already"):
            await ex.complete("refusals", "e1", output=1)
        record = await journal.load("refusals")
    assert record.call("e1").result is not None and record.call("e1").result.error == "the customer declined"
    with pytest.raises(ts.OptionError, match="journal="):
        await executor(None).complete("refusals", "e1", output=1)


async def test_an_answer_in_the_state_and_one_through_the_journal_are_never_both_delivered(
    store: Store, tmp_path: Path
) -> None:
    world = str(tmp_path)
    async with store.open() as journal:
        ex = executor(journal)
        outcome = await ex.run(TURN[:2], run_id="twice", context=world)
        state = outcome.state
        assert state is not None
        state.complete("e1", output="from the state")
        await ex.complete("twice", "e1", output="from the webhook")
        with pytest.raises(ts.StateError, match="answered already"):
            await ex.resume(state, context=world)
        # Refused before anything ran or was written: the journal's answer stands, and the same state (not
        # used up by the refusal) resumes once it no longer answers the call itself.
        recovered = await ex.recover("twice", context=world)
        assert summary(recovered)[0] == ("e1", "from the webhook", None)
        unanswered = outcome.state
        assert unanswered is not None
        assert summary(await ex.resume(unanswered, context=world))[0] == ("e1", "from the webhook", None)


async def test_a_state_resumed_here_and_in_another_process_answers_once(
    store: Store, anyio_backend: str, tmp_path: Path
) -> None:
    world = str(tmp_path)
    async with store.open() as journal:
        outcome = await executor(journal).run(TURN, run_id="copies", context=world)
    state = outcome.state
    assert state is not None
    saved = tmp_path / "state.json"
    saved.write_text(state.to_json())
    state.complete("e1", output="here")
    state.approve("r1")
    async with store.open() as journal:
        finished = await executor(journal).resume(state, context=world)
    assert summary(finished) == [("e1", "here", None), ("c1", "charged 10", None), ("r1", "refunded 5", None)]
    refused = await in_child(store, anyio_backend, "resume", str(saved), world)
    assert refused.startswith("refused") and "answered already" in refused
    async with store.open() as journal:
        assert (await executor(journal).recover("copies", context=world)).results == finished.results
    # The approved call ran once, in this process.
    runs = (tmp_path / "runs.log").read_text().split()
    assert runs.count("r1") == 1


async def test_recover_answers_an_external_call_past_its_deadline_timeout(store: Store) -> None:
    @ts.tool(external=True, timeout=0.05)
    def sign(document: str) -> str:
        """Signed elsewhere."""

    async with store.open() as journal:
        ex = ts.Executor([sign], journal=journal)
        outcome = await ex.run([ts.ToolCall("s1", "sign", {"document": "lease"})], run_id="late")
        assert outcome.interrupted
        await anyio.sleep(0.1)
        recovered = await ex.recover("late")
        with pytest.raises(ts.StateError, match="answered already"):
            await ex.complete("late", "s1", output="signed, too late")
        record = await journal.load("late")
    assert recovered.results[0].error_kind == "timeout"
    assert record.call("s1").result == recovered.results[0]


async def test_keys_of_a_journaled_run_are_the_same_in_another_process(
    store: Store, anyio_backend: str, tmp_path: Path
) -> None:
    async with store.open() as journal:
        outcome = await executor(journal).run(TURN[:1], run_id="keys", context=str(tmp_path))
    (handed,) = outcome.pending
    assert isinstance(handed, ts.ExternalCall)
    line = await in_child(store, anyio_backend, "recover", "keys", str(tmp_path), "-")
    assert json.loads(line.removeprefix("done "))["pending"] == [["e1", handed.idempotency_key]]
    # The same call ID in another run: another key.
    async with store.open() as journal:
        other = await executor(journal).run(TURN[:1], run_id="other-keys", context=str(tmp_path))
    assert other.pending[0].call_id == "e1" and other.pending[0] != handed


async def test_a_journaled_streamed_turn_hands_out_its_external_calls_once(store: Store, tmp_path: Path) -> None:
    world = str(tmp_path)
    async with store.open() as journal:
        ex = executor(journal)
        async with ex.turn(run_id="streamed", context=world) as turn:
            for call in TURN[:2]:
                turn.submit(call)
            turn.close()
            outcome = await turn.outcome()
        assert [p.call_id for p in outcome.pending] == ["e1"]
        await ex.complete("streamed", "e1", output="yes")
        recovered = await ex.recover("streamed", context=world)
        record = await journal.load("streamed")
    assert summary(recovered) == [("e1", "yes", None), ("c1", "charged 10", None)]
    assert record.call("e1").starts == 1 and record.complete
