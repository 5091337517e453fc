"""A process for the tests of edited approvals on a journal: resumes a saved state, or recovers a run.

    python approvals_child.py STORE BACKEND resume STATE_FILE WORLD
    python approvals_child.py STORE BACKEND recover RUN_ID WORLD

STORE is the JSON from ``journal_child.Store.spec()``; BACKEND is ``asyncio`` or
``trio``; WORLD is a directory where every run of ``deploy``'s body is logged.
``resume`` loads a saved ``RunState`` (decided already) and resumes it on the
journal; ``recover`` recovers the run. Each prints the outcome as JSON, or
``refused`` and the error.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from journal_child import Store

import toolsched as ts


def ran(world: str | Path) -> list[str]:
    """The targets ``deploy`` ran with, in order."""
    log = Path(world) / "deploys"
    return log.read_text(encoding="utf-8").split() if log.exists() else []


# Called when ``deploy`` stalls (a ``stall`` file in the world directory): a test cancels the run then.
stalled: list[Callable[[], object]] = []


def log_deploy(world: str, target: str) -> bool:
    """Logs a run of ``deploy``; whether the world asks it to stall."""
    with open(Path(world) / "deploys", "a", encoding="utf-8") as log:
        log.write(target + "\n")
        log.flush()
        os.fsync(log.fileno())
    return (Path(world) / "stall").exists()


def load_state(path: str) -> ts.RunState:
    return ts.RunState.from_json(Path(path).read_text(encoding="utf-8"))


def executor(journal: ts.Journal, **options: Any) -> ts.Executor:
    """The executor of every process of these tests: one ``deploy`` tool that needs approval."""

    @ts.tool(needs_approval=True, idempotent=True, rule_subject="target")
    async def deploy(target: str, ctx: ts.ToolContext) -> str:
        """Deploy to a target; every run is logged in the world directory (the context)."""
        if log_deploy(ctx.context, target):
            # The process stops here, mid-call (a test cancels the run: a crash after the call started).
            for notify in stalled:
                notify()
            await anyio.sleep_forever()
        return f"deployed {target}"

    return ts.Executor([deploy], journal=journal, **options)


def summary(outcome: ts.Outcome) -> list[list[Any]]:
    return [[r.call_id, r.error_kind or r.output, r.edited] for r in outcome.results]


async def main(store: Store, command: str, target: str, world: str) -> None:
    async with store.open() as journal:
        try:
            if command == "resume":
                state = load_state(target)
                outcome = await executor(journal).resume(state, context=world)
            else:
                outcome = await executor(journal).recover(target, context=world, force=True)
        except ts.ToolschedError as exc:
            print(f"refused {type(exc).__name__}: {exc}")
            return
    print(json.dumps(summary(outcome)))


if __name__ == "__main__":
    # The tool as the tests' process knows it: defined in the module ``approvals_child``, not ``__main__``
    # (a tool's fingerprint names where it is defined, and an approval holds for the same tool only).
    import approvals_child

    spec, backend, command, target, world = sys.argv[1:6]
    anyio.run(approvals_child.main, Store.from_spec(spec), command, target, world, backend=backend)
