"""The one digest of a call's arguments: approvals and journals both bind to it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from toolsched._values.codec import jsonable

__all__ = ["args_digest"]


def _canonical_digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=jsonable)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def args_digest(args: Any) -> str:
    """A digest of a call's arguments that ignores key order and the spelling of JSON text.

    Arguments given as JSON text have the digest of the value they parse to;
    text that does not parse has the digest of the text. Values JSON cannot
    hold count in their ``jsonable`` form. Approvals and journals both bind to it.
    """
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
        except ValueError:
            return "text:" + hashlib.sha256(args.encode("utf-8", "surrogatepass")).hexdigest()
        return _canonical_digest(parsed)
    if isinstance(args, Mapping) and type(args) is not dict:
        args = dict(args)
    return _canonical_digest(args)
