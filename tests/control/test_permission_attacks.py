"""Deny rules tried the way an attacker would: every spelling of a path, every type of subject.

A real tool writes under a temporary root; a refused call must leave the file unwritten.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio


def writer(root: Path) -> ts.Tool:
    @ts.tool(rule_subject="path")
    def write_file(path: Any, text: str = "pwned") -> str:
        # What a tool really does: open() takes the path as written (no ~ expansion), under the root.
        paths = path if isinstance(path, list) else [path]
        for item in paths:
            target = root / str(item)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        return "written"

    return write_file


def written(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


HOME = os.path.expanduser("~")

SPELLINGS = [
    "src/secret.py",
    "./src/secret.py",
    "src//secret.py",
    "src/./secret.py",
    "x/../src/secret.py",
    "~/../src/secret.py",
    "~/./../src/secret.py",
    "a/b/../../src/secret.py",
    "src/sub/../secret.py",
    ".//src/secret.py",
]


@pytest.mark.parametrize("spelling", SPELLINGS)
async def test_no_spelling_of_a_denied_path_is_written(tmp_path: Path, spelling: str) -> None:
    executor = ts.Executor([writer(tmp_path)], permissions=ts.Permissions(deny=["write_file(src/**)"], root=tmp_path))
    outcome = await executor.run([ts.ToolCall("1", "write_file", {"path": spelling})])
    assert outcome.results[0].error_kind == "permission_denied", outcome.results[0]
    assert written(tmp_path) == []


async def test_a_tilde_path_that_the_tool_expands_is_matched_as_the_home_directory(tmp_path: Path) -> None:
    home = HOME
    executor = ts.Executor(
        [writer(tmp_path)], permissions=ts.Permissions(deny=[f"write_file({home}/.ssh/**)"], root=tmp_path)
    )
    outcome = await executor.run([ts.ToolCall("1", "write_file", {"path": "~/.ssh/authorized_keys"})])
    assert outcome.results[0].error_kind == "permission_denied"


async def test_an_allow_rule_needs_every_reading_of_a_tilde_path(tmp_path: Path) -> None:
    # `~/notes.txt` read literally is under the root; expanded it is in the home directory.
    executor = ts.Executor(
        [writer(tmp_path)],
        permissions=ts.Permissions(allow=["write_file(~/**)"], mode="ask", root=tmp_path),
    )
    outcome = await executor.run([ts.ToolCall("1", "write_file", {"path": "~/notes.txt"})])
    assert outcome.interrupted  # not allowed outright: a person decides
    assert written(tmp_path) == []


UNREADABLE = [
    ["src/a", None],
    [["src/x"]],
    {"p": "src/x"},
    7,
    3.5,
    True,
    ["ok.txt", 1],
    [{"path": "src/x"}],
]


@pytest.mark.parametrize("subject", UNREADABLE, ids=repr)
@pytest.mark.parametrize("kind", ["deny", "ask"])
async def test_a_subject_the_rules_cannot_read_is_refused(tmp_path: Path, subject: Any, kind: str) -> None:
    rules: dict[str, Any] = {kind: ["write_file(src/**)"]}
    executor = ts.Executor([writer(tmp_path)], permissions=ts.Permissions(**rules, root=tmp_path))
    outcome = await executor.run([ts.ToolCall("1", "write_file", {"path": subject})])
    result = outcome.results[0]
    assert result.error_kind == "permission_denied", result
    assert "cannot check this call" in (result.error or "")
    assert written(tmp_path) == []


async def test_a_list_of_paths_is_denied_when_any_is(tmp_path: Path) -> None:
    executor = ts.Executor([writer(tmp_path)], permissions=ts.Permissions(deny=["write_file(src/**)"], root=tmp_path))
    outcome = await executor.run([ts.ToolCall("1", "write_file", {"path": ["docs/a.md", "x/../src/b.py"]})])
    assert outcome.results[0].error_kind == "permission_denied"
    assert written(tmp_path) == []


async def test_readable_subjects_outside_the_rule_still_run(tmp_path: Path) -> None:
    executor = ts.Executor([writer(tmp_path)], permissions=ts.Permissions(deny=["write_file(src/**)"], root=tmp_path))
    outcome = await executor.run([ts.ToolCall("1", "write_file", {"path": ["docs/a.md", "~/b.md"]})])
    assert outcome.results[0].output == "written"
    assert written(tmp_path) == ["docs/a.md", "~/b.md"]


async def test_a_subject_with_only_allow_rules_falls_back_to_the_mode(tmp_path: Path) -> None:
    # Nothing could deny it, so an unreadable subject is simply not allowed by the rule.
    executor = ts.Executor(
        [writer(tmp_path)], permissions=ts.Permissions(allow=["write_file(docs/**)"], mode="ask", root=tmp_path)
    )
    outcome = await executor.run([ts.ToolCall("1", "write_file", {"path": 7})])
    assert outcome.interrupted
