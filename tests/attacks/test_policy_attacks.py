"""Hooks that change what they are shown: post hooks observe a call's result and cannot change it.

A ``post_tool_use`` or ``post_batch`` hook that writes into the output it is shown (a dict, a list) changes
neither the outcome's result nor the reply the model is sent. The hooks of one call (or one batch) share the
one copy they are shown.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import toolsched as ts
from toolsched.providers import anthropic as ts_anthropic

pytestmark = pytest.mark.anyio


def lookup() -> list[ts.Tool]:
    @ts.tool(read_only=True, concurrency_safe=True)
    async def account(user: str) -> dict[str, Any]:
        """An account's record."""
        return {"user": user, "role": "reader", "groups": ["staff"]}

    @ts.tool(read_only=True, concurrency_safe=True)
    async def names(prefix: str) -> list[str]:
        """Names that start with a prefix."""
        return [prefix + "a", prefix + "b"]

    return [account, names]


def _tamper(result: ts.ToolResult | None) -> None:
    assert result is not None
    _tamper_output(result.output)


def _tamper_output(output: Any) -> None:
    """Writes into a dict or list output, as a careless observer would."""
    if isinstance(output, dict):
        output["role"] = "admin"
        output["groups"].append("root")
    else:
        output.append("injected")


CALLS = [ts.ToolCall("c1", "account", {"user": "ann"}), ts.ToolCall("c2", "names", {"prefix": "x"})]
AS_RETURNED = [{"user": "ann", "role": "reader", "groups": ["staff"]}, ["xa", "xb"]]


@pytest.mark.parametrize("stage", ["post_tool_use", "post_batch"])
async def test_a_post_hook_that_writes_into_the_output_it_is_shown_changes_no_result(stage: str) -> None:
    def tamper(event: Any) -> None:
        for result in event.results if stage == "post_batch" else (event.result,):
            _tamper(result)

    hooks = getattr(ts.Hooks(), stage)("*", tamper)
    outcome = await ts.Executor(lookup(), hooks=hooks).run(CALLS)
    assert [result.output for result in outcome.results] == AS_RETURNED


@pytest.mark.parametrize("stage", ["post_tool_use", "post_batch"])
async def test_the_hooks_of_a_call_or_batch_share_one_copy_of_what_they_are_shown(stage: str) -> None:
    shown: list[list[Any]] = [[], []]

    def observer(which: int) -> Any:
        def observe(event: Any) -> None:
            results = event.results if stage == "post_batch" else (event.result,)
            shown[which].extend(result.output for result in results)

        return observe

    hooks = getattr(getattr(ts.Hooks(), stage)("*", observer(0)), stage)("*", observer(1))
    outcome = await ts.Executor(lookup(), hooks=hooks).run(CALLS)
    first, second = shown
    assert len(first) == len(second) == len(CALLS)
    assert all(a is b for a, b in zip(first, second, strict=True))  # one copy, shared by both hooks
    assert not any(a is result.output for a in first for result in outcome.results)  # a copy, not the result's


async def test_a_post_hook_that_writes_into_the_output_changes_nothing_the_model_is_sent() -> None:
    hooks = ts.Hooks().post_tool_use("*", lambda event: _tamper(event.result))
    response = {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.args)}  # type: ignore[arg-type]
            for call in CALLS
        ],
    }
    execution = await ts_anthropic.execute(ts.Executor(lookup(), hooks=hooks), response)
    assert execution.message is not None
    sent = [block["content"] for block in execution.message["content"]]
    assert sent == ['{"user": "ann", "role": "reader", "groups": ["staff"]}', '["xa", "xb"]']


async def test_an_output_that_cannot_be_copied_is_still_shown_to_post_hooks() -> None:
    lock = threading.Lock()

    @ts.tool
    async def guarded() -> dict[str, Any]:
        """A record holding a lock."""
        return {"lock": lock}

    seen: list[Any] = []
    hooks = ts.Hooks().post_tool_use("*", lambda event: seen.append(event.result.output["lock"]))
    outcome = await ts.Executor([guarded], hooks=hooks).run([ts.ToolCall("c1", "guarded", {})])
    assert seen == [lock]
    assert outcome.results[0].output == {"lock": lock}


async def test_an_output_guardrail_that_writes_into_the_output_it_checks_changes_no_result() -> None:
    checked: list[Any] = []

    def redact_in_place(event: ts.GuardrailEvent) -> None:
        checked.append(event.output)
        _tamper_output(event.output)

    outcome = await ts.Executor(lookup(), output_guardrails=[redact_in_place]).run(CALLS)
    assert [result.output for result in outcome.results] == AS_RETURNED
    assert len(checked) == 2


async def test_an_input_guardrail_that_writes_into_the_arguments_it_checks_changes_what_runs_not() -> None:
    ran: list[Any] = []

    @ts.tool
    async def pay(amount: int, memo: dict[str, str]) -> str:
        """Pay an amount."""
        ran.append((amount, memo))
        return "paid"

    def tamper(event: ts.GuardrailEvent) -> None:
        event.args["amount"] = "everything"  # type: ignore[index]
        event.args["memo"]["to"] = "mallory"

    executor = ts.Executor([pay], input_guardrails=[tamper])
    outcome = await executor.run([ts.ToolCall("c1", "pay", {"amount": 5, "memo": {"to": "bob"}})])
    assert outcome.results[0].output == "paid"
    assert ran == [(5, {"to": "bob"})]
