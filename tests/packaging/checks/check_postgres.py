"""A durable run journaled in PostgreSQL with the ``postgres`` extra alone; argv[2] is the server's DSN."""

from __future__ import annotations

import sys
from uuid import uuid4

import anyio
import psycopg
from psycopg import sql

import toolsched as ts

DSN = sys.argv[2]
SCHEMA = f"packaging_check_{uuid4().hex[:12]}"


@ts.tool(read_only=True, concurrency_safe=True)
async def echo(text: str) -> str:
    """Echo the text."""
    return text


async def main() -> None:
    async with ts.PostgresJournal(DSN, schema=SCHEMA) as journal:
        outcome = await ts.Executor([echo], journal=journal).run(
            [ts.ToolCall("c1", "echo", {"text": "hello"})], run_id="turn-1"
        )
        print(outcome.run_id, [result.output for result in outcome.results])
    # Another journal on the same schema, as another process would open it, finds the finished run.
    async with ts.PostgresJournal(DSN, schema=SCHEMA) as journal:
        again = await ts.Executor([echo], journal=journal).recover("turn-1")
        print("recovered", [result.output for result in again.results])


try:
    anyio.run(main)
finally:
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
