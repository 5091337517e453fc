"""Attacks on journaled runs that wait for people, on SQLite and PostgreSQL: a process killed after a person's
decision is journaled, recovered in another; one ``Limits`` carried across a run stopped midway and its
recovery."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from journal_child import Store, store_in

import toolsched as ts

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_in(request.param, tmp_path, "people_attacks")


async def test_a_call_counted_before_its_run_stopped_is_not_counted_again_by_its_recovery(store: Store) -> None:
    # One Limits for the agent run: its call was counted when admitted, the run stopped while a hook judged it
    # (the journal holds it planned), and recover with the same Limits finds it counted already: it runs, as the
    # one call the run made, instead of being refused by its own count.
    ran_with: list[str] = []

    @ts.tool(idempotent=True)
    async def fetch(key: str) -> str:
        """Fetches a key."""
        ran_with.append(key)
        return f"got {key}"

    judged = anyio.Event()

    async def stall(event: ts.HookEvent) -> None:
        judged.set()
        await anyio.sleep_forever()

    limits = ts.Limits(max_calls=1, max_repeats=1)
    calls = [ts.ToolCall("c1", "fetch", {"key": "a"})]
    async with store.open() as journal:
        stalling = ts.Executor([fetch], journal=journal, hooks=ts.Hooks().pre_tool_use("fetch", stall))
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as group:
                group.start_soon(functools.partial(stalling.run, calls, run_id="counted", limits=limits))
                await judged.wait()
                scope.cancel()
        assert (await journal.load("counted")).call("c1").state == "planned" and limits.calls == 1
        recovered = await ts.Executor([fetch], journal=journal).recover("counted", limits=limits)
    assert [(r.call_id, r.error_kind, r.output) for r in recovered.results] == [("c1", None, "got a")]
    assert ran_with == ["a"] and limits.calls == 1 and limits.calls_of("fetch") == 1
