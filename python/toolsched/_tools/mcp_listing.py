"""A `tools/list` reply read entry by entry: what a server lists is checked one entry at a time, and a part
nested deeper than a tool's input schema may go is cut out before it is read, so that one bad entry costs
that entry alone (``toolsched.mcp`` reads every listing through these)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from toolsched._tools.schema import SCHEMA_DEPTH

__all__ = [
    "CUT",
    "ENTRY_DEPTH",
    "cut_too_deep",
    "entry_label",
    "holds_cut",
    "read_cut",
    "reply_in_body",
    "shown_errors",
    "too_deep_line",
]

# How deep a `tools/list` entry sits in its reply: the message, its result, the list, the entry.
ENTRY_DEPTH = 4

# Stands in for a part of a `tools/list` reply cut out for nesting too deep (text no tool has a reason to hold).
CUT = "\x00toolsched: nested too deep"

# A JSON string (one left open runs to the end of the text, so that no part of the text is scanned twice),
# or a bracket outside one.
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\[\s\S][^"\\]*)*\\?(?:"|\Z)|[\[\]{}]')
# The ends of a line of server-sent events (where ``str.splitlines`` would also split text JSON holds unescaped).
_EVENT_LINE_END = re.compile(r"\r\n|\r|\n")


def shown_errors(found: Sequence[Any], *, within: int = 0) -> str:
    """The first of pydantic's ``found`` errors, by their paths within the part ``within`` steps from the
    root of what was checked (none for that part itself)."""

    def shown(error: Any) -> str:
        path = ".".join(map(str, error["loc"][within:])) or ("(root)" if within == 0 else "")
        return f"{path}: {error['msg']}" if path else str(error["msg"])

    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    return "; ".join(shown(error) for error in found[:3]) + more


def cut_too_deep(text: str, limit: int) -> str:
    """The JSON ``text`` with every container nested deeper than ``limit`` replaced by the string ``CUT``.

    It counts brackets outside strings without parsing, so that any depth can be read; text that is not
    JSON stays not JSON.
    """
    pieces: list[str] = []
    depth = 0
    kept_to = 0
    for token in _JSON_TOKEN.finditer(text):
        bracket = token.group()
        if bracket in ("[", "{"):
            depth += 1
            if depth == limit + 1:
                pieces.append(text[kept_to : token.start()])
        elif bracket in ("]", "}"):
            if depth == limit + 1:
                pieces.append(json.dumps(CUT))
                kept_to = token.end()
            depth -= 1
    pieces.append(text[kept_to:])
    return "".join(pieces)


def too_deep_line(error: Exception) -> dict[str, Any] | None:
    """The message of a line the transport could not read because it nests deeper than the ``mcp`` package's
    JSON parser goes (about 200 levels), read with every part deeper than a tool's input schema may nest cut
    out (None for any other failure)."""
    errors = getattr(error, "errors", None)
    if not callable(errors):
        return None
    try:
        found = errors(include_url=False)
    except Exception:
        return None
    if len(found) != 1 or found[0].get("type") != "json_invalid" or "recursion limit" not in str(found[0].get("msg")):
        return None
    text = found[0].get("input")
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8", "replace")
    return read_cut(text) if isinstance(text, str) else None


def read_cut(text: str) -> dict[str, Any] | None:
    """The JSON-RPC message ``text`` holds, read with each part deeper than a tool's schema may nest cut out
    (None when it is not one)."""
    try:
        message = json.loads(cut_too_deep(text, ENTRY_DEPTH + SCHEMA_DEPTH))
    except (ValueError, RecursionError):
        return None
    return message if isinstance(message, dict) else None


def reply_in_body(content_type: str, body: str, request_id: Any) -> dict[str, Any] | None:
    """The answer to request ``request_id`` in an HTTP response's body (JSON, or server-sent events), read with
    each too deep part cut out (None when it holds no result for it)."""
    if content_type.startswith("text/event-stream"):
        events: list[str] = []
        data: list[str] = []
        for line in [*_EVENT_LINE_END.split(body), ""]:
            if not line:
                if data:
                    events.append("\n".join(data))
                data = []
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
    else:
        events = [body]
    for event in events:
        message = read_cut(event)
        if message is not None and message.get("id") == request_id and "result" in message:
            return message
    return None


def holds_cut(entry: Any) -> bool:
    """Whether a `tools/list` entry had a part cut out for nesting too deep (walked without recursion)."""
    stack = [entry]
    while stack:
        value = stack.pop()
        if value == CUT:
            return True
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def entry_label(entry: Any, index: int, cursor: Any) -> str:
    """How a warning names a `tools/list` entry: its name when it has one, its index in its page otherwise."""
    name = entry.get("name") if isinstance(entry, dict) else None
    if isinstance(name, str):
        return f"tool {name!r}"
    page = f" of the page at cursor {cursor!r}" if isinstance(cursor, str) else ""
    return f"`tools/list` entry {index}{page}"
