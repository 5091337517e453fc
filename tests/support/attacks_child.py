"""A second process for the attack tests on effects: it resumes a saved state or answers an external call
through the journal, as another worker or a webhook would.

    python attacks_child.py STORE BACKEND resume STATE_FILE WORLD DECISIONS [POINT]
    python attacks_child.py STORE BACKEND complete RUN_ID CALL_ID OUTPUT [POINT]
    python attacks_child.py STORE BACKEND nested RUN_ID WORLD POINT
    python attacks_child.py STORE BACKEND handout RUN_ID WORLD POINT

STORE is the JSON from ``journal_child.Store.spec()``; BACKEND is ``asyncio`` or
``trio``. ``resume`` loads the state, applies DECISIONS (JSON: call ID to
``"approve"``, ``"reject"`` or ``["complete", output]``), resumes it on the
journal and prints ``resumed RESULTS`` or ``refused ERROR-TYPE: message``.
``complete`` prints ``ready``, waits for a line on stdin (so two completers
start together), answers the call and prints ``completed`` or ``refused
ERROR-TYPE: message``. With POINT, ``resume``, ``complete`` and ``handout``
print the point and freeze (blocking on stdin) until the parent kills them
with SIGKILL: ``writing TRANSITION CALL`` just before the journal writes a
call's transition, ``wrote TRANSITION CALL`` just after. ``handout`` runs
``HANDED`` (two external calls) and prints ``done`` and the calls handed out. ``nested`` runs
``NESTED`` (an idempotent agent tool whose nested run makes three ``charge``
calls) and freezes at POINT (``inside ID``: the nested call ``ID`` logged its run
and key). WORLD is a directory where every run of a tool body is logged
(``runs.log``; ``keys.log`` for ``charge``: call ID and idempotency key).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from journal_child import Store

import toolsched as ts


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def log_run(world: str, line: str, name: str = "runs.log") -> None:
    with open(Path(world) / name, "a", encoding="utf-8") as log:
        log.write(line + "\n")
        log.flush()
        os.fsync(log.fileno())


@ts.tool(needs_approval=True)
async def pay(amount: int, ctx: ts.ToolContext) -> str:
    """Pays an amount (asks first)."""
    log_run(ctx.context, ctx.call_id)
    return f"paid {amount}"


@ts.tool(external=True)
def confirm(order: str) -> str:
    """Asks the customer to confirm an order (answered from outside)."""
    raise AssertionError("an external tool is never run")


_point: str | None = None


def reach(line: str) -> None:
    """At the chosen point, prints it and freezes the whole process until it is killed."""
    if line == _point:
        say(line)
        sys.stdin.readline()


@ts.tool(idempotent=True)
async def charge(amount: int, ctx: ts.ToolContext) -> str:
    """Charges an amount, sending the call's idempotency key (logged in WORLD/keys.log)."""
    log_run(ctx.context, f"{ctx.call_id} {ctx.idempotency_key}", "keys.log")
    reach(f"inside {ctx.call_id}")
    return f"charged {amount}"


@ts.agent_tool(ts.Executor([charge], strategy=ts.Sequential()), idempotent=True)
async def checkout(items: int, child: ts.ChildRun) -> str:
    """Charges each item in a nested run."""
    outcome = await child.run([ts.ToolCall(f"k{i}", "charge", {"amount": 10 * (i + 1)}) for i in range(items)])
    return ", ".join(str(result.output) for result in outcome.results)


NESTED = [ts.ToolCall("p1", "checkout", {"items": 3})]
HANDED = [ts.ToolCall("e1", "confirm", {"order": "A-1"}), ts.ToolCall("e2", "confirm", {"order": "A-2"})]


def executor(journal: ts.Journal) -> ts.Executor:
    return ts.Executor([pay, confirm, checkout], strategy=ts.Sequential(), journal=journal)


def keys(world: str | Path) -> list[tuple[str, str]]:
    path = Path(world) / "keys.log"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [(line.split()[0], line.split()[1]) for line in lines]


def runs(world: str | Path) -> list[str]:
    path = Path(world) / "runs.log"
    return path.read_text(encoding="utf-8").split() if path.exists() else []


def watched(journal: ts.Journal) -> ts.Journal:
    """The journal, freezing at ``writing TRANSITION CALL`` just before it writes a call's transition and at
    ``wrote TRANSITION CALL`` just after, when that is the chosen point."""
    record = journal.record

    async def frozen_around(run: str, call: str, transition: Any, payload: Any = None) -> None:
        reach(f"writing {transition} {call}")
        await record(run, call, transition, payload)
        reach(f"wrote {transition} {call}")

    journal.record = frozen_around  # type: ignore[method-assign]
    return journal


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
            outcome = await executor(watched(journal)).resume(state, context=world)
        except ts.ToolschedError as exc:
            say(f"refused {type(exc).__name__}: {exc}")
        else:
            say("resumed " + json.dumps([[r.call_id, r.output, r.error_kind] for r in outcome.results]))


async def complete(store: Store, run_id: str, call_id: str, output: Any) -> None:
    async with store.open() as journal:
        say("ready")
        await anyio.to_thread.run_sync(sys.stdin.readline)
        try:
            await executor(watched(journal)).complete(run_id, call_id, output=output)
        except ts.ToolschedError as exc:
            say(f"refused {type(exc).__name__}: {exc}")
        else:
            say("completed")


async def nested(store: Store, run_id: str, world: str) -> None:
    async with store.open() as journal:
        outcome = await executor(journal).run(NESTED, run_id=run_id, context=world)
    say("done " + json.dumps([[r.call_id, r.output] for r in outcome.results]))


async def hand_out(store: Store, run_id: str, world: str) -> None:
    async with store.open() as journal:
        outcome = await executor(watched(journal)).run(HANDED, run_id=run_id, context=world)
    say("done " + json.dumps([p.call_id for p in outcome.pending]))


def main(argv: list[str]) -> None:
    global _point
    store = Store.from_spec(argv[1])
    backend, command = argv[2], argv[3]
    if command in ("nested", "handout"):
        _point = argv[6]
        anyio.run(nested if command == "nested" else hand_out, store, argv[4], argv[5], backend=backend)
    elif command == "resume":
        _point = argv[7] if len(argv) > 7 else None
        saved = Path(argv[4]).read_text(encoding="utf-8")
        anyio.run(resume, store, saved, argv[5], json.loads(argv[6]), backend=backend)
    elif command == "complete":
        _point = argv[7] if len(argv) > 7 else None
        anyio.run(complete, store, argv[4], argv[5], json.loads(argv[6]), backend=backend)
    else:
        raise SystemExit(f"unknown command {command!r}")


CHILD = Path(__file__)

if __name__ == "__main__":
    # The tools as the parent sees them: from the module attacks_child, not __main__.
    import attacks_child

    attacks_child.main(sys.argv)
