"""The one digest of a call's arguments: approvals and journals both bind to it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from toolsched._values.codec import jsonable

__all__ = ["args_digest", "value_digest"]

# The canonical form's encoder, made once: ``json.dumps`` with these options builds one on every call, which
# costs as much as the encoding itself for a call's few arguments (``python benches/pieces.py --only "repeat guard"``).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=jsonable)
_canonical_text = _CANONICAL.encode

# The types of the values ``_by_value`` keeps as they are (none holds a number of another kind).
_AS_IS = frozenset({str, int, bool, type(None)})


def _canonical_digest(value: Any) -> str:
    text = _canonical_text(value)
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


def value_digest(args: Any) -> str:
    """``args_digest`` of the arguments' value: numbers count by value, so ``1``, ``1.0`` and ``1e2``'s
    ``100.0`` beside ``100`` are the same (JSON has one kind of number; a tool taking an integer runs the same
    with either). The repeat guard's notion of "the same call"; the journals and approvals keep
    ``args_digest``, which binds to the arguments exactly as given."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return args_digest(args)
    try:
        return _canonical_digest(_by_value(args))
    except RecursionError:
        return args_digest(args)


def _by_value(value: Any) -> Any:
    if type(value) is dict:
        # The usual arguments: a dict of text, whole numbers, booleans and nulls is its own value form.
        for item in value.values():
            if type(item) not in _AS_IS:
                break
        else:
            return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, Mapping):
        return {key: _by_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_by_value(item) for item in value]
    return value
