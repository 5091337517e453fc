"""Every Python block of README.md and docs/ runs as written, offline, and prints what the page shows.

A ```python block is a complete script: it runs in a fresh ``__main__`` with
the working directory a temporary one, no API key in the environment, and
every HTTP proxy pointed at a closed port on 127.0.0.1 (only the scripted
providers on 127.0.0.1 answer). When an ```output block follows it, the
script's standard output must be exactly that text. A block whose first line
is a ``# fragment`` comment is part of a larger program (a cluster, a real
API): it must compile (top-level ``await`` allowed) and is not run.
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import runpy
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
PAGES = [REPOSITORY / "README.md", *sorted((REPOSITORY / "docs").rglob("*.md"))]
PYTHON = ("python", "py")
FRAGMENT = "# fragment"
OFFLINE = "http://127.0.0.1:9"  # the discard port: nothing listens there
KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, from 1
    language: str
    code: str
    output: str | None  # the ```output block right after it, if any
    claimed: bool = False  # an ```output block that follows a ```python block

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(REPOSITORY)}:{self.line}"

    @property
    def fragment(self) -> bool:
        return self.code.lstrip().startswith(FRAGMENT)


def fenced_blocks(page: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, in order; indented fences (inside admonitions) included."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[tuple[int, str, str]] = []  # (line, language, text)
    position = 0
    while position < len(lines):
        stripped = lines[position].lstrip()
        if stripped.startswith("```"):
            indent = len(lines[position]) - len(stripped)
            fence = stripped[: len(stripped) - len(stripped.lstrip("`"))]
            language = stripped[len(fence) :].strip().split(" ")[0]
            body: list[str] = []
            position += 1
            while position < len(lines) and lines[position].strip() != fence:
                body.append(lines[position][indent:] if lines[position][:indent].isspace() else lines[position])
                position += 1
            if position == len(lines):
                raise AssertionError(f"{page}: a fence is never closed")
            found.append((position - len(body), language, "\n".join(body) + "\n"))
        position += 1
    blocks: list[Block] = []
    for index, (line, language, text) in enumerate(found):
        following = found[index + 1] if index + 1 < len(found) else None
        # The lines between this block's closing fence and the next block's opening one.
        closing = line + len(text.splitlines())  # 0-based index of the closing fence
        between = lines[closing + 1 : following[0] - 1] if following else []
        output = None
        if language in PYTHON and following and following[1] == "output" and not any(row.strip() for row in between):
            output = following[2]
        claimed = language == "output" and bool(blocks) and blocks[-1].output is text
        blocks.append(Block(page, line, language, text, output, claimed))
    return blocks


BLOCKS = [block for page in PAGES for block in fenced_blocks(page)]
PYTHON_BLOCKS = [block for block in BLOCKS if block.language in PYTHON]


def test_the_pages_hold_python_blocks_and_name_their_language_plainly() -> None:
    assert len(PYTHON_BLOCKS) >= 30
    odd = [block.name for block in BLOCKS if block.language.startswith("py") and block.language not in PYTHON]
    assert odd == [], "write ```python (or a `# fragment` comment for a block that does not run)"
    unclaimed = [block.name for block in BLOCKS if block.language == "output" and not block.claimed]
    assert unclaimed == [], "an ```output block must directly follow the ```python block that prints it"


def test_the_readme_has_no_fragment() -> None:
    assert [block.name for block in PYTHON_BLOCKS if block.page.name == "README.md" and block.fragment] == []


@pytest.mark.parametrize("block", [b for b in PYTHON_BLOCKS if b.fragment], ids=lambda block: block.name)
def test_a_fragment_compiles(block: Block) -> None:
    compile(block.code, block.name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


@pytest.mark.parametrize("block", [b for b in PYTHON_BLOCKS if not b.fragment], ids=lambda block: block.name)
def test_a_block_runs_as_written(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "block.py"
    script.write_text(block.code, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(script)])
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(proxy, OFFLINE)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    # urlopen builds one process-wide opener on first use and keeps the proxies it read then: one built by a
    # block would send every later test's requests to the closed proxy once NO_PROXY is restored.
    monkeypatch.setattr(urllib.request, "_opener", None)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        runpy.run_path(str(script), run_name="__main__")
    if block.output is not None:
        assert _lines(printed.getvalue()) == _lines(block.output), f"{block.name} printed other than its page shows"


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip().splitlines()]


@pytest.fixture(autouse=True)
def _no_leftover_environment() -> Iterator[None]:
    # Blocks run in this process: one that changed the environment for good would change the next.
    before = {key: value for key, value in os.environ.items() if key != "PYTEST_CURRENT_TEST"}
    yield
    assert {key: value for key, value in os.environ.items() if key != "PYTEST_CURRENT_TEST"} == before
