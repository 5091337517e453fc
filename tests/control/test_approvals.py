"""Approvals and resumable runs: nothing runs twice, nothing runs on a stale approval."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import logging
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pydantic
import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio

PACKAGE_ROOT = str(Path(ts.__file__).resolve().parent.parent)


class Shop:
    """Tools that count their invocations by call ID."""

    def __init__(self, remove_description: str = "Remove an item.") -> None:
        self.invocations: Counter[str] = Counter()
        invocations = self.invocations

        @ts.tool(concurrency_safe=True, read_only=True)
        async def look(item: str, ctx: ts.ToolContext) -> str:
            """Look at an item."""
            invocations[ctx.call_id] += 1
            return f"saw {item}"

        @ts.tool(needs_approval=True, description=remove_description)
        async def remove(item: str, ctx: ts.ToolContext) -> str:
            invocations[ctx.call_id] += 1
            return f"removed {item}"

        @ts.tool(needs_approval=True)
        async def pay(amount: int, ctx: ts.ToolContext) -> int:
            """Pay an amount."""
            invocations[ctx.call_id] += 1
            return amount

        self.tools = [look, remove, pay]

    def executor(self, **options: Any) -> ts.Executor:
        return ts.Executor(self.tools, **options)


TURN = [
    ts.ToolCall("c1", "look", {"item": "a"}),
    ts.ToolCall("c2", "remove", {"item": "b"}),
    ts.ToolCall("c3", "look", {"item": "c"}),
    ts.ToolCall("c4", "pay", '{"amount": 30}'),
    ts.ToolCall("c5", "remove", {"item": "e"}),
]


def summary(outcome: ts.Outcome) -> list[tuple[str, Any]]:
    return [(r.call_id, r.error_kind or r.output) for r in outcome.results]


# -- an approver --------------------------------------------------------------------


async def test_the_approver_sees_each_request_and_decides() -> None:
    shop = Shop()
    requests: list[ts.ApprovalRequest] = []

    async def approver(request: ts.ApprovalRequest) -> bool | ts.Decision:
        requests.append(request)
        if request.call_id == "c2":
            return True
        if request.call_id == "c4":
            return ts.Decision.deny("over budget")
        return False

    outcome = await shop.executor(approver=approver).run(TURN)
    assert [(r.call_id, r.tool_name, r.args) for r in requests] == [
        ("c2", "remove", {"item": "b"}),
        ("c4", "pay", {"amount": 30}),
        ("c5", "remove", {"item": "e"}),
    ]
    assert requests[0].reason == "`remove` needs approval before it runs"
    assert not outcome.interrupted and outcome.pending == [] and outcome.state is None
    assert summary(outcome) == [
        ("c1", "saw a"),
        ("c2", "removed b"),
        ("c3", "saw c"),
        ("c4", "permission_denied"),
        ("c5", "permission_denied"),
    ]
    assert outcome.results[3].error == "the call to `pay` was not approved: over budget"
    assert outcome.results[4].error == "the call to `remove` was not approved"
    assert shop.invocations == Counter({"c1": 1, "c2": 1, "c3": 1})


@pytest.mark.parametrize("answer", ["raise", "garbage"])
async def test_an_approver_that_fails_rejects(answer: str, caplog: pytest.LogCaptureFixture) -> None:
    shop = Shop()

    def approver(request: ts.ApprovalRequest) -> Any:
        if answer == "raise":
            raise RuntimeError("approval service down")
        return "maybe"

    with caplog.at_level(logging.WARNING, logger="toolsched"):
        outcome = await shop.executor(approver=approver).run([TURN[1]])
    assert outcome.results[0].error_kind == "permission_denied"
    assert ("approval service down" if answer == "raise" else "'maybe'") in (outcome.results[0].error or "")
    assert shop.invocations == Counter()
    assert caplog.records


async def test_an_approver_that_asks_again_holds_the_call() -> None:
    shop = Shop()
    outcome = await shop.executor(approver=lambda request: ts.Decision.ask()).run(TURN[:2])
    assert outcome.interrupted
    assert [p.call_id for p in outcome.pending] == ["c2"]


async def test_the_approver_cannot_change_what_runs_by_mutating_the_request() -> None:
    shop = Shop()

    def approver(request: ts.ApprovalRequest) -> bool:
        request.args["item"] = "everything"  # type: ignore[index]
        return True

    outcome = await shop.executor(approver=approver).run([TURN[1]])
    assert outcome.results[0].output == "removed b"


# -- interrupt and resume ------------------------------------------------------------


async def test_interrupt_then_resume_runs_only_what_was_unresolved() -> None:
    shop = Shop()
    executor = shop.executor()
    first = await executor.run(TURN)
    assert first.interrupted
    assert summary(first) == [("c1", "saw a"), ("c3", "saw c")]
    assert [(p.call_id, p.tool_name, p.args) for p in first.pending] == [
        ("c2", "remove", {"item": "b"}),
        ("c4", "pay", {"amount": 30}),
        ("c5", "remove", {"item": "e"}),
    ]
    assert shop.invocations == Counter({"c1": 1, "c3": 1})

    state = first.state
    assert state is not None
    state.approve("c2")
    state.reject("c4", "ask me tomorrow")
    second = await executor.resume(state)
    # c5 is still undecided: the run stays interrupted, with c5 the only request.
    assert second.interrupted
    assert [p.call_id for p in second.pending] == ["c5"]
    assert summary(second) == [("c1", "saw a"), ("c2", "removed b"), ("c3", "saw c"), ("c4", "permission_denied")]
    assert second.results[3].error == "the call to `pay` was not approved: ask me tomorrow"
    assert shop.invocations == Counter({"c1": 1, "c2": 1, "c3": 1})

    state = second.state
    assert state is not None
    state.approve("c5")
    third = await executor.resume(state)
    assert not third.interrupted and third.state is None
    assert summary(third) == [
        ("c1", "saw a"),
        ("c2", "removed b"),
        ("c3", "saw c"),
        ("c4", "permission_denied"),
        ("c5", "removed e"),
    ]
    assert shop.invocations == Counter({"c1": 1, "c2": 1, "c3": 1, "c5": 1})


async def test_an_approved_call_is_not_judged_again() -> None:
    shop = Shop()
    judged: list[Any] = []

    def judge(args: Any) -> bool:
        judged.append(args)
        return True

    @ts.tool(needs_approval=judge)
    async def archive(item: str) -> str:
        return f"archived {item}"

    executor = ts.Executor([*shop.tools, archive])
    state = (await executor.run([ts.ToolCall("a1", "archive", {"item": "x"})])).state
    assert state is not None and judged == [{"item": "x"}]
    state.approve("a1")
    outcome = await executor.resume(state)
    assert summary(outcome) == [("a1", "archived x")]
    assert judged == [{"item": "x"}]


async def test_resuming_without_decisions_runs_nothing() -> None:
    shop = Shop()
    executor = shop.executor()
    first = await executor.run(TURN)
    state = first.state
    assert state is not None
    again = await executor.resume(state)
    assert again.interrupted
    assert [p.call_id for p in again.pending] == ["c2", "c4", "c5"]
    assert summary(again) == summary(first)
    assert shop.invocations == Counter({"c1": 1, "c3": 1})


async def test_a_state_resumes_once() -> None:
    shop = Shop()
    executor = shop.executor()
    state = (await executor.run(TURN)).state
    assert state is not None
    state.approve("c2")
    await executor.resume(state)
    with pytest.raises(ts.StateError, match="already resumed"):
        await executor.resume(state)
    with pytest.raises(ts.StateError, match="already resumed"):
        state.to_json()
    with pytest.raises(ts.StateError, match="already resumed"):
        state.approve("c4")
    assert shop.invocations["c2"] == 1


async def test_always_decides_every_call_of_the_tool() -> None:
    shop = Shop()
    executor = shop.executor()
    state = (await executor.run(TURN)).state
    assert state is not None
    state.approve("c2", always=True)
    state.reject("c4", always=True)
    assert state.decisions == {"c1": "done", "c2": "approved", "c3": "done", "c4": "rejected", "c5": "approved"}
    outcome = await executor.resume(state)
    assert summary(outcome) == [
        ("c1", "saw a"),
        ("c2", "removed b"),
        ("c3", "saw c"),
        ("c4", "permission_denied"),
        ("c5", "removed e"),
    ]


async def test_two_states_from_one_outcome_do_not_share_approvals() -> None:
    shop = Shop()
    executor = shop.executor()
    outcome = await executor.run(TURN)
    first, second = outcome.state, outcome.state
    assert first is not None and second is not None and first is not second
    first.approve("c2")
    first.approve("c4")
    assert [p.call_id for p in second.pending] == ["c2", "c4", "c5"]
    assert [p.call_id for p in first.pending] == ["c5"]

    held = await executor.resume(second)
    assert [p.call_id for p in held.pending] == ["c2", "c4", "c5"]
    assert shop.invocations == Counter({"c1": 1, "c3": 1})

    # The run was resumed from one copy; the other copy cannot resume it again.
    with pytest.raises(ts.StateError, match="already resumed from another copy"):
        await executor.resume(first)
    assert shop.invocations == Counter({"c1": 1, "c3": 1})
    # The run goes on from the resume's own state.
    state = held.state
    assert state is not None
    state.approve("c2")
    ran = await executor.resume(state)
    assert [p.call_id for p in ran.pending] == ["c4", "c5"]
    assert shop.invocations == Counter({"c1": 1, "c2": 1, "c3": 1})
    # The outcome still hands out fresh, undecided copies.
    fresh = outcome.state
    assert fresh is not None and fresh.decisions["c2"] == "pending"


async def test_an_approved_call_runs_once_however_its_state_is_copied() -> None:
    shop = Shop()
    executor = shop.executor()
    outcome = await executor.run(TURN)
    text = outcome.state.to_json()  # type: ignore[union-attr]
    copies = [outcome.state, outcome.state, ts.RunState.from_json(text), ts.RunState.from_json(text)]
    for state in copies:
        assert state is not None
        state.approve("c2")
    results: list[object] = []

    async def resume(state: ts.RunState) -> None:
        try:
            results.append(await executor.resume(state))
        except ts.StateError as exc:
            results.append(exc)

    async with anyio.create_task_group() as group:
        for state in copies:
            assert state is not None
            group.start_soon(resume, state)
    assert shop.invocations["c2"] == 1
    assert sum(isinstance(result, ts.Outcome) for result in results) == 1
    assert sum(isinstance(result, ts.StateError) for result in results) == 3


async def test_approving_an_unknown_or_finished_call_is_an_error() -> None:
    shop = Shop()
    state = (await shop.executor().run(TURN)).state
    assert state is not None
    with pytest.raises(ts.ApprovalError, match="no such call") as caught:
        state.approve("c99")
    assert isinstance(caught.value, LookupError)
    assert "'c2'" in str(caught.value)
    with pytest.raises(ts.ApprovalError, match="already completed"):
        state.reject("c1")
    with pytest.raises(TypeError):
        state.reject("c2", message=42)  # type: ignore[arg-type]
    assert state.decisions["c2"] == "pending"


async def test_calls_answered_in_the_first_run_are_carried_not_rerun() -> None:
    shop = Shop()
    executor = shop.executor(permissions=ts.Permissions(deny=["look"]))
    calls = [*TURN[:2], ts.ToolCall("c2", "look", {"item": "dup"}), ts.ToolCall("x", "nope", {})]
    first = await executor.run(calls)
    assert [d.call_id for d in first.duplicates] == ["c2"]
    state = first.state
    assert state is not None
    state.approve("c2")
    second = await executor.resume(state)
    assert [(r.call_id, r.error_kind) for r in second.results] == [
        ("c1", "permission_denied"),
        ("c2", None),
        ("x", "unknown_tool"),
    ]
    assert second.results[0] is first.results[0]
    assert [d.call_id for d in second.duplicates] == ["c2"]


async def test_input_guardrails_run_again_on_resume() -> None:
    shop = Shop()
    first = await shop.executor().run(TURN[:2])
    state = first.state
    assert state is not None
    state.approve("c2")

    def stop_removals(event: ts.GuardrailEvent) -> ts.Reject | None:
        return ts.Reject("removals are paused") if event.tool_name == "remove" else None

    resumed = await shop.executor(input_guardrails=[stop_removals]).resume(state)
    assert summary(resumed) == [("c1", "saw a"), ("c2", "guardrail_rejected")]
    assert shop.invocations == Counter({"c1": 1})


# -- nothing runs on a stale approval ---------------------------------------------------


async def test_a_hook_rewrite_after_the_approval_asks_again() -> None:
    shop = Shop()
    rewrite = {"on": False}

    def redirect(event: ts.HookEvent) -> ts.Rewrite | None:
        return ts.Rewrite({"item": "all-items"}) if rewrite["on"] else None

    executor = shop.executor(hooks=ts.Hooks().pre_tool_use("remove", redirect))
    state = (await executor.run([TURN[1]])).state
    assert state is not None
    state.approve("c2")
    rewrite["on"] = True
    again = await executor.resume(state)
    assert again.interrupted and shop.invocations == Counter()
    (request,) = again.pending
    assert request.args == {"item": "all-items"}
    assert request.reason is not None and "the arguments changed since the approval" in request.reason

    state = again.state
    assert state is not None
    state.approve("c2")
    done = await executor.resume(state)
    assert summary(done) == [("c2", "removed all-items")]
    assert shop.invocations == Counter({"c2": 1})


async def test_a_changed_tool_is_asked_again_and_a_removed_tool_is_unknown() -> None:
    shop = Shop()
    state = (await shop.executor().run(TURN[:2])).state
    assert state is not None
    state.approve("c2")
    text = state.to_json()

    changed = Shop(remove_description="Remove an item and everything that depends on it.")
    asked: list[ts.ApprovalRequest] = []

    async def approver(request: ts.ApprovalRequest) -> bool:
        asked.append(request)
        return False

    outcome = await changed.executor(approver=approver).resume(ts.RunState.from_json(text))
    assert [r.call_id for r in asked] == ["c2"]
    assert asked[0].reason is not None and "the tool changed since the approval" in asked[0].reason
    assert summary(outcome) == [("c1", "saw a"), ("c2", "permission_denied")]
    assert changed.invocations == Counter()

    # A second interruption of the same turn (a state resumes once).
    again = (await shop.executor().run(TURN[:2])).state
    assert again is not None
    again.approve("c2")
    gone = await ts.Executor(shop.tools[:1]).resume(ts.RunState.from_json(again.to_json()))
    assert summary(gone) == [("c1", "saw a"), ("c2", "unknown_tool")]
    assert shop.invocations == Counter({"c1": 2})


# -- saved states -------------------------------------------------------------------------


async def test_a_state_round_trips_through_json_in_this_process() -> None:
    shop = Shop()
    executor = shop.executor()
    state = (await executor.run(TURN)).state
    assert state is not None
    state.approve("c4")
    loaded = ts.RunState.from_json(state.to_json())
    assert loaded.decisions == state.decisions
    assert loaded.results == state.results
    assert [(p.call_id, p.args, p.reason) for p in loaded.pending] == [
        (p.call_id, p.args, p.reason) for p in state.pending
    ]
    outcome = await executor.resume(loaded)
    assert [p.call_id for p in outcome.pending] == ["c2", "c5"]
    assert shop.invocations == Counter({"c1": 1, "c3": 1, "c4": 1})


FLOW = textwrap.dedent(
    """
    import json, sys
    import anyio
    import toolsched as ts

    phase, state_path, log_path = sys.argv[1:]

    def log(call_id):
        with open(log_path, "a") as f:
            f.write(call_id + "\\n")

    @ts.tool(read_only=True, concurrency_safe=True)
    async def look(item: str, ctx: ts.ToolContext) -> str:
        log(ctx.call_id)
        return "saw " + item

    @ts.tool(needs_approval=True)
    async def remove(item: str, ctx: ts.ToolContext) -> str:
        log(ctx.call_id)
        return "removed " + item

    executor = ts.Executor([look, remove])

    async def main():
        if phase == "run":
            outcome = await executor.run([
                ts.ToolCall("c1", "look", {"item": "a"}),
                ts.ToolCall("c2", "remove", {"item": "b"}),
                ts.ToolCall("c3", "remove", {"item": "c"}),
            ])
            with open(state_path, "w") as f:
                f.write(outcome.state.to_json(key="k3y"))
        else:
            with open(state_path) as f:
                state = ts.RunState.from_json(f.read(), key="k3y")
            outcome = await executor.resume(state)
        print(json.dumps({
            "results": [[r.call_id, r.output, r.error_kind] for r in outcome.results],
            "pending": [p.call_id for p in outcome.pending],
        }))

    anyio.run(main)
    """
)


def run_phase(script: Path, phase: str, state: Path, log: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([PACKAGE_ROOT, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(script), phase, str(state), str(log)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


def test_a_state_resumes_in_another_process_without_rerunning_anything(tmp_path: Path) -> None:
    script, state_file, log = tmp_path / "flow.py", tmp_path / "state.json", tmp_path / "calls.log"
    script.write_text(FLOW)

    first = run_phase(script, "run", state_file, log)
    assert first == {"results": [["c1", "saw a", None]], "pending": ["c2", "c3"]}

    # A person decides in a third process (here: this one), without the tools at hand.
    state = ts.RunState.from_json(state_file.read_text(), key="k3y")
    state.approve("c2")
    state.reject("c3", "keep it")
    state_file.write_text(state.to_json(key="k3y"))

    second = run_phase(script, "resume", state_file, log)
    assert second == {
        "results": [["c1", "saw a", None], ["c2", "removed b", None], ["c3", None, "permission_denied"]],
        "pending": [],
    }
    assert log.read_text().split() == ["c1", "c2"]


def reseal(body: dict[str, Any]) -> str:
    """What someone without the key could do: alter a state and recompute its checksum."""
    body = {key: value for key, value in body.items() if key != "seal"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    body["seal"] = "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    return json.dumps(body)


async def test_corrupt_truncated_or_altered_states_are_refused() -> None:
    shop = Shop()
    state = (await shop.executor().run(TURN)).state
    assert state is not None
    text = state.to_json()

    for broken in (text[: len(text) // 2], "", "[]", '{"format": "something else"}', "null"):
        with pytest.raises(ts.StateError):
            ts.RunState.from_json(broken)

    body = json.loads(text)
    body["calls"][1]["args"] = {"item": "everything"}
    with pytest.raises(ts.StateError, match="altered or corrupted"):
        ts.RunState.from_json(json.dumps(body))

    body = json.loads(text)
    body["calls"][0]["result"]["output"] = "forged"
    with pytest.raises(ts.StateError, match="altered or corrupted"):
        ts.RunState.from_json(json.dumps(body))

    body = json.loads(text)
    body["version"] = 99
    with pytest.raises(ts.StateError, match="version"):
        ts.RunState.from_json(json.dumps(body))

    body = json.loads(text)
    body["calls"][1]["status"] = "finished"
    with pytest.raises(ts.StateError, match="status"):
        ts.RunState.from_json(reseal(body))

    body = json.loads(text)
    body["calls"][0]["result"]["error_kind"] = "bad_kind"
    with pytest.raises(ts.StateError, match="error kind"):
        ts.RunState.from_json(reseal(body))

    body = json.loads(text)
    body["calls"][1]["request"]["args"] = {"item": "everything"}
    with pytest.raises(ts.StateError, match="digest"):
        ts.RunState.from_json(reseal(body))

    body = json.loads(text)
    body["calls"].append(body["calls"][0])
    with pytest.raises(ts.StateError, match="repeats a call ID"):
        ts.RunState.from_json(reseal(body))


async def test_a_forged_approval_for_other_arguments_is_asked_again() -> None:
    shop = Shop()
    executor = shop.executor()
    state = (await executor.run(TURN[:2])).state
    assert state is not None
    state.approve("c2")
    body = json.loads(state.to_json())
    # Swap the model's arguments under an approval given for other ones.
    body["calls"][1]["args"] = {"item": "the-database"}
    outcome = await executor.resume(ts.RunState.from_json(reseal(body)))
    assert outcome.interrupted
    assert [(p.call_id, p.args) for p in outcome.pending] == [("c2", {"item": "the-database"})]
    assert shop.invocations == Counter({"c1": 1})


async def test_a_signed_state_refuses_any_alteration_and_any_other_key() -> None:
    shop = Shop()
    state = (await shop.executor().run(TURN)).state
    assert state is not None
    text = state.to_json(key=b"secret")
    assert ts.RunState.from_json(text, key=b"secret").decisions == state.decisions
    with pytest.raises(ts.StateError, match="signed"):
        ts.RunState.from_json(text)
    with pytest.raises(ts.StateError, match="altered"):
        ts.RunState.from_json(text, key=b"other")
    body = json.loads(text)
    body["calls"][1]["status"] = "approved"
    with pytest.raises(ts.StateError, match="altered"):
        ts.RunState.from_json(reseal(body), key=b"secret")


class Point(pydantic.BaseModel):
    x: int
    y: int


@dataclasses.dataclass
class Span:
    start: int
    end: int


async def test_a_state_carries_outputs_json_cannot_hold_in_the_form_adapters_send() -> None:
    # Outputs a journal can store (models, dataclasses, dates, tuples, any object as its text)
    # do not stop a state from being saved: it carries them in the same form.
    @ts.tool
    async def make(kind: str) -> object:
        return {
            "model": Point(x=1, y=2),
            "dataclass": Span(3, 4),
            "datetime": datetime.datetime(2026, 1, 2, 3, 4, 5),
            "tuple": (1, 2),
            "object": Opaque(),
        }[kind]

    @ts.tool(needs_approval=True)
    async def act() -> str:
        return "ok"

    kinds = ["model", "dataclass", "datetime", "tuple", "object"]
    calls = [ts.ToolCall(kind, "make", {"kind": kind}) for kind in kinds] + [ts.ToolCall("act", "act", {})]
    executor = ts.Executor([make, act])
    state = (await executor.run(calls)).state
    assert state is not None
    restored = ts.RunState.from_json(state.to_json())
    restored.approve("act")
    outcome = await executor.resume(restored)
    outputs = {result.call_id: result.output for result in outcome.results}
    assert outputs["model"] == {"x": 1, "y": 2}
    assert outputs["dataclass"] == {"start": 3, "end": 4}
    assert outputs["datetime"] == "2026-01-02 03:04:05"
    assert outputs["tuple"] == [1, 2]
    assert outputs["object"] == "an opaque value"
    assert outputs["act"] == "ok"


async def test_a_state_refuses_an_output_that_has_no_json_form() -> None:
    @ts.tool
    async def make() -> object:
        looped: list[object] = []
        looped.append(looped)
        return looped

    @ts.tool(needs_approval=True)
    async def act() -> str:
        return "ok"

    state = (await ts.Executor([make, act]).run([ts.ToolCall("1", "make", {}), ts.ToolCall("2", "act", {})])).state
    assert state is not None
    with pytest.raises(ts.StateError, match="cannot be saved"):
        state.to_json()


class Opaque:
    def __str__(self) -> str:
        return "an opaque value"


def test_run_state_is_not_built_by_hand() -> None:
    with pytest.raises(TypeError, match=r"Outcome\.state"):
        ts.RunState()


async def test_resume_takes_only_a_run_state() -> None:
    with pytest.raises(TypeError, match="RunState"):
        await Shop().executor().resume("{}")  # type: ignore[arg-type]


@pytest.mark.parametrize("waiting_on", ["approver", "pre hook", "input check"])
@pytest.mark.parametrize("how", ["cancel", "interrupt"])
async def test_a_call_cancelled_or_a_run_interrupted_while_its_admission_awaits_never_runs(
    how: str, waiting_on: str
) -> None:
    # The person hits stop while the approval dialog is open (or a hook, or an input check, still thinks):
    # whatever the answer then, the call does not run, and the next call is not even asked about.
    ran: list[str] = []
    asked: list[str] = []
    waiting = anyio.Event()
    answer = anyio.Event()

    async def wait_for_answer(call_id: str) -> None:
        asked.append(call_id)
        if call_id == "c1":
            waiting.set()
            await answer.wait()

    async def approver(request: ts.ApprovalRequest) -> bool:
        await wait_for_answer(request.call_id)
        return True

    async def hook(event: ts.HookEvent) -> None:
        await wait_for_answer(event.call_id)

    class Delete(ts.Tool):
        name = "delete"
        description = "Deletes a path."
        input_schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
        needs_approval = waiting_on == "approver"

        async def validate_input(self, args: Any, ctx: ts.ToolContext) -> None:
            if waiting_on == "input check":
                await wait_for_answer(ctx.call_id)

        async def call(self, args: Any, ctx: ts.ToolContext) -> str:
            ran.append(ctx.call_id)
            return "deleted"

    hooks = ts.Hooks().pre_tool_use("*", hook) if waiting_on == "pre hook" else None
    executor = ts.Executor([Delete()], approver=approver, hooks=hooks)
    calls = [ts.ToolCall("c1", "delete", {"path": "x"}), ts.ToolCall("c2", "delete", {"path": "y"})]
    outcomes: list[ts.Outcome] = []
    reached: list[object] = []

    async def run() -> None:
        outcomes.append(await executor.run(calls, run_id="r1"))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await waiting.wait()
            reached.append(executor.cancel("c1", run_id="r1") if how == "cancel" else executor.interrupt(run_id="r1"))
            answer.set()
    results = outcomes[0].results
    assert [result.call_id for result in results] == ["c1", "c2"]
    if how == "cancel":
        assert reached == [True]
        assert results[0].error_kind == "cancelled"
        assert ran == ["c2"]
    else:
        assert reached == [1]
        assert [result.error_kind for result in results] == ["skipped", "skipped"]
        assert ran == []
        assert "c2" not in asked
