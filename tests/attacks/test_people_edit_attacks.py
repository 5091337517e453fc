"""Attacks on people in the loop: a call a ``pre_tool_use`` hook rewrote before it asked, approved with a person's
own arguments and asked about again; what the person was shown is what runs, through every copy of the state
(``copy``, pickle, JSON) and every later decision, and nothing runs that nobody approved."""

from __future__ import annotations

import copy
import hashlib
import json
import pickle
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from journal_child import Store, store_in

import toolsched as ts

pytestmark = pytest.mark.anyio

COPIES: dict[str, Callable[[ts.RunState], ts.RunState]] = {
    "same": lambda state: state,
    "state.copy": lambda state: state.copy(),
    "copy.deepcopy": copy.deepcopy,
    "pickle": lambda state: pickle.loads(pickle.dumps(state)),
    "json": lambda state: ts.RunState.from_json(state.to_json()),
}


class Refunds:
    """A ``refund`` tool that asks, behind a hook that turns cents into units (a rewrite that settles: units
    are never rewritten again); ``ran`` records what ran."""

    def __init__(self, **options: Any) -> None:
        self.ran: list[tuple[str, int]] = []
        ran = self.ran

        @ts.tool(needs_approval=True)
        def refund(order: str, amount: int) -> str:
            """Refund an order."""
            ran.append((order, amount))
            return f"refunded {amount} on {order}"

        def cents_to_units(event: ts.HookEvent) -> ts.Rewrite | None:
            if event.args["amount"] > 10_000:
                return ts.Rewrite({**event.args, "amount": event.args["amount"] // 100})
            return None

        self.executor = ts.Executor([refund], hooks=ts.Hooks().pre_tool_use("refund", cents_to_units), **options)


class Shell:
    """A ``bash`` tool that asks, behind a hook that appends ``--all`` to every command it is shown (a rewrite
    that never settles: the hook's own output is rewritten again)."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        ran = self.ran

        @ts.tool(needs_approval=True)
        def bash(command: str) -> str:
            """Run a shell command."""
            ran.append(command)
            return f"ran {command}"

        def widen(event: ts.HookEvent) -> ts.Rewrite:
            return ts.Rewrite({**event.args, "command": event.args["command"] + " --all"})

        self.tools = [bash]
        self.hooks = ts.Hooks().pre_tool_use("bash", widen)

    def executor(self, **options: Any) -> ts.Executor:
        return ts.Executor(self.tools, hooks=self.hooks, **options)


def waiting(outcome: ts.Outcome) -> ts.RunState:
    assert outcome.interrupted and outcome.state is not None, outcome.results
    return outcome.state


def shown(outcome: ts.Outcome) -> dict[str, Any]:
    (request,) = outcome.pending
    assert isinstance(request, ts.ApprovalRequest)
    return dict(request.args)


# -- an edit asked about again ------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", list(COPIES))
async def test_an_edit_asked_again_runs_what_the_person_was_shown_once_approved(how: str) -> None:
    refunds = Refunds()
    first = await refunds.executor.run([ts.ToolCall("r1", "refund", {"order": "A", "amount": 25_000})])
    assert shown(first) == {"order": "A", "amount": 250}
    state = waiting(first)
    state.approve("r1", args={"order": "A", "amount": 30_000})  # the person typed cents too: the hook rewrites them
    again = await refunds.executor.resume(state)
    assert shown(again) == {"order": "A", "amount": 300} and refunds.ran == []
    state = COPIES[how](waiting(again))
    state.approve("r1")  # yes to what they were shown: 300, which came from their own edit
    done = await refunds.executor.resume(state)
    assert not done.interrupted, done.pending
    assert [(r.call_id, r.output, r.edited) for r in done.results] == [("r1", "refunded 300 on A", True)]
    assert refunds.ran == [("A", 300)]


async def test_approving_the_shown_arguments_by_value_after_an_edit_runs_them() -> None:
    refunds = Refunds()
    state = waiting(await refunds.executor.run([ts.ToolCall("r1", "refund", {"order": "A", "amount": 25_000})]))
    state.approve("r1", args={"order": "A", "amount": 30_000})
    again = await refunds.executor.resume(state)
    state = waiting(again)
    state.approve("r1", args=shown(again))  # the same arguments, given back: no new edit
    done = await refunds.executor.resume(state)
    assert [(r.output, r.edited) for r in done.results] == [("refunded 300 on A", True)]
    assert refunds.ran == [("A", 300)]


async def test_an_edit_asked_again_and_approved_once_more_never_falls_back_to_the_models_arguments() -> None:
    # A hook that never settles: each round shows the person the hook's rewrite of what they approved. Saying yes
    # to what is shown runs it; the model's own command, rewritten, is never what is asked about or run.
    shell = Shell()
    executor = shell.executor()
    first = await executor.run([ts.ToolCall("c1", "bash", {"command": "ls"})])
    assert shown(first) == {"command": "ls --all"}
    state = waiting(first)
    state.approve("c1", args={"command": "ls -l"})
    again = await executor.resume(state)
    assert shown(again) == {"command": "ls -l --all"}
    state = waiting(again)
    state.approve("c1")
    done = await executor.resume(state)
    assert [(r.output, r.edited) for r in done.results] == [("ran ls -l --all", True)]
    assert shell.ran == ["ls -l --all"]


async def test_an_edit_asked_again_rejected_then_approved_runs_what_was_shown() -> None:
    # A later decision replaces an earlier one until the resume: a rejection in between loses nothing.
    refunds = Refunds()
    state = waiting(await refunds.executor.run([ts.ToolCall("r1", "refund", {"order": "A", "amount": 25_000})]))
    state.approve("r1", args={"order": "A", "amount": 30_000})
    state = waiting(await refunds.executor.resume(state))
    state.reject("r1", "no")
    state.approve("r1")
    done = await refunds.executor.resume(state)
    assert [(r.output, r.edited) for r in done.results] == [("refunded 300 on A", True)]


async def test_an_edit_asked_again_then_rejected_runs_nothing() -> None:
    refunds = Refunds()
    state = waiting(await refunds.executor.run([ts.ToolCall("r1", "refund", {"order": "A", "amount": 25_000})]))
    state.approve("r1", args={"order": "A", "amount": 30_000})
    state = waiting(await refunds.executor.resume(state))
    state.reject("r1", "no refunds today")
    done = await refunds.executor.resume(state)
    assert [(r.error_kind, r.error) for r in done.results] == [
        ("permission_denied", "the call to `refund` was not approved: no refunds today")
    ]
    assert refunds.ran == []


async def test_an_edit_asked_again_keeps_the_models_arguments_as_the_model_sent_them() -> None:
    # ``args`` of the state's record stays what the model sent (older readers of the saved state rely on it).
    refunds = Refunds()
    state = waiting(await refunds.executor.run([ts.ToolCall("r1", "refund", {"order": "A", "amount": 25_000})]))
    state.approve("r1", args={"order": "A", "amount": 30_000})
    state = waiting(await refunds.executor.resume(state))
    text = state.to_json()
    assert '"args": {"order": "A", "amount": 25000}' in text
    assert ts.RunState.from_json(text).decisions == {"r1": "pending"}


async def test_an_edit_asked_again_in_a_nested_run_runs_what_was_shown_once_approved() -> None:
    refunds = Refunds()

    @ts.agent_tool(refunds.executor, name="agent")
    async def agent(amount: int, child: ts.ChildRun) -> str:
        """Refund through a child run."""
        outcome = await child.run([ts.ToolCall("r1", "refund", {"order": "A", "amount": amount})])
        (result,) = outcome.results
        return f"{result.output} (edited: {result.edited})"

    executor = ts.Executor([agent])
    state = waiting(await executor.run([ts.ToolCall("p1", "agent", {"amount": 25_000})]))
    state.approve("p1/r1", args={"order": "A", "amount": 30_000})
    again = await executor.resume(ts.RunState.from_json(state.to_json()))
    assert shown(again) == {"order": "A", "amount": 300}
    state = waiting(again)
    state.approve("p1/r1")
    done = await executor.resume(ts.RunState.from_json(state.to_json()))
    assert [r.output for r in done.results] == ["refunded 300 on A (edited: True)"]
    assert refunds.ran == [("A", 300)]


async def test_a_call_repaired_and_rewritten_by_a_hook_runs_what_was_shown_once_approved() -> None:
    # The model's text did not parse; the repair function fixed it and the hook rewrote the fix. The person says
    # yes to the rewrite they were shown: the hook is not applied a second time to its own output.
    async def repair(call: ts.ToolCall, error: str) -> dict[str, Any]:
        return {"command": "ls"}

    shell = Shell()
    executor = shell.executor(repair_arguments=repair)
    first = await executor.run([ts.ToolCall("c1", "bash", '{"command": ')])
    assert shown(first) == {"command": "ls --all"}
    state = waiting(first)
    state.approve("c1")
    done = await executor.resume(ts.RunState.from_json(state.to_json()))
    assert not done.interrupted, done.pending
    assert [(r.output, r.repaired) for r in done.results] == [("ran ls --all", True)]
    assert shell.ran == ["ls --all"]


def resealed(body: dict[str, Any]) -> str:
    """``body`` as ``to_json`` writes it without a key: the seal is the SHA-256 of its canonical text."""
    body = {key: value for key, value in body.items() if key != "seal"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    body["seal"] = "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return json.dumps(body, ensure_ascii=False)


@pytest.mark.parametrize(
    ("alter", "match"),
    [
        (lambda call: call["input"]["args"].update(amount=99_900), "does not match its digest"),
        (lambda call: call["input"].update(edited="yes"), "edited must be true or false"),
        (lambda call: call.update(input=[1]), "must hold the arguments"),
    ],
    ids=["args", "edited", "shape"],
)
async def test_the_input_a_saved_state_holds_is_checked_on_load(alter: Callable[[Any], Any], match: str) -> None:
    # Resealed after the change, as a person tampering with an unsigned state would: the input is checked itself.
    refunds = Refunds()
    state = waiting(await refunds.executor.run([ts.ToolCall("r1", "refund", {"order": "A", "amount": 25_000})]))
    state.approve("r1", args={"order": "A", "amount": 30_000})
    body = json.loads(waiting(await refunds.executor.resume(state)).to_json())
    alter(body["calls"][0])
    with pytest.raises(ts.StateError, match=match):
        ts.RunState.from_json(resealed(body))


# -- the same, journaled --------------------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_in(request.param, tmp_path, "people_edit_attacks")


async def asked_again(refunds: Refunds, run_id: str) -> ts.RunState:
    """Runs ``refund`` of 25,000 cents (asked as 250), approves it with 30,000 (the hook makes 300 of it) and
    resumes: asked again, about 300."""
    first = await refunds.executor.run([ts.ToolCall("r1", "refund", {"order": "A", "amount": 25_000})], run_id=run_id)
    state = waiting(first)
    state.approve("r1", args={"order": "A", "amount": 30_000})
    again = await refunds.executor.resume(state)
    assert shown(again) == {"order": "A", "amount": 300}
    return waiting(again)


async def test_an_edit_asked_again_in_a_journaled_run_and_recovered_runs_what_was_shown(store: Store) -> None:
    # The process that held the state is gone: the run is recovered from the journal, which kept the person's
    # arguments with the hold, and approving what the person is shown runs it.
    async with store.open() as journal:
        refunds = Refunds(journal=journal)
        await asked_again(refunds, "lost-state")
        recovered = await refunds.executor.recover("lost-state")
        assert shown(recovered) == {"order": "A", "amount": 300}
        state = waiting(recovered)
        state.approve("r1")
        done = await refunds.executor.resume(state)
    assert [(r.output, r.edited) for r in done.results] == [("refunded 300 on A", True)]
    assert refunds.ran == [("A", 300)]


async def test_an_edit_approved_as_shown_and_stopped_before_it_ran_is_recovered_with_it(store: Store) -> None:
    # The resume journals the approval, then stops while an input guardrail checks the call: recover runs what
    # the person approved (300), once, and says it was the person's.
    checked = anyio.Event()
    hold = [True]

    async def guard(event: ts.GuardrailEvent) -> None:
        if hold[0]:
            checked.set()
            await anyio.sleep_forever()

    async with store.open() as journal:
        refunds = Refunds(journal=journal, input_guardrails=[guard])
        state = await asked_again(refunds, "stopped")
        state.approve("r1")
        resumed: list[ts.Outcome] = []

        async def resume() -> None:
            resumed.append(await refunds.executor.resume(state))

        async with anyio.create_task_group() as group:
            group.start_soon(resume)
            with anyio.move_on_after(30):
                await checked.wait()
            group.cancel_scope.cancel()
        # Approved as shown, the call reached its guardrail: it was not asked about again.
        assert checked.is_set() and resumed == [] and refunds.ran == []
        hold[0] = False
        recovered = await refunds.executor.recover("stopped")
    assert [(r.output, r.edited) for r in recovered.results] == [("refunded 300 on A", True)]
    assert refunds.ran == [("A", 300)]


async def test_a_call_repaired_and_rewritten_in_a_journaled_run_runs_what_was_shown_once_recovered(
    store: Store,
) -> None:
    async def repair(call: ts.ToolCall, error: str) -> dict[str, Any]:
        return {"command": "ls"}

    shell = Shell()
    async with store.open() as journal:
        executor = shell.executor(repair_arguments=repair, journal=journal)
        first = await executor.run([ts.ToolCall("c1", "bash", '{"command": ')], run_id="repaired")
        assert shown(first) == {"command": "ls --all"}
        recovered = await executor.recover("repaired")
        assert shown(recovered) == {"command": "ls --all"}
        state = waiting(recovered)
        state.approve("c1")
        done = await executor.resume(state)
    assert not done.interrupted, done.pending
    assert [(r.output, r.repaired) for r in done.results] == [("ran ls --all", True)]
    assert shell.ran == ["ls --all"]


# -- deciding by an ID that is no call ID ---------------------------------------------------------------------------


def nested_run(ran: list[str]) -> ts.Executor:
    """An executor whose ``agent`` tool runs a child run holding a ``delete`` call that asks."""

    @ts.tool(needs_approval=True)
    async def delete(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    @ts.agent_tool(ts.Executor([delete]), name="agent")
    async def agent(path: str, child: ts.ChildRun) -> str:
        """Delete through a child run."""
        outcome = await child.run([ts.ToolCall("d1", "delete", {"path": path})])
        return str(outcome.results[0].output)

    return ts.Executor([agent])


@pytest.mark.parametrize("call_id", [5, None, b"p1/d1", ("p1", "d1")], ids=["int", "none", "bytes", "tuple"])
@pytest.mark.parametrize("verb", ["approve", "reject"])
async def test_deciding_by_an_id_that_is_not_text_is_an_approval_error_and_decides_nothing(
    call_id: Any, verb: str
) -> None:
    # A nested run waits: the ID is matched against the prefixed IDs of its calls too.
    ran: list[str] = []
    executor = nested_run(ran)
    state = waiting(await executor.run([ts.ToolCall("p1", "agent", {"path": "x"})]))
    with pytest.raises(ts.ApprovalError, match="call IDs are text"):
        getattr(state, verb)(call_id)
    assert state.decisions == {"p1": "nested", "p1/d1": "pending"}
    state.approve("p1/d1")
    done = await executor.resume(state)
    assert [r.output for r in done.results] == ["deleted x"] and ran == ["x"]


# -- a decision racing a resume -------------------------------------------------------------------------------------


@pytest.mark.parametrize("decide", ["reject", "approve-edited"])
def test_a_decision_taken_while_another_thread_resumes_the_state_is_refused_or_obeyed(
    monkeypatch: pytest.MonkeyPatch, decide: str
) -> None:
    """A web server's thread decides on a state while another resumes it. The decision passed its check before
    the resume took the records and was written after: ``reject`` returned, yet the approved call ran (and an
    edit returned, yet the earlier arguments ran). Here the decision is held right after its check until the
    resume has finished (or 2 s have gone): it must either be refused (``StateError``) or be what the run obeys."""
    import threading

    from toolsched._policy import runstate

    refunds = Refunds()
    state = waiting(anyio.run(refunds.executor.run, [ts.ToolCall("r1", "refund", {"order": "A", "amount": 25_000})]))
    state.approve("r1")
    resumed = threading.Event()
    deciding: list[threading.Thread] = []
    made = runstate.replace

    def held(record: Any, **changes: Any) -> Any:
        if deciding and threading.current_thread() is deciding[0] and "status" in changes:
            deciding.clear()
            resumed.wait(2)
        return made(record, **changes)

    monkeypatch.setattr(runstate, "replace", held)
    outcomes: list[ts.Outcome] = []
    decided: list[bool] = []

    def resume() -> None:
        try:
            outcomes.append(anyio.run(refunds.executor.resume, state))
        finally:
            resumed.set()

    def decision() -> None:
        try:
            if decide == "reject":
                state.reject("r1", "no")
            else:
                state.approve("r1", args={"order": "A", "amount": 7})
            decided.append(True)
        except ts.StateError:
            decided.append(False)

    decider = threading.Thread(target=decision)
    deciding.append(decider)
    resumer = threading.Thread(target=resume)
    decider.start()
    while deciding:  # the decision has passed its check
        resumed.wait(0.001)
    resumer.start()
    decider.join()
    resumer.join()
    monkeypatch.undo()
    (outcome,) = outcomes
    if decided == [False]:
        assert refunds.ran == [("A", 250)]  # refused: the approval given before stands
    elif decide == "reject":
        assert refunds.ran == [] and outcome.results[0].error_kind == "permission_denied"
    else:
        assert refunds.ran == [("A", 7)] and outcome.results[0].edited


# -- deciding on a state already resumed ----------------------------------------------------------------------------


@pytest.mark.parametrize("verb", ["approve", "approve-edited", "reject"])
async def test_deciding_on_a_state_already_resumed_is_an_approval_error(verb: str) -> None:
    # Promise (permissions.md): deciding a call "in a state already resumed raises `ts.ApprovalError`, a
    # `ts.StateError`": a web handler catches ApprovalError for every decision that comes too late. A copy
    # made the Python ways of a resumed state is resumed too.
    refunds = Refunds()
    calls = [
        ts.ToolCall("r1", "refund", {"order": "A", "amount": 5}),
        ts.ToolCall("r2", "refund", {"order": "B", "amount": 6}),
    ]
    state = waiting(await refunds.executor.run(calls))
    state.approve("r1")
    state.reject("r2")
    await refunds.executor.resume(state)
    for target in (state, copy.copy(state), copy.deepcopy(state), pickle.loads(pickle.dumps(state))):
        with pytest.raises(ts.ApprovalError, match="already resumed"):
            if verb == "reject":
                target.reject("r2")
            else:
                target.approve("r2", args={"order": "B", "amount": 1} if verb == "approve-edited" else None)
    assert refunds.ran == [("A", 5)]
