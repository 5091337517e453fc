"""The one codec that turns outputs and results into JSON: provider adapters, run states and journals use it."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, is_dataclass
from typing import Any

from toolsched._values.content import Image, image_of

__all__ = ["RESULT_FIELD_TYPES", "encode_output", "jsonable"]


def jsonable(value: Any) -> Any:
    """The JSON form of a value JSON cannot hold as it is: the form provider adapters send.

    Pydantic models and dataclasses become their fields, sets and tuples lists,
    images (``Image``, or bytes of an image file) their MCP form
    (``{"type": "image", "data": base64, "mimeType": ...}``), other bytes UTF-8
    text, anything else (dates too) its ``str()``; a value whose conversion
    raises is named by its type.
    """
    image = image_of(value) if type(value) is Image or isinstance(value, (bytes, bytearray, memoryview)) else None
    if image is not None:
        return image.to_json()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    try:
        if hasattr(value, "model_dump"):
            return value.model_dump(mode="json")
        if is_dataclass(value) and not isinstance(value, type):
            return asdict(value)
        return str(value)
    except Exception:  # a value that fails to show itself is named, never a crash of the reply
        return f"<{type(value).__name__} object that cannot be shown>"


def encode_output(output: Any) -> tuple[str, bool]:
    """An output as ASCII JSON text, and whether it decodes back equal to what the tool returned.

    JSON values come back equal (a NaN float as NaN). Anything else is encoded
    in its ``jsonable`` form and comes back in that form. Raises ``ValueError``
    for what has no JSON form at all (a list that contains itself).
    """
    if output is None or type(output) in (str, int, bool):
        return json.dumps(output, ensure_ascii=True), True
    if type(output) is float:
        return json.dumps(output), not math.isnan(output)
    try:
        text = json.dumps(output, ensure_ascii=True, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        try:
            return json.dumps(output, ensure_ascii=True, separators=(",", ":"), default=jsonable), False
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueError(f"the value has no JSON form ({type(exc).__name__}: {exc})") from None
    return text, json.loads(text) == output


# The JSON types of a ToolResult's fields besides its output, as the codecs of run states and
# journals check what they read back.
RESULT_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "call_id": (str,),
    "tool_name": (str,),
    "error": (str, type(None)),
    "error_kind": (str, type(None)),
    "is_error": (bool,),
    "duration_ms": (int, float),
    "was_concurrent": (bool,),
    "batch": (int, type(None)),
    "truncated": (bool,),
    "offload_path": (str, type(None)),
    "attempts": (int,),
    "repaired": (bool,),
}
