"""Result shaping: keep every output within its tool's budget before the model sees it."""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path
from typing import Any

import anyio.to_thread

from toolsched import _core
from toolsched._tools.tools import Tool
from toolsched._values.codec import jsonable
from toolsched._values.content import content_parts, content_text

__all__ = ["cut_text", "fits_as_is", "shape_now", "shape_output", "shown_as_text"]

_UNSAFE_FILENAME = re.compile(r"[^A-Za-z0-9_.-]+")
# Surrogates alone in a str (what os.fsdecode makes of bytes that are not UTF-8): no UTF-8 text holds them.
_SURROGATE = re.compile("[\ud800-\udfff]")


def shown_as_text(value: Any) -> str:
    """A value JSON cannot hold (a dict keyed by tuples, one that contains itself, nesting too deep, an int
    past Python's digit limit) as the text the budget measures and the provider adapters send: its ``str()``,
    or a stand-in naming its type when even that fails."""
    try:
        return str(jsonable(value))
    except Exception:  # a value that fails to show itself is named: its result is never lost to it
        return f"<{type(value).__name__} object that cannot be shown>"


def _as_text(output: Any) -> str | None:
    """The text an output is measured by; None for scalars, which always fit."""
    if isinstance(output, str):
        return output
    if output is None or isinstance(output, (bool, int, float)):
        return None
    if isinstance(output, bytes):
        return output.decode("utf-8", errors="replace")
    try:
        return json.dumps(output, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return shown_as_text(output)


def cut_text(text: str, max_chars: int, *, max_lines: int | None, cut: str) -> tuple[str, str | None]:
    """``(text, cut)``: ``text`` as the engine measured it, and its cut to the budget (None when it fits).

    The engine takes UTF-8 text: in text that is not (lone surrogates), each surrogate becomes U+FFFD,
    one character for one, so the budget counts the same. Only such text pays for the replacement.
    """
    try:
        shaped = _core.truncate(text, max_chars, max_lines=max_lines, cut=cut)
    except UnicodeEncodeError:
        text = _SURROGATE.sub("\ufffd", text)
        shaped = _core.truncate(text, max_chars, max_lines=max_lines, cut=cut)
    return text, None if shaped is None else shaped[0]


def fits_as_is(output: Any, tool: Tool) -> bool:
    """Whether ``output`` certainly needs no shaping (None, a scalar, a short string): ``shape_output`` is skipped."""
    kind = type(output)
    if output is None or kind is bool or kind is int or kind is float:
        return True
    return kind is str and tool.max_result_lines is None and len(output) <= tool.max_result_chars


def _preview(text: str, max_chars: int, max_lines: int | None) -> str:
    """The start of ``text``: at most ``max_chars`` characters on at most ``max_lines`` lines."""
    preview = text[: max(max_chars, 0)]
    if max_lines is None:
        return preview
    return "\n".join(preview.split("\n", max_lines)[:max_lines]) if max_lines > 0 else ""


def _offload_note(text: str, path: Path, max_chars: int, max_lines: int | None) -> str:
    """The preview of an offloaded output and the note naming its file, within the budget.

    The preview gives way first. A note longer than ``max_chars`` on its own is kept whole, over the
    budget: the file's name is the one way to the output, and a cut name leads nowhere.
    """
    note = f"[full output of {len(text)} characters saved to {path}]"
    # One character and one line go to the newline before the note.
    preview = _preview(text, max_chars - len(note) - 1, None if max_lines is None else max_lines - 1)
    return f"{preview}\n{note}" if preview else note


def shape_now(output: Any, tool: Tool) -> tuple[Any, bool]:
    """``shape_output`` for a tool that does not offload its outputs (nothing to write, so nothing to wait for):
    ``(output, truncated)``."""
    parts = content_parts(output)
    if parts is not None:
        cut, truncated = shape_now(content_text(parts, describe=False), tool)
        if not truncated:
            return output, False
        return [cut, *(part for part in parts if not isinstance(part, str))], True
    text = _as_text(output)
    max_chars = tool.max_result_chars
    max_lines = tool.max_result_lines
    if text is None or (len(text) <= max_chars and max_lines is None):
        return output, False
    _, shaped = cut_text(text, max_chars, max_lines=max_lines, cut=tool.truncate)
    if shaped is None:
        return output, False
    return shaped, True


async def shape_output(output: Any, tool: Tool, call_id: str, offload_dir: Path) -> tuple[Any, bool, str | None]:
    """Returns ``(output, truncated, offload_path)``.

    An output within budget is returned as it is (an int stays an int); one
    over budget becomes text cut per ``tool.truncate``, or with ``"offload"``
    is written whole to a file and replaced by a preview naming the file.
    An output with images (``toolsched._values.content``) keeps its images whole: its
    text alone is held to the budget, and when cut comes first, followed by the images.
    """
    if tool.truncate != "offload":
        shaped, truncated = shape_now(output, tool)
        return shaped, truncated, None
    parts = content_parts(output)
    if parts is not None:
        cut, truncated, saved_to = await shape_output(content_text(parts, describe=False), tool, call_id, offload_dir)
        if not truncated:
            return output, False, None
        return [cut, *(part for part in parts if not isinstance(part, str))], True, saved_to
    text = _as_text(output)
    max_chars = tool.max_result_chars
    max_lines = tool.max_result_lines
    if text is None or (len(text) <= max_chars and max_lines is None):
        return output, False, None
    text, shaped = cut_text(
        text, max_chars, max_lines=max_lines, cut="tail" if tool.truncate == "offload" else tool.truncate
    )
    if shaped is None:
        return output, False, None
    if tool.truncate != "offload":
        return shaped, True, None
    stem = f"{_UNSAFE_FILENAME.sub('_', tool.name)}-{_UNSAFE_FILENAME.sub('_', call_id)}"

    def write() -> Path:
        # A file of its own, never one already there: call IDs repeat across runs (and two IDs can read
        # alike once made safe), and an offloaded output must stay what its result says it is.
        offload_dir.mkdir(parents=True, exist_ok=True)
        while True:
            path = offload_dir / f"{stem}-{secrets.token_hex(4)}.txt"
            try:
                with path.open("x", encoding="utf-8") as file:
                    file.write(text)
            except FileExistsError:
                continue
            return path

    path = await anyio.to_thread.run_sync(write)
    return _offload_note(text, path, max_chars, max_lines), True, str(path)
