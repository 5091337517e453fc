"""Attacks on copies of a paused state made the Python ways (``copy.copy``, ``copy.deepcopy``, pickle) beside
``state.copy()`` and JSON: each is independent (an answer or decision on one never shows on another), and the
run resumes once whichever copies are resumed, one after another or at the same time."""

from __future__ import annotations

import copy
import pickle
from collections import Counter
from collections.abc import Callable

import anyio
import anyio.lowlevel
import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio

COPIES: dict[str, Callable[[ts.RunState], ts.RunState]] = {
    "state.copy": lambda state: state.copy(),
    "copy.copy": copy.copy,
    "copy.deepcopy": copy.deepcopy,
    "pickle": lambda state: pickle.loads(pickle.dumps(state)),
    "json": lambda state: ts.RunState.from_json(state.to_json()),
}


def shop(ran: Counter[str]) -> ts.Executor:
    @ts.tool(external=True)
    def confirm(order: str) -> str:
        """Asks the customer to confirm an order (answered from outside)."""

    @ts.tool(needs_approval=True)
    async def ship(order: str, ctx: ts.ToolContext) -> str:
        """Ships an order (asks first)."""
        ran[ctx.call_id] += 1
        await anyio.lowlevel.checkpoint()
        return f"shipped {order}"

    return ts.Executor([confirm, ship])


TURN = [ts.ToolCall("e1", "confirm", {"order": "A-1"}), ts.ToolCall("s1", "ship", {"order": "A-1"})]


@pytest.mark.parametrize("how", list(COPIES))
async def test_an_answer_or_decision_on_a_copy_never_shows_on_the_original(how: str) -> None:
    outcome = await shop(Counter()).run(TURN)
    state = outcome.state
    assert state is not None
    twin = COPIES[how](state)
    twin.complete("e1", output="on the copy")
    twin.approve("s1")
    assert state.decisions == {"e1": "external", "s1": "pending"}
    state.fail("e1", error="on the original")
    state.reject("s1")
    assert twin.decisions == {"e1": "completed", "s1": "approved"}


@pytest.mark.parametrize("how", list(COPIES))
async def test_two_copies_resumed_at_once_resume_the_run_once(how: str) -> None:
    ran: Counter[str] = Counter()
    executor = shop(ran)
    outcome = await executor.run(TURN)
    state = outcome.state
    assert state is not None
    states = [state, COPIES[how](state)]
    for index, each in enumerate(states):
        each.complete("e1", output=f"answer {index}")
        each.approve("s1")
    resumed: list[ts.Outcome] = []
    refused: list[BaseException] = []

    async def resume(each: ts.RunState) -> None:
        try:
            resumed.append(await executor.resume(each))
        except ts.StateError as exc:
            refused.append(exc)

    async with anyio.create_task_group() as group:
        for each in states:
            group.start_soon(resume, each)
    assert len(resumed) == 1 and len(refused) == 1
    assert ran == Counter({"s1": 1})
    assert [r.call_id for r in resumed[0].results] == ["e1", "s1"]


async def test_a_copy_of_a_resumed_state_is_resumed_too() -> None:
    executor = shop(Counter())
    outcome = await executor.run(TURN)
    state = outcome.state
    assert state is not None
    state.complete("e1", output="yes")
    state.reject("s1")
    await executor.resume(state)
    for twin in (copy.copy(state), copy.deepcopy(state)):
        with pytest.raises(ts.StateError, match="already resumed"):
            twin.complete("e1", output="again")
        with pytest.raises(ts.StateError, match="already resumed"):
            await executor.resume(twin)
