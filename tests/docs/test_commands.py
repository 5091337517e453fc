"""Every command README.md and docs/ give a user to type runs as written, or is listed here as not run.

A ```console block holds commands, one a line (``$ `` prompts, ``# ...`` comments and ``\\`` continuations
allowed; the lines after a ``$`` command are its output). Inline code that starts a bench script
(`python benches/...`) counts too. What each kind of command gets:

- ``toolsched ...``: run for real in a scratch directory (with the checkout's ``benches/`` beside it, for
  the recorded workloads); the output a page shows under a ``$`` command appears in the real one, figures and
  bars aside;
- ``python benches/X.py ...``, ``python scripts/...``: the script's own argument parser accepts the
  arguments (the run itself takes minutes; the measuring scripts are run by `make bench`);
- ``pip install ...``: every extra named exists in pyproject.toml (tests/packaging installs the built wheel
  with each extra);
- ``make ...``: the target exists in the Makefile (they are what CI runs: `make test` is the suite itself).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
PAGES = [REPOSITORY / "README.md", *sorted((REPOSITORY / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```console\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(
    r"`((?:nice )?(?:tests/\w+_server\.sh )*(?:\.venv/bin/)?python (?:-m pytest )?(?:benches|scripts)/[^`]*"
    r"|cargo bench --bench [^`]*)`"
)
PLACEHOLDER = re.compile(r"\[|\b[A-Z]{1,6}\b")  # ``--runs R``, ``N TURNS [--runs 100]``: a shape, not a command


@dataclass(frozen=True)
class Command:
    page: str
    line: str  # as a user would type it: no prompt, no comment, continuations joined
    shown: tuple[str, ...]  # the output the page shows under it, if any

    @property
    def argv(self) -> list[str]:
        """The command's words, without ``nice``, the throwaway-server wrappers and the virtualenv's path."""
        words = shlex.split(self.line)
        while words[0] == "nice" or re.fullmatch(r"tests/\w+_server\.sh", words[0]):
            words = words[1:]
        return ["python" if word == ".venv/bin/python" else word for word in words]


def commands() -> list[Command]:
    found: list[Command] = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        name = str(page.relative_to(REPOSITORY))
        for block in FENCE.finditer(text):
            lines = block.group(1).splitlines()
            prompted = any(line.startswith("$ ") for line in lines)
            pending = ""
            current: Command | None = None
            for raw in lines:
                if prompted and not raw.startswith("$ "):
                    if current is not None:
                        current = Command(current.page, current.line, (*current.shown, raw))
                    continue
                if current is not None:
                    found.append(current)
                    current = None
                line = pending + raw.removeprefix("$ ").split(" #")[0].strip()
                if line.endswith("\\"):
                    pending = line[:-1].strip() + " "
                    continue
                pending = ""
                if line:
                    current = Command(name, line, ())
            if current is not None:
                found.append(current)
        for match in INLINE.finditer(text):
            line = " ".join(match.group(1).split())
            if not PLACEHOLDER.search(line.split(" ", 2)[-1]):
                found.append(Command(name, line, ()))
    return found


COMMANDS = commands()


def by_kind(kind: str) -> list[Command]:
    """The commands of one kind, each line once (the first page that gives it names it)."""
    seen: dict[tuple[str, tuple[str, ...]], Command] = {}
    for command in COMMANDS:
        if kind_of(command) == kind:
            seen.setdefault((command.line, command.shown), command)
    return list(seen.values())


def kind_of(command: Command) -> str:
    argv = command.argv
    if argv[0] == "toolsched":
        return "toolsched"
    if argv[0] == "python" and argv[1].startswith(("benches/", "scripts/")):
        return "script"
    if argv[:3] == ["python", "-m", "pytest"]:
        return "pytest"
    if argv[:3] == ["cargo", "bench", "--bench"]:
        return "cargo"
    if argv[:2] == ["pip", "install"]:
        return "pip"
    if argv[0] == "make":
        return "make"
    return "other"


def test_every_command_is_of_a_known_kind() -> None:
    assert len(COMMANDS) >= 30
    assert [f"{c.page}: {c.line}" for c in COMMANDS if kind_of(c) == "other"] == []


def _normal(line: str) -> str:
    """A line of output with its figures, bars and spacing taken out."""
    line = re.sub(r"[█▏▎▍▌▋▊▉]+", "", line)
    line = re.sub(r"\d+(\.\d+)?", "#", line)
    return " ".join(line.split())


@pytest.mark.parametrize("command", by_kind("toolsched"), ids=lambda c: f"{c.page}: {c.line}")
def test_a_toolsched_command_runs_as_written(command: Command, tmp_path: Path) -> None:
    (tmp_path / "benches").symlink_to(REPOSITORY / "benches")
    words = shlex.split(command.line.split(">")[0])
    redirect = command.line.split(">")[1].strip() if ">" in command.line else None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(
        [sys.executable, "-m", "toolsched", *words[1:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    if redirect:
        (tmp_path / redirect).write_text(done.stdout, encoding="utf-8")
    for written in re.findall(r"--plot (\S+)|> (\S+)", command.line):
        assert (tmp_path / "".join(written)).stat().st_size > 0
    printed = {_normal(line) for line in done.stdout.splitlines()}
    shown = [line for line in command.shown if line.strip() and line.strip() != "..."]
    assert [line for line in shown if _normal(line) not in printed] == [], done.stdout


# Run before the script: its parser parses the arguments and the process ends there (exit 0), or argparse
# refuses them (exit 2). A script that finished without parsing would exit 3.
_PARSE_ONLY = """
import argparse, runpy, sys
parse = argparse.ArgumentParser.parse_args
def parse_then_stop(self, *args, **kwargs):
    parse(self, *args, **kwargs)
    raise SystemExit(0)
argparse.ArgumentParser.parse_args = parse_then_stop
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, script.rsplit("/", 1)[0])
runpy.run_path(script, run_name="__main__")
raise SystemExit(3)
"""


@pytest.mark.parametrize("command", by_kind("script"), ids=lambda c: f"{c.page}: {c.line}")
def test_a_scripts_arguments_are_its_own(command: Command) -> None:
    argv = command.argv
    assert (REPOSITORY / argv[1]).is_file(), f"{argv[1]} does not exist"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(
        [sys.executable, "-c", _PARSE_ONLY, *argv[1:]],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_extras_the_pages_name_exist() -> None:
    declared = set(
        tomllib.loads((REPOSITORY / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    )
    named = set()
    for command in by_kind("pip"):
        for word in command.argv[2:]:
            for extras in re.findall(r"\[([^\]]*)\]", word):
                named.update(extra.strip() for extra in extras.split(","))
    assert named and named <= declared
    # The README's list of the extras a user installs: every one, and only those (dev, docs and compare
    # are the project's own).
    readme = (REPOSITORY / "README.md").read_text(encoding="utf-8")
    listed = set(re.search(r"# extras: ([a-z, ]+)", readme).group(1).replace(" ", "").split(","))  # type: ignore[union-attr]
    assert listed == declared - {"dev", "docs", "compare"}


@pytest.mark.parametrize("command", by_kind("pytest"), ids=lambda c: f"{c.page}: {c.line}")
def test_a_bench_suite_collects_with_its_options(command: Command) -> None:
    done = subprocess.run(
        [sys.executable, *command.argv[1:], "--collect-only", "-q", "-p", "no:randomly"],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_cargo_benches_the_pages_name_exist() -> None:
    cargo = tomllib.loads((REPOSITORY / "Cargo.toml").read_text(encoding="utf-8"))
    named = {command.argv[3] for command in by_kind("cargo")}
    assert named and named <= {bench["name"] for bench in cargo["bench"]}


def test_the_make_targets_the_pages_name_exist() -> None:
    makefile = (REPOSITORY / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([\w-]+):", makefile, re.MULTILINE))
    named = {command.argv[1] for command in by_kind("make")}
    assert named and named <= targets
