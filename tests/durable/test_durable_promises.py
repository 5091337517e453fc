"""Durable runs keep their promises under awkward outputs and copies: an output the journal
cannot store is that call's error (journaled as finished), never a raw exception with the call
left 'started'."""

from __future__ import annotations

import functools
import os
import signal
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import anyio
import psycopg
import pytest
from crashes import orphan_holder
from journal_child import Store
from psycopg import sql

import toolsched as ts

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        yield Store("sqlite", path=str(tmp_path / "journal.db"))
        return
    dsn = os.environ.get("TOOLSCHED_TEST_POSTGRES_DSN")
    if not dsn:
        pytest.fail("TOOLSCHED_TEST_POSTGRES_DSN is not set: run the tests through `make test`")
    schema = f"promises_{uuid4().hex[:12]}"
    yield Store("postgres", dsn=dsn, schema=schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def wait_for_file(path: Path) -> None:
    """Polls for a file another process writes (no event crosses processes)."""
    for _ in range(600):
        if await anyio.Path(path).exists():
            return
        await anyio.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def looped() -> list[Any]:
    value: list[Any] = []
    value.append(value)
    return value


@pytest.mark.parametrize("make", [looped, lambda: {(1, 2): "tuple key"}], ids=["circular", "tuple-key"])
async def test_an_output_the_journal_cannot_store_is_that_call_s_error(store: Store, make: Any) -> None:
    ran: list[str] = []

    @ts.tool(concurrency_safe=True)
    async def odd() -> object:
        ran.append("odd")
        return make()

    @ts.tool(concurrency_safe=True)
    async def fine(n: int) -> int:
        ran.append(f"fine {n}")
        return n

    async with store.open() as journal:
        executor = ts.Executor([odd, fine], journal=journal)
        outcome = await executor.run(
            [ts.ToolCall("f1", "fine", {"n": 1}), ts.ToolCall("o", "odd"), ts.ToolCall("f2", "fine", {"n": 2})],
            run_id="r1",
        )
        by_id = {result.call_id: result for result in outcome.results}
        assert by_id["o"].error_kind == "execution_error"
        assert "cannot be journaled" in (by_id["o"].error or "")
        assert by_id["f1"].output == 1 and by_id["f2"].output == 2
        record = await journal.load("r1")
        assert [entry.state for entry in record.calls] == ["finished", "finished", "finished"]
        # Recovering the finished run runs nothing again and answers the same.
        again = await executor.recover("r1")
        assert [r.error_kind for r in again.results] == [r.error_kind for r in outcome.results]
    assert sorted(ran) == ["fine 1", "fine 2", "odd"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_output_larger_than_the_journal_stores_is_that_call_s_error(store: Store) -> None:
    """An output of 2**30 characters (a tool whose result budget lets it through) is more than either journal
    stores in one row. SQLite's refusal ("string or blob too big") was reported as ``JournalCorruptError``, "the
    journal is damaged", and the run failed with the call left started; now the call is an
    ``execution_error`` saying why, journaled as finished, and the turn's other calls are unaffected."""
    ran: list[str] = []

    @ts.tool(max_result_chars=2**31)
    async def dump() -> str:
        ran.append("dump")
        return "x" * 2**30

    @ts.tool
    async def fine(n: int) -> int:
        ran.append(f"fine {n}")
        return n

    async with store.open() as journal:
        executor = ts.Executor([dump, fine], journal=journal)
        outcome = await executor.run([ts.ToolCall("d", "dump"), ts.ToolCall("f", "fine", {"n": 1})], run_id="big")
        dumped, fine_result = outcome.results
        assert dumped.error_kind == "execution_error" and dumped.output is None
        assert "cannot be journaled" in (dumped.error or "") and "characters" in (dumped.error or "")
        assert fine_result.output == 1
        again = await executor.recover("big")
        assert [result.error for result in again.results] == [dumped.error, None]
    assert ran == ["dump", "fine 1"]


@pytest.mark.parametrize(
    "bad",
    [{"key": {1: "int key", "text": "text key"}}, {"number": 10**5000}, {"when": object()}],
    ids=["mixed-keys", "past-4300-digits", "object"],
)
async def test_arguments_the_journal_cannot_store_answer_that_call_invalid_input(
    store: Store, bad: dict[str, Any]
) -> None:
    """Promise: a journaled run answers every call as an unjournaled one does. Arguments a journal cannot store
    (a key that is not text beside text keys, an integer past Python's 4,300 digits) made the journaled run
    raise ``JournalError`` where the unjournaled run answers that call ``invalid_input``; now it answers it the
    same, nothing run, the turn's other calls unaffected, and the journal holds a finished run a recovery reads."""
    ran: list[str] = []

    @ts.tool(concurrency_safe=True)
    async def take(key: object = None, number: object = None, when: object = None) -> str:
        ran.append("take")
        return "taken"

    @ts.tool(concurrency_safe=True)
    async def fine(n: int) -> int:
        ran.append(f"fine {n}")
        return n

    def turn() -> list[ts.ToolCall]:
        return [ts.ToolCall("f1", "fine", {"n": 1}), ts.ToolCall("b", "take", bad), ts.ToolCall("f2", "fine", {"n": 2})]

    def answers(outcome: ts.Outcome) -> list[tuple[Any, ...]]:
        return [(r.call_id, r.output, r.error_kind, r.error) for r in outcome.results]

    unjournaled = answers(await ts.Executor([take, fine]).run(turn()))
    assert unjournaled[1][2] == "invalid_input"
    ran.clear()
    async with store.open() as journal:
        executor = ts.Executor([take, fine], journal=journal)
        outcome = await executor.run(turn(), run_id="r1")
        assert answers(outcome) == unjournaled
        assert sorted(ran) == ["fine 1", "fine 2"]
        record = await journal.load("r1")
        assert [entry.state for entry in record.calls] == ["finished", "finished", "finished"]
        again = await executor.recover("r1")
        assert answers(again) == unjournaled
        assert sorted(ran) == ["fine 1", "fine 2"]
        # A run that stopped after its calls were journaled, before any was answered: its recovery answers the
        # call invalid_input too (the journal's stand-in for the arguments is text that is not JSON).
        from toolsched._executor.durable import journaled_calls

        assert journaled_calls([ts.ToolCall("f1", "fine", {"n": 1})]) is None
        stored = journaled_calls(turn())
        assert stored is not None
        await journal.begin_run("r2", stored)
        recovered = answers(await executor.recover("r2"))
        assert [answer[:3] for answer in recovered] == [("f1", 1, None), ("b", None, "invalid_input"), ("f2", 2, None)]
        assert "not valid JSON" in recovered[1][3]
        assert sorted(ran) == ["fine 1", "fine 1", "fine 2", "fine 2"]
        # A streamed turn journals each call as it arrives: the same answer.
        ran.clear()
        async with executor.turn(run_id="s1") as streamed:
            for call in turn():
                streamed.submit(call)
            streamed.close()
            assert answers(await streamed.outcome()) == unjournaled
        assert sorted(ran) == ["fine 1", "fine 2"]
        assert answers(await executor.recover("s1")) == unjournaled


async def test_recover_of_a_run_still_running_here_is_refused(store: Store) -> None:
    ran: list[str] = []
    started = anyio.Event()

    @ts.tool(idempotent=True)
    async def slow() -> str:
        ran.append("slow")
        started.set()
        await anyio.sleep(0.3)
        return "done"

    async with store.open() as journal:
        executor = ts.Executor([slow], journal=journal)
        outcomes: list[ts.Outcome] = []

        async def run() -> None:
            outcomes.append(await executor.run([ts.ToolCall("s", "slow")], run_id="live"))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await started.wait()
            with pytest.raises(ts.RunClaimedError):
                await executor.recover("live")
            with pytest.raises(ts.RunClaimedError):
                await executor.recover("live", force=True)
        assert outcomes[0].results[0].output == "done"
        assert ran == ["slow"]
        # Once the run is over, recovering it answers from the journal.
        again = await executor.recover("live")
        assert again.results[0].output == "done" and ran == ["slow"]


async def test_the_lease_is_renewed_while_a_long_call_runs(store: Store) -> None:
    ran: list[str] = []
    started = anyio.Event()

    @ts.tool(idempotent=True)
    async def long_call() -> str:
        ran.append("long")
        started.set()
        await anyio.sleep(3.0)
        return "done"

    # A lease of a second: one of 0.3 s lapsed in a fresh-clone make test on 2 busy cores (PostgreSQL), its
    # renewals later than a third of it; what this checks is that renewals go on, not how fast they land.
    async with store.open(lease=1.0) as journal, store.open(lease=1.0) as other_process:
        executor = ts.Executor([long_call], journal=journal)
        elsewhere = ts.Executor([long_call], journal=other_process)
        async with anyio.create_task_group() as group:
            group.start_soon(functools.partial(executor.run, [ts.ToolCall("l", "long_call")], run_id="long"))
            await started.wait()
            await anyio.sleep(2.0)  # twice the lease: without renewal it would have lapsed
            with pytest.raises(ts.RunClaimedError):
                await elsewhere.recover("long")
        assert ran == ["long"]


async def test_a_killed_holder_on_this_host_lets_go_at_once(tmp_path: Path) -> None:
    # A child process begins a run with a long lease and is killed with SIGKILL in the middle of a call.
    path = tmp_path / "journal.db"
    marker = tmp_path / "started"
    script = orphan_holder(path, marker)
    process = await anyio.open_process([sys.executable, "-c", script])
    try:
        with anyio.fail_after(30):
            await wait_for_file(marker)
        process.send_signal(signal.SIGKILL)
        await process.wait()
    finally:
        if process.returncode is None:
            process.kill()

    @ts.tool
    async def hang() -> None:
        raise AssertionError("not idempotent: never run again")

    async with ts.SqliteJournal(path, lease=600) as journal:
        # No waiting out the 600 s lease, no force=True: the holder is known to be dead.
        outcome = await ts.Executor([hang], journal=journal).recover("orphan")
    assert outcome.results[0].error_kind == "interrupted"


async def test_an_approved_call_runs_once_across_processes_with_a_journal(tmp_path: Path) -> None:
    # The state of an interrupted journaled run, resumed here and then, from the same text, in
    # another process: the journal refuses the second resume, and the approved call ran once.
    path = tmp_path / "journal.db"
    log = tmp_path / "ran.log"
    tools_source = textwrap.dedent(
        f"""
        import pathlib
        import toolsched as ts

        @ts.tool(needs_approval=True)
        async def pay(amount: int) -> str:
            with open({str(log)!r}, "a") as out:
                out.write(f"paid {{amount}}\\n")
            return "paid"
        """
    )
    namespace: dict[str, Any] = {}
    exec(tools_source, namespace)
    async with ts.SqliteJournal(path) as journal:
        executor = ts.Executor([namespace["pay"]], journal=journal)
        outcome = await executor.run([ts.ToolCall("p", "pay", {"amount": 5})], run_id="pay-run")
        assert outcome.interrupted
        state = outcome.state
        assert state is not None
        state.approve("p")
        text = state.to_json()
        done = await executor.resume(ts.RunState.from_json(text))
        assert done.results[0].output == "paid"
    script = tools_source + textwrap.dedent(
        f"""
        import anyio

        async def main() -> None:
            async with ts.SqliteJournal({str(path)!r}) as journal:
                executor = ts.Executor([pay], journal=journal)
                try:
                    await executor.resume(ts.RunState.from_json({text!r}))
                except ts.ToolschedError as exc:
                    print("refused:", type(exc).__name__)
                else:
                    print("ran again")

        anyio.run(main)
        """
    )
    other = await anyio.run_process([sys.executable, "-c", script], check=False)
    assert other.returncode == 0, other.stderr.decode()
    assert other.stdout.decode().startswith("refused:"), other.stdout.decode()
    assert (await anyio.Path(log).read_text()).splitlines() == ["paid 5"]
