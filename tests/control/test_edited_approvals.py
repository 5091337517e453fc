"""Approvals with a person's own arguments (``approve(args=...)``) and standing approvals within a scope
(``approve(always="call" | "tool" | rule)``): what runs is what the person approved, checked as the model's
input is; a deny still wins; nothing runs twice."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import pytest
from recorded import Recorded

import toolsched as ts
from toolsched.loops import anthropic_loop

pytestmark = pytest.mark.anyio


class Shell:
    """A ``bash`` tool that needs approval and a ``read`` tool with a path subject; both record what ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, Any]] = []
        ran = self.ran

        @ts.tool(needs_approval=True, rule_subject="command")
        async def bash(command: str, retries: int = 0) -> str:
            """Run a shell command."""
            ran.append(("bash", command))
            return f"ran {command}"

        @ts.tool(needs_approval=True)
        async def read(path: str) -> str:
            """Read a file."""
            ran.append(("read", path))
            return f"read {path}"

        self.tools = [bash, read]

    def executor(self, **options: Any) -> ts.Executor:
        return ts.Executor(self.tools, **options)


def summary(outcome: ts.Outcome) -> list[tuple[str, Any, bool]]:
    return [(r.call_id, r.error_kind or r.output, r.edited) for r in outcome.results]


def waiting(outcome: ts.Outcome) -> ts.RunState:
    assert outcome.interrupted and outcome.state is not None
    return outcome.state


# -- approve with edits -----------------------------------------------------------------------------------------


async def test_an_edited_approval_runs_the_persons_arguments_and_the_result_says_so() -> None:
    shell = Shell()
    seen: list[tuple[str, Any]] = []

    async def pre(event: ts.HookEvent) -> None:
        seen.append(("hook", dict(event.args)))

    async def guard(event: ts.GuardrailEvent) -> None:
        seen.append(("guardrail", dict(event.args)))

    hooks = ts.Hooks()
    hooks.pre_tool_use("bash", pre)
    executor = shell.executor(hooks=hooks, input_guardrails=[guard])
    calls = [ts.ToolCall("c1", "bash", {"command": "rm -rf build"}), ts.ToolCall("c2", "bash", {"command": "ls"})]
    state = waiting(await executor.run(calls))
    seen.clear()
    state.approve("c1", args={"command": "rm -rf build/tmp", "retries": 5})
    state.approve("c2")
    assert state.decisions == {"c1": "approved", "c2": "approved"}
    outcome = await executor.resume(state)
    assert summary(outcome) == [("c1", "ran rm -rf build/tmp", True), ("c2", "ran ls", False)]
    assert shell.ran == [("bash", "rm -rf build/tmp"), ("bash", "ls")]
    # Hooks and guardrails see the arguments that run: the person's.
    assert ("hook", {"command": "rm -rf build/tmp", "retries": 5}) in seen
    assert ("guardrail", {"command": "rm -rf build/tmp", "retries": 5}) in seen
    assert ("hook", {"command": "rm -rf build"}) not in seen


async def test_approving_the_models_own_arguments_is_no_edit() -> None:
    shell = Shell()
    executor = shell.executor()
    state = waiting(await executor.run([ts.ToolCall("c1", "bash", '{"command": "ls"}')]))
    state.approve("c1", args={"command": "ls"})
    assert summary(await executor.resume(state)) == [("c1", "ran ls", False)]


@pytest.mark.parametrize(
    "edited",
    [{"command": 5}, {"command": "ls", "verbose": True}, {}, {"command": "ls", "retries": "soon"}],
    ids=["wrong-type", "unknown-argument", "missing-argument", "wrong-optional"],
)
async def test_edited_arguments_that_fail_the_schema_are_answered_invalid_input_and_never_run(
    edited: dict[str, Any],
) -> None:
    shell = Shell()
    executor = shell.executor()
    state = waiting(await executor.run([ts.ToolCall("c1", "bash", {"command": "ls"})]))
    state.approve("c1", args=edited)
    outcome = await executor.resume(ts.RunState.from_json(state.to_json()))
    (result,) = outcome.results
    assert (result.error_kind, result.edited) == ("invalid_input", True)
    assert result.error is not None and result.error.startswith("the arguments approved for this call are invalid")
    assert shell.ran == []


@pytest.mark.parametrize(
    "command",
    ["rm -rf /", "rm  -rf /", "rm -rf /home"],
)
async def test_an_edited_approval_never_runs_arguments_a_deny_rule_covers(command: str) -> None:
    shell = Shell()
    executor = shell.executor(permissions=ts.Permissions(deny=["bash(rm *)"]))
    state = waiting(await executor.run([ts.ToolCall("c1", "bash", {"command": "ls"})]))
    state.approve("c1", args={"command": command}, always="tool")
    outcome = await executor.resume(state)
    assert [(r.error_kind, r.edited) for r in outcome.results] == [("permission_denied", True)]
    assert "bash(rm *)" in (outcome.results[0].error or "")
    assert shell.ran == []


@pytest.mark.parametrize("path", ["secret/key", "./secret/key", "docs/../secret/key", "secret//key"])
async def test_an_edited_path_is_judged_by_the_rules_in_every_spelling(path: str, tmp_path: Path) -> None:
    ran: list[str] = []

    @ts.tool(needs_approval=True, rule_subject="path")
    async def read(path: str) -> str:
        ran.append(path)
        return path

    executor = ts.Executor([read], permissions=ts.Permissions(deny=["read(secret/**)"], root=tmp_path))
    state = waiting(await executor.run([ts.ToolCall("c1", "read", {"path": "docs/readme"})]))
    state.approve("c1", args={"path": path})
    outcome = await executor.resume(state)
    assert outcome.results[0].error_kind == "permission_denied" and ran == []


async def test_a_hook_that_denies_the_edited_arguments_blocks_the_call() -> None:
    shell = Shell()

    async def no_sudo(event: ts.HookEvent) -> ts.Decision | None:
        return ts.Decision.deny("no sudo") if "sudo" in event.args["command"] else None

    hooks = ts.Hooks()
    hooks.pre_tool_use("bash", no_sudo)
    executor = shell.executor(hooks=hooks)
    state = waiting(await executor.run([ts.ToolCall("c1", "bash", {"command": "ls"})]))
    state.approve("c1", args={"command": "sudo ls"})
    outcome = await executor.resume(state)
    assert [(r.error_kind, r.error, r.edited) for r in outcome.results] == [("hook_blocked", "no sudo", True)]
    assert shell.ran == []


async def test_a_hook_that_rewrites_the_edited_arguments_asks_again() -> None:
    shell = Shell()

    async def widen(event: ts.HookEvent) -> ts.Rewrite:
        return ts.Rewrite({**event.args, "command": event.args["command"] + " --all"})

    hooks = ts.Hooks()
    hooks.pre_tool_use("bash", widen)
    executor = shell.executor(hooks=hooks)
    state = waiting(await executor.run([ts.ToolCall("c1", "bash", {"command": "ls"})]))
    state.approve("c1", args={"command": "ls -l"})
    again = await executor.resume(state)
    # The approval is bound to the arguments the person approved: other arguments are asked about again.
    assert again.interrupted and shell.ran == []
    (request,) = again.pending
    assert isinstance(request, ts.ApprovalRequest) and request.args == {"command": "ls -l --all"}
    assert "changed since the approval" in (request.reason or "")


async def test_the_model_arguments_and_the_approved_ones_survive_a_saved_state() -> None:
    shell = Shell()
    executor = shell.executor()
    state = waiting(await executor.run([ts.ToolCall("c1", "bash", {"command": "ls"})]))
    state.approve("c1", args={"command": "ls -a"})
    body = json.loads(state.to_json())
    (call,) = body["calls"]
    assert call["args"] == {"command": "ls"} and call["request"]["args"] == {"command": "ls"}
    assert call["edit"]["args"] == {"command": "ls -a"}
    outcome = await executor.resume(ts.RunState.from_json(state.to_json()))
    assert summary(outcome) == [("c1", "ran ls -a", True)]


def _resealed(body: dict[str, Any]) -> str:
    body.pop("seal", None)
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    body["seal"] = "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    return json.dumps(body)


async def test_approved_arguments_altered_in_a_saved_state_are_refused() -> None:
    shell = Shell()
    executor = shell.executor()
    state = waiting(await executor.run([ts.ToolCall("c1", "bash", {"command": "ls"})]))
    state.approve("c1", args={"command": "ls -a"})
    body = json.loads(state.to_json())
    body["calls"][0]["edit"]["args"] = {"command": "rm -rf /"}
    with pytest.raises(ts.StateError, match="approved arguments do not match their digest"):
        ts.RunState.from_json(_resealed(body))
    # An edit on a call that is not approved is refused too.
    body = json.loads(state.to_json())
    body["calls"][0]["status"] = "pending"
    with pytest.raises(ts.StateError, match="only an approved call"):
        ts.RunState.from_json(_resealed(body))


async def test_a_state_saved_before_edits_and_scopes_still_loads() -> None:
    shell = Shell()
    executor = shell.executor()
    calls = [ts.ToolCall("c0", "read", {"path": "a"}), ts.ToolCall("c1", "bash", {"command": "ls"})]
    first = waiting(await executor.run(calls))
    first.approve("c0")
    state = waiting(await executor.resume(first))  # c0 done, c1 still waiting
    body = json.loads(state.to_json())
    for call in body["calls"]:
        if "result" in call:
            del call["result"]["edited"]  # as a state saved before results said whether a call was edited
    assert "always_calls" not in body and "always_rules" not in body
    old = ts.RunState.from_json(_resealed(body))
    old.reject("c1", always=True)
    outcome = await executor.resume(old)
    assert [(r.call_id, r.error_kind, r.edited) for r in outcome.results] == [
        ("c0", None, False),
        ("c1", "permission_denied", False),
    ]


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["command", "ls"], "mapping"),
        ("ls", "mapping"),
        ({"command": {1, 2}}, "JSON"),
        ({"command": float("nan")}, "JSON"),
        ({"command": object()}, "JSON"),
    ],
)
async def test_approved_arguments_that_are_no_json_object_are_a_typed_error(args: Any, match: str) -> None:
    shell = Shell()
    executor = shell.executor()
    state = waiting(await executor.run([ts.ToolCall("c1", "bash", {"command": "ls"})]))
    with pytest.raises(ts.OptionError, match=match):
        state.approve("c1", args=args)
    assert state.decisions == {"c1": "pending"}


async def test_approving_an_unknown_or_answered_call_is_refused_with_a_state_error() -> None:
    shell = Shell()
    executor = shell.executor(permissions=ts.Permissions(allow=["read"]))
    calls = [ts.ToolCall("r1", "read", {"path": "a"}), ts.ToolCall("c1", "bash", {"command": "ls"})]
    state = waiting(await executor.run(calls))
    for call_id in ("nope", "r1"):
        with pytest.raises(ts.StateError):
            state.approve(call_id, args={"command": "ls"})
        with pytest.raises(ts.StateError):
            state.approve(call_id, always="call")
    assert state.decisions == {"r1": "done", "c1": "pending"}
    state.approve("c1")
    copy_before = state.copy()
    await executor.resume(state)
    with pytest.raises(ts.StateError):
        state.approve("c1", args={"command": "ls -a"})
    with pytest.raises(ts.StateError):
        await executor.resume(copy_before)
    assert shell.ran == [("read", "a"), ("bash", "ls")]


@pytest.mark.parametrize("how", ["deepcopy", "copy", "json"])
async def test_a_state_copied_and_resumed_twice_runs_an_edited_call_once(how: str) -> None:
    shell = Shell()
    executor = shell.executor()
    state = waiting(await executor.run([ts.ToolCall("c1", "bash", {"command": "ls"})]))
    state.approve("c1", args={"command": "make deploy"})
    if how == "deepcopy":
        other = copy.deepcopy(state)
    elif how == "copy":
        other = state.copy()
    else:
        other = ts.RunState.from_json(state.to_json())
    first = await executor.resume(other)
    assert summary(first) == [("c1", "ran make deploy", True)]
    with pytest.raises(ts.StateError):
        await executor.resume(state)
    assert shell.ran == [("bash", "make deploy")]


# -- always within a scope ------------------------------------------------------------------------------------


TURN = [
    ts.ToolCall("c1", "bash", {"command": "npm test"}),
    ts.ToolCall("c2", "bash", {"command": "npm test"}),
    ts.ToolCall("c3", "bash", {"command": "npm test --watch"}),
    ts.ToolCall("c4", "read", {"path": "a"}),
]


async def test_always_call_approves_the_same_arguments_only() -> None:
    shell = Shell()
    executor = shell.executor()
    state = waiting(await executor.run(TURN))
    state.approve("c1", always="call")
    assert state.decisions == {"c1": "approved", "c2": "approved", "c3": "pending", "c4": "pending"}
    again = waiting(await executor.resume(state))
    assert [p.call_id for p in again.pending] == ["c3", "c4"]
    # It holds for the rest of the run: the same arguments are approved, others asked.
    again.reject("c3")
    again.reject("c4")
    assert summary(await executor.resume(again))[:2] == [("c1", "ran npm test", False), ("c2", "ran npm test", False)]
    assert shell.ran == [("bash", "npm test"), ("bash", "npm test")]


async def test_always_call_binds_to_the_edited_arguments() -> None:
    shell = Shell()
    executor = shell.executor()
    calls = [
        ts.ToolCall("c1", "bash", {"command": "npm test --watch"}),
        ts.ToolCall("c2", "bash", {"command": "npm test --watch"}),
        ts.ToolCall("c3", "bash", {"command": "npm test"}),
    ]
    state = waiting(await executor.run(calls))
    state.approve("c1", args={"command": "npm test"}, always="call")
    # Not the model's arguments: the call with the approved ones is approved, the other asks.
    assert state.decisions == {"c1": "approved", "c2": "pending", "c3": "approved"}


@pytest.mark.parametrize("always", ["tool", True])
async def test_always_tool_approves_every_call_of_the_tool(always: Literal["tool"] | bool) -> None:
    shell = Shell()
    executor = shell.executor()
    state = waiting(await executor.run(TURN))
    state.approve("c1", always=always)
    assert state.decisions == {"c1": "approved", "c2": "approved", "c3": "approved", "c4": "pending"}
    state.reject("c4")
    outcome = await executor.resume(state)
    assert [r.error_kind for r in outcome.results] == [None, None, None, "permission_denied"]


async def test_a_rule_scope_approves_the_calls_it_matches_when_the_run_resumes() -> None:
    shell = Shell()
    executor = shell.executor()
    calls = [*TURN, ts.ToolCall("c5", "bash", {"command": "npm publish"})]
    state = waiting(await executor.run(calls))
    state.approve("c1", always="bash(npm test*)")
    again = waiting(await executor.resume(ts.RunState.from_json(state.to_json())))
    assert [p.call_id for p in again.pending] == ["c4", "c5"]
    assert ("bash", "npm test --watch") in shell.ran and ("bash", "npm publish") not in shell.ran


async def test_a_rule_scope_never_overrides_a_deny() -> None:
    shell = Shell()

    async def no_watch(event: ts.HookEvent) -> ts.Decision | None:
        return ts.Decision.deny("no watching") if "--watch" in event.args["command"] else None

    hooks = ts.Hooks()
    hooks.pre_tool_use("bash", no_watch)
    permissions = ts.Permissions(deny=["bash(npm test --bail*)"])
    executor = shell.executor(permissions=permissions, hooks=hooks)
    calls = [
        ts.ToolCall("c1", "bash", {"command": "npm test"}),
        ts.ToolCall("c2", "bash", {"command": "npm test --bail"}),
        ts.ToolCall("c3", "bash", {"command": "npm test --watch"}),
    ]
    state = waiting(await executor.run([calls[0]]))
    state.approve("c1", always="bash(*)")
    # Held in force by a loop's later turns as by the resumed state: a deny rule and a hook's deny still win.
    from toolsched._policy.runstate import standing_of
    from toolsched._policy.standing import standing_in_force

    standing = standing_of(state)
    await executor.resume(state)
    with standing_in_force(standing):
        outcome = await executor.run(calls)
    assert [r.error_kind for r in outcome.results] == [None, "permission_denied", "hook_blocked"]
    assert shell.ran == [("bash", "npm test"), ("bash", "npm test")]


async def test_a_rule_scope_with_a_pattern_never_approves_a_tool_without_a_subject() -> None:
    shell = Shell()
    executor = shell.executor()
    calls = [ts.ToolCall("c1", "bash", {"command": "ls"}), ts.ToolCall("c2", "bash", {"command": "ls -l"}), TURN[3]]
    state = waiting(await executor.run(calls))
    state.approve("c1", always="*(a)")
    # `read` has no rule subject (its `path` is never matched); `bash`'s command is not "a".
    again = waiting(await executor.resume(state))
    assert [p.call_id for p in again.pending] == ["c2", "c4"]


@pytest.mark.parametrize(
    ("always", "error", "match"),
    [
        (1, ts.OptionError, "always"),
        ("", ts.OptionError, "empty"),
        (["tool"], ts.OptionError, "always"),
        ("bash(npm test", ts.RuleError, "bash\\(npm test"),
        ("bash()", ts.RuleError, "empty pattern"),
        ("ba sh", ts.RuleError, "ba sh"),
    ],
)
async def test_a_bad_always_is_a_typed_error_and_decides_nothing(always: Any, error: type, match: str) -> None:
    shell = Shell()
    executor = shell.executor()
    state = waiting(await executor.run(TURN))
    with pytest.raises(error, match=match):
        state.approve("c1", always=always)
    assert set(state.decisions.values()) == {"pending"}


async def test_standing_scopes_round_trip_and_copies_are_independent() -> None:
    shell = Shell()
    executor = shell.executor()
    state = waiting(await executor.run(TURN))
    other = state.copy()
    state.approve("c1", always="call")
    state.approve("c4", always="read")
    loaded = ts.RunState.from_json(state.to_json())
    body = json.loads(loaded.to_json())
    assert body["always_rules"] == ["read"] and len(body["always_calls"]) == 1
    assert loaded.decisions == state.decisions
    # The copy taken before the decisions has none of them.
    assert set(other.decisions.values()) == {"pending"} and "always_calls" not in json.loads(other.to_json())
    outcome = await executor.resume(loaded)
    assert waiting(outcome).decisions["c3"] == "pending"


async def test_the_loop_carries_a_standing_approval_across_its_turns() -> None:
    ran: list[str] = []

    @ts.tool(read_only=True, needs_approval=True)
    async def get_weather(city: str, unit: Literal["c", "f"] = "c") -> str:
        """Current weather for a city (each call needs a person's approval)."""
        ran.append(city)
        return f"{city}: 18°C"

    executor = ts.Executor([get_weather])
    recorded = Recorded("anthropic", "tool_use", "tool_use", "tool_use", "end_turn")
    client = recorded.anthropic()
    options: dict[str, Any] = {"model": "claude-sonnet-4-6", "max_tokens": 1024}
    paused = await anthropic_loop(client, executor, messages=[{"role": "user", "content": "weather?"}], **options)
    assert paused.state is not None
    paused.state.approve("toolu_01Paris", always="call")
    paused.state.approve("toolu_02London")
    # Turn 2 asks the same two calls: Paris (same arguments) runs, London asks again.
    second = await anthropic_loop(client, paused.executor, messages=paused.history, resume=paused, **options)
    assert second.stop == "interrupted" and [p.call_id for p in second.pending] == ["toolu_02London"]
    assert ran == ["Paris", "London", "Paris"]
    assert second.state is not None
    second.state.approve("toolu_02London", always="tool")
    # Turn 3: both standing approvals hold; the loop finishes without asking.
    done = await anthropic_loop(client, second.executor, messages=second.history, resume=second, **options)
    assert done.stop == "done"
    assert ran == ["Paris", "London", "Paris", "London", "Paris", "London"]


@pytest.mark.parametrize("always", ["call", "tool", "bash(*)", None, 1])
async def test_reject_always_takes_a_bool_only(always: Any) -> None:
    shell = Shell()
    executor = shell.executor()
    state = waiting(await executor.run(TURN))
    with pytest.raises(ts.OptionError, match="reject"):
        state.reject("c1", always=always)
    assert set(state.decisions.values()) == {"pending"}


async def test_a_call_of_a_nested_run_is_approved_with_edits_under_its_prefixed_id() -> None:
    ran: list[str] = []
    edited: list[bool] = []

    @ts.tool(needs_approval=True)
    async def delete(path: str) -> str:
        """Delete a path."""
        ran.append(path)
        return f"deleted {path}"

    child_executor = ts.Executor([delete])

    @ts.agent_tool(child_executor, description="Tidies a site.")
    async def tidy(site: str, child: ts.ChildRun) -> str:
        removed = await child.run([ts.ToolCall("d1", "delete", {"path": f"{site}/old"})])
        edited.append(removed.results[0].edited)
        return str(removed.results[0].output)

    executor = ts.Executor([tidy])
    state = waiting(await executor.run([ts.ToolCall("p1", "tidy", {"site": "s"})]))
    state.approve("p1/d1", args={"path": "s/older"})
    restored = ts.RunState.from_json(state.to_json())
    assert restored.decisions["p1/d1"] == "approved"
    final = await executor.resume(restored)
    assert [(r.output, r.edited) for r in final.results] == [("deleted s/older", False)]
    assert ran == ["s/older"] and edited == [True]


async def test_an_external_call_approved_with_edits_is_handed_out_with_them_and_its_answer_says_so() -> None:
    @ts.tool(external=True, needs_approval=True)
    async def sign(document: str) -> str:
        """Have a person sign a document."""
        raise AssertionError("an external tool never runs here")

    executor = ts.Executor([sign])
    state = waiting(await executor.run([ts.ToolCall("s1", "sign", {"document": "draft"})]))
    state.approve("s1", args={"document": "final"})
    handed = waiting(await executor.resume(state))
    (call,) = handed.pending
    assert isinstance(call, ts.ExternalCall) and call.args == {"document": "final"}
    # Still waiting after a second resume: the hand-out keeps the edit.
    again = waiting(await executor.resume(ts.RunState.from_json(handed.to_json())))
    again.complete("s1", output="signed")
    outcome = await executor.resume(again)
    assert [(r.output, r.edited) for r in outcome.results] == [("signed", True)]
