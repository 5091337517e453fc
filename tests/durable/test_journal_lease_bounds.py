"""The longest lease a journal takes is one it can store and read back (SQLite and PostgreSQL).

A lease runs out at ``now + lease``: past the year 9999 that time cannot be read back, and a journal
given such a lease wrote rows it then refused as corrupt. The lease is held to 365,000 days (and to
``numeric_fault``'s rule: a timedelta or a finite number of seconds), refused when the journal is made.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from journal_child import Store, store_in

import toolsched as ts

pytestmark = pytest.mark.anyio

DSN_VARIABLE = "TOOLSCHED_TEST_POSTGRES_DSN"
LONGEST = timedelta(days=365_000)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_in(request.param, tmp_path, "lease_test")


@pytest.mark.parametrize("lease", [LONGEST, LONGEST.total_seconds()], ids=["timedelta", "seconds"])
async def test_the_longest_lease_is_stored_and_read_back(store: Store, lease: timedelta | float) -> None:
    async with store.open(lease=lease) as journal:
        await journal.begin_run("long", [ts.ToolCall("a", "echo", {})])
        await journal.renew("long")
        record = await journal.claim("long")
        assert record.lease_until is not None and record.lease_until.year > 2900
    async with store.open(owner="other") as other:
        with pytest.raises(ts.RunClaimedError):
            await other.claim("long")


@pytest.mark.parametrize(
    "lease",
    [LONGEST + timedelta(days=1), LONGEST.total_seconds() + 86_400, timedelta.max, 1e20, 10**400],
    ids=["timedelta", "seconds", "timedelta.max", "1e20", "huge-int"],
)
def test_a_longer_lease_is_refused_when_the_journal_is_made(store: Store, lease: timedelta | float) -> None:
    with pytest.raises(ts.JournalError, match="lease must be positive and at most 365,000 days"):
        store.open(lease=lease)
