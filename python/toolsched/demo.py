"""``toolsched demo``: one realistic turn under each strategy, with its schedule drawn."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import anyio

import toolsched as ts

__all__ = ["demo_calls", "demo_tools", "run_demo"]

# Simulated latencies, in seconds: a coding agent's reads, searches, an edit and a test run.
_LATENCY = {"read_file": 0.03, "grep": 0.05, "edit_file": 0.04, "shell": 0.08}


def demo_tools() -> list[ts.Tool]:
    """A workspace's tools, with latencies simulated by sleeps."""

    @ts.tool(read_only=True, concurrency_safe=True)
    async def read_file(path: str) -> str:
        """Read a text file from the workspace."""
        await anyio.sleep(_LATENCY["read_file"])
        return f"<{path}: 120 lines>"

    @ts.tool(read_only=True, concurrency_safe=True)
    async def grep(pattern: str, path: str = ".") -> list[str]:
        """Search files for a regular expression."""
        await anyio.sleep(_LATENCY["grep"])
        return [f"{path}/app.py:12: {pattern}"]

    @ts.tool(destructive=True, rule_subject="path")
    async def edit_file(path: str, old: str, new: str) -> str:
        """Replace text in a file."""
        await anyio.sleep(_LATENCY["edit_file"])
        return f"edited {path}: {old!r} -> {new!r}"

    @ts.tool(rule_subject="command", timeout=5)
    async def shell(command: str) -> str:
        """Run a shell command in the workspace."""
        await anyio.sleep(_LATENCY["shell"])
        return f"$ {command}\n3 passed"

    return [read_file, grep, edit_file, shell]


def demo_calls() -> list[ts.ToolCall]:
    """One turn as a model might emit it."""
    return [
        ts.ToolCall("c1", "read_file", {"path": "src/app.py"}),
        ts.ToolCall("c2", "read_file", {"path": "src/util.py"}),
        ts.ToolCall("c3", "grep", {"pattern": "def load", "path": "src"}),
        ts.ToolCall("c4", "edit_file", {"path": "src/app.py", "old": "load()", "new": "load(cache=True)"}),
        ts.ToolCall("c5", "shell", '{"command": "pytest -q"}'),
        ts.ToolCall("c6", "read_file", {"path": "README.md"}),
        ts.ToolCall("c7", "grep", {"pattern": "cache=", "path": "tests"}),
        ts.ToolCall("c8", "deploy", {"env": "prod"}),
    ]


async def _timed_run(strategy: ts.Strategy) -> tuple[ts.Outcome, dict[str, tuple[float, float]], float]:
    spans: dict[str, list[float]] = {}
    origin = time.perf_counter()

    def record(event: ts.Event) -> None:
        now = time.perf_counter() - origin
        if isinstance(event, ts.ToolStarted) and event.ran:
            spans[event.call_id] = [now, now]
        elif isinstance(event, ts.ToolFinished) and event.result.call_id in spans:
            spans[event.result.call_id][1] = now

    executor = ts.Executor(demo_tools(), strategy=strategy, on_event=record)
    outcome = await executor.run(demo_calls())
    makespan = time.perf_counter() - origin
    return outcome, {k: (v[0], v[1]) for k, v in spans.items()}, makespan


def _timeline(outcome: ts.Outcome, spans: dict[str, tuple[float, float]], makespan: float, width: int = 48) -> list[str]:
    lines = []
    scale = width / max(makespan, 1e-9)
    for result in outcome.results:
        label = f"  {result.call_id} {result.tool_name:<10}"
        if result.call_id not in spans:
            lines.append(f"{label} {'':<{width}}  {result.error_kind}")
            continue
        start, end = spans[result.call_id]
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
    outcomes = []
    for strategy in strategies:
        outcome, spans, makespan = await _timed_run(strategy)
        out.append(f"{strategy!r}: {makespan * 1000:.0f} ms")
        out.extend(_timeline(outcome, spans, makespan))
        out.append("")
        outcomes.append(outcome)
    answers = {tuple((r.call_id, repr(r.output), r.error_kind) for r in o.results) for o in outcomes}
    verdict = "identical under every strategy" if len(answers) == 1 else "DIFFERENT between strategies"
    last = outcomes[-1]
    out.append(f"Results in model order ({verdict}):")
    for result in last.results:
        shown = f"ERROR {result.error_kind}: {result.error}" if result.is_error else _describe(result.output)
        out.append(f"  {result.call_id} {result.tool_name:<10} {shown}")
    return out


def run_demo(strategies: Sequence[ts.Strategy] | None = None) -> str:
    """Runs the demo turn and returns the report."""
    chosen = strategies or [ts.Sequential(), ts.Batched(3), ts.Parallel(), ts.Partitioned()]
    lines: list[str] = anyio.run(_demo, chosen)
    return "\n".join(lines)
