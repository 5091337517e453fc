"""Child processes killed at a chosen point: the crash tests' one way to start a child and SIGKILL it."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

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
