"""Attacks on what a PostgreSQL journal leaves on the server when a statement goes unanswered
(docs/concepts/durability.md): "a statement with no answer within the lease (or `connect_timeout`, if longer) is
cancelled on the server and has its connection closed under it".
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio.to_thread
import psycopg
import pytest
from journal_child import Store, store_in
from psycopg import conninfo, sql

import toolsched as ts

pytestmark = pytest.mark.anyio

# How long a test polls the server for what it waits to see, in seconds: generous, never a measure of speed.
POLL_FOR = 30.0


@pytest.fixture
def postgres_store(tmp_path: Path) -> Iterator[Store]:
    yield from store_in("postgres", tmp_path, "cancel_attack")


def waiting_statements(dsn: str, application_name: str) -> list[str]:
    """The statements the journal's sessions (by their application name) are running on the server now."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT query FROM pg_stat_activity WHERE application_name = %s AND state = 'active'",
            (application_name,),
        ).fetchall()
    return [str(row[0]) for row in rows]


def until_none_left(dsn: str, application_name: str) -> list[str]:
    """Polls until the journal's sessions run no statement on the server (at most ``POLL_FOR`` seconds); returns
    what they still ran when polling ended."""
    give_up = time.monotonic() + POLL_FOR
    left = waiting_statements(dsn, application_name)
    while left and time.monotonic() < give_up:
        time.sleep(0.1)
        left = waiting_statements(dsn, application_name)
    return left


async def test_a_statement_past_its_deadline_is_cancelled_on_the_server_not_only_left(
    postgres_store: Store,
) -> None:
    """A statement past its deadline had only its client socket shut down: the server's backend went on
    waiting for the row lock another session held (a backend waiting on a lock never reads its socket), and
    ran the write the journal had reported failed as soon as the lock was released: a ``started`` transition
    landed after ``record`` raised ``JournalError``, and the backend held its place in the lock queue meanwhile.
    The statement is now cancelled on the server before its connection is closed: none is left running, and
    the write the journal reported failed never lands."""
    dsn = postgres_store.dsn
    assert dsn is not None
    async with postgres_store.open(lease=1, connect_timeout=1) as journal:
        name = f"toolsched-journal {journal.owner}"[:63]
        await journal.begin_run("r", [ts.ToolCall("c1", "charge", {"order": "A-1"})])
        with psycopg.connect(dsn, autocommit=True) as blocker:
            assert postgres_store.schema is not None
            blocker.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(postgres_store.schema)))
            with blocker.transaction():
                blocker.execute("SELECT run_id FROM toolsched_runs WHERE run_id = 'r' FOR UPDATE")
                with pytest.raises(ts.JournalError, match="did not answer within"):
                    await journal.record("r", "c1", "started")
                # The lock is still held here: a statement still waiting for it is the severed one.
                assert await anyio.to_thread.run_sync(until_none_left, dsn, name) == []
        record = await journal.load("r")
    assert record.calls[0].state == "planned"


class SilentServer:
    """A TCP relay in front of the test server that can go silent: from ``silence()`` on, it passes nothing
    either way and answers no connection (each is accepted and held), as a host that stops answering looks to
    its clients; ``revive()`` closes everything it holds."""

    def __init__(self, dsn: str) -> None:
        params = conninfo.conninfo_to_dict(dsn)
        self.upstream = (str(params["host"]), int(str(params["port"])))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.dsn = conninfo.make_conninfo(dsn, port=self.listener.getsockname()[1])
        self.silent = threading.Event()
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def silence(self) -> None:
        self.silent.set()

    def revive(self) -> None:
        self.listener.close()
        for held in self.held:
            held.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.held.append(client)
            if self.silent.is_set():
                continue
            server = socket.create_connection(self.upstream)
            self.held.append(server)
            threading.Thread(target=self._relay, args=(client, server), daemon=True).start()
            threading.Thread(target=self._relay, args=(server, client), daemon=True).start()

    def _relay(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                if not self.silent.is_set():
                    sink.sendall(data)
        except OSError:
            return


async def test_a_server_that_answers_nothing_cannot_hold_a_statement_by_not_taking_its_cancel(
    postgres_store: Store,
) -> None:
    """The cancel request sent for a statement past its deadline goes to the same server: one that answers
    nothing (a host gone quiet, a network that drops everything) takes the request's connection and never
    answers it. The request is given up after ``connect_timeout``: the statement still fails with
    ``JournalError`` while the server is silent, and its write never landed."""
    assert postgres_store.dsn is not None
    relay = SilentServer(postgres_store.dsn)
    journal = ts.PostgresJournal(relay.dsn, schema=postgres_store.schema, lease=1, connect_timeout=1)
    revived = threading.Event()

    def revive() -> None:
        revived.set()
        relay.revive()

    async with journal:
        await journal.begin_run("r", [ts.ToolCall("c1", "charge", {"order": "A-1"})])
        relay.silence()
        guard = threading.Timer(POLL_FOR, revive)
        guard.start()
        try:
            with pytest.raises(ts.JournalError, match="did not answer within"):
                await journal.record("r", "c1", "started")
            assert not revived.is_set()
        finally:
            guard.cancel()
            revive()
    async with postgres_store.open() as direct:
        assert (await direct.load("r")).calls[0].state == "planned"
