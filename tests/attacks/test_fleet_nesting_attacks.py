"""Attacks on nested runs under ``ts.RedisCoordination`` (docs/fleet.md): a call made inside a call of its own tool
runs on its ancestor's slot, whichever of the two executors has the fleet's limits and whether Redis answers.
"""

from __future__ import annotations

import socket
import warnings

import anyio
import pytest
from fleet_redis import namespace

import toolsched as ts

pytestmark = pytest.mark.anyio


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(("parent_fleet", "child_fleet"), [(True, False), (False, True), (True, True)])
async def test_a_nested_call_on_a_slot_its_ancestor_took_in_the_local_fallback_runs(
    anyio_backend: str, parent_fleet: bool, child_fleet: bool
) -> None:
    """Redis unreachable, ``on_unavailable="local"``: a call holding the per-process slot of a capped tool (the
    fallback's, or an executor's own without coordination) runs a nested call of the same tool on another executor
    (with or without coordination, a namespace of its own). The nested call runs on its ancestor's slot: before,
    the fallback and the executor's own cap each kept their own record of the slots held, and the nested call
    asked anyio's limiter for a second token of the task holding one (``RuntimeError``)."""
    url = f"redis://127.0.0.1:{free_port()}"
    box: dict[str, ts.Executor] = {}

    @ts.agent_tool(lambda: box["child"], name="delegate", max_concurrency=1)
    async def delegate(depth: int, child: ts.ChildRun) -> str:
        """Delegates to itself until the depth runs out."""
        if depth == 0:
            return "leaf"
        outcome = await child.run([ts.ToolCall(f"d{depth}", "delegate", {"depth": depth - 1})])
        result = outcome.results[0]
        return f"{depth}/{result.output if not result.is_error else result.error}"

    def make(fleet: bool) -> ts.Executor:
        if not fleet:
            return ts.Executor([delegate])
        coordination = ts.RedisCoordination(url, namespace=namespace(), connect_timeout=0.5)
        return ts.Executor([delegate], coordination=coordination)

    box["child"] = make(child_fleet)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with anyio.fail_after(20):
            outcome = await make(parent_fleet).run([ts.ToolCall("c1", "delegate", {"depth": 2})])
    assert [(result.error_kind, result.output) for result in outcome.results] == [(None, "2/1/leaf")]
