"""A process for the tests of approvals asked again on recover: it dies (SIGKILL) once an approval is journaled.

    python reask_child.py STORE BACKEND RUN_ID

STORE is the JSON from ``journal_child.Store.spec()``; BACKEND is ``asyncio`` or ``trio``. The child runs
``TURN`` on a journal with an approver that approves d1 and, asked about d2 (d1's approval journaled, d1
not started), prints ``approved d1`` and freezes until it is killed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
from journal_child import Store

import toolsched as ts

TURN = [ts.ToolCall("d1", "deploy", {"target": "prod"}), ts.ToolCall("d2", "deploy", {"target": "staging"})]


@ts.tool(name="deploy", needs_approval=True)
async def deploy(target: str, ctx: ts.ToolContext) -> str:
    """Deploy to a target."""
    ctx.context.append(f"deploy {target}")
    return f"deployed {target}"


@ts.tool(name="deploy", needs_approval=True)
async def deploy_changed(target: str, ctx: ts.ToolContext) -> str:
    """Deploy to a target, all regions at once."""
    ctx.context.append(f"changed {target}")
    return f"deployed {target} everywhere"


def approver(request: ts.ApprovalRequest) -> bool:
    if request.call_id == "d2":
        sys.stdout.write("approved d1\n")
        sys.stdout.flush()
        sys.stdin.readline()  # frozen here (the event loop with it) until the parent kills the process
    return True


async def main(store: Store, run_id: str) -> None:
    async with store.open() as journal:
        await ts.Executor([deploy], journal=journal, approver=approver).run(TURN, run_id=run_id, context=[])
    print("done")


CHILD = Path(__file__)

if __name__ == "__main__":
    # The tools as the tests' process knows them: from the module reask_child, not __main__ (a tool's
    # fingerprint names where it is defined).
    import reask_child

    anyio.run(reask_child.main, Store.from_spec(sys.argv[1]), sys.argv[3], backend=sys.argv[2])
