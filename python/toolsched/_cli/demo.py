"""``toolsched demo``: one realistic turn under each strategy, with its schedule drawn.

It runs on the machinery of ``toolsched bench`` (the same timer and summary).
The tools work on a small in-memory workspace, with latencies simulated by
sleeps, so a strategy that overlaps an edit with a search of the same file
shows in the results as well as in the timeline.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import anyio

import toolsched as ts
from toolsched import _core
from toolsched._cli.bench import BenchReport, TurnTimer, TurnTiming, format_table, summarize, time_turn

__all__ = ["DEMO_FILES", "demo_calls", "demo_tools", "run_demo"]

# Simulated latencies, in seconds: a coding agent's reads, searches, an edit and a test run.
_LATENCY = {"read_file": 0.03, "grep": 0.05, "edit_file": 0.04, "shell": 0.08}

DEMO_FILES: Mapping[str, str] = {
    "README.md": "# app\n\nLoads data, with an optional cache.\n",
    "src/app.py": "from util import fetch\n\n\ndef load():\n    return fetch()\n\n\ndata = load()\n",
    "src/util.py": "def fetch(cache=False):\n    return {}\n",
    "tests/test_app.py": "from app import load\n\n\ndef test_load():\n    assert load(cache=True) == {}\n",
}


def _under(path: str, file: str) -> bool:
    key = _core.normalize_key(path)
    return key == "." or file == key or file.startswith(key + "/")


def demo_tools(files: MutableMapping[str, str] | None = None) -> list[ts.Tool]:
    """A workspace's tools over ``files`` (path -> text; a fresh copy of ``DEMO_FILES`` by default).

    Each tool sleeps for its latency, then reads or writes the workspace.
    """
    workspace: MutableMapping[str, str] = dict(DEMO_FILES) if files is None else files

    def reads_path(args: Mapping[str, Any]) -> ts.Access:
        return ts.Access(reads=[args.get("path", ".")])

    def writes_path(args: Mapping[str, Any]) -> ts.Access:
        return ts.Access(writes=[args["path"]])

    def shell_resources(args: Mapping[str, Any]) -> ts.Access | None:
        # A test run reads the workspace and writes its cache; any other command could do anything.
        if args["command"].startswith("pytest"):
            return ts.Access(reads=["."], writes=[".pytest_cache"])
        return None

    @ts.tool(read_only=True, concurrency_safe=True, resources=reads_path)
    async def read_file(path: str) -> str:
        """Read a text file from the workspace."""
        await anyio.sleep(_LATENCY["read_file"])
        text = workspace.get(_core.normalize_key(path))
        if text is None:
            raise FileNotFoundError(path)
        return f"<{path}: {len(text.splitlines())} lines>"

    @ts.tool(read_only=True, concurrency_safe=True, resources=reads_path)
    async def grep(pattern: str, path: str = ".") -> list[str]:
        """Search files for a text."""
        await anyio.sleep(_LATENCY["grep"])
        return [
            f"{file}:{number}: {line.strip()}"
            for file, text in sorted(workspace.items())
            if _under(path, file)
            for number, line in enumerate(text.splitlines(), start=1)
            if pattern in line
        ]

    @ts.tool(destructive=True, rule_subject="path", resources=writes_path)
    async def edit_file(path: str, old: str, new: str) -> str:
        """Replace text in a file."""
        await anyio.sleep(_LATENCY["edit_file"])
        key = _core.normalize_key(path)
        text = workspace.get(key, "")
        if old not in text:
            raise ValueError(f"{old!r} is not in {path}")
        workspace[key] = text.replace(old, new)
        return f"edited {path}: {text.count(old)} x {old!r} -> {new!r}"

    @ts.tool(rule_subject="command", timeout=5, resources=shell_resources)
    async def shell(command: str) -> str:
        """Run a shell command in the workspace."""
        await anyio.sleep(_LATENCY["shell"])
        if not command.startswith("pytest"):
            return f"$ {command}"
        passed = "cache=True" in workspace.get("src/app.py", "")
        workspace[".pytest_cache/lastfailed"] = "" if passed else "tests/test_app.py::test_load"
        return f"$ {command}\n{'1 passed' if passed else '1 failed'}"

    return [read_file, grep, edit_file, shell]


def demo_calls() -> list[ts.ToolCall]:
    """One turn as a model might emit it."""
    return [
        ts.ToolCall("c1", "read_file", {"path": "src/app.py"}),
        ts.ToolCall("c2", "read_file", {"path": "src/util.py"}),
        ts.ToolCall("c3", "grep", {"pattern": "load(", "path": "src"}),
        ts.ToolCall("c4", "edit_file", {"path": "src/app.py", "old": "load()", "new": "load(cache=True)"}),
        ts.ToolCall("c5", "shell", '{"command": "pytest -q"}'),
        ts.ToolCall("c6", "read_file", {"path": "README.md"}),
        ts.ToolCall("c7", "grep", {"pattern": "cache=", "path": "tests"}),
        ts.ToolCall("c8", "deploy", {"env": "prod"}),
    ]


async def _timed_run(strategy: ts.Strategy) -> TurnTiming:
    files = dict(DEMO_FILES)
    timer = TurnTimer()
    executor = ts.Executor(demo_tools(files), strategy=strategy, on_event=timer)
    timing = await time_turn(executor, timer, demo_calls())
    return dataclasses.replace(timing, final_state=files)


def _timeline(timing: TurnTiming, width: int = 48) -> list[str]:
    lines = []
    scale = width / max(timing.makespan_s, 1e-9)
    for result in timing.outcome.results:
        label = f"  {result.call_id} {result.tool_name:<10}"
        if result.call_id not in timing.spans:
            lines.append(f"{label} {'':<{width}}  {result.error_kind}")
            continue
        start, end = timing.spans[result.call_id]
        begin = int(start * scale)
        length = max(1, int((end - start) * scale))
        bar = " " * begin + "█" * length
        lines.append(f"{label} {bar:<{width}}  batch {result.batch}{' (overlapped)' if result.was_concurrent else ''}")
    return lines


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


async def _demo(strategies: Sequence[ts.Strategy]) -> list[str]:
    out = ["toolsched demo: one turn of 8 tool calls (simulated latencies), under each strategy", ""]
    timings: list[tuple[ts.Strategy, TurnTiming]] = []
    for strategy in strategies:
        timing = await _timed_run(strategy)
        out.append(f"{strategy!r}: {timing.makespan_s * 1000:.0f} ms")
        out.extend(_timeline(timing))
        out.append("")
        timings.append((strategy, timing))
    baseline = next((t for s, t in timings if isinstance(s, ts.Sequential)), None)
    if baseline is None:
        baseline = await _timed_run(ts.Sequential())
    reports = tuple(summarize(type(s).__name__, s, [t], [baseline]) for s, t in timings)
    out.append(format_table(BenchReport({"source": "demo"}, 0, reports)))
    out.append("")
    same = [r.strategy for r in reports if r.same_results_as_sequential]
    different = [r.strategy for r in reports if not r.same_results_as_sequential]
    out.append("Results and final workspace as when run one by one (Sequential): " + ", ".join(same))
    if different:
        out.append("DIFFERENT (a conflicting call overlapped): " + ", ".join(different))
    out.append("")
    out.append("Results in model order, as Sequential returns them:")
    for result in baseline.outcome.results:
        shown = f"ERROR {result.error_kind}: {result.error}" if result.is_error else _describe(result.output)
        out.append(f"  {result.call_id} {result.tool_name:<10} {shown}")
    return out


def run_demo(strategies: Sequence[ts.Strategy] | None = None) -> str:
    """Runs the demo turn and returns the report."""
    chosen = strategies or [ts.Sequential(), ts.Batched(3), ts.Parallel(), ts.Partitioned(), ts.ResourceAware()]
    lines: list[str] = anyio.run(_demo, chosen)
    return "\n".join(lines)
