"""Attacks on a journaled run's holder (docs/concepts/durability.md): "a holder known to be dead lets go at
once: a process of this host ... that no longer exists (after kill -9, say) needs no waiting out its lease"."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from crashes import orphan_holder

import toolsched as ts

pytestmark = pytest.mark.anyio


def state_of(pid: int) -> bytes:
    """The process's state letter in /proc (``Z``: a zombie, dead and not yet reaped by its parent)."""
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]


async def test_a_killed_holder_its_parent_has_not_reaped_yet_lets_go_at_once(tmp_path: Path) -> None:
    """A worker killed with SIGKILL whose supervisor has not yet waited for it is a zombie: it runs nothing
    and holds nothing, but its pid still answers a signal 0, so its run was held for the whole lease (600 s
    here: ``RunClaimedError``)."""
    path = tmp_path / "journal.db"
    marker = tmp_path / "started"
    script = orphan_holder(path, marker)
    # A plain Popen: no event loop's child watcher reaps it behind the test's back.
    process = subprocess.Popen([sys.executable, "-c", script])  # noqa: ASYNC220 (see above)
    try:
        with anyio.fail_after(30):
            while not marker.exists():  # noqa: ASYNC110 (another process's file)
                await anyio.sleep(0.02)
            process.send_signal(signal.SIGKILL)
            while state_of(process.pid) != b"Z":  # noqa: ASYNC110 (another process's state)
                await anyio.sleep(0.01)

        @ts.tool
        async def hang() -> None:
            raise AssertionError("not idempotent: never run again")

        async with ts.SqliteJournal(path, lease=600) as journal:
            outcome = await ts.Executor([hang], journal=journal).recover("orphan")
        assert outcome.results[0].error_kind == "interrupted"
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
