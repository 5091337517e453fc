"""Hooks: order, composition, decisions, fail-closed errors, post hooks and batch hooks."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import anyio
import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio


class Files:
    def __init__(self) -> None:
        self.runs: list[tuple[str, Any]] = []
        runs = self.runs

        @ts.tool(rule_subject="path", aliases=["write_file"])
        async def edit(path: str, text: str = "") -> str:
            runs.append(("edit", path))
            return f"edited {path}"

        @ts.tool(read_only=True, concurrency_safe=True, rule_subject="path")
        async def read(path: str) -> str:
            runs.append(("read", path))
            return f"read {path}"

        @ts.tool(needs_approval=True)
        async def remove(target: str) -> str:
            runs.append(("remove", target))
            return f"removed {target}"

        @ts.tool
        async def explode(message: str) -> str:
            runs.append(("explode", message))
            raise RuntimeError(message)

        self.tools = [edit, read, remove, explode]


def one(name: str, args: Any) -> list[ts.ToolCall]:
    return [ts.ToolCall("c1", name, args)]


# -- order and composition -----------------------------------------------------------


async def test_pre_hooks_run_in_registration_order_and_rewrites_compose() -> None:
    files = Files()
    seen: list[tuple[str, str]] = []

    def relocate(event: ts.HookEvent) -> ts.Rewrite:
        seen.append(("relocate", event.args["path"]))
        return ts.Rewrite({**event.args, "path": "sandbox/" + event.args["path"]})

    async def suffix(event: ts.HookEvent) -> ts.Rewrite:
        seen.append(("suffix", event.args["path"]))
        return ts.Rewrite({**event.args, "path": event.args["path"] + ".txt"})

    async def observe(event: ts.HookEvent) -> None:
        seen.append(("observe", event.args["path"]))

    hooks = ts.Hooks().pre_tool_use("edit", relocate).pre_tool_use("*", suffix).pre_tool_use("edit|read", observe)
    outcome = await ts.Executor(files.tools, hooks=hooks).run(one("edit", {"path": "notes"}))
    assert seen == [("relocate", "notes"), ("suffix", "sandbox/notes"), ("observe", "sandbox/notes.txt")]
    assert files.runs == [("edit", "sandbox/notes.txt")]
    assert outcome.results[0].output == "edited sandbox/notes.txt"


async def test_hooks_run_one_after_another_whatever_their_speed() -> None:
    files = Files()
    log: list[str] = []

    def make(label: str, delay: float) -> Any:
        async def hook(event: ts.HookEvent) -> None:
            log.append(f"start {label} {event.call_id}")
            await anyio.sleep(delay)
            log.append(f"end {label} {event.call_id}")

        return hook

    hooks = ts.Hooks().pre_tool_use("read", make("slow", 0.03)).pre_tool_use("read", make("fast", 0.0))
    calls = [ts.ToolCall("a", "read", {"path": "1"}), ts.ToolCall("b", "read", {"path": "2"})]
    await ts.Executor(files.tools, hooks=hooks).run(calls)
    assert log == [
        "start slow a",
        "end slow a",
        "start fast a",
        "end fast a",
        "start slow b",
        "end slow b",
        "start fast b",
        "end fast b",
    ]


@pytest.mark.parametrize(
    ("matcher", "expected"),
    [
        ("edit", ["edit"]),
        ("write_file", ["edit"]),
        ("edit|remove", ["edit", "remove"]),
        ("re.*", ["read", "remove"]),
        ("(?!read).*", ["edit", "remove", "explode"]),
        ("*", ["edit", "read", "remove", "explode"]),
        ("", ["edit", "read", "remove", "explode"]),
        ("ed", []),
    ],
)
async def test_matchers_select_tools_by_name_or_alias(matcher: str, expected: list[str]) -> None:
    files = Files()
    seen: list[str] = []

    async def hook(event: ts.HookEvent) -> ts.Decision:
        seen.append(event.tool_name)
        return ts.Decision.allow()

    executor = ts.Executor(files.tools, hooks=ts.Hooks().pre_tool_use(matcher, hook))
    for name, args in [
        ("edit", {"path": "a"}),
        ("read", {"path": "a"}),
        ("remove", {"target": "a"}),
        ("explode", {"message": "x"}),
    ]:
        await executor.run(one(name, args))
    assert seen == expected


def test_a_matcher_that_does_not_parse_is_refused() -> None:
    with pytest.raises(ts.RuleError, match="valid regex"):
        ts.Hooks().pre_tool_use("edit(", lambda event: None)
    with pytest.raises(ts.RuleError):
        ts.Hooks().post_tool_use(3, lambda event: None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        ts.Hooks().pre_tool_use("edit", "not a function")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        ts.Hooks().pre_tool_use("edit", lambda event: None, timeout=0)
    with pytest.raises(TypeError, match="mapping or JSON text"):
        ts.Rewrite(42)  # type: ignore[arg-type]


# -- decisions -------------------------------------------------------------------------


def answering(decision: ts.Decision | None, log: list[str] | None = None, label: str = "") -> Any:
    async def hook(event: ts.HookEvent) -> ts.Decision | None:
        if log is not None:
            log.append(label)
        return decision

    return hook


async def test_a_hook_deny_blocks_the_call_and_stops_later_hooks() -> None:
    files = Files()
    log: list[str] = []
    hooks = (
        ts.Hooks()
        .pre_tool_use("edit", answering(ts.Decision.allow(), log, "first"))
        .pre_tool_use("edit", answering(ts.Decision.deny("edits are frozen today"), log, "second"))
        .pre_tool_use("edit", answering(None, log, "third"))
    )
    outcome = await ts.Executor(files.tools, hooks=hooks).run(one("edit", {"path": "a"}))
    result = outcome.results[0]
    assert (result.error_kind, result.error) == ("hook_blocked", "edits are frozen today")
    assert log == ["first", "second"]
    assert files.runs == []


@pytest.mark.parametrize(
    ("decisions", "rules", "expected"),
    [
        ([ts.Decision.allow()], {}, "ran"),
        ([ts.Decision.ask("check")], {}, "asked"),
        ([ts.Decision.allow(), ts.Decision.ask("check")], {}, "asked"),
        ([ts.Decision.ask("check"), ts.Decision.allow()], {}, "asked"),
        ([ts.Decision.ask("check"), ts.Decision.deny("no")], {}, "hook_blocked"),
        ([ts.Decision.allow()], {"deny": ["edit"]}, "permission_denied"),
        ([ts.Decision.allow()], {"deny": ["edit(a)"]}, "permission_denied"),
        ([ts.Decision.allow()], {"ask": ["edit"]}, "asked"),
        ([ts.Decision.allow()], {"mode": "ask"}, "ran"),
        ([ts.Decision.allow()], {"mode": "plan"}, "permission_denied"),
        ([ts.Decision.deny("no")], {"allow": ["edit"]}, "hook_blocked"),
        ([ts.Decision.ask("check")], {"allow": ["edit"]}, "asked"),
        ([ts.Decision.ask("check")], {"mode": "bypass"}, "ran"),
        ([ts.Decision.deny("no")], {"mode": "bypass"}, "hook_blocked"),
    ],
)
async def test_hook_decisions_merge_with_rules_deny_over_ask_over_allow(
    decisions: list[ts.Decision], rules: dict[str, Any], expected: str
) -> None:
    files = Files()
    hooks = ts.Hooks()
    for decision in decisions:
        hooks.pre_tool_use("edit", answering(decision))
    executor = ts.Executor(files.tools, hooks=hooks, permissions=ts.Permissions(root="/w", **rules))
    outcome = await executor.run(one("edit", {"path": "a"}))
    if expected == "asked":
        assert outcome.interrupted and [p.call_id for p in outcome.pending] == ["c1"]
        assert outcome.pending[0].reason in ("check", "matches the ask rule `edit`")
    else:
        assert (outcome.results[0].error_kind or "ran") == expected
    assert files.runs == ([("edit", "a")] if expected == "ran" else [])


async def test_a_hook_allow_waives_the_tools_needs_approval() -> None:
    files = Files()
    hooks = ts.Hooks().pre_tool_use("remove", answering(ts.Decision.allow()))
    outcome = await ts.Executor(files.tools, hooks=hooks).run(one("remove", {"target": "x"}))
    assert not outcome.interrupted
    assert files.runs == [("remove", "x")]


async def test_rules_judge_the_input_the_hooks_produced() -> None:
    files = Files()
    perms = ts.Permissions(deny=["edit(secret/**)"], root="/w")

    async def into_secret(event: ts.HookEvent) -> ts.Rewrite:
        return ts.Rewrite({"path": "secret/" + event.args["path"]})

    async def out_of_secret(event: ts.HookEvent) -> ts.Rewrite:
        return ts.Rewrite({"path": event.args["path"].replace("secret/", "public/")})

    blocked = ts.Executor(files.tools, permissions=perms, hooks=ts.Hooks().pre_tool_use("edit", into_secret))
    assert (await blocked.run(one("edit", {"path": "a"}))).results[0].error_kind == "permission_denied"
    cleaned = ts.Executor(files.tools, permissions=perms, hooks=ts.Hooks().pre_tool_use("edit", out_of_secret))
    assert (await cleaned.run(one("edit", {"path": "secret/a"}))).results[0].error_kind is None
    assert files.runs == [("edit", "public/a")]


async def test_a_hook_cannot_change_the_input_by_mutating_its_event() -> None:
    files = Files()

    async def meddle(event: ts.HookEvent) -> None:
        event.args["path"] = "elsewhere"  # type: ignore[index]
        with pytest.raises(dataclasses.FrozenInstanceError):
            event.args = {}  # type: ignore[misc]

    await ts.Executor(files.tools, hooks=ts.Hooks().pre_tool_use("*", meddle)).run(one("edit", {"path": "here"}))
    assert files.runs == [("edit", "here")]


# -- fail closed -------------------------------------------------------------------------


async def test_a_pre_hook_that_raises_blocks_the_call_with_the_reason(caplog: pytest.LogCaptureFixture) -> None:
    files = Files()

    async def broken(event: ts.HookEvent) -> None:
        raise ConnectionError("policy server unreachable")

    with caplog.at_level(logging.WARNING, logger="toolsched"):
        outcome = await ts.Executor(files.tools, hooks=ts.Hooks().pre_tool_use("edit", broken)).run(
            one("edit", {"path": "a"})
        )
    result = outcome.results[0]
    assert result.error_kind == "hook_blocked"
    assert "ConnectionError: policy server unreachable" in (result.error or "")
    assert "broken" in (result.error or "")
    assert files.runs == []
    assert any("broken" in record.getMessage() for record in caplog.records)


async def test_a_pre_hook_past_its_timeout_blocks_the_call() -> None:
    files = Files()

    async def stuck(event: ts.HookEvent) -> None:
        await anyio.sleep(30)

    hooks = ts.Hooks(timeout=30).pre_tool_use("edit", stuck, timeout=0.05)
    outcome = await ts.Executor(files.tools, hooks=hooks).run(one("edit", {"path": "a"}))
    assert outcome.results[0].error_kind == "hook_blocked"
    assert "did not finish within 0.05 seconds" in (outcome.results[0].error or "")
    assert files.runs == []


@pytest.mark.parametrize("kind", ["sync", "async that swallows its cancellation"])
async def test_a_pre_hook_that_allows_past_its_timeout_is_not_obeyed(kind: str) -> None:
    # A sync hook holds the event loop, so its timeout cannot stop it; an async one may catch the cancellation
    # and answer anyway. Either way the answer came too late: the call is blocked, and no allow waives an ask.
    ran: list[str] = []

    @ts.tool(needs_approval=True)
    async def delete(path: str) -> str:
        ran.append(path)
        return "deleted"

    def slow_allow(event: ts.HookEvent) -> ts.Decision:
        time.sleep(0.2)
        return ts.Decision.allow()

    async def stubborn_allow(event: ts.HookEvent) -> ts.Decision:
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            pass
        return ts.Decision.allow()

    hook = slow_allow if kind == "sync" else stubborn_allow
    hooks = ts.Hooks().pre_tool_use("*", hook, timeout=0.05)  # type: ignore[arg-type]
    outcome = await ts.Executor([delete], hooks=hooks).run([ts.ToolCall("c1", "delete", {"path": "x"})])
    assert outcome.results[0].error_kind == "hook_blocked"
    assert "did not finish within 0.05 seconds" in (outcome.results[0].error or "")
    assert ran == []


async def test_a_sync_pre_batch_hook_past_its_timeout_blocks_its_batch() -> None:
    files = Files()

    def slow_gate(event: ts.BatchEvent) -> None:
        time.sleep(0.2)

    hooks = ts.Hooks().pre_batch("edit", slow_gate, timeout=0.05)
    outcome = await ts.Executor(files.tools, hooks=hooks).run([ts.ToolCall("1", "edit", {"path": "b"})])
    assert outcome.results[0].error_kind == "hook_blocked"
    assert files.runs == []


@pytest.mark.parametrize("garbage", [True, "allow", {"path": "b"}, 0, ts.Decision])
async def test_a_pre_hook_that_returns_garbage_blocks_the_call(garbage: Any) -> None:
    files = Files()
    hooks = ts.Hooks().pre_tool_use("edit", lambda event: garbage)
    outcome = await ts.Executor(files.tools, hooks=hooks).run(one("edit", {"path": "a"}))
    assert outcome.results[0].error_kind == "hook_blocked"
    assert "not None, a Decision or a Rewrite" in (outcome.results[0].error or "")
    assert files.runs == []


@pytest.mark.parametrize(
    "rewrite",
    [{"path": 3}, {"path": "a", "extra": True}, {}, '{"path": ', '{"path": "a", "text": [1]}'],
)
async def test_a_rewrite_that_breaks_the_schema_blocks_the_call(rewrite: Any) -> None:
    files = Files()
    hooks = ts.Hooks().pre_tool_use("edit", lambda event: ts.Rewrite(rewrite))
    outcome = await ts.Executor(files.tools, hooks=hooks).run(one("edit", {"path": "a"}))
    result = outcome.results[0]
    assert result.error_kind == "hook_blocked"
    assert "rewritten by a pre_tool_use hook is invalid" in (result.error or "")
    assert files.runs == []


async def test_a_rewrite_as_json_text_is_parsed_and_validated() -> None:
    files = Files()
    hooks = ts.Hooks().pre_tool_use("edit", lambda event: ts.Rewrite('{"path": "from-json"}'))
    await ts.Executor(files.tools, hooks=hooks).run(one("edit", {"path": "a"}))
    assert files.runs == [("edit", "from-json")]


async def test_a_rewrite_is_checked_by_validate_input_again() -> None:
    runs: list[str] = []

    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}

    class Scoped(ts.Tool):
        name = "scoped"
        input_schema = schema

        async def validate_input(self, args: Any, ctx: ts.ToolContext) -> None:
            if args["path"].startswith("/"):
                raise ts.SemanticError("absolute paths are outside the workspace")

        async def call(self, args: Any, ctx: ts.ToolContext) -> str:
            runs.append(args["path"])
            return "ok"

    hooks = ts.Hooks().pre_tool_use("scoped", lambda event: ts.Rewrite({"path": "/etc/passwd"}))
    outcome = await ts.Executor([Scoped()], hooks=hooks).run(one("scoped", {"path": "a"}))
    assert outcome.results[0].error_kind == "hook_blocked"
    assert "absolute paths are outside the workspace" in (outcome.results[0].error or "")
    assert runs == []


# -- post hooks ---------------------------------------------------------------------------


async def test_each_call_that_ran_gets_exactly_one_post_hook() -> None:
    files = Files()
    seen: list[tuple[str, str, str | None]] = []

    async def success(event: ts.HookEvent) -> None:
        assert event.result is not None
        seen.append(("success", event.call_id, event.result.error_kind))

    async def failure(event: ts.HookEvent) -> None:
        assert event.result is not None
        seen.append(("failure", event.call_id, event.result.error_kind))

    hooks = ts.Hooks().post_tool_use("*", success).post_tool_use_failure("*", failure)
    perms = ts.Permissions(deny=["edit(secret/**)"], root="/w")
    calls = [
        ts.ToolCall("r1", "read", {"path": "a"}),
        ts.ToolCall("r2", "read", {"path": "b"}),
        ts.ToolCall("boom", "explode", {"message": "bang"}),
        ts.ToolCall("denied", "edit", {"path": "secret/x"}),
        ts.ToolCall("unknown", "nope", {}),
        ts.ToolCall("invalid", "read", {"path": 1}),
        ts.ToolCall("e1", "edit", {"path": "ok"}),
    ]
    outcome = await ts.Executor(files.tools, hooks=hooks, permissions=perms).run(calls)
    assert sorted(seen) == sorted(
        [
            ("success", "r1", None),
            ("success", "r2", None),
            ("failure", "boom", "execution_error"),
            ("success", "e1", None),
        ]
    )
    assert [r.error_kind for r in outcome.results] == [
        None,
        None,
        "execution_error",
        "permission_denied",
        "unknown_tool",
        "invalid_input",
        None,
    ]


async def test_post_hooks_observe_the_final_result_and_cannot_change_it(caplog: pytest.LogCaptureFixture) -> None:
    files = Files()
    observed: list[ts.ToolResult] = []

    async def tamper(event: ts.HookEvent) -> ts.Rewrite:
        assert event.result is not None
        observed.append(event.result)
        event.result.output = "tampered"  # type: ignore[misc]  # frozen: raises, and the error is logged
        return ts.Rewrite({"path": "x"})

    async def broken(event: ts.HookEvent) -> None:
        raise RuntimeError("metrics backend down")

    after: list[str] = []
    hooks = (
        ts.Hooks()
        .post_tool_use("read", tamper)
        .post_tool_use("read", broken)
        .post_tool_use("read", lambda event: after.append(event.call_id))
    )
    with caplog.at_level(logging.WARNING, logger="toolsched"):
        outcome = await ts.Executor(files.tools, hooks=hooks).run(one("read", {"path": "a"}))
    assert outcome.results[0].output == "read a"
    assert outcome.results[0] is observed[0]
    assert after == ["c1"]
    messages = [record.getMessage() for record in caplog.records]
    assert any("tamper" in message for message in messages)
    assert any("broken" in message for message in messages)


async def test_post_hooks_see_the_final_input() -> None:
    files = Files()
    seen: list[Any] = []
    hooks = (
        ts.Hooks()
        .pre_tool_use("edit", lambda event: ts.Rewrite({"path": "final"}))
        .post_tool_use("edit", lambda event: seen.append(dict(event.args)))
    )
    await ts.Executor(files.tools, hooks=hooks).run(one("edit", {"path": "first"}))
    assert seen == [{"path": "final"}]


# -- batch hooks ------------------------------------------------------------------------------


async def test_batch_hooks_see_each_batch_its_calls_and_results() -> None:
    files = Files()
    events: list[tuple[str, int, tuple[str, ...], bool, tuple[Any, ...]]] = []

    async def before(event: ts.BatchEvent) -> None:
        events.append(("pre", event.batch, tuple(c.id for c in event.calls), event.concurrent, ()))

    async def after(event: ts.BatchEvent) -> None:
        events.append(
            (
                "post",
                event.batch,
                tuple(c.id for c in event.calls),
                event.concurrent,
                tuple(r.output for r in event.results),
            )
        )

    hooks = ts.Hooks().pre_batch("*", before).post_batch("*", after)
    calls = [
        ts.ToolCall("1", "read", {"path": "a"}),
        ts.ToolCall("2", "read", {"path": "b"}),
        ts.ToolCall("3", "edit", {"path": "c"}),
    ]
    await ts.Executor(files.tools, hooks=hooks).run(calls)
    assert events == [
        ("pre", 0, ("1", "2"), True, ()),
        ("post", 0, ("1", "2"), True, ("read a", "read b")),
        ("pre", 1, ("3",), False, ()),
        ("post", 1, ("3",), False, ("edited c",)),
    ]


@pytest.mark.parametrize("answer", ["deny", "raise", "garbage"])
async def test_a_pre_batch_hook_that_denies_or_fails_blocks_its_batch(answer: str) -> None:
    files = Files()

    async def gate(event: ts.BatchEvent) -> Any:
        if answer == "deny":
            return ts.Decision.deny("snapshot failed")
        if answer == "raise":
            raise OSError("disk full")
        return "sure"

    hooks = ts.Hooks().pre_batch("edit", gate)
    calls = [
        ts.ToolCall("1", "read", {"path": "a"}),
        ts.ToolCall("2", "edit", {"path": "b"}),
        ts.ToolCall("3", "read", {"path": "c"}),
    ]
    outcome = await ts.Executor(files.tools, hooks=hooks).run(calls)
    assert [r.error_kind for r in outcome.results] == [None, "hook_blocked", None]
    assert files.runs == [("read", "a"), ("read", "c")]
    expected = {"deny": "snapshot failed", "raise": "disk full", "garbage": "'sure'"}[answer]
    assert expected in (outcome.results[1].error or "")
