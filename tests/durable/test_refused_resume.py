"""A resume the journal refuses runs nothing and takes nothing: the person's decisions stay on the state and
on every copy of it, for the resume that is let through. Run IDs of the wrong kind are typed errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio


def _pay(ran: list[int]) -> ts.Tool:
    @ts.tool(needs_approval=True)
    async def pay(amount: int) -> str:
        ran.append(amount)
        return f"paid {amount}"

    return pay


@pytest.mark.parametrize("retry_with", ["the same state", "a copy from JSON"])
async def test_a_resume_refused_while_another_process_holds_the_run_keeps_the_approval(
    tmp_path: Path, retry_with: str
) -> None:
    ran: list[int] = []
    path = tmp_path / "runs.db"
    async with ts.SqliteJournal(path) as ours, ts.SqliteJournal(path) as theirs:
        executor = ts.Executor([_pay(ran)], journal=ours)
        first = await executor.run([ts.ToolCall("p1", "pay", {"amount": 5})], run_id="R")
        assert first.state is not None
        state = first.state
        state.approve("p1")
        text = state.to_json()
        await theirs.claim("R")  # another process recovers R right now
        with pytest.raises(ts.RunClaimedError):
            await executor.resume(state)
        assert ran == []
        await theirs.release("R")
        again = state if retry_with == "the same state" else ts.RunState.from_json(text)
        outcome = await executor.resume(again)
        assert [(result.output, result.error_kind) for result in outcome.results] == [("paid 5", None)]
        # Resumed once: every other copy is refused from now on, and nothing runs twice.
        with pytest.raises(ts.StateError):
            await executor.resume(ts.RunState.from_json(text))
    assert ran == [5]


@pytest.mark.parametrize("run_id", [["a"], {"a": 1}, 123, "", None.__class__])
async def test_a_run_id_of_the_wrong_kind_is_a_typed_error(tmp_path: Path, run_id: Any) -> None:
    ran: list[int] = []
    calls = [ts.ToolCall("p1", "pay", {"amount": 5})]
    with pytest.raises(ts.OptionError, match="run_id"):
        await ts.Executor([_pay(ran)]).run(calls, run_id=run_id)
    async with ts.SqliteJournal(tmp_path / "runs.db") as journal:
        executor = ts.Executor([_pay(ran)], journal=journal)
        with pytest.raises(ts.OptionError, match="run_id"):
            await executor.run(calls, run_id=run_id)
        with pytest.raises(ts.JournalError, match="run_id"):
            await executor.recover(run_id)
    assert ran == []
