"""Child processes killed at a chosen point: the crash tests' one way to start a child and SIGKILL it."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream


def child_env() -> dict[str, str]:
    """This process's environment, with its import path passed on (the child imports what the tests import)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*sys.path, os.environ.get("PYTHONPATH", "")])}


async def kill_at(
    command: Sequence[str], point: str, *, finished: tuple[str, ...] = ("done",), go: bool = False
) -> None:
    """Runs ``command`` and kills it with SIGKILL once it prints the line ``point``.

    A line starting with one of ``finished`` before it fails the test: the child ended without reaching
    ``point``. With ``go``, a ``ready`` line is answered ``go`` (a child that waits to be told to go on).
    """
    process = await anyio.open_process(list(command), env=child_env(), stderr=None)
    try:
        assert process.stdout is not None and process.stdin is not None
        lines = BufferedByteReceiveStream(process.stdout)
        with anyio.fail_after(60):
            while True:
                line = (await lines.receive_until(b"\n", 65536)).decode()
                assert not line.startswith(finished), f"the child printed {line!r} before {point!r}"
                if line == "ready" and go:
                    await process.stdin.send(b"go\n")
                if line == point:
                    break
        process.kill()
        with anyio.fail_after(30):
            await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()
        await process.aclose()


def orphan_holder(journal: Path, marker: Path) -> str:
    """A child's script: it begins run ``orphan`` on the SQLite journal at ``journal`` with a 600 s lease, and
    writes ``marker`` once its one call (``hang``) started, which then waits a minute (for its SIGKILL)."""
    return textwrap.dedent(
        f"""
        import anyio, pathlib
        import toolsched as ts

        @ts.tool
        async def hang() -> None:
            pathlib.Path({str(marker)!r}).write_text("started")
            await anyio.sleep(60)

        async def main() -> None:
            async with ts.SqliteJournal({str(journal)!r}, lease=600) as journal:
                await ts.Executor([hang], journal=journal).run([ts.ToolCall("h", "hang")], run_id="orphan")

        anyio.run(main)
        """
    )
