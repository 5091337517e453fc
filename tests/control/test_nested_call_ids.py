"""Nested approvals under prefixed IDs: a decision by ID reaches the request shown under it, or none.

A nested run's requests are listed as ``"<parent call id>/<child call id>"``. A
top-level call (or another nested request) may be spelled the same way; deciding
by that ID must then be refused, never land on a call nobody was shown.
"""

from __future__ import annotations

import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio


class Bank:
    """A nested helper whose child reads a note (asks first), and a top-level tool that moves money (asks first)."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, object]] = []
        ran = self.ran

        @ts.tool(needs_approval=True)
        async def read_note(name: str) -> str:
            """Read a note."""
            ran.append(("read_note", name))
            return "note"

        @ts.agent_tool(ts.Executor([read_note]), description="helper")
        async def helper(task: str, child_call: str, child: ts.ChildRun) -> str:
            outcome = await child.run([ts.ToolCall(child_call, "read_note", {"name": task})])
            return str(outcome.results[0].output)

        @ts.tool(needs_approval=True)
        async def wire_money(amount: int) -> str:
            """Wire money."""
            ran.append(("wire_money", amount))
            return "sent"

        @ts.tool()
        async def check_balance(amount: int) -> str:
            """Check the balance."""
            ran.append(("check_balance", amount))
            return "plenty"

        self.executor = ts.Executor([helper, wire_money, check_balance])


def nested_call() -> ts.ToolCall:
    return ts.ToolCall("t1", "helper", {"task": "readme", "child_call": "x1"})


def wire_call() -> ts.ToolCall:
    return ts.ToolCall("t1/x1", "wire_money", {"amount": 1_000_000})


ORDERS = {"top_level_first": [wire_call, nested_call], "nested_first": [nested_call, wire_call]}


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("verb", ["approve", "reject"])
async def test_an_id_naming_a_nested_request_and_a_top_level_call_decides_neither(order: str, verb: str) -> None:
    bank = Bank()
    outcome = await bank.executor.run([make() for make in ORDERS[order]])
    state = outcome.state
    assert sorted((p.call_id, p.tool_name) for p in state.pending) == [("t1/x1", "read_note"), ("t1/x1", "wire_money")]
    request = next(p for p in state.pending if p.tool_name == "read_note")

    with pytest.raises(ts.ApprovalError, match=r"'t1/x1'.*ambiguous") as refused:
        if verb == "approve":
            state.approve(request.call_id)
        else:
            state.reject(request.call_id, "no")
    assert "wire_money" in str(refused.value) and "read_note" in str(refused.value)

    final = await bank.executor.resume(state)
    assert bank.ran == []  # nothing ran that nobody approved
    assert final.interrupted
    assert sorted(p.tool_name for p in final.pending) == ["read_note", "wire_money"]


async def test_the_ambiguity_survives_saving_the_state() -> None:
    bank = Bank()
    outcome = await bank.executor.run([nested_call(), wire_call()])
    restored = ts.RunState.from_json(outcome.state.to_json())
    with pytest.raises(ts.ApprovalError, match="ambiguous"):
        restored.approve("t1/x1", always=True)
    await bank.executor.resume(restored)
    assert bank.ran == []


@pytest.mark.parametrize("order", ORDERS)
async def test_rejecting_the_parent_call_leaves_the_id_naming_one_call(order: str) -> None:
    bank = Bank()
    outcome = await bank.executor.run([make() for make in ORDERS[order]])
    state = outcome.state
    state.reject("t1", "not now")  # abandons the nested run: its request is gone
    assert [(p.call_id, p.tool_name) for p in state.pending] == [("t1/x1", "wire_money")]
    state.approve("t1/x1")
    final = await bank.executor.resume(state)
    assert bank.ran == [("wire_money", 1_000_000)]
    assert not final.interrupted


@pytest.mark.parametrize("verb", ["approve", "reject"])
async def test_a_completed_top_level_call_does_not_hide_the_nested_request_spelled_like_it(verb: str) -> None:
    bank = Bank()
    outcome = await bank.executor.run([ts.ToolCall("t1/x1", "check_balance", {"amount": 5}), nested_call()])
    assert bank.ran == [("check_balance", 5)]
    state = outcome.state
    assert [(p.call_id, p.tool_name) for p in state.pending] == [("t1/x1", "read_note")]
    if verb == "approve":
        state.approve("t1/x1")
    else:
        state.reject("t1/x1", "no")
    final = await bank.executor.resume(state)
    assert not final.interrupted
    expected = [("check_balance", 5), ("read_note", "readme")] if verb == "approve" else [("check_balance", 5)]
    assert bank.ran == expected  # the completed call did not run again


async def test_two_nested_requests_spelled_alike_are_decided_by_neither() -> None:
    bank = Bank()
    outcome = await bank.executor.run(
        [
            ts.ToolCall("a", "helper", {"task": "first", "child_call": "b/c"}),
            ts.ToolCall("a/b", "helper", {"task": "second", "child_call": "c"}),
        ]
    )
    state = outcome.state
    assert [(p.call_id, p.parent_call_id) for p in state.pending] == [("a/b/c", "a"), ("a/b/c", "a/b")]
    for decide in (lambda: state.approve("a/b/c"), lambda: state.reject("a/b/c")):
        with pytest.raises(ts.ApprovalError, match="ambiguous"):
            decide()
    await bank.executor.resume(state)
    assert bank.ran == []
