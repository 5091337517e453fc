"""A process that runs a durable turn, for the crash tests: the parent kills it at a chosen point.

    python durable_child.py STORE BACKEND RUN_ID LOG POINT [stream]

STORE is the JSON from ``journal_child.Store.spec()``; BACKEND is ``asyncio``
or ``trio``. The child runs ``TURN`` through an executor journaling to STORE,
printing a line at each point a crash may hit: ``before ID`` (the call is
about to start), ``inside ID`` (the tool body runs, its execution logged),
``finished ID`` (the result is journaled and reported). When it reaches POINT
it prints it and freezes there (blocking on stdin, which the parent never
writes) until the parent kills it with SIGKILL.

The tools append one line per execution to LOG (the context of the run), so
the parent can count how often each call really ran. With ``stream`` the turn's
calls arrive one by one (an async iterable, a streamed turn), each journaled as
it arrives.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
from journal_child import Store

import toolsched as ts

TURN = [
    ts.ToolCall("c0", "append", {"text": "zero"}),
    ts.ToolCall("c1", "lookup", {"key": "one"}),
    ts.ToolCall("c2", "deploy", {"target": "prod"}),
    ts.ToolCall("c3", "append", {"text": "three"}),
    ts.ToolCall("c1", "lookup", {"key": "again"}),
    ts.ToolCall("c4", "lookup", {"key": "four"}),
    ts.ToolCall("c5", "missing", {}),
]
IDEMPOTENT = {"lookup"}
POINTS = [f"{stage} {call_id}" for call_id in ("c0", "c1", "c3", "c4") for stage in ("before", "inside", "finished")]

_point: str | None = None


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def reach(line: str) -> None:
    """Prints a point; at the chosen one, freezes the whole process until it is killed."""
    if _point is None:
        return
    say(line)
    if line == _point:
        sys.stdin.readline()


def executed(ctx: ts.ToolContext) -> None:
    """Logs one execution of the call, durably, before the body does anything else."""
    with open(ctx.context, "a", encoding="utf-8") as log:
        log.write(f"{ctx.call_id}\n")
        log.flush()
        os.fsync(log.fileno())
    reach(f"inside {ctx.call_id}")


@ts.tool
async def append(text: str, ctx: ts.ToolContext) -> str:
    """Appends a line (not idempotent)."""
    executed(ctx)
    return f"appended {text}"


@ts.tool(read_only=True, idempotent=True)
async def lookup(key: str, ctx: ts.ToolContext) -> dict[str, Any]:
    """Looks a key up (idempotent)."""
    executed(ctx)
    return {"key": key, "value": len(key)}


@ts.tool(needs_approval=True, destructive=True)
async def deploy(target: str, ctx: ts.ToolContext) -> str:
    """Deploys (asks first; not idempotent)."""
    executed(ctx)
    return f"deployed to {target}"


def on_event(event: ts.Event) -> None:
    if isinstance(event, ts.ToolStarted) and event.ran:
        reach(f"before {event.call_id}")
    elif isinstance(event, ts.ToolFinished):
        reach(f"finished {event.result.call_id}")


def executor(journal: ts.Journal, *, observed: bool = False) -> ts.Executor:
    return ts.Executor(
        [append, lookup, deploy], strategy=ts.Sequential(), journal=journal, on_event=on_event if observed else None
    )


def expected_output(call: ts.ToolCall) -> Any:
    args = dict(call.args) if not isinstance(call.args, str) else {}
    if call.name == "append":
        return f"appended {args['text']}"
    if call.name == "lookup":
        return {"key": args["key"], "value": len(args["key"])}
    return f"deployed to {args['target']}"


async def streamed() -> Any:
    for call in TURN:
        await anyio.sleep(0.01)
        yield call


async def main(store: Store, run_id: str, log: str, stream: bool = False) -> None:
    async with store.open() as journal:
        calls = streamed() if stream else TURN
        outcome = await executor(journal, observed=True).run(calls, run_id=run_id, context=log)
    say(f"done {len(outcome.results)}")


CHILD = Path(__file__)

if __name__ == "__main__":
    # The tools as the parent sees them: from the module durable_child, not __main__.
    import durable_child

    durable_child._point = sys.argv[5]
    stream = sys.argv[6:7] == ["stream"]
    anyio.run(durable_child.main, Store.from_spec(sys.argv[1]), sys.argv[3], sys.argv[4], stream, backend=sys.argv[2])
