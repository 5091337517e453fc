"""Attacks on the executor's core: the checks a call meets before it runs (``validate_input``, hooks,
``check_permissions``, the approver, the tool's judgements of its arguments, batch hooks) failing in ways an
``except Exception`` misses, and the executor's options and ``run``'s calls given the wrong types."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio


def cancelled_by_hand(*_: Any) -> Any:
    """What a check raises when something it awaited was cancelled by someone else (or it raised a cancellation
    itself): an ``asyncio.CancelledError`` while nothing cancelled the run."""
    raise asyncio.CancelledError("a future it awaited was cancelled elsewhere")


async def cancelled_by_hand_async(*_: Any) -> Any:
    raise asyncio.CancelledError("a future it awaited was cancelled elsewhere")


def checked_tool(ran: list[int], **methods: Any) -> ts.Tool:
    class Checked(ts.Tool):
        name = "checked"
        description = "A tool whose checks are given."
        input_schema = {"type": "object", "properties": {"n": {"type": "integer"}}}

        async def call(self, args: Any, ctx: Any) -> int:
            ran.append(args["n"])
            return int(args["n"])

    for name, method in methods.items():
        setattr(Checked, name, method)
    return Checked()


def calls() -> list[ts.ToolCall]:
    return [ts.ToolCall("c1", "checked", {"n": 1}), ts.ToolCall("c2", "checked", {"n": 2})]


# Each check raising a cancellation that is not the run's, with what its failure means for the calls:
# (the tool's methods, the executor's options, the error kind of both calls, which calls ran).
CHECKS: dict[str, tuple[dict[str, Any], dict[str, Any], str | None, list[int]]] = {
    "validate_input": ({"validate_input": cancelled_by_hand_async}, {}, "semantic_error", []),
    "check_permissions": ({"check_permissions": cancelled_by_hand_async}, {}, "permission_denied", []),
    "pre_tool_use hook": ({}, {"hooks": ts.Hooks().pre_tool_use("*", cancelled_by_hand_async)}, "hook_blocked", []),
    "pre_tool_use hook with a timeout": (
        {},
        {"hooks": ts.Hooks(timeout=30).pre_tool_use("*", cancelled_by_hand_async)},
        "hook_blocked",
        [],
    ),
    "approver": (
        {"needs_approval": lambda self, args: True},
        {"approver": cancelled_by_hand_async},
        "permission_denied",
        [],
    ),
    "pre_batch hook": ({}, {"hooks": ts.Hooks().pre_batch("*", cancelled_by_hand_async)}, "hook_blocked", []),
    "post_batch hook": ({}, {"hooks": ts.Hooks().post_batch("*", cancelled_by_hand_async)}, None, [1, 2]),
    # The tool's judgements of its arguments: a failure is the fail-closed answer.
    "is_concurrency_safe": ({"is_concurrency_safe": cancelled_by_hand}, {}, None, [1, 2]),
    "resources": ({"resources": cancelled_by_hand}, {"strategy": ts.ResourceAware()}, None, [1, 2]),
    "is_read_only in plan mode": (
        {"is_read_only": cancelled_by_hand},
        {"permissions": ts.Permissions(mode="plan")},
        "permission_denied",
        [],
    ),
}


@pytest.mark.parametrize("check", list(CHECKS))
async def test_a_check_that_raises_a_cancellation_not_the_runs_fails_as_that_check(check: str) -> None:
    """Documented for tools, post hooks and listeners: a cancellation that is not the run's is the code's own
    failure. The checks before a call are held to the same rule (a failing check is fail-closed); before, the
    run raised the CancelledError to a caller nobody had cancelled."""
    methods, options, kind, ran_expected = CHECKS[check]
    ran: list[int] = []
    outcome = await ts.Executor([checked_tool(ran, **methods)], **options).run(calls())
    assert [result.call_id for result in outcome.results] == ["c1", "c2"]
    assert [result.error_kind for result in outcome.results] == [kind, kind]
    assert ran == ran_expected


async def test_a_check_of_rewritten_input_that_raises_a_cancellation_not_the_runs_blocks_the_call() -> None:
    validated: list[int] = []

    async def validate_input(self: Any, args: Any, ctx: Any) -> None:
        validated.append(args["n"])
        if args["n"] == 7:
            raise asyncio.CancelledError("a future it awaited was cancelled elsewhere")

    hooks = ts.Hooks().pre_tool_use("*", lambda event: ts.Rewrite({"n": 7}))
    ran: list[int] = []
    outcome = await ts.Executor([checked_tool(ran, validate_input=validate_input)], hooks=hooks).run(calls())
    assert [result.error_kind for result in outcome.results] == ["hook_blocked", "hook_blocked"]
    assert ran == []


async def test_needs_approval_that_raises_a_cancellation_not_the_runs_asks() -> None:
    ran: list[int] = []
    outcome = await ts.Executor([checked_tool(ran, needs_approval=cancelled_by_hand)]).run(calls())
    assert outcome.interrupted
    assert [request.call_id for request in outcome.pending] == ["c1", "c2"]
    assert ran == []


@pytest.mark.parametrize("where", ["pre_tool_use", "pre_batch", "approver"])
async def test_the_runs_own_cancellation_during_a_check_still_stops_the_run(where: str) -> None:
    started = anyio.Event()

    async def waits(*_: Any) -> None:
        started.set()
        await anyio.sleep_forever()

    options: dict[str, Any] = {
        "pre_tool_use": {"hooks": ts.Hooks().pre_tool_use("*", waits)},
        "pre_batch": {"hooks": ts.Hooks().pre_batch("*", waits)},
        "approver": {"approver": waits},
    }[where]
    methods = {"needs_approval": lambda self, args: True} if where == "approver" else {}
    ran: list[int] = []
    executor = ts.Executor([checked_tool(ran, **methods)], **options)
    finished = False
    with anyio.CancelScope() as scope:

        async def cancel_once_started() -> None:
            await started.wait()
            scope.cancel()

        async with anyio.create_task_group() as group:
            group.start_soon(cancel_once_started)
            await executor.run(calls())
            finished = True
    assert scope.cancelled_caught
    assert not finished
    assert ran == []


async def test_a_repair_function_that_raises_a_cancellation_not_the_runs_leaves_the_call_refused() -> None:
    ran: list[int] = []
    executor = ts.Executor([checked_tool(ran)], repair_arguments=cancelled_by_hand_async)
    outcome = await executor.run([ts.ToolCall("c1", "checked", {"n": "one"}), ts.ToolCall("c2", "checked", {"n": 2})])
    assert [result.error_kind for result in outcome.results] == ["invalid_input", None]
    assert ran == [2]
