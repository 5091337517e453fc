"""Attacks on the journals' options (docs/concepts/durability.md): a path or connection string no journal could
open is refused with ``JournalError`` when the journal is built, not as another error or at its first write."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import toolsched as ts


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (5, "path must be a file path"),
        (b"runs.db", "path must be a file path"),
        ("", "path must name a file"),
        ("runs\x00.db", "NUL character"),
        ("runs\ud800.db", "cannot name a file"),
    ],
)
def test_a_sqlite_path_no_file_could_have_is_refused_when_built(path: Any, message: str, tmp_path: Path) -> None:
    """An int or bytes path raised TypeError; "" became "." and a NUL in the path raised ValueError at the
    journal's first use; a lone surrogate no file system encoding holds raised a bare ``UnicodeEncodeError`` at
    the journal's first use."""
    with pytest.raises(ts.JournalError, match=message):
        ts.SqliteJournal(path)


@pytest.mark.anyio
async def test_a_sqlite_path_from_a_file_name_that_is_not_utf8_opens(tmp_path: Path) -> None:
    """A name of bytes that are not UTF-8, as Python reads it from the file system (``os.fsdecode``: its bytes as
    escaped surrogates), is a file's name: it is taken, and the journal is made there."""
    path = os.fsdecode(os.fsencode(tmp_path) + b"/runs-\xff.db")
    async with ts.SqliteJournal(path) as journal:
        await journal.begin_run("r", [])
    assert b"runs-\xff.db" in os.listdir(os.fsencode(tmp_path))


@pytest.mark.parametrize(
    ("dsn", "message"),
    [
        ("=garbage", "not a valid connection string"),
        ("postgresql://u:s3cret@[::1", "not a valid connection string"),
        ("host=db\x00 password=s3cret", "NUL character"),
        ("host=db password='s3cret", "not a valid connection string"),
    ],
)
def test_a_postgres_dsn_that_does_not_parse_is_refused_when_built(dsn: str, message: str) -> None:
    """A connection string libpq cannot parse was refused only when the journal was first used, with libpq's
    message quoting it, password and all."""
    with pytest.raises(ts.JournalError, match=message) as refused:
        ts.PostgresJournal(dsn)
    assert "s3cret" not in str(refused.value)


@pytest.mark.parametrize("schema", ["j" * 64, "é" * 32], ids=["64-ascii", "64-bytes-utf8"])
def test_a_postgres_schema_name_longer_than_postgresql_keeps_is_refused_when_built(schema: str) -> None:
    """PostgreSQL keeps the first 63 bytes of a name and drops the rest without an error: a journal given a
    longer schema name opened the schema of its first 63 bytes, so two journals whose schema names differ only
    after those (``journal_<63 bytes>_eu`` and ``..._us``) shared one journal and each other's runs. Such a name
    is refused when the journal is built, naming the option and the limit."""
    with pytest.raises(ts.JournalError, match="schema must be at most 63 bytes"):
        ts.PostgresJournal("host=localhost", schema=schema)
    ts.PostgresJournal("host=localhost", schema=schema[: len(schema) - 1])


@pytest.mark.parametrize("lease", [1e-9, 4e-7], ids=["1e-9", "4e-7"])
def test_a_lease_shorter_than_a_microsecond_is_refused_naming_what_was_given(lease: float) -> None:
    """A lease of a positive number of seconds under half a microsecond became ``timedelta(0)`` before it was
    checked: the refusal said the lease must be positive and showed ``timedelta(0)``, a value the caller never
    gave, for one that is positive. It names the seconds given and why they are too few."""
    with pytest.raises(ts.JournalError, match="lease must be positive") as refused:
        ts.SqliteJournal("runs.db", lease=lease)
    assert repr(lease) in str(refused.value) and "microsecond" in str(refused.value)
    assert "timedelta(0)" not in str(refused.value)
