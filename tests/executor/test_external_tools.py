"""External tools: validated, permitted and scheduled, then handed out; answered from outside, in model order, once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest
from effects_child import CHILD
from recorded import Recorded

import toolsched as ts
from toolsched._policy.runstate import run_identity
from toolsched._values.effects import idempotency_key
from toolsched.loops import anthropic_loop

pytestmark = pytest.mark.anyio


class Shop:
    """A read tool, a tool that asks first, and an external tool whose calls count how often anything ran them."""

    def __init__(self, timeout: float | None = None) -> None:
        self.ran: Counter[str] = Counter()
        ran = self.ran

        @ts.tool(read_only=True, concurrency_safe=True)
        async def look(item: str, ctx: ts.ToolContext) -> str:
            """Looks at an item."""
            ran[ctx.call_id] += 1
            return f"saw {item}"

        @ts.tool(needs_approval=True)
        async def remove(item: str, ctx: ts.ToolContext) -> str:
            """Removes an item (asks first)."""
            ran[ctx.call_id] += 1
            return f"removed {item}"

        @ts.tool(external=True, timeout=timeout, rule_subject="order")
        def confirm(order: str, quantity: int = 1) -> str:
            """Asks the customer to confirm an order (answered from outside)."""
            ran["confirm body"] += 1
            raise AssertionError("an external tool is never run")

        self.tools = [look, remove, confirm]

    def executor(self, **options: Any) -> ts.Executor:
        return ts.Executor(self.tools, **options)


TURN = [
    ts.ToolCall("c1", "look", {"item": "a"}),
    ts.ToolCall("c2", "confirm", {"order": "A-1"}),
    ts.ToolCall("c3", "look", {"item": "b"}),
]


def summary(outcome: ts.Outcome) -> list[tuple[str, Any, str | None]]:
    return [(r.call_id, r.output if not r.is_error else r.error, r.error_kind) for r in outcome.results]


def is_key(text: str) -> bool:
    return uuid.UUID(text).version == 8 and str(uuid.UUID(text)) == text


async def test_an_external_call_is_handed_out_and_its_answer_delivered_in_model_order() -> None:
    shop = Shop()
    executor = shop.executor()
    outcome = await executor.run(TURN)
    assert outcome.interrupted
    assert summary(outcome) == [("c1", "saw a", None), ("c3", "saw b", None)]
    (handed,) = outcome.pending
    assert isinstance(handed, ts.ExternalCall)
    assert (handed.call_id, handed.tool_name, dict(handed.args)) == ("c2", "confirm", {"order": "A-1"})
    assert is_key(handed.idempotency_key)
    state = outcome.state
    assert state is not None and state.decisions == {"c1": "done", "c2": "external", "c3": "done"}
    state.complete("c2", output={"confirmed": True})
    assert state.decisions["c2"] == "completed" and state.pending == []
    finished = await executor.resume(state)
    assert not finished.interrupted and finished.pending == []
    assert summary(finished) == [("c1", "saw a", None), ("c2", {"confirmed": True}, None), ("c3", "saw b", None)]
    assert finished.results[1].tool_name == "confirm" and finished.results[1].attempts == 1
    assert shop.ran == Counter({"c1": 1, "c3": 1})


async def test_a_failed_external_call_is_an_execution_error_with_the_message() -> None:
    shop = Shop()
    outcome = await shop.executor().run(TURN)
    state = outcome.state
    assert state is not None
    state.fail("c2", error="the customer declined")
    finished = await shop.executor().resume(state)
    assert finished.results[1].error_kind == "execution_error"
    assert finished.results[1].error == "the customer declined"
    with pytest.raises(TypeError, match="must be a string"):
        (await shop.executor().run(TURN)).state.fail("c2", error=None)  # type: ignore[arg-type, union-attr]


async def test_an_external_answer_is_held_to_its_tool_s_budget() -> None:
    @ts.tool(external=True, max_result_chars=50)
    def fetch_report(name: str) -> str:
        """A report produced elsewhere."""

    executor = ts.Executor([fetch_report])
    state = (await executor.run([ts.ToolCall("r1", "fetch_report", {"name": "q3"})])).state
    assert state is not None
    state.complete("r1", output="y" * 1000)
    result = (await executor.resume(state)).results[0]
    assert result.truncated and len(result.output) < 1000


async def test_external_calls_are_validated_and_permitted_before_they_are_handed_out() -> None:
    rules = ts.Permissions(deny=["confirm(VIP-*)"])
    guard = ts.Executor(
        Shop().tools,
        permissions=rules,
        input_guardrails=[lambda event: ts.Reject("no bulk orders") if event.args.get("quantity", 1) > 10 else None],
    )
    outcome = await guard.run(
        [
            ts.ToolCall("bad", "confirm", {"order": 7}),
            ts.ToolCall("vip", "confirm", {"order": "VIP-1"}),
            ts.ToolCall("bulk", "confirm", {"order": "B-1", "quantity": 50}),
            ts.ToolCall("ok", "confirm", {"order": "A-1"}),
        ]
    )
    kinds = {r.call_id: r.error_kind for r in outcome.results}
    assert kinds == {"bad": "invalid_input", "vip": "permission_denied", "bulk": "guardrail_rejected"}
    assert [p.call_id for p in outcome.pending] == ["ok"]


async def test_an_external_call_and_an_approval_in_the_same_turn() -> None:
    shop = Shop()
    executor = shop.executor()
    turn = [*TURN, ts.ToolCall("c4", "remove", {"item": "c"}), ts.ToolCall("c5", "confirm", {"order": "A-2"})]
    outcome = await executor.run(turn)
    assert [(type(p).__name__, p.call_id) for p in outcome.pending] == [
        ("ExternalCall", "c2"),
        ("ApprovalRequest", "c4"),
        ("ExternalCall", "c5"),
    ]
    keys = {p.call_id: p.idempotency_key for p in outcome.pending if isinstance(p, ts.ExternalCall)}
    # Approving alone: the approved call runs, the external calls still wait, with the same keys.
    state = outcome.state
    assert state is not None
    state.approve("c4")
    with pytest.raises(ts.ApprovalError, match="complete\\(\\) or fail\\(\\)"):
        state.approve("c2")
    second = await executor.resume(state)
    assert second.interrupted and shop.ran["c4"] == 1
    assert [(p.call_id, getattr(p, "idempotency_key", None)) for p in second.pending] == [
        ("c2", keys["c2"]),
        ("c5", keys["c5"]),
    ]
    # Answering one of them: it is delivered, the other still waits.
    state = second.state
    assert state is not None
    state.complete("c5", output="yes")
    third = await executor.resume(state)
    assert [p.call_id for p in third.pending] == ["c2"]
    assert summary(third)[-1] == ("c5", "yes", None)
    state = third.state
    assert state is not None
    state.complete("c2", output="yes too")
    done = await executor.resume(state)
    assert [r.call_id for r in done.results] == ["c1", "c2", "c3", "c4", "c5"]
    assert shop.ran == Counter({"c1": 1, "c3": 1, "c4": 1})


async def test_a_state_copied_and_resumed_twice_never_answers_or_runs_anything_twice() -> None:
    shop = Shop()
    executor = shop.executor()
    outcome = await executor.run([*TURN, ts.ToolCall("c4", "remove", {"item": "c"})])
    first, second = outcome.state, outcome.state
    assert first is not None and second is not None
    text = first.to_json()
    for state, answer in ((first, "first"), (second, "second")):
        state.complete("c2", output=answer)
        state.approve("c4")
    finished = await executor.resume(first)
    assert summary(finished)[1] == ("c2", "first", None)
    for again in (second, ts.RunState.from_json(text), ts.RunState.from_json(text)):
        with pytest.raises(ts.StateError, match="already resumed"):
            await executor.resume(again)
    with pytest.raises(ts.StateError, match="already resumed"):
        first.complete("c2", output="late")
    assert shop.ran == Counter({"c1": 1, "c3": 1, "c4": 1})


async def test_a_completion_for_an_unknown_or_answered_call_is_refused() -> None:
    outcome = await Shop().executor().run([*TURN, ts.ToolCall("c4", "remove", {"item": "c"})])
    state = outcome.state
    assert state is not None
    with pytest.raises(ts.StateError, match="no such call \\(external calls waiting: 'c2'\\)"):
        state.complete("nope", output=1)
    with pytest.raises(ts.StateError, match="answered already"):
        state.complete("c1", output=1)  # it ran and was answered in the first run
    with pytest.raises(ts.StateError, match="not a call of an external tool"):
        state.complete("c4", output=1)  # it waits for a person, not for an answer
    state.complete("c2", output="yes")
    with pytest.raises(ts.StateError, match="answered already"):
        state.complete("c2", output="again")
    with pytest.raises(ts.StateError, match="answered already"):
        state.fail("c2", error="again")
    with pytest.raises(TypeError, match="call ID string"):
        state.complete(2, output=1)  # type: ignore[arg-type]


async def test_an_external_call_past_its_timeout_is_answered_timeout_on_resume() -> None:
    shop = Shop(timeout=0.05)
    executor = shop.executor()
    outcome = await executor.run(TURN)
    state = outcome.state
    assert state is not None
    await anyio.sleep(0.1)
    finished = await executor.resume(state)
    assert not finished.interrupted
    assert finished.results[1].error_kind == "timeout"
    assert "no answer within 0.05 seconds" in (finished.results[1].error or "")


async def test_an_external_call_within_its_timeout_still_waits_on_resume() -> None:
    shop = Shop(timeout=3600)
    executor = shop.executor()
    outcome = await executor.run(TURN)
    key = outcome.pending[0]
    state = outcome.state
    assert state is not None
    again = await executor.resume(state)
    assert again.interrupted and again.pending == [key]
    assert summary(again) == summary(outcome)


async def test_a_state_with_an_external_call_round_trips_through_json_and_keeps_its_key() -> None:
    shop = Shop()
    outcome = await shop.executor().run(TURN)
    state = outcome.state
    assert state is not None
    loaded = ts.RunState.from_json(state.to_json(key="k"), key="k")
    assert loaded.pending == outcome.pending
    loaded.complete("c2", output=[1, 2])
    saved = loaded.to_json()
    assert ts.RunState.from_json(saved).decisions["c2"] == "completed"
    body = json.loads(saved)
    body["calls"][1]["external"] = {"handed_out": "yesterday"}
    body.pop("seal")
    with pytest.raises(ts.StateError):
        ts.RunState.from_json(json.dumps(body))
    finished = await shop.executor().resume(ts.RunState.from_json(saved))
    assert finished.results[1].output == [1, 2]


def test_external_keys_and_answers_cross_processes(tmp_path: Path, anyio_backend: str) -> None:
    """A state saved here is answered and resumed in another process: the keys there are the keys here."""

    async def first() -> ts.Outcome:
        from effects_child import executor

        return await executor(None).run(
            [ts.ToolCall("e1", "confirm", {"order": "A-1"}), ts.ToolCall("e2", "refund", {"amount": 5})],
            context=str(tmp_path),
        )

    outcome = anyio.run(first, backend=anyio_backend)
    state = outcome.state
    assert state is not None
    state_file = tmp_path / "state.json"
    state_file.write_text(state.to_json())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*sys.path, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(CHILD), "-", anyio_backend, "resume", str(state_file), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    resumed = json.loads(done.stdout)
    key = outcome.pending[0]
    assert isinstance(key, ts.ExternalCall)
    assert resumed["results"][0] == ["e1", f"confirmed with {key.idempotency_key}", None]
    assert resumed["results"][1] == ["e2", "refunded 5", None]
    # The approved call ran there with the key of this run: derived from the identity the state carried.
    (ran,) = (line.split() for line in (tmp_path / "runs.log").read_text().splitlines())
    assert ran == ["e2", idempotency_key(run_identity(state), "e2")]
    assert ran[1] != key.idempotency_key


async def test_a_streamed_turn_hands_out_its_external_calls() -> None:
    shop = Shop()
    executor = shop.executor()
    events = [event async for event in executor.stream(TURN)]
    finished = events[-1]
    assert isinstance(finished, ts.RunFinished)
    assert finished.outcome.interrupted and [p.call_id for p in finished.outcome.pending] == ["c2"]
    assert not any(isinstance(e, ts.ToolStarted) and e.call_id == "c2" and e.ran for e in events)

    async def arriving() -> Any:
        for call in TURN:
            await anyio.sleep(0.001)
            yield call

    async with executor.turn() as turn:
        for call in TURN:
            turn.submit(call)
        turn.close()
        given = [result.call_id async for result in turn.results()]
        streamed = await turn.outcome()
    # Results come out in model order up to the call that waits for its answer.
    assert given == ["c1"]
    assert [p.call_id for p in streamed.pending] == ["c2"] and summary(streamed) == summary(finished.outcome)
    state = streamed.state
    assert state is not None
    state.complete("c2", output="yes")
    assert summary(await executor.resume(state))[1] == ("c2", "yes", None)
    via_iterable = await executor.run(arriving())
    assert [p.call_id for p in via_iterable.pending] == ["c2"]
    assert shop.ran["confirm body"] == 0


async def test_an_external_call_of_a_nested_run_is_answered_under_its_prefixed_id() -> None:
    @ts.tool(external=True)
    def sign(document: str) -> str:
        """Asks a person to sign a document elsewhere."""

    child = ts.Executor([sign])
    bodies: Counter[str] = Counter()

    @ts.agent_tool(child)
    async def paperwork(document: str, child: ts.ChildRun) -> str:
        bodies["paperwork"] += 1
        signed = await child.run([ts.ToolCall("s1", "sign", {"document": document})])
        return f"filed {signed.results[0].output}"

    @ts.agent_tool(child)
    async def twin(document: str, child: ts.ChildRun) -> str:
        signed = await child.run([ts.ToolCall("s1", "sign", {"document": document})])
        return f"twin {signed.results[0].output}"

    executor = ts.Executor([paperwork, twin])
    outcome = await executor.run(
        [ts.ToolCall("p1", "paperwork", {"document": "lease"}), ts.ToolCall("p2", "twin", {"document": "lease"})]
    )
    first, second = outcome.pending
    assert isinstance(first, ts.ExternalCall) and isinstance(second, ts.ExternalCall)
    assert (first.call_id, first.parent_call_id, second.call_id) == ("p1/s1", "p1", "p2/s1")
    # The same child call ID under two parent calls: two keys.
    assert first.idempotency_key != second.idempotency_key
    state = outcome.state
    assert state is not None
    state.complete("p1/s1", output="signed")
    with pytest.raises(ts.StateError, match="answered already"):
        state.complete("p1/s1", output="twice")
    second_leg = await executor.resume(state)
    assert summary(second_leg) == [("p1", "filed signed", None)]
    # The nested call still waiting keeps its key.
    assert second_leg.pending == [second]
    assert bodies["paperwork"] == 2


def test_an_external_tool_refuses_what_shapes_a_body() -> None:
    for options in (
        {"retry": ts.Retry(), "idempotent": True},
        {"rate_limit": ts.RateLimit(1, per=1)},
        {"max_concurrency": 2},
        {"isolation": "process"},
        {"backend": "ray"},
        {"reconcile": lambda args, ctx: None},
    ):

        @ts.tool(external=True, **options)
        def approve(order: str) -> str:
            """Answered from outside."""

        with pytest.raises(ts.ToolDefinitionError, match="external tool"):
            ts.ToolRegistry([approve])
    with pytest.raises(ts.ToolDefinitionError, match="external must be True or False"):
        ts.ToolRegistry([ts.tool(external="yes")(lambda order: None)])  # type: ignore[arg-type]


async def test_an_external_tool_class_needs_no_call_method() -> None:
    class Confirm(ts.Tool):
        name = "confirm"
        description = "Answered from outside."
        input_schema = {"type": "object", "properties": {"order": {"type": "string"}}}
        external = True

    outcome = await ts.Executor([Confirm()]).run([ts.ToolCall("x1", "confirm", {"order": "A"})])
    assert [p.call_id for p in outcome.pending] == ["x1"]


# -- loops ------------------------------------------------------------------------------------------


def weather_tools(ask_for: str | None) -> list[ts.Tool]:
    @ts.tool(external=True, needs_approval=lambda args: args["city"] == ask_for)
    def get_weather(city: str, unit: Literal["c", "f"] = "c") -> str:
        """Current weather for a city (read by a station elsewhere)."""

    return [get_weather]


async def test_a_loop_stops_with_external_and_resumes_once_answered() -> None:
    recorded = Recorded("anthropic", "tool_use", "end_turn")
    client = recorded.anthropic()
    options: dict[str, Any] = {"model": "claude-sonnet-4-6", "max_tokens": 1024}
    messages = [{"role": "user", "content": "What is the weather in Paris and London?"}]
    # London asks a person first: with an approval waiting the loop stops interrupted, the external call listed.
    paused = await anthropic_loop(client, ts.Executor(weather_tools("London")), messages=messages, **options)
    assert paused.stop == "interrupted"
    assert [(type(p).__name__, p.call_id) for p in paused.pending] == [
        ("ExternalCall", "toolu_01Paris"),
        ("ApprovalRequest", "toolu_02London"),
    ]
    paused.state.approve("toolu_02London")
    waiting = await anthropic_loop(client, paused.executor, messages=paused.history, resume=paused, **options)
    # Only answers from outside are awaited now.
    assert waiting.stop == "external" and isinstance(waiting.state, ts.RunState)
    assert [p.call_id for p in waiting.pending] == ["toolu_01Paris", "toolu_02London"]
    assert len(recorded.requests) == 1
    waiting.state.complete("toolu_01Paris", output="Paris: 18°C")
    waiting.state.complete("toolu_02London", output="London: 59°F")
    finished = await anthropic_loop(client, waiting.executor, messages=waiting.history, resume=waiting, **options)
    assert finished.stop == "done"
    answers = recorded.requests[1]["messages"][2]["content"]
    assert [block["content"] for block in answers] == ["Paris: 18°C", "London: 59°F"]


def test_keys_are_uuid_shaped_and_derived_not_random() -> None:
    assert idempotency_key("run", "c1") == idempotency_key("run", "c1")
    assert len({idempotency_key("run", "c1"), idempotency_key("run", "c2"), idempotency_key("rum", "c1")}) == 3
    # Parts are told apart by their lengths, not joined: ("ab", "c") and ("a", "bc") differ.
    assert idempotency_key("ab", "c") != idempotency_key("a", "bc")
    assert is_key(idempotency_key("run", "c1"))
