"""Dynamic tool sets and nested runs, driven the way a model would drive them.

    python examples/dynamic_tools.py

- the tool list is refreshed after each turn (a remote server adds a tool);
- a deferred tool is found with ``tool_search`` in one turn and called in the next;
- a per-run resource (a database connection) is opened once per run and closed by it;
- an agent tool runs a sub-agent whose call needs approval: the parent run waits,
  and resuming it resumes the sub-agent without running its finished calls again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

import toolsched as ts

ORDERS = {42: "shipped", 43: "processing"}
TICKETS = {"T-7": "open"}


@asynccontextmanager
async def database(run: ts.RunScope) -> AsyncIterator[dict[int, str]]:
    print("  database: connected")
    yield ORDERS
    print("  database: disconnected")


@ts.tool(concurrency_safe=True, read_only=True, run_resource=database)
async def lookup_order(order_id: int, ctx: ts.ToolContext) -> str:
    """Look up an order's status."""
    return f"order {order_id}: {ctx.resource[order_id]}"


@ts.tool(should_defer=True)
async def refund_order(order_id: int) -> str:
    """Refund a customer's order and email them a receipt."""
    return f"refunded order {order_id}"


@ts.tool(concurrency_safe=True)
async def track_parcel(order_id: int) -> str:
    """Where the parcel of an order is now."""
    return f"order {order_id} is in Lyon"


# The sub-agent's own tools: reading is free, closing a ticket needs a person's approval.
@ts.tool(read_only=True)
async def read_ticket(ticket: str) -> str:
    """Read a support ticket."""
    print(f"  support desk: read {ticket}")
    return f"{ticket} is {TICKETS[ticket]}"


@ts.tool(needs_approval=True)
async def close_ticket(ticket: str) -> str:
    """Close a support ticket."""
    TICKETS[ticket] = "closed"
    print(f"  support desk: closed {ticket}")
    return f"closed {ticket}"


support_desk = ts.Executor([read_ticket, close_ticket])


@ts.agent_tool(support_desk, description="Resolve a support ticket with the support desk's tools.")
async def resolve_ticket(ticket: str, child: ts.ChildRun) -> str:
    seen = await child.run([ts.ToolCall("r1", "read_ticket", {"ticket": ticket})])
    done = await child.run([ts.ToolCall("x1", "close_ticket", {"ticket": ticket})])
    return f"{seen.results[0].output}; then {done.results[0].output}"


remote_tools: list[ts.Tool] = []  # what a remote tool server offers; it changes between turns


def current_tools() -> list[Any]:
    return [lookup_order, refund_order, resolve_ticket, *remote_tools]


def show(event: ts.Event) -> None:
    if isinstance(event, ts.ToolFinished) and event.parent_call_id is not None:
        print(f"  event from the sub-agent of {event.parent_call_id}: {event.result.call_id} finished")
    elif isinstance(event, ts.ToolsChanged):
        print(f"  tools changed: added {list(event.added)}, removed {list(event.removed)}")


registry = ts.ToolRegistry(current_tools(), refresh_tools=current_tools)
executor = ts.Executor(registry, on_event=show)


def offered() -> list[str]:
    return [item["name"] for item in registry.to_anthropic()]


def report(outcome: ts.Outcome) -> None:
    for result in outcome.results:
        print(f"  {result.call_id} {result.tool_name} -> {result.error_kind or result.output!r}")


async def main() -> None:
    print("turn 1 offers:", offered())
    remote_tools.append(track_parcel)  # the server adds a tool while turn 1 runs
    outcome = await executor.run(
        [
            ts.ToolCall("s1", "tool_search", {"query": "refund an order"}),
            ts.ToolCall("c1", "lookup_order", {"order_id": 42}),
            ts.ToolCall("c2", "lookup_order", {"order_id": 43}),
        ]
    )
    report(outcome)

    print("turn 2 offers:", offered())
    outcome = await executor.run(
        [
            ts.ToolCall("c3", "refund_order", {"order_id": 42}),
            ts.ToolCall("c4", "track_parcel", {"order_id": 43}),
            ts.ToolCall("t1", "resolve_ticket", {"ticket": "T-7"}),
        ]
    )
    report(outcome)
    print("waiting for a person:", [(p.call_id, p.tool_name, dict(p.args)) for p in outcome.pending])
    assert outcome.state is not None
    saved = outcome.state.to_json()  # store it; resume later, here or in another process

    state = ts.RunState.from_json(saved)
    state.approve("t1/x1")
    print("approved t1/x1; resuming")
    outcome = await executor.resume(state)
    report(outcome)


if __name__ == "__main__":
    anyio.run(main)
