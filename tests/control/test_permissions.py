"""Permissions: rules, precedence, modes, path normalisation, and the tool's own say."""

from __future__ import annotations

import itertools
import json
import re
import types
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import toolsched as ts
from toolsched import _core
from toolsched._policy.rule_syntax import glob_path, glob_text, normalize_path, path_matcher, text_matcher
from toolsched._policy.tool_rules import UNDECIDED, ToolRules

pytestmark = pytest.mark.anyio


class Workspace:
    """Tools that record every invocation, so a test can tell what ran."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, Any]] = []
        runs = self.runs

        @ts.tool(rule_subject="path", aliases=["old_edit"])
        async def edit(path: str, text: str = "") -> str:
            """Edit a file."""
            runs.append(("edit", path))
            return f"edited {path}"

        @ts.tool(read_only=True, concurrency_safe=True, rule_subject="path")
        async def read(path: str) -> str:
            """Read a file."""
            runs.append(("read", path))
            return f"read {path}"

        @ts.tool(needs_approval=True)
        async def remove(target: str) -> str:
            """Remove something."""
            runs.append(("remove", target))
            return f"removed {target}"

        @ts.tool(rule_subject="command")
        async def bash(command: str) -> str:
            """Run a command."""
            runs.append(("bash", command))
            return f"ran {command}"

        @ts.tool(rule_subject="paths")
        async def bulk(paths: list[str]) -> int:
            """Touch several files."""
            runs.append(("bulk", tuple(paths)))
            return len(paths)

        @ts.tool(read_only=True, rule_subject="path")
        async def grep(pattern: str, path: str = ".") -> str:
            """Search files."""
            runs.append(("grep", path))
            return f"grep {pattern} in {path}"

        self.tools = [edit, read, remove, bash, bulk, grep]

    def executor(self, **options: Any) -> ts.Executor:
        return ts.Executor(self.tools, **options)


def permissions(**options: Any) -> ts.Permissions:
    return ts.Permissions(root="/work/project", **options)


async def run_one(executor: ts.Executor, name: str, args: dict[str, Any], form: str = "mapping") -> ts.Outcome:
    """One call, its arguments a mapping (judged by ``ToolRules.evaluate`` at admission) or JSON text as a
    model sends it (decoded, and its rules judged, by the engine as it plans the turn)."""
    given: dict[str, Any] | str = json.dumps(args) if form == "text" else args
    return await executor.run([ts.ToolCall("c1", name, given)])


# The tests of what rules decide run with the arguments in both forms.
both_forms = pytest.mark.parametrize("form", ["mapping", "text"])


def verdict(outcome: ts.Outcome) -> str:
    """'ran', 'asked', or the error kind of the one call of the turn."""
    if outcome.interrupted:
        assert [request.call_id for request in outcome.pending] == ["c1"]
        assert outcome.results == []
        return "asked"
    (result,) = outcome.results
    return result.error_kind or "ran"


# -- rules that do not parse -------------------------------------------------------


@pytest.mark.parametrize(
    "rule",
    [
        "",
        "   ",
        "edit(",
        "edit()",
        "edit( )",
        "ed it",
        "edit(src)x",
        "(src)",
        "edit(src/***)",
        "edit(a**b)",
        "edit(src/**x)",
        "edit(*/../x)",
        "edit(a\x00b)",
        42,
        None,
    ],
)
def test_a_rule_that_does_not_parse_is_refused_when_permissions_are_built(rule: Any) -> None:
    with pytest.raises(ts.RuleError) as caught:
        ts.Permissions(deny=["read", rule])
    assert isinstance(caught.value, ValueError)
    assert "deny[1]" in str(caught.value)


def test_rules_must_come_as_a_list_and_the_mode_must_exist() -> None:
    with pytest.raises(TypeError, match="list of rules"):
        ts.Permissions(allow="read")
    with pytest.raises(ts.OptionError, match="mode must be one of"):
        ts.Permissions(mode="yolo")  # type: ignore[arg-type]


@pytest.mark.parametrize("rule", ["write(secret/**)", "*(secret/**)"])
async def test_a_pattern_rule_for_a_tool_whose_rule_subject_names_no_argument_is_an_error(rule: str) -> None:
    # A misspelt subject would never be found in a call: the deny rule would let every call through.
    ran: list[str] = []

    @ts.tool(rule_subject="path")
    async def write(file_path: str) -> str:
        ran.append(file_path)
        return "written"

    with pytest.raises(ts.RuleError, match="`path`, the rule_subject of tool `write`, which is not one of its"):
        executor = ts.Executor([write], permissions=permissions(deny=[rule]))
        await executor.run([ts.ToolCall("c1", "write", {"file_path": "secret/key"})])
    assert ran == []


async def test_a_pattern_rule_for_a_tool_without_a_rule_subject_is_an_error() -> None:
    workspace = Workspace()
    with pytest.raises(ts.RuleError, match="declares no rule_subject"):
        workspace.executor(permissions=permissions(deny=["remove(x/**)"]))
    # A wildcard rule applies to the tools that have a subject and leaves the others alone.
    executor = workspace.executor(permissions=permissions(deny=["*(secret/**)"]))
    assert verdict(await run_one(executor, "edit", {"path": "secret/a"})) == "permission_denied"
    assert verdict(await run_one(executor, "read", {"path": "./secret/b"})) == "permission_denied"
    assert verdict(await run_one(executor, "bash", {"command": "secret/x"})) == "permission_denied"
    assert verdict(await run_one(executor, "remove", {"target": "secret/x"})) == "asked"


# -- precedence ----------------------------------------------------------------------

PRECEDENCE = [
    ({"allow": ["edit"]}, "ran"),
    ({"ask": ["edit"]}, "asked"),
    ({"deny": ["edit"]}, "permission_denied"),
    ({"allow": ["edit"], "ask": ["edit"]}, "asked"),
    ({"allow": ["edit"], "deny": ["edit"]}, "permission_denied"),
    ({"ask": ["edit"], "deny": ["edit"]}, "permission_denied"),
    ({"allow": ["edit"], "ask": ["edit"], "deny": ["edit"]}, "permission_denied"),
    ({"allow": ["edit(src/**)"], "deny": ["edit"]}, "permission_denied"),
    ({"allow": ["edit"], "deny": ["edit(src/**)"]}, "permission_denied"),
    ({"allow": ["edit"], "ask": ["edit(src/**)"]}, "asked"),
    ({"ask": ["edit"], "allow": ["edit(src/**)"]}, "asked"),
    ({"deny": ["edit(lib/**)"]}, "ran"),
]


@pytest.mark.parametrize(("rules", "expected"), PRECEDENCE)
@both_forms
async def test_deny_beats_ask_beats_allow(rules: dict[str, list[str]], expected: str, form: str) -> None:
    workspace = Workspace()
    outcome = await run_one(workspace.executor(permissions=permissions(**rules)), "edit", {"path": "src/a.py"}, form)
    assert verdict(outcome) == expected
    assert workspace.runs == ([("edit", "src/a.py")] if expected == "ran" else [])


@both_forms
async def test_precedence_does_not_depend_on_the_order_of_the_lists(form: str) -> None:
    rules = ["edit", "edit(src/**)", "edit(src/a.py)"]
    for order in itertools.permutations(rules):
        workspace = Workspace()
        perms = permissions(allow=list(order), ask=[order[0]], deny=[order[1]])
        assert verdict(await run_one(workspace.executor(permissions=perms), "edit", {"path": "src/a.py"}, form)) == (
            "permission_denied"
        )
        assert workspace.runs == []


async def test_an_allow_rule_waives_the_tools_needs_approval_but_not_an_ask_rule() -> None:
    workspace = Workspace()
    assert verdict(await run_one(workspace.executor(), "remove", {"target": "x"})) == "asked"
    allowed = workspace.executor(permissions=permissions(allow=["remove"]))
    assert verdict(await run_one(allowed, "remove", {"target": "x"})) == "ran"
    both = workspace.executor(permissions=permissions(allow=["remove"], ask=["remove"]))
    assert verdict(await run_one(both, "remove", {"target": "y"})) == "asked"
    assert workspace.runs == [("remove", "x")]


@both_forms
async def test_a_denial_tells_the_model_which_rule_refused(form: str) -> None:
    workspace = Workspace()
    outcome = await run_one(
        workspace.executor(permissions=permissions(deny=["edit(secret/**)"])), "edit", {"path": "secret/key"}, form
    )
    assert outcome.results[0].is_error
    assert "edit(secret/**)" in (outcome.results[0].error or "")


@both_forms
async def test_aliases_and_name_wildcards_match_like_the_name(form: str) -> None:
    workspace = Workspace()
    executor = workspace.executor(permissions=permissions(deny=["old_edit"]))
    assert verdict(await run_one(executor, "edit", {"path": "a"}, form)) == "permission_denied"
    assert verdict(await run_one(executor, "old_edit", {"path": "a"}, form)) == "permission_denied"
    wildcard = workspace.executor(permissions=permissions(deny=["re*"]))
    assert verdict(await run_one(wildcard, "read", {"path": "a"}, form)) == "permission_denied"
    assert verdict(await run_one(wildcard, "remove", {"target": "a"}, form)) == "permission_denied"
    assert verdict(await run_one(wildcard, "edit", {"path": "a"}, form)) == "ran"
    assert workspace.runs == [("edit", "a")]


# -- path subjects -----------------------------------------------------------------

SECRET_SPELLINGS = [
    "secret/key",
    "./secret/key",
    "secret//key",
    "secret/./key",
    "docs/../secret/key",
    "docs/../../project/secret/key",
    "/work/project/secret/key",
    "//work///project/secret/key",
    "/work/project/docs/../secret/key",
    "secret/",
    "secret",
    "secret/deep/er/key",
]


@pytest.mark.parametrize("path", SECRET_SPELLINGS)
@both_forms
async def test_no_spelling_of_a_path_slips_past_a_deny_rule(path: str, form: str) -> None:
    workspace = Workspace()
    executor = workspace.executor(permissions=permissions(deny=["edit(secret/**)"]))
    assert verdict(await run_one(executor, "edit", {"path": path}, form)) == "permission_denied"
    assert workspace.runs == []


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "//etc/passwd",
        "/tmp/../etc/passwd",
        "/../etc/passwd",
        "../../etc/passwd",
        "../../../../../etc/passwd",
        "/etc/./ssh/../passwd",
    ],
)
@both_forms
async def test_absolute_deny_rules_hold_for_relative_and_folded_spellings(path: str, form: str) -> None:
    workspace = Workspace()
    executor = workspace.executor(permissions=permissions(deny=["read(/etc/**)"]))
    assert verdict(await run_one(executor, "read", {"path": path}, form)) == "permission_denied"
    assert workspace.runs == []


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("src/a.py", "ran"),
        ("./src/pkg/b.py", "ran"),
        ("src", "ran"),
        ("src/../etc/passwd", "asked"),
        ("src/../../outside", "asked"),
        ("/src/a.py", "asked"),
        ("srcx/a.py", "asked"),
        ("../project2/src/a.py", "asked"),
    ],
)
@both_forms
async def test_an_allow_rule_covers_only_what_its_pattern_names(path: str, expected: str, form: str) -> None:
    workspace = Workspace()
    executor = workspace.executor(permissions=permissions(allow=["edit(src/**)"], mode="ask"))
    assert verdict(await run_one(executor, "edit", {"path": path}, form)) == expected


@both_forms
async def test_single_star_stays_within_a_segment_and_leading_double_star_matches_anywhere(form: str) -> None:
    workspace = Workspace()
    executor = workspace.executor(permissions=permissions(allow=["edit(src/*.py)"], deny=["edit(**/.env)"], mode="ask"))
    assert verdict(await run_one(executor, "edit", {"path": "src/a.py"}, form)) == "ran"
    assert verdict(await run_one(executor, "edit", {"path": "src/pkg/a.py"}, form)) == "asked"
    assert verdict(await run_one(executor, "edit", {"path": "/anywhere/at/all/.env"}, form)) == "permission_denied"
    assert verdict(await run_one(executor, "edit", {"path": ".env"}, form)) == "permission_denied"


@both_forms
async def test_home_is_expanded_on_both_sides(monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    monkeypatch.setenv("HOME", "/home/person")
    workspace = Workspace()
    executor = workspace.executor(permissions=permissions(deny=["read(~/.ssh/**)"]))
    assert verdict(await run_one(executor, "read", {"path": "~/.ssh/id_ed25519"}, form)) == "permission_denied"
    assert (
        verdict(await run_one(executor, "read", {"path": "/home/person/.ssh/id_ed25519"}, form)) == "permission_denied"
    )
    assert verdict(await run_one(executor, "read", {"path": "/home/other/.ssh/id_ed25519"}, form)) == "ran"


@both_forms
async def test_path_typed_arguments_are_paths_whatever_their_name(form: str) -> None:
    runs: list[str] = []

    @ts.tool(rule_subject="target")
    async def publish(target: Path) -> str:
        runs.append(str(target))
        return "published"

    executor = ts.Executor([publish], permissions=permissions(deny=["publish(private/**)"]))
    assert verdict(await run_one(executor, "publish", {"target": "public/../private/x"}, form)) == "permission_denied"
    assert verdict(await run_one(executor, "publish", {"target": "public/x"}, form)) == "ran"
    assert runs == ["public/x"]


@both_forms
async def test_the_root_defaults_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    monkeypatch.chdir(tmp_path)
    workspace = Workspace()
    executor = workspace.executor(permissions=ts.Permissions(deny=["edit(secret/**)"]))
    assert (
        verdict(await run_one(executor, "edit", {"path": str(tmp_path / "secret" / "k")}, form)) == "permission_denied"
    )


@both_forms
async def test_a_missing_subject_is_matched_by_its_schema_default(form: str) -> None:
    workspace = Workspace()
    executor = workspace.executor(permissions=permissions(allow=["grep(.)"], mode="ask"))
    assert verdict(await run_one(executor, "grep", {"pattern": "x"}, form)) == "ran"
    assert verdict(await run_one(executor, "grep", {"pattern": "x", "path": "./"}, form)) == "ran"
    assert verdict(await run_one(executor, "grep", {"pattern": "x", "path": "sub"}, form)) == "asked"


@both_forms
async def test_list_subjects_deny_when_any_item_matches_and_allow_only_when_all_do(form: str) -> None:
    workspace = Workspace()
    executor = workspace.executor(permissions=permissions(allow=["bulk(src/**)"], deny=["bulk(secret/**)"], mode="ask"))
    assert verdict(await run_one(executor, "bulk", {"paths": ["src/a", "src/b"]}, form)) == "ran"
    assert verdict(await run_one(executor, "bulk", {"paths": ["src/a", "lib/b"]}, form)) == "asked"
    assert verdict(await run_one(executor, "bulk", {"paths": ["src/a", "./secret/b"]}, form)) == "permission_denied"
    assert verdict(await run_one(executor, "bulk", {"paths": []}, form)) == "asked"


@both_forms
async def test_text_subjects_match_as_text(form: str) -> None:
    workspace = Workspace()
    executor = workspace.executor(permissions=permissions(allow=["bash(npm test *)", "bash(ls)"], mode="ask"))
    assert verdict(await run_one(executor, "bash", {"command": "npm test src/a.test.js"}, form)) == "ran"
    assert verdict(await run_one(executor, "bash", {"command": "ls"}, form)) == "ran"
    assert verdict(await run_one(executor, "bash", {"command": "ls -la"}, form)) == "asked"
    assert verdict(await run_one(executor, "bash", {"command": "npm install left-pad"}, form)) == "asked"


# -- modes ---------------------------------------------------------------------------

MODES = [
    # mode, tool, args, expected
    ("default", "edit", {"path": "a"}, "ran"),
    ("default", "remove", {"target": "a"}, "asked"),
    ("ask", "read", {"path": "a"}, "asked"),
    ("ask", "edit", {"path": "a"}, "asked"),
    ("accept_reads", "read", {"path": "a"}, "ran"),
    ("accept_reads", "edit", {"path": "a"}, "asked"),
    ("accept_reads", "remove", {"target": "a"}, "asked"),
    ("plan", "read", {"path": "a"}, "ran"),
    ("plan", "edit", {"path": "a"}, "permission_denied"),
    ("plan", "remove", {"target": "a"}, "permission_denied"),
    ("bypass", "edit", {"path": "a"}, "ran"),
    ("bypass", "remove", {"target": "a"}, "ran"),
]


@pytest.mark.parametrize(("mode", "name", "args", "expected"), MODES)
@both_forms
async def test_each_mode(mode: str, name: str, args: dict[str, Any], expected: str, form: str) -> None:
    workspace = Workspace()
    outcome = await run_one(workspace.executor(permissions=permissions(mode=mode)), name, args, form)
    assert verdict(outcome) == expected
    assert len(workspace.runs) == (1 if expected == "ran" else 0)


async def say_nothing(event: ts.HookEvent) -> None:
    return None


@pytest.mark.parametrize(("mode", "name", "args", "expected"), MODES)
@pytest.mark.parametrize("with_hook", [False, True])
@both_forms
async def test_each_mode_holds_beside_a_silent_hook_and_rules_that_name_other_calls(
    mode: str, name: str, args: dict[str, Any], expected: str, with_hook: bool, form: str
) -> None:
    """A call no rule names and no hook speaks of is decided by the mode and the tool alone, on the
    path without hooks and on the path with them."""
    workspace = Workspace()
    rules = permissions(mode=mode, deny=["bash(rm *)", "edit(/etc/**)"], ask=["read(secret/**)"])
    hooks = ts.Hooks().pre_tool_use("*", say_nothing) if with_hook else None
    outcome = await run_one(workspace.executor(permissions=rules, hooks=hooks), name, args, form)
    assert verdict(outcome) == expected
    assert len(workspace.runs) == (1 if expected == "ran" else 0)


@both_forms
async def test_allow_rules_waive_the_ask_of_ask_and_accept_reads_modes(form: str) -> None:
    for mode in ("ask", "accept_reads"):
        workspace = Workspace()
        executor = workspace.executor(permissions=permissions(mode=mode, allow=["edit(src/**)"]))
        assert verdict(await run_one(executor, "edit", {"path": "src/a"}, form)) == "ran"
        assert verdict(await run_one(executor, "edit", {"path": "lib/a"}, form)) == "asked"


@both_forms
async def test_bypass_runs_ask_rules_but_never_a_deny(form: str) -> None:
    workspace = Workspace()
    executor = workspace.executor(permissions=permissions(mode="bypass", ask=["edit"], deny=["edit(secret/**)"]))
    assert verdict(await run_one(executor, "edit", {"path": "src/a"}, form)) == "ran"
    assert verdict(await run_one(executor, "edit", {"path": "secret/a"}, form)) == "permission_denied"
    assert workspace.runs == [("edit", "src/a")]


async def test_plan_mode_judges_read_only_per_call() -> None:
    runs: list[str] = []

    @ts.tool(read_only=lambda args: args["mode"] == "r")
    async def open_file(name: str, mode: str) -> str:
        runs.append(mode)
        return mode

    executor = ts.Executor([open_file], permissions=permissions(mode="plan"))
    assert verdict(await run_one(executor, "open_file", {"name": "a", "mode": "r"})) == "ran"
    assert verdict(await run_one(executor, "open_file", {"name": "a", "mode": "w"})) == "permission_denied"
    assert runs == ["r"]
    # Read-only is decided per call, so the tool stays in the tool list even in plan mode.
    assert [tool["name"] for tool in executor.registry.to_anthropic(permissions=permissions(mode="plan"))] == [
        "open_file"
    ]


# -- the tool's own say ------------------------------------------------------------


LEVEL_SCHEMA = {
    "type": "object",
    "properties": {"level": {"type": "string"}},
    "required": ["level"],
    "additionalProperties": False,
}


class Guarded(ts.Tool):
    name = "guarded"
    description = "A tool that decides for itself."
    input_schema = LEVEL_SCHEMA

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.checked: list[tuple[str, bool]] = []

    async def check_permissions(self, args: Any, ctx: ts.ToolContext) -> ts.Decision:
        self.checked.append((ctx.call_id, ctx.interactive))
        level = args["level"]
        if level == "deny":
            return ts.Decision.deny("level deny is never allowed")
        if level == "ask":
            return ts.Decision.ask("level ask needs a person")
        if level == "raise":
            raise RuntimeError("permission backend down")
        if level == "garbage":
            return "yes"  # type: ignore[return-value]
        return ts.Decision.allow()

    async def call(self, args: Any, ctx: ts.ToolContext) -> str:
        level = str(args["level"])
        self.runs.append(level)
        return level


@pytest.mark.parametrize(
    ("level", "rules", "expected"),
    [
        ("allow", {}, "ran"),
        ("deny", {}, "permission_denied"),
        ("ask", {}, "asked"),
        ("deny", {"allow": ["guarded"]}, "permission_denied"),
        ("ask", {"allow": ["guarded"]}, "asked"),
        ("allow", {"deny": ["guarded"]}, "permission_denied"),
        ("allow", {"ask": ["guarded"]}, "asked"),
        ("raise", {"allow": ["guarded"]}, "permission_denied"),
        ("garbage", {"allow": ["guarded"]}, "permission_denied"),
    ],
)
async def test_check_permissions_feeds_the_same_decision(level: str, rules: dict[str, Any], expected: str) -> None:
    tool = Guarded()
    outcome = await run_one(ts.Executor([tool], permissions=permissions(**rules)), "guarded", {"level": level})
    assert verdict(outcome) == expected
    assert tool.runs == ([level] if expected == "ran" else [])


async def test_check_permissions_reasons_reach_the_model_and_the_person() -> None:
    tool = Guarded()
    executor = ts.Executor([tool])
    denied = await run_one(executor, "guarded", {"level": "deny"})
    assert denied.results[0].error == "level deny is never allowed"
    asked = await run_one(executor, "guarded", {"level": "ask"})
    assert asked.pending[0].reason == "level ask needs a person"
    failed = await run_one(executor, "guarded", {"level": "raise"})
    assert "permission backend down" in (failed.results[0].error or "")
    assert tool.checked == [("c1", False)] * 3


async def test_needs_approval_is_judged_on_the_parsed_arguments() -> None:
    runs: list[int] = []

    @ts.tool(needs_approval=lambda args: args["amount"] > 100)
    async def pay(amount: int) -> int:
        runs.append(amount)
        return amount

    executor = ts.Executor([pay])
    outcome = await executor.run(
        [ts.ToolCall("small", "pay", {"amount": 5}), ts.ToolCall("big", "pay", '{"amount": 500}')]
    )
    assert [r.call_id for r in outcome.results] == ["small"]
    assert [p.call_id for p in outcome.pending] == ["big"]
    assert runs == [5]


async def test_a_needs_approval_that_raises_asks() -> None:
    def judge(args: Any) -> bool:
        raise KeyError("nope")

    @ts.tool(needs_approval=judge)
    async def act() -> str:
        return "done"

    assert verdict(await run_one(ts.Executor([act]), "act", {})) == "asked"


# -- interaction and exports -------------------------------------------------------


async def test_tools_that_need_a_person_are_refused_in_non_interactive_runs() -> None:
    runs: list[str] = []

    @ts.tool(requires_user_interaction=True)
    async def ask_user(question: str) -> str:
        runs.append(question)
        return "yes"

    refused = await run_one(ts.Executor([ask_user]), "ask_user", {"question": "ok?"})
    assert verdict(refused) == "interaction_required"
    ran = await run_one(ts.Executor([ask_user], interactive=True), "ask_user", {"question": "ok?"})
    assert verdict(ran) == "ran"
    assert runs == ["ok?"]


def test_a_tool_denied_outright_disappears_from_every_tool_list() -> None:
    registry = ts.ToolRegistry(Workspace().tools)
    perms = permissions(deny=["remove", "old_edit", "read(/etc/**)"])
    expected = ["bash", "bulk", "grep", "read"]
    assert [t["name"] for t in registry.to_anthropic(permissions=perms)] == expected
    assert [t["name"] for t in registry.to_openai(permissions=perms)] == expected
    assert [t["name"] for t in registry.to_openai(strict=True, permissions=perms)] == expected
    assert [t["function"]["name"] for t in registry.to_openai_chat(permissions=perms)] == expected
    assert [d["name"] for d in registry.to_gemini(permissions=perms)[0]["function_declarations"]] == expected
    assert len(registry.to_anthropic()) == 6
    planning = permissions(mode="plan")
    assert [t["name"] for t in registry.to_anthropic(permissions=planning)] == ["grep", "read"]


async def test_a_denied_call_in_a_turn_leaves_its_siblings_alone() -> None:
    workspace = Workspace()
    executor = workspace.executor(permissions=permissions(deny=["edit(secret/**)"]))
    outcome = await executor.run(
        [
            ts.ToolCall("1", "read", {"path": "a"}),
            ts.ToolCall("2", "edit", {"path": "secret/x"}),
            ts.ToolCall("3", "edit", {"path": "b"}),
        ]
    )
    assert [(r.call_id, r.error_kind) for r in outcome.results] == [
        ("1", None),
        ("2", "permission_denied"),
        ("3", None),
    ]
    assert workspace.runs == [("read", "a"), ("edit", "b")]


_SEGMENTS = ["src", "a.py", "*", "*.py", "x?z", "**", "..", "."]
_SUBJECT_SEGMENTS = ["src", "srcx", "a.py", "xaz", "..", "."]


@st.composite
def path_patterns(draw: st.DrawFn) -> str:
    segments = draw(st.lists(st.sampled_from(_SEGMENTS), min_size=1, max_size=3))
    pattern = ("/" if draw(st.booleans()) else "") + "/".join(segments)
    assume("***" not in pattern)
    for before, segment in itertools.pairwise(segments):
        assume(not (segment == ".." and ("*" in before or "?" in before)))
    return pattern


@given(
    pattern=path_patterns(),
    subject=st.lists(st.sampled_from(_SUBJECT_SEGMENTS), max_size=3).map("/".join),
    absolute=st.booleans(),
)
@example(pattern="src/**", subject="srcx", absolute=False)
@example(pattern="src/**", subject="src", absolute=False)
@example(pattern="/**", subject="", absolute=True)
@example(pattern="src/a.py", subject="src/./a.py", absolute=False)
@settings(max_examples=300, deadline=None)
def test_path_patterns_without_regexes_match_as_their_globs_do(pattern: str, subject: str, absolute: bool) -> None:
    root = "/work/project"
    value = normalize_path(("/" if absolute else "") + subject, root)
    fast = bool(path_matcher(pattern, root)(value))
    assert fast == bool(glob_path(pattern, root).fullmatch(value)), (pattern, value)


@given(
    pattern=st.text(alphabet="ab*?-", min_size=1, max_size=6),
    value=st.text(alphabet="ab-\n", max_size=6),
)
@example(pattern="ab*", value="a")
@example(pattern="ab*", value="abba")
@settings(max_examples=300, deadline=None)
def test_text_patterns_without_regexes_match_as_their_globs_do(pattern: str, value: str) -> None:
    assert bool(text_matcher(pattern)(value)) == bool(glob_text(pattern).fullmatch(value))


# -- the set-and-prefix path of evaluate -----------------------------------------------

_WORKSPACE_TOOLS = {tool.name: tool for tool in Workspace().tools}


@st.composite
def rule_lists(draw: st.DrawFn, tool: str, patterns: st.SearchStrategy[str]) -> dict[str, list[str]]:
    """Deny, ask and allow lists for ``tool``: pattern rules, now and then a rule naming every call of it."""
    lists: dict[str, list[str]] = {}
    for kind in ("deny", "ask", "allow"):
        rules = [f"{tool}({pattern})" for pattern in draw(st.lists(patterns, max_size=3))]
        if draw(st.integers(0, 9)) == 0:
            rules.insert(draw(st.integers(0, len(rules))), tool)
        lists[kind] = rules
    return lists


def engine_verdict(rules: ToolRules, args: Any) -> Any:
    """The verdict the engine gives a call of a tool with these rules, as it plans a turn."""
    return _core.RuleTable(UNDECIDED, [rules.engine]).judge(0, args)


def is_clean_relative(path: str) -> bool:
    """A relative path normalising would only join to the root (what the engine judges itself)."""
    return bool(path) and path[0] not in "/.~" and path[-1] != "/" and "//" not in path and "/." not in path


def compiled(lists: dict[str, list[str]], tool: str) -> ToolRules:
    """The rules of ``lists`` that name ``tool``; draws whose rules do not parse or name nothing are skipped."""
    try:
        built = permissions(**lists)
    except ts.RuleError:
        assume(False)
    rules = built.for_tool(_WORKSPACE_TOOLS[tool])
    assume(rules is not None)
    assert rules is not None
    return rules


@given(
    lists=rule_lists("edit", path_patterns()),
    subject=st.one_of(
        st.lists(st.sampled_from([*_SUBJECT_SEGMENTS, "~", "", "secret"]), max_size=3).map("/".join),
        st.sampled_from(["/work/project/src", "/work/project/src/", "src//a.py", "~/src", ".", "src/a.py/"]),
    ),
)
@example(lists={"deny": [], "ask": [], "allow": ["edit(src/**)", "edit(src/a.py)"]}, subject="src/a.py")
@example(lists={"deny": ["edit(src)"], "ask": [], "allow": ["edit(src/**)"]}, subject="src")
@example(lists={"deny": ["edit(src/**)"], "ask": [], "allow": []}, subject="src/..")
@example(lists={"deny": [], "ask": [], "allow": ["edit(src/a.py)"]}, subject="src/a.py/")
@example(lists={"deny": [], "ask": ["edit(src/a.py)"], "allow": []}, subject="src//a.py")
@example(lists={"deny": ["edit(/work/project/src/**)"], "ask": [], "allow": []}, subject="./src/a.py")
@example(lists={"deny": ["edit(~/**)"], "ask": [], "allow": []}, subject="~/a.py")
@settings(max_examples=400, deadline=None)
def test_one_plain_path_gets_the_verdict_every_subject_gets(lists: dict[str, list[str]], subject: str) -> None:
    """The verdict of set and prefix tests on one clean relative path is the one of normalising the subject and
    matching each pattern in turn: the same behavior and the same rule named, for any mix of rules; and the
    engine's verdict, whenever it gives one, is that one too."""
    rules = compiled(lists, "edit")
    args = {"path": subject, "text": ""}
    expected = rules._evaluate_values(args)
    assert rules.evaluate(args) == expected, (lists, subject)
    judged = engine_verdict(rules, args)
    assert judged is UNDECIDED or judged == expected, (lists, subject, judged)
    if rules.simple is not None and is_clean_relative(subject):
        # What evaluate decides by sets and prefixes, the engine decides as well.
        assert judged is not UNDECIDED, (lists, subject)


@given(
    lists=rule_lists("bash", st.text(alphabet="ab *?", min_size=1, max_size=5)),
    command=st.text(alphabet="ab ~/.*", max_size=6),
)
@example(lists={"deny": ["bash(a*)"], "ask": [], "allow": ["bash(ab)"]}, command="ab")
@settings(max_examples=400, deadline=None)
def test_one_plain_text_gets_the_verdict_every_subject_gets(lists: dict[str, list[str]], command: str) -> None:
    rules = compiled(lists, "bash")
    args = {"command": command}
    expected = rules._evaluate_values(args)
    assert rules.evaluate(args) == expected, (lists, command)
    judged = engine_verdict(rules, args)
    assert judged is UNDECIDED or judged == expected, (lists, command, judged)
    if rules.simple is not None or rules.deny_all is not None:
        assert judged is not UNDECIDED, (lists, command)


def test_literal_and_prefix_rules_take_the_set_and_prefix_path() -> None:
    """The differential tests above compare two paths only if the first is taken for such rules."""
    edit = permissions(deny=["edit(secret/**)", "edit(/etc/passwd)"], allow=["edit(src/**)"])
    bash = permissions(deny=["bash(rm *)"], ask=["bash(ls)"])
    assert edit.for_tool(_WORKSPACE_TOOLS["edit"]).simple is not None  # type: ignore[union-attr]
    assert bash.for_tool(_WORKSPACE_TOOLS["bash"]).simple is not None  # type: ignore[union-attr]
    globbed = permissions(deny=["edit(src/*.py)"])
    assert globbed.for_tool(_WORKSPACE_TOOLS["edit"]).simple is None  # type: ignore[union-attr]


# -- the engine's verdicts -----------------------------------------------------------


class Text(str):
    """Text of another type: its methods could answer anything, so only evaluate judges it."""


@given(
    lists=rule_lists("edit", path_patterns()),
    value=st.one_of(
        st.none(),
        st.integers(),
        st.booleans(),
        st.lists(st.sampled_from(["src/a.py", "secret/x", "~/a", 3]), max_size=3),
        st.sampled_from(["src/a.py", "secret/x", "\udc80/a", "src/\x00", "é/ß", "src/a.py"]).map(Text),
        st.sampled_from(["src/a.py", "secret", "src/\udc80", "a/\x00/b", "é/ß", " src", "src ", "-"]),
    ),
    shape=st.sampled_from(["value", "missing", "mapping"]),
)
@settings(max_examples=300, deadline=None)
def test_the_engine_judges_any_input_as_evaluate_does_or_leaves_it(
    lists: dict[str, list[str]], value: Any, shape: str
) -> None:
    """Other types, other spellings, a missing subject (the schema's default applies), another mapping:
    the engine gives evaluate's verdict or leaves the call to it, never another verdict."""
    rules = compiled(lists, "edit")
    args: Any = {"path": value, "text": ""}
    if shape == "missing":
        args = {"text": ""}
    elif shape == "mapping":
        args = types.MappingProxyType(args)
    try:
        expected = rules.evaluate(args)
    except Exception as exc:  # evaluate never raises; the engine must not either
        pytest.fail(f"evaluate raised {exc!r}")
    judged = engine_verdict(rules, args)
    assert judged is UNDECIDED or judged == expected, (lists, args, judged)
    if shape != "value" or type(value) is not str:
        # Not exactly a dict holding exactly text: unless a rule names every call whatever its input.
        assert judged is UNDECIDED or rules.deny_all is not None, (lists, args, judged)


def test_a_tool_named_by_rules_without_patterns_gets_one_verdict_whatever_its_input() -> None:
    deny_all = permissions(deny=["edit"], allow=["edit(src/**)"]).for_tool(_WORKSPACE_TOOLS["edit"])
    ask_all = permissions(ask=["remove"], allow=["remove"]).for_tool(_WORKSPACE_TOOLS["remove"])
    allow_all = permissions(allow=["remove"]).for_tool(_WORKSPACE_TOOLS["remove"])
    for rules, expected in (
        (deny_all, ("deny", "edit", None)),
        (ask_all, ("ask", "remove", None)),
        (allow_all, ("allow", "remove", None)),
    ):
        assert rules is not None
        for args in ({"path": "src/a"}, {"target": 3}, {}, "not a mapping", None):
            assert engine_verdict(rules, args) == expected == rules.evaluate(args)


def test_a_rule_table_refuses_what_is_not_a_tools_compiled_rules() -> None:
    for tools, message in (
        ([True], "tools[0] is True"),
        ([("x",) * 3], "a tuple of 1 or 8 items"),
        ([3], "tools[0] is not a tool's compiled rules"),
        ([("path", True, "/r", [(None, None, "v")], None, [], None, [])], "neither a value to equal nor a prefix"),
        ([("path", True, "/r", [("a", None)], None, [], None, [])], "tools[0] is not a tool's compiled rules"),
    ):
        with pytest.raises(ts.OptionError, match=re.escape(message)):
            _core.RuleTable(UNDECIDED, tools)
    table = _core.RuleTable(UNDECIDED, [None, False])
    assert len(table) == 2
    assert table.judge(0, {"path": "a"}) is None
    assert table.judge(1, {"path": "a"}) is UNDECIDED
    with pytest.raises(ts.OptionError, match="no tool at position 2"):
        table.judge(2, {})


def deny_secret(workspace: Workspace, **options: Any) -> ts.Executor:
    return workspace.executor(permissions=permissions(deny=["edit(secret/**)"], allow=["edit(src/**)"]), **options)


async def test_a_rewrite_is_judged_by_the_rules_not_the_verdict_on_the_models_input() -> None:
    """The engine judged the model's text; a hook's rewrite into a denied path is denied, a rewrite out of
    one runs."""

    async def into_secret(event: ts.HookEvent) -> ts.Rewrite:
        return ts.Rewrite({"path": "secret/" + event.args["path"]})

    async def out_of_secret(event: ts.HookEvent) -> ts.Rewrite:
        return ts.Rewrite({"path": event.args["path"].replace("secret/", "src/")})

    workspace = Workspace()
    into = deny_secret(workspace, hooks=ts.Hooks().pre_tool_use("edit", into_secret))
    outcome = await into.run([ts.ToolCall("c1", "edit", '{"path": "src/a.py"}')])
    assert outcome.results[0].error_kind == "permission_denied"
    out = deny_secret(workspace, hooks=ts.Hooks().pre_tool_use("edit", out_of_secret))
    outcome = await out.run([ts.ToolCall("c1", "edit", '{"path": "secret/a.py"}')])
    assert outcome.results[0].error_kind is None
    assert workspace.runs == [("edit", "src/a.py")]


async def test_an_input_check_that_changes_the_arguments_in_place_cannot_slip_past_a_deny_rule() -> None:
    """``validate_input`` is shown a copy of the call's arguments: what it writes into them reaches neither the
    rules nor the tool, which runs with the arguments the rules judged."""
    runs: list[str] = []

    class Sneaky(ts.Tool):
        name = "sneaky"
        input_schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
        rule_subject = "path"

        async def validate_input(self, args: Any, ctx: ts.ToolContext) -> None:
            args["path"] = "secret/" + args["path"]

        async def call(self, args: Any, ctx: ts.ToolContext) -> str:
            runs.append(args["path"])
            return "ok"

    executor = ts.Executor([Sneaky()], permissions=permissions(deny=["sneaky(secret/**)"], allow=["sneaky(src/**)"]))
    outcome = await executor.run([ts.ToolCall("c1", "sneaky", '{"path": "src/a"}')])
    assert outcome.results[0].error_kind is None
    assert runs == ["src/a"]


@pytest.mark.parametrize("when", ["before it is admitted", "after it is admitted"])
@pytest.mark.parametrize("strategy", [ts.Sequential(), ts.Partitioned()], ids=lambda s: type(s).__name__)
async def test_a_mapping_the_caller_changes_after_giving_it_reaches_neither_the_rules_nor_the_tool(
    when: str, strategy: ts.Strategy
) -> None:
    """A mapping the caller keeps may change while the turn runs (here: a hook on an earlier call changes it,
    before the call is admitted or after): the call is validated, judged and run as it was given."""
    workspace = Workspace()
    later = {"path": "src/b.py"}

    async def redirect_the_next(event: ts.HookEvent) -> None:
        if event.call_id == "c1":
            later["path"] = "secret/key"

    hooks = ts.Hooks()
    if when == "before it is admitted":
        hooks.pre_tool_use("edit", redirect_the_next)
    else:
        hooks.post_tool_use("edit", redirect_the_next)
    executor = deny_secret(workspace, hooks=hooks, strategy=strategy)
    outcome = await executor.run([ts.ToolCall("c1", "edit", '{"path": "src/a.py"}'), ts.ToolCall("c2", "edit", later)])
    assert [result.error_kind for result in outcome.results] == [None, None]
    assert sorted(workspace.runs) == [("edit", "src/a.py"), ("edit", "src/b.py")]


async def test_a_nested_value_the_caller_changes_after_giving_it_does_not_reach_the_tool() -> None:
    """Validated as given: a list inside the caller's mapping changed afterwards does not reach the tool."""
    seen: list[Any] = []

    @ts.tool
    async def tag(names: list[str]) -> str:
        seen.append(names)
        return "ok"

    names = ["a", "b"]
    given = {"names": names}

    async def spoil(event: ts.HookEvent) -> None:
        names.append(7)  # not a string: the schema would have refused it

    executor = ts.Executor([tag], hooks=ts.Hooks().pre_tool_use("tag", spoil))
    outcome = await executor.run([ts.ToolCall("c1", "tag", given)])
    assert outcome.results[0].error_kind is None
    assert seen == [["a", "b"]]


async def test_the_engine_judges_the_models_text_and_evaluate_the_callers_mapping(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Calls as JSON text are judged while the turn is planned: evaluate is not asked. A mapping is
    judged by evaluate, as is a path the engine leaves to it."""
    asked: list[Any] = []
    evaluate = ToolRules.evaluate

    def counted(self: ToolRules, args: Any) -> Any:
        asked.append(dict(args))
        return evaluate(self, args)

    monkeypatch.setattr(ToolRules, "evaluate", counted)
    workspace = Workspace()
    executor = deny_secret(workspace)
    outcome = await executor.run(
        [
            ts.ToolCall("c1", "edit", '{"path": "src/a.py"}'),
            ts.ToolCall("c2", "edit", '{"path": "secret/k"}'),
            ts.ToolCall("c3", "edit", {"path": "secret/k"}),
            ts.ToolCall("c4", "edit", '{"path": "./secret/k"}'),
            ts.ToolCall("c5", "edit", '{"path": "docs/a"}'),
        ]
    )
    kinds = [result.error_kind for result in outcome.results]
    assert kinds == [None, "permission_denied", "permission_denied", "permission_denied", None]
    assert "secret/**" in (outcome.results[1].error or "")
    assert asked == [{"path": "secret/k"}, {"path": "./secret/k"}]
    assert workspace.runs == [("edit", "src/a.py"), ("edit", "docs/a")]


@both_forms
async def test_rules_and_a_root_holding_lone_surrogates_still_judge_every_call(form: str) -> None:
    """Text the engine cannot read as UTF-8 leaves those rules to evaluate: the executor builds and
    judges as before (an argument holding one is refused as invalid input, as it always was)."""

    @ts.tool(rule_subject="path")
    async def edit(path: str) -> str:
        return path

    for perms, path, expected in (
        (ts.Permissions(deny=["edit(\udc80/**)", "edit(b/**)"], root="/w"), "b/c", "permission_denied"),
        (ts.Permissions(deny=["edit(\udc80/**)"], root="/w"), "a", "ran"),
        (ts.Permissions(deny=["edit(a/**)"], root="/w\udc80"), "a/b", "permission_denied"),
        (ts.Permissions(deny=["edit(a/**)"], root="/w\udc80"), "b", "ran"),
    ):
        args = {"path": path}
        given: Any = json.dumps(args) if form == "text" else args
        outcome = await ts.Executor([edit], permissions=perms).run([ts.ToolCall("c1", "edit", given)])
        assert verdict(outcome) == expected, (perms, path)
