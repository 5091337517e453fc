"""What a durable run pays the journal per call (pytest-benchmark).

Run with ``make bench`` (which starts the throwaway PostgreSQL), or
``tests/postgres_server.sh .venv/bin/python -m pytest benches/test_journal.py --benchmark-only``.

Three measures, each for SQLite with ``synchronous="full"`` (the default: a
commit survives power loss), SQLite with ``"normal"``, and PostgreSQL on
127.0.0.1 (fsync on):

- one transition: ``record(..., "started")`` on the same call again and
  again, a committed transaction each time;
- a single-call turn: ``begin_run`` with one call, then ``started`` and
  ``finished`` with its result: everything one call of a turn writes;
- a turn of 10 concurrent calls: ``begin_run`` with 10 calls, then each call's
  ``started`` and ``finished`` from 10 tasks at once; divide by 10 for the
  cost per call.

Every round commits for real: a database on a disk without a write cache pays
an fsync per commit, which dominates.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import anyio
import psycopg
import pytest
from psycopg import sql

import toolsched as ts

DSN_VARIABLE = "TOOLSCHED_TEST_POSTGRES_DSN"
OUTPUT = {"path": "src/module.py", "lines": ["x = 1"] * 20}


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(params=["sqlite-full", "sqlite-normal", "postgres"])
def journal(request: pytest.FixtureRequest, tmp_path: Path, loop: asyncio.AbstractEventLoop) -> Iterator[ts.Journal]:
    schema = None
    made: ts.Journal
    if request.param == "postgres":
        dsn = os.environ.get(DSN_VARIABLE)
        if not dsn:
            pytest.fail(f"{DSN_VARIABLE} is not set: run the benchmarks through `make bench`, which starts PostgreSQL")
        schema = f"journal_bench_{uuid4().hex[:12]}"
        made = ts.PostgresJournal(dsn, schema=schema)
    else:
        made = ts.SqliteJournal(tmp_path / "journal.db", synchronous=request.param.removeprefix("sqlite-"))
    loop.run_until_complete(made.open())
    yield made
    loop.run_until_complete(made.close())
    if schema is not None and dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def drive(loop: asyncio.AbstractEventLoop, make: Callable[[], Awaitable[Any]]) -> Callable[[], Any]:
    async def run() -> Any:
        return await make()

    return lambda: loop.run_until_complete(run())


def test_one_transition(benchmark: Any, loop: asyncio.AbstractEventLoop, journal: ts.Journal) -> None:
    benchmark.group = "journal: one transition"
    loop.run_until_complete(journal.begin_run("bench", [ts.ToolCall("c", "read_file", {"path": "a"})]))
    benchmark(drive(loop, lambda: journal.record("bench", "c", "started")))


def test_single_call_turn(benchmark: Any, loop: asyncio.AbstractEventLoop, journal: ts.Journal) -> None:
    benchmark.group = "journal: single-call turn (begin, started, finished)"
    numbers = itertools.count()

    async def turn() -> None:
        run_id = f"run-{next(numbers)}"
        await journal.begin_run(run_id, [ts.ToolCall("c", "read_file", {"path": "src/module.py"})])
        await journal.record(run_id, "c", "started")
        await journal.record(run_id, "c", "finished", ts.ToolResult("c", "read_file", OUTPUT, duration_ms=1.0))

    benchmark(drive(loop, turn))


def test_turn_of_ten_concurrent_calls(benchmark: Any, loop: asyncio.AbstractEventLoop, journal: ts.Journal) -> None:
    benchmark.group = "journal: turn of 10 concurrent calls"
    numbers = itertools.count()
    calls = [ts.ToolCall(f"c{i}", "read_file", {"path": f"src/{i}.py"}) for i in range(10)]

    async def turn() -> None:
        run_id = f"run-{next(numbers)}"
        await journal.begin_run(run_id, calls)

        async def one(call: ts.ToolCall) -> None:
            await journal.record(run_id, call.id, "started")
            await journal.record(run_id, call.id, "finished", ts.ToolResult(call.id, call.name, OUTPUT))

        async with anyio.create_task_group() as group:
            for call in calls:
                group.start_soon(one, call)

    benchmark(drive(loop, turn))
