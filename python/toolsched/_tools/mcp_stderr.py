"""A stdio MCP server's stderr, delivered to an ``errlog`` that has no file descriptor.

A subprocess writes its stderr to a descriptor: a ``StringIO``, a notebook's output stream or a test
runner's captured ``sys.stderr`` has none. For those the server writes to a pipe, and a task copies what
arrives into the stream, until the transport is closed (the server has stopped by then) and the pipe is
read to its end.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TextIO

import anyio

_CHUNK = 65536


def has_descriptor(stream: TextIO) -> bool:
    """Whether a subprocess can write to ``stream`` directly (it has a working ``fileno``)."""
    try:
        stream.fileno()
    except (OSError, ValueError, AttributeError):
        return False
    return True


@asynccontextmanager
async def stderr_into(
    errlog: TextIO, open_transport: Callable[[TextIO], AbstractAsyncContextManager[Any]]
) -> AsyncIterator[Any]:
    """``open_transport(stream)`` entered, with the server's stderr reaching ``errlog``: ``stream`` is
    ``errlog`` itself when it has a descriptor, else the write end of a pipe copied into it."""
    if has_descriptor(errlog):
        async with open_transport(errlog) as streams:
            yield streams
        return
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    try:
        with os.fdopen(write_end, "w", encoding="utf-8") as server_end:
            async with anyio.create_task_group() as group:
                group.start_soon(_copy, read_end, decoder, errlog)
                try:
                    async with open_transport(server_end) as streams:
                        # The server holds its own copy of the write end: the pipe ends when the server does.
                        server_end.close()
                        yield streams
                finally:
                    group.cancel_scope.cancel()
    finally:
        # The transport is closed and its server stopped (even when the close was cancelled: the transport
        # stops its server shielded): what it wrote last is in the pipe.
        _read_what_is_left(read_end, decoder, errlog)
        os.close(read_end)


async def _copy(read_end: int, decoder: codecs.IncrementalDecoder, errlog: TextIO) -> None:
    """Copies the pipe into ``errlog`` as its text arrives, until the pipe ends."""
    while True:
        await anyio.wait_readable(read_end)
        try:
            chunk = os.read(read_end, _CHUNK)
        except BlockingIOError:
            continue
        if not chunk:
            return
        _write(errlog, decoder.decode(chunk))


def _read_what_is_left(read_end: int, decoder: codecs.IncrementalDecoder, errlog: TextIO) -> None:
    """Copies what the pipe holds now into ``errlog``, without waiting for more."""
    while True:
        try:
            chunk = os.read(read_end, _CHUNK)
        except BlockingIOError:
            break
        if not chunk:
            break
        _write(errlog, decoder.decode(chunk))
    _write(errlog, decoder.decode(b"", final=True))


def _write(errlog: TextIO, text: str) -> None:
    """Writes ``text`` to ``errlog``; a stream that refuses it (closed, say) loses the server's text and nothing
    else, as a descriptor that fails loses it for a server writing there directly: the pipe is still read."""
    if not text:
        return
    try:
        errlog.write(text)
    except (OSError, ValueError):
        pass
