"""Redis's wire protocol (RESP2), as the fleet's coordination speaks it: commands encoded, replies parsed from
a buffer, one connection whose commands are written together and whose replies are read in order, and the
one-line request the lease-renewal thread makes on a plain socket. A reply Redis would not send ends the
connection with ``CoordinationError``: the server is not Redis."""

from __future__ import annotations

import math
import socket
from typing import Any

import anyio
import anyio.abc

__all__ = [
    "MAX_LINE",
    "Connection",
    "CoordinationError",
    "Incomplete",
    "ReplyError",
    "blocking_request",
    "bulk",
    "encoded",
    "parsed",
]

# The longest reply line, and the largest string or array, toolsched takes from Redis: the scripts' replies are
# a few numbers, so a larger one comes from a server that is not Redis (read no further than this).
MAX_LINE = 64 * 1024
MAX_BULK = 1024 * 1024


class CoordinationError(Exception):
    """Redis could not be reached, or answered with an error (internal: ``on_unavailable`` decides)."""


class Incomplete(Exception):
    """The buffer ends inside a reply (internal: more bytes are read)."""


class ReplyError(Exception):
    """Redis answered a command with an error reply."""


def parsed(buffer: bytearray, at: int) -> tuple[Any, int]:
    """The reply that starts at ``at`` in ``buffer`` and where the next one starts; an error reply is returned
    as a ``ReplyError`` (a pipeline's replies are each their own command's); ``Incomplete`` when the buffer
    ends before the reply does. A reply Redis would not send (a line past ``MAX_LINE``, a number that is not
    one, a string or array past ``MAX_BULK``) raises ``CoordinationError``: the server is not Redis."""
    end = buffer.find(b"\r\n", at)
    if end < 0:
        if len(buffer) - at > MAX_LINE:
            raise CoordinationError(f"the server sent a line of over {MAX_LINE} bytes: it is not Redis")
        raise Incomplete
    kind = buffer[at]
    if kind in (0x3A, 0x2A, 0x24):  # ':', '*', '$'
        rest = bytes(buffer[at + 1 : end])
        if not (rest.lstrip(b"-").isdigit() and len(rest) < 20):
            raise CoordinationError(
                f"the server sent a reply toolsched cannot read (is it Redis?): {bytes(buffer[at : at + 80])!r}"
            )
        number = int(rest)
        if kind == 0x3A:
            return number, end + 2
        if number > MAX_BULK:
            raise CoordinationError(f"the server announced a reply of {number} bytes: it is not Redis")
        if kind == 0x2A:
            at = end + 2
            if number < 0:
                return None, at
            items = []
            for _ in range(number):
                item, at = parsed(buffer, at)
                items.append(item)
            return items, at
        if number < 0:
            return None, end + 2
        if len(buffer) < end + 4 + number:
            raise Incomplete
        return bytes(buffer[end + 2 : end + 2 + number]), end + 4 + number
    if kind == 0x2B:  # '+'
        return buffer[at + 1 : end].decode(errors="replace"), end + 2
    if kind == 0x2D:  # '-'
        return ReplyError(buffer[at + 1 : end].decode(errors="replace")), end + 2
    raise CoordinationError(
        f"the server sent a reply toolsched cannot read (is it Redis?): {bytes(buffer[at : at + 80])!r}"
    )


class Connection:
    """One RESP2 connection (internal): commands written together, their replies read in order."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.buffer = bytearray()
        # Whether any byte of the current request's reply arrived (a connection that failed before one did
        # never had the request answered).
        self.heard = False
        # The replies of the current exchange read so far, in order (those read before it failed are answers).
        self.replies: list[Any] = []

    async def request(self, *parts: str | int | bytes, per_reply: float = math.inf) -> Any:
        """One command and its reply (an error reply raised)."""
        (reply,) = await self.exchange(encoded(*parts), 1, per_reply)
        if isinstance(reply, ReplyError):
            raise reply
        return reply

    async def exchange(self, data: bytes, count: int, per_reply: float = math.inf) -> list[Any]:
        """Writes ``data`` (``count`` commands) at once and returns their ``count`` replies, in order; each reply
        is awaited at most ``per_reply`` seconds (``TimeoutError``). ``heard``: whether any byte of them came;
        ``replies``: those read so far (when the exchange fails, the first commands' answers)."""
        self.heard = False
        replies: list[Any] = []
        self.replies = replies
        await self.stream.send(data)
        buffer, at = self.buffer, 0
        deadline = anyio.current_time() + per_reply
        while len(replies) < count:
            try:
                reply, at = parsed(buffer, at)
            except (Incomplete, IndexError):
                del buffer[:at]
                at = 0
                with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
                    buffer += await self.stream.receive()
                self.heard = True
                continue
            replies.append(reply)
            deadline = anyio.current_time() + per_reply
        del buffer[:at]
        return replies


def encoded(*parts: str | int | bytes) -> bytes:
    out = bytearray(b"*%d\r\n" % len(parts))
    for part in parts:
        raw = part if isinstance(part, bytes) else str(part).encode()
        out += b"$%d\r\n%s\r\n" % (len(raw), raw)
    return bytes(out)


def blocking_request(connection: socket.socket, *parts: str | int | bytes) -> bytes:
    """Sends one command and returns the first line of its reply (the renewal's replies are one line)."""
    connection.sendall(encoded(*parts))
    reply = b""
    while not reply.endswith(b"\r\n"):
        chunk = connection.recv(4096)
        if not chunk:
            raise OSError("Redis closed the connection")
        reply += chunk
        if len(reply) > MAX_LINE:
            raise OSError("the server's reply is not Redis's")
    return reply


def bulk(part: str | int) -> bytes:
    raw = str(part).encode()
    return b"$%d\r\n%s\r\n" % (len(raw), raw)
