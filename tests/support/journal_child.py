"""A second process for the journal tests: reads, claims and writes a journal, reporting on stdout.

    python journal_child.py STORE BACKEND load RUN_ID
    python journal_child.py STORE BACKEND claim RUN_ID OWNER
    python journal_child.py STORE BACKEND write RUN_ID CALLS

STORE is the JSON from ``Store.spec()``; BACKEND is ``asyncio`` or ``trio``.
``load`` prints the run as JSON. ``claim`` prints ``ready``, waits for a line
on stdin (so two claimers start together), then prints ``won`` or ``lost
OWNER``. ``write`` begins a run of CALLS calls and records each call's
``started`` and ``finished``, printing each transition only once the journal
has returned from writing it; the parent kills it at a random point.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

import anyio

import toolsched as ts


@dataclass(frozen=True)
class Store:
    """Where a test's journal lives: an SQLite file, or a schema of the test PostgreSQL server."""

    kind: str
    path: str | None = None
    dsn: str | None = None
    schema: str | None = None

    def open(self, **options: Any) -> ts.Journal:
        if self.kind == "sqlite":
            assert self.path is not None
            return ts.SqliteJournal(self.path, **options)
        assert self.dsn is not None
        return ts.PostgresJournal(self.dsn, schema=self.schema, **options)

    def spec(self) -> str:
        return json.dumps({"kind": self.kind, "path": self.path, "dsn": self.dsn, "schema": self.schema})

    @classmethod
    def from_spec(cls, text: str) -> Store:
        return cls(**json.loads(text))


DSN_VARIABLE = "TOOLSCHED_TEST_POSTGRES_DSN"


def store_in(kind: str, tmp_path: Path, prefix: str) -> Iterator[Store]:
    """A test's journal store of ``kind`` (``sqlite`` or ``postgres``), for a fixture to yield from.

    PostgreSQL gets a fresh schema named with ``prefix`` on the server ``make test`` starts, dropped after.
    """
    if kind == "sqlite":
        yield Store("sqlite", path=str(tmp_path / "journal.db"))
        return
    import psycopg
    from psycopg import sql

    dsn = os.environ.get(DSN_VARIABLE)
    if not dsn:
        raise RuntimeError(f"{DSN_VARIABLE} is not set: run the tests through `make test` (tests/postgres_server.sh)")
    schema = f"{prefix}_{uuid4().hex[:12]}"
    yield Store("postgres", dsn=dsn, schema=schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def turn(count: int) -> list[ts.ToolCall]:
    """The calls the writer journals: one per index, with arguments that name it."""
    return [ts.ToolCall(f"c{i}", "echo", {"index": i, "text": f"call {i}"}) for i in range(count)]


def expected_output(index: int) -> dict[str, Any]:
    return {"index": index, "echo": f"call {index}"}


def summary(record: ts.RunRecord) -> dict[str, Any]:
    return {
        "owner": record.owner,
        "calls": {
            entry.call_id: {
                "state": entry.state,
                "starts": entry.starts,
                "output": entry.result.output if entry.result is not None else None,
            }
            for entry in record.calls
        },
    }


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def load(store: Store, run_id: str) -> None:
    async with store.open() as journal:
        say(json.dumps(summary(await journal.load(run_id))))


async def claim(store: Store, run_id: str, owner: str) -> None:
    async with store.open(owner=owner) as journal:
        say("ready")
        await anyio.to_thread.run_sync(sys.stdin.readline)
        try:
            await journal.claim(run_id)
        except ts.RunClaimedError as exc:
            say(f"lost {exc.owner}")
        else:
            say("won")


async def write(store: Store, run_id: str, count: int) -> None:
    async with store.open() as journal:
        calls = turn(count)
        await journal.begin_run(run_id, calls)
        say("begun")
        for index, call in enumerate(calls):
            await journal.record(run_id, call.id, "started")
            say(f"started {call.id}")
            result = ts.ToolResult(call.id, call.name, expected_output(index), duration_ms=0.5)
            await journal.record(run_id, call.id, "finished", result)
            say(f"finished {call.id}")
        say("done")


def main(argv: list[str]) -> None:
    store = Store.from_spec(argv[1])
    backend, command, run_id = argv[2], argv[3], argv[4]
    if command == "load":
        anyio.run(load, store, run_id, backend=backend)
    elif command == "claim":
        anyio.run(claim, store, run_id, argv[5], backend=backend)
    elif command == "write":
        anyio.run(write, store, run_id, int(argv[5]), backend=backend)
    else:
        raise SystemExit(f"unknown command {command!r}")


CHILD = Path(__file__)

if __name__ == "__main__":
    main(sys.argv)
