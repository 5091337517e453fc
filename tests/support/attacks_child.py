"""A second process for the attack tests on effects: it resumes a saved state or answers an external call
through the journal, as another worker or a webhook would.

    python attacks_child.py STORE BACKEND resume STATE_FILE WORLD DECISIONS
    python attacks_child.py STORE BACKEND complete RUN_ID CALL_ID OUTPUT

STORE is the JSON from ``journal_child.Store.spec()``; BACKEND is ``asyncio`` or
``trio``. ``resume`` loads the state, applies DECISIONS (JSON: call ID to
``"approve"``, ``"reject"`` or ``["complete", output]``), resumes it on the
journal and prints ``resumed RESULTS`` or ``refused ERROR-TYPE: message``.
``complete`` prints ``ready``, waits for a line on stdin (so two completers
start together), answers the call and prints ``completed`` or ``refused
ERROR-TYPE: message``. WORLD is a directory where every run of a tool body is
logged (``runs.log``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
from journal_child import Store

import toolsched as ts


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def log_run(world: str, call_id: str) -> None:
    with open(Path(world) / "runs.log", "a", encoding="utf-8") as log:
        log.write(call_id + "\n")


@ts.tool(needs_approval=True)
async def pay(amount: int, ctx: ts.ToolContext) -> str:
    """Pays an amount (asks first)."""
    log_run(ctx.context, ctx.call_id)
    return f"paid {amount}"


@ts.tool(external=True)
def confirm(order: str) -> str:
    """Asks the customer to confirm an order (answered from outside)."""
    raise AssertionError("an external tool is never run")


def executor(journal: ts.Journal) -> ts.Executor:
    return ts.Executor([pay, confirm], strategy=ts.Sequential(), journal=journal)


def runs(world: str | Path) -> list[str]:
    path = Path(world) / "runs.log"
    return path.read_text(encoding="utf-8").split() if path.exists() else []


async def resume(store: Store, saved: str, world: str, decisions: dict[str, Any]) -> None:
    state = ts.RunState.from_json(saved)
    for call_id, decision in decisions.items():
        if decision == "approve":
            state.approve(call_id)
        elif decision == "reject":
            state.reject(call_id)
        else:
            state.complete(call_id, output=decision[1])
    async with store.open() as journal:
        try:
            outcome = await executor(journal).resume(state, context=world)
        except ts.ToolschedError as exc:
            say(f"refused {type(exc).__name__}: {exc}")
        else:
            say("resumed " + json.dumps([[r.call_id, r.output, r.error_kind] for r in outcome.results]))


async def complete(store: Store, run_id: str, call_id: str, output: Any) -> None:
    async with store.open() as journal:
        say("ready")
        await anyio.to_thread.run_sync(sys.stdin.readline)
        try:
            await executor(journal).complete(run_id, call_id, output=output)
        except ts.ToolschedError as exc:
            say(f"refused {type(exc).__name__}: {exc}")
        else:
            say("completed")


def main(argv: list[str]) -> None:
    store = Store.from_spec(argv[1])
    backend, command = argv[2], argv[3]
    if command == "resume":
        saved = Path(argv[4]).read_text(encoding="utf-8")
        anyio.run(resume, store, saved, argv[5], json.loads(argv[6]), backend=backend)
    elif command == "complete":
        anyio.run(complete, store, argv[4], argv[5], json.loads(argv[6]), backend=backend)
    else:
        raise SystemExit(f"unknown command {command!r}")


CHILD = Path(__file__)

if __name__ == "__main__":
    # The tools as the parent sees them: from the module attacks_child, not __main__.
    import attacks_child

    attacks_child.main(sys.argv)
