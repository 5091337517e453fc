"""A process that runs or resumes a journaled run whose call runs a nested run, for the nested crash tests.

    python nested_crash_child.py BACKEND JOURNAL LOG run RUN_ID PATHS [POINT]
    python nested_crash_child.py BACKEND JOURNAL LOG resume STATE_FILE [POINT]

``run`` runs ``turn(PATHS)`` (PATHS comma-separated) under RUN_ID; ``resume`` resumes the
``RunState`` saved as JSON in STATE_FILE. Both journal to the SQLite file JOURNAL and print
one line at the end: ``done``, ``interrupted`` followed by the pending call IDs, or
``refused`` followed by the error's type and message.

The agent tool ``tidy`` runs one child turn per path, each a ``delete`` that needs approval
and is not idempotent; ``hang`` is an ordinary call after it. Each execution of ``delete`` or
``hang`` appends its call ID to LOG (the run's context) before anything else, so the parent
can count how often each really ran. At POINT the process prints the point and freezes
(blocking on stdin, which the parent never writes) until the parent kills it with SIGKILL:
``inside ID`` once the call logged its execution, ``admitting t1`` while ``t1`` is admitted
(after a resume journaled its decisions, before the call starts).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio

import toolsched as ts

_point: str | None = None


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def reach(line: str) -> None:
    """At the chosen point, prints it and freezes the whole process until it is killed."""
    if line == _point:
        say(line)
        sys.stdin.readline()


def executed(ctx: ts.ToolContext) -> None:
    """Logs one execution of the call, durably, before the body does anything else."""
    with open(ctx.context, "a", encoding="utf-8") as log:
        log.write(f"{ctx.call_id}\n")
        log.flush()
        os.fsync(log.fileno())
    reach(f"inside {ctx.call_id}")


async def admitting(event: ts.HookEvent) -> None:
    """A point while a call is admitted: after a resume journaled its decisions, before the call starts."""
    reach(f"admitting {event.call_id}")


@ts.tool(needs_approval=True, destructive=True)
async def delete(path: str, ctx: ts.ToolContext) -> str:
    """Deletes a path (asks first; not idempotent)."""
    executed(ctx)
    return f"deleted {path}"


@ts.tool
async def hang(ctx: ts.ToolContext) -> str:
    """A call of the parent run after the nested one (not idempotent)."""
    executed(ctx)
    return "hung up"


@ts.agent_tool(ts.Executor([delete]))
async def tidy(paths: list[str], child: ts.ChildRun) -> str:
    """Deletes each path in a child turn of its own."""
    deleted = []
    for index, path in enumerate(paths):
        outcome = await child.run([ts.ToolCall(f"x{index + 1}", "delete", {"path": path})])
        deleted.append(str(outcome.results[0].output))
    return "; ".join(deleted)


def turn(paths: list[str]) -> list[ts.ToolCall]:
    return [ts.ToolCall("t1", "tidy", {"paths": paths}), ts.ToolCall("h", "hang")]


def executor(journal: ts.Journal) -> ts.Executor:
    hooks = ts.Hooks().pre_tool_use("tidy", admitting)
    return ts.Executor([tidy, hang], strategy=ts.Sequential(), journal=journal, hooks=hooks)


def ran(log: Path) -> list[str]:
    """The call IDs of every execution, in order."""
    return log.read_text(encoding="utf-8").split() if log.exists() else []


def report(outcome: ts.Outcome) -> str:
    if outcome.interrupted:
        return " ".join(["interrupted", *(request.call_id for request in outcome.pending)])
    return "done"


async def main(journal_path: str, log: str, command: str, target: str, paths: str) -> None:
    async with ts.SqliteJournal(journal_path) as journal:
        try:
            if command == "run":
                outcome = await executor(journal).run(turn(paths.split(",")), run_id=target, context=log)
            else:
                state = ts.RunState.from_json(await anyio.Path(target).read_text(encoding="utf-8"))
                outcome = await executor(journal).resume(state, context=log)
        except ts.ToolschedError as exc:
            say(f"refused {type(exc).__name__}: {exc}")
            return
    say(report(outcome))


CHILD = Path(__file__)

if __name__ == "__main__":
    # The tools as the parent sees them (their fingerprints name the module): nested_crash_child, not __main__.
    import nested_crash_child

    backend, journal_path, log, command, target = sys.argv[1:6]
    rest = sys.argv[6:]
    paths = rest.pop(0) if command == "run" else ""
    nested_crash_child._point = rest[0] if rest else None
    anyio.run(nested_crash_child.main, journal_path, log, command, target, paths, backend=backend)
