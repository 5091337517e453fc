"""Result shaping: keep every output within its tool's budget before the model sees it."""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path
from typing import Any

import anyio.to_thread

from toolsched import _core
from toolsched.content import content_parts, content_text
from toolsched.tools import Tool

__all__ = ["fits_as_is", "shape_output"]

_UNSAFE_FILENAME = re.compile(r"[^A-Za-z0-9_.-]+")


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
    except (TypeError, ValueError):
        return str(output)


def fits_as_is(output: Any, tool: Tool) -> bool:
    """Whether ``output`` certainly needs no shaping (None, a scalar, a short string): ``shape_output`` is skipped."""
    kind = type(output)
    if output is None or kind is bool or kind is int or kind is float:
        return True
    return kind is str and tool.max_result_lines is None and len(output) <= tool.max_result_chars


async def shape_output(output: Any, tool: Tool, call_id: str, offload_dir: Path) -> tuple[Any, bool, str | None]:
    """Returns ``(output, truncated, offload_path)``.

    An output within budget is returned as it is (an int stays an int); one
    over budget becomes text cut per ``tool.truncate``, or with ``"offload"``
    is written whole to a file and replaced by a preview naming the file.
    An output with images (``toolsched.content``) keeps its images whole: its
    text alone is held to the budget, and when cut comes first, followed by the images.
    """
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
    if tool.truncate != "offload":
        shaped = _core.truncate(text, max_chars, max_lines=max_lines, cut=tool.truncate)
        return (output, False, None) if shaped is None else (shaped[0], True, None)
    if _core.truncate(text, max_chars, max_lines=max_lines, cut="tail") is None:
        return output, False, None
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
    note = f"\n[full output of {len(text)} characters saved to {path}]"
    room = max(max_chars - len(note), 0)
    preview = _core.truncate(text, room, max_lines=max_lines, cut="tail")
    head = text if preview is None else preview[0]
    return head + note, True, str(path)
