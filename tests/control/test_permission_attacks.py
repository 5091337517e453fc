"""Deny rules tried the way an attacker would: every spelling of a path, every type of subject.

A real tool writes under a temporary root; a refused call must leave the file unwritten.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import unquote

import pydantic
import pytest
from pydantic.alias_generators import to_camel

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


# -- the value the tool receives, not the argument as written ------------------------------------------------


def reading(model: type[pydantic.BaseModel], subject: str, field: str, ran: list[str]) -> ts.Tool:
    """A read-only class tool `read` taking ``model`` (its rule subject ``subject``) that notes its ``field``."""

    class Read(ts.Tool):
        name = "read"
        input_model = model
        rule_subject = subject
        read_only = True

        async def call(self, args: Any, ctx: Any) -> str:
            ran.append(str(getattr(args, field)))
            return "read"

    return Read()


async def test_a_subject_a_model_takes_under_its_field_name_is_judged() -> None:
    """A model with an alias that also fills its field by name: the schema names the alias, and a call giving
    the field's own name was judged as giving no subject at all, and ran."""

    ran: list[str] = []

    class Args(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(alias_generator=to_camel, populate_by_name=True)
        file_path: str | None = None

    read = reading(Args, "filePath", "file_path", ran)
    executor = ts.Executor([read], permissions=ts.Permissions(root="/repo", deny=["read(secret/**)"]))
    calls = [
        ts.ToolCall("by-name", "read", '{"file_path": "secret/key"}'),
        ts.ToolCall("by-alias", "read", {"filePath": "secret/key"}),
        ts.ToolCall("allowed", "read", {"file_path": "src/a.py"}),
    ]
    outcome = await executor.run(calls)
    assert [result.error_kind for result in outcome.results] == ["permission_denied", "permission_denied", None]
    assert ran == ["src/a.py"]


async def test_a_subject_a_model_changes_is_judged_as_changed() -> None:
    """What a model's validators make of the argument (stripped, unquoted) is what the tool touches: the rules
    judged the text as written, and `" secret/key"` and `"%73ecret/key"` ran as `secret/key`."""

    ran: list[str] = []

    class Args(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(str_strip_whitespace=True)
        path: str

    @ts.tool(name="fetch", rule_subject="path", read_only=True)
    async def fetch(path: Annotated[str, pydantic.AfterValidator(unquote)], base: Path = Path(".")) -> str:
        ran.append(path)
        return "fetched"

    @ts.tool(name="open_plain", rule_subject="path", read_only=True)
    async def open_plain(path: Annotated[str, pydantic.AfterValidator(unquote)]) -> str:
        ran.append(path)
        return "opened"

    rules = ts.Permissions(root="/repo", deny=["read(secret/**)", "fetch(secret/**)", "open_plain(secret/**)"])
    executor = ts.Executor([reading(Args, "path", "path", ran), fetch, open_plain], permissions=rules)
    calls = [
        ts.ToolCall("stripped", "read", {"path": " secret/key"}),
        ts.ToolCall("unquoted", "fetch", {"path": "%73ecret/key"}),
        ts.ToolCall("unquoted-alone", "open_plain", {"path": "%73ecret/key"}),
        ts.ToolCall("fine", "fetch", {"path": "src/%61.py"}),
    ]
    outcome = await executor.run(calls)
    assert [result.error_kind for result in outcome.results] == ["permission_denied"] * 3 + [None]
    # A validator runs whatever the other parameters' types (alone, it was skipped: the tool got `src/%61.py`).
    assert ran == ["src/a.py"]


async def test_a_model_value_the_rules_cannot_read_is_refused() -> None:

    class Args(pydantic.BaseModel):
        path: str

        @pydantic.field_validator("path")
        @classmethod
        def no_dots(cls, value: str) -> str:
            if value.startswith("."):
                raise ValueError("no dot paths")
            return value

    ran: list[str] = []
    read = reading(Args, "path", "path", ran)
    executor = ts.Executor([read], permissions=ts.Permissions(root="/repo", deny=["read(secret/**)"]))
    outcome = await executor.run([ts.ToolCall("a", "read", {"path": "./x"})])
    assert ran == []
    assert outcome.results[0].error_kind == "permission_denied"
    assert "do not validate against Args" in (outcome.results[0].error or "")


async def test_path_typed_subjects_and_path_names_are_matched_as_paths(tmp_path: Path) -> None:

    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "x").write_text("s")
    ran: list[str] = []

    @ts.tool(name="read", rule_subject="target", read_only=True)
    async def read(target: pydantic.FilePath) -> str:
        ran.append(str(target))
        return "read"

    @ts.tool(name="write", rule_subject="file_name")
    async def write(file_name: str) -> str:
        ran.append(file_name)
        return "written"

    rules = ts.Permissions(root=tmp_path, deny=["read(secret/**)", "write(secret/**)"])
    executor = ts.Executor([read, write], permissions=rules)
    calls = [
        ts.ToolCall("dot", "read", {"target": str(tmp_path / "." / "secret" / "x")}),
        ts.ToolCall("relative", "write", {"file_name": "./secret/x"}),
        ts.ToolCall("absolute", "write", {"file_name": str(tmp_path / "secret" / "x")}),
    ]
    outcome = await executor.run(calls)
    assert [result.error_kind for result in outcome.results] == ["permission_denied"] * 3
    assert ran == []


async def test_a_root_with_a_tilde_is_the_home_directory() -> None:
    rules = ts.Permissions(root="~/project", deny=["write(secret/**)"])
    assert rules.root == os.path.join(HOME, "project")


async def test_a_default_the_model_makes_reaches_the_function() -> None:

    @ts.tool
    async def tag(name: str, labels: list[str] = pydantic.Field(default_factory=list)) -> list[str]:  # noqa: B008
        return [*labels, name]

    outcome = await ts.Executor([tag]).run([ts.ToolCall("a", "tag", {"name": "x"})])
    assert outcome.results[0].output == ["x"]


@pytest.mark.parametrize(
    ("rule", "refusal"),
    [
        ("write_file(secret/x )", "starts or ends with a space"),
        ("write_file( secret/x)", "starts or ends with a space"),
        ("write_file(secret/)", "write `secret/\\*\\*` for it and everything below it, or `secret`"),
    ],
)
def test_rules_that_would_never_match_what_they_seem_to_name_are_refused(
    tmp_path: Path, rule: str, refusal: str
) -> None:
    """`write(secret/x )` never matched anything; `write(secret/)` named the directory alone, not what is in it."""
    with pytest.raises(ts.RuleError, match=refusal):
        ts.Executor([writer(tmp_path)], permissions=ts.Permissions(root=tmp_path, deny=[rule]))
