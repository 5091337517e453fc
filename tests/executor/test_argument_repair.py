"""``Executor(repair_arguments=True)``: almost-JSON arguments are repaired, then validated, judged by the rules,
seen by the hooks and run like any others; cut-off text is refused saying so; valid text is never changed."""

from __future__ import annotations

from typing import Any

import pytest

import toolsched as ts
from toolsched.errors import OptionError

pytestmark = pytest.mark.anyio


def reader(ran: list[dict[str, Any]]) -> ts.Tool:
    @ts.tool(rule_subject="path")
    def read(path: str, lines: int = 10, tags: list[str] | None = None) -> str:
        """Reads a file."""
        ran.append({"path": path, "lines": lines, "tags": tags})
        return f"{path}:{lines}"

    return read


MALFORMED = "```json\n{'path': 'notes.txt', lines: '3', 'tags': 'x',}\n```"


async def test_malformed_arguments_run_repaired_only_when_asked() -> None:
    ran: list[dict[str, Any]] = []
    plain = await ts.Executor([reader(ran)]).run([ts.ToolCall("1", "read", MALFORMED)])
    assert plain.results[0].error_kind == "invalid_input" and ran == []
    repaired = await ts.Executor([reader(ran)], repair_arguments=True).run([ts.ToolCall("1", "read", MALFORMED)])
    assert repaired.results[0].output == "notes.txt:3"
    assert ran == [{"path": "notes.txt", "lines": 3, "tags": ["x"]}]


async def test_valid_arguments_run_unchanged() -> None:
    ran: list[dict[str, Any]] = []
    text = '{"path": "a", "lines": 2}'
    result = (await ts.Executor([reader(ran)], repair_arguments=True).run([ts.ToolCall("1", "read", text)])).results[0]
    assert (result.output, result.is_error) == ("a:2", False)
    assert ran == [{"path": "a", "lines": 2, "tags": None}]


async def test_cut_off_arguments_are_refused_saying_so() -> None:
    ran: list[dict[str, Any]] = []
    executor = ts.Executor([reader(ran)], repair_arguments=True)
    result = (await executor.run([ts.ToolCall("1", "read", '{"path": "notes.txt", "lin')])).results[0]
    assert result.error_kind == "invalid_input"
    assert result.error is not None and "cut off" in result.error
    assert ran == []


async def test_an_apostrophe_in_single_quotes_is_refused_as_ambiguous_not_as_cut_off() -> None:
    ran: list[dict[str, Any]] = []
    executor = ts.Executor([reader(ran)], repair_arguments=True)
    outcome = await executor.run([ts.ToolCall("1", "read", "{'path': 'it's'}")])
    result = outcome.results[0]
    assert result.error_kind == "invalid_input" and ran == []
    assert result.error is not None and "apostrophe" in result.error and "cut off" not in result.error


async def test_a_missing_required_field_is_never_invented() -> None:
    ran: list[dict[str, Any]] = []
    executor = ts.Executor([reader(ran)], repair_arguments=True)
    result = (await executor.run([ts.ToolCall("1", "read", "{'lines': 3,}")])).results[0]
    assert result.error_kind == "invalid_input" and result.error is not None and "path" in result.error
    assert ran == []


async def test_a_deny_rule_judges_the_repaired_arguments() -> None:
    ran: list[dict[str, Any]] = []
    rules = ts.Permissions(root="/repo", deny=["read(secret/**)"])
    executor = ts.Executor([reader(ran)], repair_arguments=True, permissions=rules)
    calls = [
        ts.ToolCall("1", "read", "{'path': 'secret/key',}"),
        ts.ToolCall("2", "read", '```json\n{"path": "secret/key"}\n```'),
        ts.ToolCall("3", "read", '"{\\"path\\": \\"secret/key\\"}"'),
        ts.ToolCall("4", "read", {"path": "secret/key", "lines": "3"}),
    ]
    results = (await executor.run(calls)).results
    assert [result.error_kind for result in results] == ["permission_denied"] * 4
    assert ran == []


async def test_hooks_and_the_approver_see_the_repaired_arguments() -> None:
    ran: list[dict[str, Any]] = []
    seen: list[Any] = []
    approved: list[Any] = []

    def before(event: ts.HookEvent) -> None:
        seen.append(dict(event.args))

    async def approver(request: Any) -> bool:
        approved.append(dict(request.args))
        return True

    executor = ts.Executor(
        [reader(ran)],
        repair_arguments=True,
        hooks=ts.Hooks().pre_tool_use("read", before),
        permissions=ts.Permissions(ask=["read"]),
        approver=approver,
    )
    result = (await executor.run([ts.ToolCall("1", "read", "{path: 'a', lines: '4'}")])).results[0]
    assert result.output == "a:4"
    assert seen == approved == [{"path": "a", "lines": 4}]


async def test_a_streamed_turn_repairs_as_run_does() -> None:
    ran: list[dict[str, Any]] = []
    executor = ts.Executor([reader(ran)], repair_arguments=True)
    async with executor.turn() as turn:
        turn.submit(ts.ToolCall("1", "read", MALFORMED))
        turn.submit(ts.ToolCall("2", "read", '{"path": "b", "li'))
    outcome = await turn.outcome()
    assert outcome.results[0].output == "notes.txt:3"
    assert outcome.results[1].error is not None and "cut off" in outcome.results[1].error
    assert ran == [{"path": "notes.txt", "lines": 3, "tags": ["x"]}]


def test_repair_arguments_must_be_a_bool() -> None:
    with pytest.raises(OptionError, match="repair_arguments"):
        ts.Executor([], repair_arguments="yes")  # type: ignore[arg-type]
