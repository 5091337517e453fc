"""A process for the tests of effects in the world: idempotency keys, reconcile and external calls.

    python effects_child.py STORE BACKEND run RUN_ID WORLD POINT
    python effects_child.py STORE BACKEND recover RUN_ID WORLD POINT
    python effects_child.py STORE BACKEND complete RUN_ID CALL_ID OUTPUT
    python effects_child.py STORE BACKEND resume STATE_FILE WORLD

STORE is the JSON from ``journal_child.Store.spec()`` (``-`` for none); BACKEND is
``asyncio`` or ``trio``. WORLD is a directory standing for the world outside:
``Downstream`` keeps there what a payment API that drops repeated requests by
``Idempotency-Key`` would keep, and every run of a tool body is logged there.

``run`` runs ``TURN`` durably and ``recover`` recovers the run, each printing a
line at each point a crash may hit (``before ID``: the call is about to start;
``inside ID``: the body runs, nothing sent yet; ``effected ID``: the downstream
applied the charge, the result is not journaled yet; ``finished ID``: the result
is journaled; ``reconciling ID`` / ``reconciled ID``: recover asks ``reconcile``,
and it is about to answer). At POINT it prints it and freezes (blocking on stdin,
which the parent never writes) until the parent kills it with SIGKILL; ``-`` runs
to the end. ``complete`` answers an external call of a journaled run through the
journal. ``resume`` loads a saved ``RunState``, answers its external calls and
approves its held ones, resumes it (on the journal, or without one for STORE
``-``) and prints the outcome, or ``refused`` and why.
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

TURN = [
    ts.ToolCall("c0", "charge", {"amount": 10}),
    ts.ToolCall("c1", "charge", {"amount": 20}),
    ts.ToolCall("c2", "charge", {"amount": 30}),
]
POINTS = [f"{stage} {call.id}" for call in TURN for stage in ("before", "inside", "effected", "finished")]

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


class Downstream:
    """A payment API that drops a repeated request by its idempotency key, kept in a directory (durably)."""

    def __init__(self, world: str | Path) -> None:
        self.root = Path(world)
        (self.root / "ledger").mkdir(parents=True, exist_ok=True)

    def _append(self, name: str, line: str) -> None:
        with open(self.root / name, "a", encoding="utf-8") as log:
            log.write(line + "\n")
            log.flush()
            os.fsync(log.fileno())

    def charge(self, key: str, amount: int) -> str:
        """Applies the charge once per key; a repeat gets the first answer back."""
        entry = self.root / "ledger" / key
        answer = f"charged {amount}"
        try:
            descriptor = os.open(entry, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return str(json.loads(entry.read_text(encoding="utf-8")))
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(json.dumps(answer))
            file.flush()
            os.fsync(file.fileno())
        self._append("effects.log", key)
        return answer

    def lookup(self, key: str) -> str | None:
        """What the downstream answered for ``key``, or None when it never saw it."""
        entry = self.root / "ledger" / key
        return str(json.loads(entry.read_text(encoding="utf-8"))) if entry.exists() else None

    def ran(self, call_id: str, key: str) -> None:
        """Logs one run of a tool body, with the key it sent."""
        self._append("runs.log", f"{call_id} {key}")

    def effects(self) -> list[str]:
        path = self.root / "effects.log"
        return path.read_text(encoding="utf-8").split() if path.exists() else []

    def runs(self) -> list[tuple[str, str]]:
        path = self.root / "runs.log"
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        return [(line.split()[0], line.split()[1]) for line in lines]


async def settle_charge(args: dict[str, Any], ctx: ts.ToolContext) -> ts.Done | ts.NotDone:
    """``charge``'s reconcile: asks the downstream whether it saw the call's key."""
    reach(f"reconciling {ctx.call_id}")
    answer = Downstream(ctx.context).lookup(ctx.idempotency_key)
    reach(f"reconciled {ctx.call_id}")
    return ts.NotDone() if answer is None else ts.Done(answer)


@ts.tool(reconcile=settle_charge)
async def charge(amount: int, ctx: ts.ToolContext) -> str:
    """Charges an amount (not idempotent: it is settled by its reconcile after a crash)."""
    world = Downstream(ctx.context)
    world.ran(ctx.call_id, ctx.idempotency_key)
    reach(f"inside {ctx.call_id}")
    answer = world.charge(ctx.idempotency_key, amount)
    reach(f"effected {ctx.call_id}")
    return answer


@ts.tool(needs_approval=True)
async def refund(amount: int, ctx: ts.ToolContext) -> str:
    """Refunds an amount (asks first)."""
    Downstream(ctx.context).ran(ctx.call_id, ctx.idempotency_key)
    return f"refunded {amount}"


@ts.tool(external=True)
def confirm(order: str) -> str:
    """Asks the customer to confirm an order (answered from outside)."""
    raise AssertionError("an external tool is never run")


def on_event(event: ts.Event) -> None:
    if isinstance(event, ts.ToolStarted) and event.ran:
        reach(f"before {event.call_id}")
    elif isinstance(event, ts.ToolFinished):
        reach(f"finished {event.result.call_id}")


def executor(journal: ts.Journal | None, *, observed: bool = False) -> ts.Executor:
    return ts.Executor(
        [charge, refund, confirm], strategy=ts.Sequential(), journal=journal, on_event=on_event if observed else None
    )


def outcome_json(outcome: ts.Outcome) -> str:
    return json.dumps(
        {
            "results": [[r.call_id, r.output, r.error_kind] for r in outcome.results],
            "pending": [[p.call_id, getattr(p, "idempotency_key", None)] for p in outcome.pending],
        }
    )


async def run(store: Store, run_id: str, world: str) -> None:
    async with store.open() as journal:
        outcome = await executor(journal, observed=True).run(TURN, run_id=run_id, context=world)
    say(f"done {outcome_json(outcome)}")


async def recover(store: Store, run_id: str, world: str) -> None:
    async with store.open() as journal:
        outcome = await executor(journal, observed=True).recover(run_id, context=world, force=True)
    say(f"done {outcome_json(outcome)}")


async def complete(store: Store, run_id: str, call_id: str, output: str) -> None:
    async with store.open() as journal:
        try:
            await executor(journal).complete(run_id, call_id, output=json.loads(output))
        except ts.StateError as exc:
            say(f"refused {exc}")
        else:
            say("completed")


async def resume(store: Store | None, saved: str, world: str) -> None:
    state = ts.RunState.from_json(saved)
    for waiting in state.pending:
        if isinstance(waiting, ts.ExternalCall):
            state.complete(waiting.call_id, output=f"confirmed with {waiting.idempotency_key}")
        else:
            state.approve(waiting.call_id)
    if store is None:
        say(outcome_json(await executor(None).resume(state, context=world)))
        return
    async with store.open() as journal:
        try:
            outcome = await executor(journal).resume(state, context=world)
        except ts.StateError as exc:
            say(f"refused {exc}")
        else:
            say(outcome_json(outcome))


def main(argv: list[str]) -> None:
    store = None if argv[1] == "-" else Store.from_spec(argv[1])
    backend, command = argv[2], argv[3]
    if command in ("run", "recover"):
        assert store is not None
        point = argv[6]
        global _point
        _point = None if point == "-" else point
        anyio.run(run if command == "run" else recover, store, argv[4], argv[5], backend=backend)
    elif command == "complete":
        assert store is not None
        anyio.run(complete, store, argv[4], argv[5], argv[6], backend=backend)
    elif command == "resume":
        anyio.run(resume, store, Path(argv[4]).read_text(encoding="utf-8"), argv[5], backend=backend)
    else:
        raise SystemExit(f"unknown command {command!r}")


CHILD = Path(__file__)

if __name__ == "__main__":
    # The tools as the parent sees them: from the module effects_child, not __main__.
    import effects_child

    effects_child.main(sys.argv)
