"""Guardrails: input checks just before a call runs, output checks before its output is accepted."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio


def make_tools(runs: list[str]) -> list[ts.Tool]:
    @ts.tool(concurrency_safe=True)
    async def fetch(url: str, delay: float = 0.0) -> str:
        runs.append(url)
        await anyio.sleep(delay)
        return f"<html>{url}</html>"

    @ts.tool
    async def send(to: str, body: str) -> str:
        runs.append(to)
        return f"sent to {to}: {body}"

    return [fetch, send]


async def test_an_input_guardrail_rejects_a_call_with_a_message_for_the_model() -> None:
    runs: list[str] = []
    failures: list[str] = []

    def no_internal_hosts(event: ts.GuardrailEvent) -> ts.Reject | None:
        assert event.stage == "input"
        if "internal" in event.args.get("url", ""):
            return ts.Reject("internal hosts are off limits; use a public URL")
        return None

    hooks = ts.Hooks().post_tool_use_failure("*", lambda event: failures.append(event.call_id))
    executor = ts.Executor(make_tools(runs), input_guardrails=[no_internal_hosts], hooks=hooks)
    outcome = await executor.run(
        [
            ts.ToolCall("1", "fetch", {"url": "https://internal.corp"}),
            ts.ToolCall("2", "fetch", {"url": "https://a.org"}),
        ]
    )
    first, second = outcome.results
    assert (first.error_kind, first.error) == ("guardrail_rejected", "internal hosts are off limits; use a public URL")
    assert second.output == "<html>https://a.org</html>"
    assert runs == ["https://a.org"]
    assert failures == ["1"]


async def test_input_guardrails_run_just_before_invocation_on_the_final_input() -> None:
    runs: list[str] = []
    seen: list[tuple[str, list[str]]] = []

    async def record(event: ts.GuardrailEvent) -> None:
        seen.append((event.args["to"], list(runs)))

    hooks = ts.Hooks().pre_tool_use("send", lambda event: ts.Rewrite({**event.args, "to": event.args["to"].lower()}))
    executor = ts.Executor(make_tools(runs), input_guardrails=[record], hooks=hooks, strategy=ts.Sequential())
    await executor.run(
        [ts.ToolCall("1", "send", {"to": "ANN", "body": "hi"}), ts.ToolCall("2", "send", {"to": "BOB", "body": "hi"})]
    )
    # The second call's guardrail ran after the first call had run, not when the turn was admitted.
    assert seen == [("ann", []), ("bob", ["ann"])]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (None, None),
        (True, None),
        (False, "refused by input guardrail"),
        ("no", "returned 'no'"),
        (ts.Decision.deny("x"), "not None or Reject"),
    ],
)
async def test_guardrail_answers(answer: Any, expected: str | None) -> None:
    runs: list[str] = []
    executor = ts.Executor(make_tools(runs), input_guardrails=[lambda event: answer])
    outcome = await executor.run([ts.ToolCall("1", "fetch", {"url": "u"})])
    result = outcome.results[0]
    if expected is None:
        assert result.error_kind is None and runs == ["u"]
    else:
        assert result.error_kind == "guardrail_rejected" and expected in (result.error or "")
        assert runs == []


async def test_a_guardrail_that_fails_rejects_the_call(caplog: pytest.LogCaptureFixture) -> None:
    runs: list[str] = []

    async def classifier(event: ts.GuardrailEvent) -> None:
        raise TimeoutError("moderation API timed out")

    with caplog.at_level(logging.WARNING, logger="toolsched"):
        outcome = await ts.Executor(make_tools(runs), input_guardrails=[classifier]).run(
            [ts.ToolCall("1", "fetch", {"url": "u"})]
        )
    assert outcome.results[0].error_kind == "guardrail_rejected"
    assert "moderation API timed out" in (outcome.results[0].error or "")
    assert runs == []
    assert any("classifier" in record.getMessage() for record in caplog.records)


async def test_a_tripped_guardrail_stops_the_run_after_its_batch_settles() -> None:
    runs: list[str] = []

    def tripwire(event: ts.GuardrailEvent) -> None:
        if event.args.get("url") == "evil":
            raise ts.GuardrailTripped("prompt injection detected")

    executor = ts.Executor(make_tools(runs), input_guardrails=[tripwire])
    calls = [
        ts.ToolCall("1", "fetch", {"url": "slow", "delay": 0.05}),
        ts.ToolCall("2", "fetch", {"url": "evil"}),
        ts.ToolCall("3", "send", {"to": "boss", "body": "x"}),
    ]
    with pytest.raises(ts.GuardrailTripped, match="prompt injection detected") as caught:
        await executor.run(calls)
    assert caught.value.call_id == "2"
    # The sibling in the same batch finished; the next batch never started.
    assert runs == ["slow"]
    assert [(r.call_id, r.error_kind) for r in caught.value.results] == [("1", None), ("2", "guardrail_rejected")]


async def test_an_output_guardrail_rejects_output_before_it_is_accepted() -> None:
    runs: list[str] = []
    seen: list[Any] = []

    async def no_secrets(event: ts.GuardrailEvent) -> ts.Reject | None:
        assert event.stage == "output"
        seen.append(event.output)
        if "secret" in event.output:
            return ts.Reject("the page held credentials and was withheld")
        return None

    executor = ts.Executor(make_tools(runs), output_guardrails=[no_secrets])
    outcome = await executor.run(
        [ts.ToolCall("1", "fetch", {"url": "secret-page"}), ts.ToolCall("2", "fetch", {"url": "plain"})]
    )
    first, second = outcome.results
    assert (first.error_kind, first.output, first.error) == (
        "guardrail_rejected",
        None,
        "the page held credentials and was withheld",
    )
    assert second.output == "<html>plain</html>"
    assert sorted(runs) == ["plain", "secret-page"]
    assert sorted(seen) == ["<html>plain</html>", "<html>secret-page</html>"]


async def test_output_guardrails_do_not_run_for_failed_calls() -> None:
    seen: list[str] = []

    @ts.tool
    async def broken() -> str:
        raise ValueError("nope")

    outcome = await ts.Executor([broken], output_guardrails=[lambda event: seen.append(event.call_id)]).run(
        [ts.ToolCall("1", "broken", {})]
    )
    assert outcome.results[0].error_kind == "execution_error"
    assert seen == []


def test_guardrails_must_be_callables() -> None:
    with pytest.raises(TypeError, match="not callable"):
        ts.Executor(make_tools([]), input_guardrails=["strict"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="collection of callables"):
        ts.Executor(make_tools([]), output_guardrails=lambda event: None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="non-empty message"):
        ts.Reject("")
