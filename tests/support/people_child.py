"""A process for the attacks on journaled runs that wait for people: resumes a decided state and is killed
(SIGKILL, by itself) while a ``pre_tool_use`` hook judges the arguments a person approved.

    python people_child.py STORE BACKEND STATE_FILE WORLD

STORE is the JSON from ``journal_child.Store.spec()``; BACKEND is ``asyncio`` or ``trio``; WORLD is a
directory where every run of ``deploy``'s body is logged. The tool is defined here, and imported by the tests
from here, so that both processes know it as the same tool (its fingerprint names its module).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
from journal_child import Store

import toolsched as ts


def ran(world: str | Path) -> list[str]:
    """The targets ``deploy`` ran with, in order."""
    log = Path(world) / "deploys"
    return log.read_text(encoding="utf-8").split() if log.exists() else []


@ts.tool(needs_approval=True, rule_subject="target")
def deploy(target: str, ctx: ts.ToolContext) -> str:
    """Deploy to a target (not idempotent); every run is logged in the world directory (the context)."""
    with open(Path(ctx.context) / "deploys", "a", encoding="utf-8") as log:
        log.write(target + "\n")
    return f"deployed {target}"


def executor(journal: ts.Journal, **options: Any) -> ts.Executor:
    return ts.Executor([deploy], journal=journal, **options)


def die_when_judged(event: ts.HookEvent) -> None:
    """The process dies while a hook judges the approved arguments: the approval is journaled, nothing else."""
    os.kill(os.getpid(), signal.SIGKILL)


async def main(store: Store, state: ts.RunState, world: str) -> None:
    async with store.open() as journal:
        hooks = ts.Hooks().pre_tool_use("deploy", die_when_judged)
        await executor(journal, hooks=hooks).resume(state, context=world)
    print("the hook did not kill the process")


if __name__ == "__main__":
    import people_child

    spec, backend, state_file, world = sys.argv[1:5]
    state = ts.RunState.from_json(Path(state_file).read_text(encoding="utf-8"))
    anyio.run(people_child.main, Store.from_spec(spec), state, world, backend=backend)
