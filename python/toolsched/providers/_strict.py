"""Undoing OpenAI strict mode's nulls before the engine validates a call.

``registry.to_openai(strict=True)`` makes every property required and every
optional one nullable, so the model sends ``null`` for what it means to leave
out. The engine validates against the tool's own schema, where such a
property is optional and usually does not admit ``null``.

The rule (applied by both OpenAI adapters whenever they know the registry,
whether or not strict export is in use): a ``null`` is dropped when its
property is optional in the tool's schema *and* that property's schema does
not admit ``null``. Such a value could only fail validation, and "absent" is
what strict mode cannot otherwise say. A ``null`` for a property that admits
it (``x: int | None = None``) is a real value and is kept; a ``null`` for a
required property is kept too, so the engine reports it. Nested objects and
arrays are cleaned the same way, following the schema.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping
from typing import Any

from toolsched._tools.registry import ToolRegistry
from toolsched._tools.schema import inline_refs
from toolsched._tools.tools import Tool
from toolsched.errors import SchemaError

__all__ = ["admits_null", "drop_strict_nulls", "drop_strict_nulls_for"]

_CONSTRAINTS = ("type", "enum", "const", "anyOf", "oneOf", "allOf")
_schemas: weakref.WeakKeyDictionary[Tool, Mapping[str, Any] | None] = weakref.WeakKeyDictionary()


def admits_null(schema: Any) -> bool:
    """Whether a JSON Schema accepts ``null`` (an unconstrained schema does)."""
    if schema is True or not isinstance(schema, Mapping):
        return schema is not False
    if not any(key in schema for key in _CONSTRAINTS):
        return True
    kind = schema.get("type")
    if kind is not None and not (kind == "null" or (isinstance(kind, list) and "null" in kind)):
        return False
    if "enum" in schema and None not in schema["enum"]:
        return False
    if "const" in schema and schema["const"] is not None:
        return False
    for key in ("anyOf", "oneOf"):
        if key in schema and not any(admits_null(branch) for branch in schema[key]):
            return False
    return all(admits_null(branch) for branch in schema.get("allOf", ()))


def _object_branch(schema: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    """The one branch of an ``anyOf``/``oneOf`` that describes an object or array, if there is exactly one."""
    branches = [
        branch
        for option in ("anyOf", "oneOf")
        for branch in schema.get(option, ())
        if isinstance(branch, Mapping) and key in branch
    ]
    return branches[0] if len(branches) == 1 else None


def _clean(value: Any, schema: Any) -> Any:
    if not isinstance(schema, Mapping):
        return value
    if isinstance(value, dict):
        properties = schema.get("properties")
        if not isinstance(properties, Mapping):
            branch = _object_branch(schema, "properties")
            return value if branch is None else _clean(value, branch)
        required = set(schema.get("required", ()))
        cleaned: dict[str, Any] = {}
        for name, item in value.items():
            sub = properties.get(name)
            if item is None and sub is not None and name not in required and not admits_null(sub):
                continue
            cleaned[name] = item if sub is None else _clean(item, sub)
        return cleaned
    if isinstance(value, list):
        items = schema.get("items")
        if not isinstance(items, Mapping):
            branch = _object_branch(schema, "items")
            items = None if branch is None else branch.get("items")
        return value if not isinstance(items, Mapping) else [_clean(item, items) for item in value]
    return value


def drop_strict_nulls(args: Mapping[str, Any] | str, schema: Mapping[str, Any]) -> Mapping[str, Any] | str:
    """``args`` without the nulls strict mode put in for absent optional properties (see the module doc).

    JSON text without ``null`` in it is returned untouched (and unparsed); text
    that does not parse is returned as it is, for the engine to report.
    """
    if isinstance(args, str):
        if "null" not in args:
            return args
        try:
            parsed = json.loads(args)
        except (ValueError, RecursionError):
            return args
        if not isinstance(parsed, dict):
            return args
        cleaned: dict[str, Any] = _clean(parsed, schema)
        return cleaned
    if isinstance(args, dict):
        result: dict[str, Any] = _clean(args, schema)
        return result
    return args


def drop_strict_nulls_for(
    name: str, args: Mapping[str, Any] | str, registry: ToolRegistry | None
) -> Mapping[str, Any] | str:
    """``drop_strict_nulls`` against the schema of the tool ``name`` (by name or alias), if the registry has it."""
    if registry is None or (isinstance(args, str) and "null" not in args):
        return args
    member = registry.get(name)
    if member is None:
        return args
    if member not in _schemas:
        try:
            _schemas[member] = inline_refs(member.facts.input_schema)
        except SchemaError:
            _schemas[member] = None
    schema = _schemas[member]
    return args if schema is None else drop_strict_nulls(args, schema)
