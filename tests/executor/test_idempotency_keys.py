"""``ctx.idempotency_key``: the same for every attempt of one call, different for every other call."""

from __future__ import annotations

import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import toolsched as ts
from toolsched._policy.runstate import run_identity
from toolsched._values.effects import idempotency_key

pytestmark = pytest.mark.anyio


class Keys:
    """Tools that record the key each run of each call sent, by call ID."""

    def __init__(self) -> None:
        self.sent: defaultdict[str, list[str]] = defaultdict(list)
        self.checked: defaultdict[str, list[str]] = defaultdict(list)
        sent, checked = self.sent, self.checked
        self.failures = 0

        @ts.tool(idempotent=True, retry=ts.Retry(attempts=3, backoff=0.001, max_backoff=0.002))
        async def post(body: str, ctx: ts.ToolContext) -> str:
            sent[ctx.call_id].append(ctx.idempotency_key)
            if len(sent[ctx.call_id]) < 3:
                raise ts.Transient("busy")
            return f"posted {body}"

        class Pay(ts.Tool):
            name = "pay"
            description = "Pays (asks first)."
            input_schema = {"type": "object", "properties": {"amount": {"type": "integer"}}}
            needs_approval = True

            async def validate_input(self, args: Any, ctx: ts.ToolContext) -> None:
                checked[ctx.call_id].append(ctx.idempotency_key)

            async def call(self, args: Any, ctx: ts.ToolContext) -> str:
                sent[ctx.call_id].append(ctx.idempotency_key)
                return f"paid {args['amount']}"

        @ts.tool
        def sync_send(text: str, ctx: ts.ToolContext) -> str:
            sent[ctx.call_id].append(ctx.idempotency_key)
            return text

        self.tools = [post, Pay(), sync_send]


def is_key(text: str) -> bool:
    return str(uuid.UUID(text)) == text


async def test_every_attempt_of_a_retried_call_sends_the_same_key() -> None:
    keys = Keys()
    outcome = await ts.Executor(keys.tools).run(
        [ts.ToolCall("c1", "post", {"body": "a"}), ts.ToolCall("c2", "post", {"body": "b"})]
    )
    assert [r.attempts for r in outcome.results] == [3, 3]
    assert len(set(keys.sent["c1"])) == 1 and len(set(keys.sent["c2"])) == 1
    assert keys.sent["c1"][0] != keys.sent["c2"][0]
    assert is_key(keys.sent["c1"][0])


async def test_the_same_call_id_in_another_run_sends_another_key() -> None:
    keys = Keys()
    executor = ts.Executor(keys.tools)
    for run_id in (None, None, "named", "named"):
        await executor.run([ts.ToolCall("c1", "sync_send", {"text": "x"})], run_id=run_id)
    # Without a journal a run ID names a run for cancel(); it does not make two runs one.
    assert len(set(keys.sent["c1"])) == 4


async def test_a_resumed_call_sends_the_key_it_was_checked_with(tmp_path: Path) -> None:
    keys = Keys()
    executor = ts.Executor(keys.tools)
    outcome = await executor.run(
        [ts.ToolCall("p1", "pay", {"amount": 3}), ts.ToolCall("s1", "sync_send", {"text": "t"})]
    )
    state = outcome.state
    assert state is not None
    # Carried in the state, through JSON too: the run resumed in another process has the same identity.
    resumed = ts.RunState.from_json(state.to_json())
    resumed.approve("p1")
    await executor.resume(resumed)
    assert keys.sent["p1"] == keys.checked["p1"][:1] and len(keys.checked["p1"]) == 2
    assert len(set(keys.checked["p1"])) == 1
    assert keys.sent["s1"][0] != keys.sent["p1"][0]


async def test_a_streamed_turn_gives_each_call_its_own_key() -> None:
    keys = Keys()
    executor = ts.Executor(keys.tools)
    async with executor.turn() as turn:
        turn.submit(ts.ToolCall("a", "sync_send", {"text": "1"}))
        turn.submit(ts.ToolCall("b", "sync_send", {"text": "2"}))
        turn.close()
        await turn.outcome()
    assert keys.sent["a"] != keys.sent["b"] and all(is_key(key) for key in keys.sent["a"] + keys.sent["b"])


async def test_a_journaled_run_s_keys_come_from_its_run_id(tmp_path: Path) -> None:
    keys = Keys()
    async with ts.SqliteJournal(tmp_path / "runs.db") as journal:
        executor = ts.Executor(keys.tools, journal=journal)
        await executor.run([ts.ToolCall("c1", "sync_send", {"text": "x"})], run_id="r1")
    async with ts.SqliteJournal(tmp_path / "other.db") as journal:
        await ts.Executor(keys.tools, journal=journal).run([ts.ToolCall("c1", "sync_send", {"text": "x"})], run_id="r1")
        await ts.Executor(keys.tools, journal=journal).run([ts.ToolCall("c1", "sync_send", {"text": "x"})], run_id="r2")
    first, same_run_id, other = keys.sent["c1"]
    assert first == same_run_id != other


async def test_the_calls_of_nested_runs_get_keys_of_their_own_kept_across_a_resume() -> None:
    seen: defaultdict[str, list[str]] = defaultdict(list)

    @ts.tool
    async def fetch(url: str, ctx: ts.ToolContext) -> str:
        seen[f"fetch {url}"].append(ctx.idempotency_key)
        return url

    @ts.tool(needs_approval=True)
    async def delete(path: str, ctx: ts.ToolContext) -> str:
        seen[f"delete {path}"].append(ctx.idempotency_key)
        return path

    child = ts.Executor([fetch, delete])

    @ts.agent_tool(child)
    async def tidy(site: str, child: ts.ChildRun) -> str:
        seen[f"tidy {site}"].append(child.ctx.idempotency_key)
        await child.run([ts.ToolCall("f1", "fetch", {"url": site})])
        await child.run([ts.ToolCall("f1", "fetch", {"url": f"{site}/again"})])
        await child.run([ts.ToolCall("d1", "delete", {"path": site})])
        return "tidied"

    executor = ts.Executor([tidy])
    outcome = await executor.run([ts.ToolCall("p1", "tidy", {"site": "a"}), ts.ToolCall("p2", "tidy", {"site": "b"})])
    state = outcome.state
    assert state is not None
    for request in outcome.pending:
        state.approve(request.call_id)
    # The approvals are carried into a state loaded from JSON: the nested runs resume in "another process".
    finished = await executor.resume(ts.RunState.from_json(state.to_json()))
    assert [r.output for r in finished.results] == ["tidied", "tidied"]
    # Each parent call kept its key across the resume (its body ran twice).
    assert all(len(seen[f"tidy {site}"]) == 2 and len(set(seen[f"tidy {site}"])) == 1 for site in "ab")
    every = [keys[0] for keys in seen.values()]
    # The same child call ID in two child turns, and in two parent calls: every key differs.
    assert len(set(every)) == len(every) == 8


async def test_calls_in_worker_threads_derive_their_keys_from_the_run_the_state_carries() -> None:
    """Sync tools ask for their keys from worker threads at once: the run's identity is chosen once, so the
    state a held call resumes from derives the keys the threads sent."""
    keys = Keys()

    @ts.tool(needs_approval=True)
    async def hold(reason: str) -> str:
        return reason

    calls = [ts.ToolCall(f"s{i}", "sync_send", {"text": str(i)}) for i in range(16)]
    executor = ts.Executor([*keys.tools, hold], strategy=ts.Parallel())
    outcome = await executor.run([*calls, ts.ToolCall("h1", "hold", {"reason": "wait"})])
    state = outcome.state
    assert state is not None
    identity = run_identity(state)
    assert all(keys.sent[call.id] == [idempotency_key(identity, call.id)] for call in calls)
