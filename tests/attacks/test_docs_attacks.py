"""Attacks on the examples the site shows beside the pages' own blocks: the API reference renders docstrings
(``::: name`` in docs/reference/), and their ``::`` examples are not blocks of a page, so the page runner never
sees them. Each must at least be Python; the Agents SDK example, complete but for its tools, must run as written
and refuse what it says it refuses."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import toolsched as ts

REPOSITORY = Path(__file__).resolve().parents[2]
RENDERED = re.compile(r"^::: ([\w.]+)", re.MULTILINE)


def rendered_objects() -> list[tuple[str, Any]]:
    """What docs/reference renders: each ``::: name`` target, and the public members of a module or class."""
    found: list[tuple[str, Any]] = []
    for page in sorted((REPOSITORY / "docs" / "reference").glob("*.md")):
        for target in RENDERED.findall(page.read_text(encoding="utf-8")):
            module_name, _, attribute = target.rpartition(".")
            try:
                obj: Any = importlib.import_module(target)
            except ModuleNotFoundError:
                obj = getattr(importlib.import_module(module_name), attribute)
            found.append((target, obj))
            if isinstance(obj, ModuleType) or inspect.isclass(obj):
                names = getattr(obj, "__all__", None) or [n for n in vars(obj) if not n.startswith("_")]
                found.extend((f"{target}.{name}", getattr(obj, name)) for name in names if hasattr(obj, name))
    return found


def literal_blocks(doc: str) -> list[str]:
    """The ``::`` literal blocks of a docstring (reST): the indented lines after a line ending in ``::``."""
    lines = doc.splitlines()
    blocks = []
    for index, line in enumerate(lines):
        if not line.rstrip().endswith("::"):
            continue
        body: list[str] = []
        for following in lines[index + 1 :]:
            if following.strip() and len(following) - len(following.lstrip()) <= len(line) - len(line.lstrip()):
                break
            body.append(following)
        if any(row.strip() for row in body):
            blocks.append(textwrap.dedent("\n".join(body)).strip() + "\n")
    return blocks


EXAMPLES = sorted(
    {
        (name, block)
        for name, obj in rendered_objects()
        for block in literal_blocks(inspect.getdoc(obj) or "")
        if not block.lstrip().startswith("{")  # a JSON sample, not code
    }
)


def test_the_reference_renders_docstring_examples() -> None:
    assert len(EXAMPLES) >= 8


@pytest.mark.parametrize(("name", "block"), EXAMPLES, ids=[f"{name}#{i}" for i, (name, _) in enumerate(EXAMPLES)])
def test_a_docstring_example_the_reference_renders_is_python(name: str, block: str) -> None:
    compile(block, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the Agents SDK runs on asyncio only
async def test_the_agents_integration_example_runs_as_written_and_refuses_what_it_says(anyio_backend: str) -> None:
    from agents import Agent, function_tool

    import toolsched.integrations.agents as module

    @function_tool
    def search(query: str) -> str:
        """Searches."""
        return query

    @function_tool
    def write_note(path: str, text: str) -> str:
        """Writes a note."""
        return f"wrote {path}"

    class Runner:
        """The SDK's Runner, recording the agent it is given (no model in this test)."""

        ran: list[Any] = []

        @classmethod
        async def run(cls, agent: Any, text: str) -> None:
            cls.ran.append(agent)

    [example] = literal_blocks(module.__doc__ or "")
    namespace = {"Agent": Agent, "Runner": Runner, "ts": ts, "search": search, "write_note": write_note}
    code = compile(example, "agents example", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    await eval(code, namespace)  # the docstring's own example
    [agent] = Runner.ran
    executor = agent.toolsched_executor
    calls = [
        ts.ToolCall("c1", "write_note", {"path": "/etc/cron.d/x", "text": "t"}),
        ts.ToolCall("c2", "write_note", {"path": "notes/x", "text": "t"}),
    ]
    outcome = await executor.run(calls)
    assert [result.error_kind for result in outcome.results] == ["permission_denied", None]
