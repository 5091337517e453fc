"""Durable runs keep their promises under awkward outputs and copies: an output the journal
cannot store is that call's error (journaled as finished), never a raw exception with the call
left 'started'."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from journal_child import Store
from psycopg import sql

import toolsched as ts

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        yield Store("sqlite", path=str(tmp_path / "journal.db"))
        return
    dsn = os.environ.get("TOOLSCHED_TEST_POSTGRES_DSN")
    if not dsn:
        pytest.fail("TOOLSCHED_TEST_POSTGRES_DSN is not set: run the tests through `make test`")
    schema = f"promises_{uuid4().hex[:12]}"
    yield Store("postgres", dsn=dsn, schema=schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def looped() -> list[Any]:
    value: list[Any] = []
    value.append(value)
    return value


@pytest.mark.parametrize("make", [looped, lambda: {(1, 2): "tuple key"}], ids=["circular", "tuple-key"])
async def test_an_output_the_journal_cannot_store_is_that_call_s_error(store: Store, make: Any) -> None:
    ran: list[str] = []

    @ts.tool(concurrency_safe=True)
    async def odd() -> object:
        ran.append("odd")
        return make()

    @ts.tool(concurrency_safe=True)
    async def fine(n: int) -> int:
        ran.append(f"fine {n}")
        return n

    async with store.open() as journal:
        executor = ts.Executor([odd, fine], journal=journal)
        outcome = await executor.run(
            [ts.ToolCall("f1", "fine", {"n": 1}), ts.ToolCall("o", "odd"), ts.ToolCall("f2", "fine", {"n": 2})],
            run_id="r1",
        )
        by_id = {result.call_id: result for result in outcome.results}
        assert by_id["o"].error_kind == "execution_error"
        assert "cannot be journaled" in (by_id["o"].error or "")
        assert by_id["f1"].output == 1 and by_id["f2"].output == 2
        record = await journal.load("r1")
        assert [entry.state for entry in record.calls] == ["finished", "finished", "finished"]
        # Recovering the finished run runs nothing again and answers the same.
        again = await executor.recover("r1")
        assert [r.error_kind for r in again.results] == [r.error_kind for r in outcome.results]
    assert sorted(ran) == ["fine 1", "fine 2", "odd"]
