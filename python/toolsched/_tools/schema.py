"""Input schemas: built from type hints or pydantic models, and rewritten for each provider."""

from __future__ import annotations

import copy
import inspect
import types
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any, Literal, Union

import pydantic

from toolsched.errors import SchemaError, ToolDefinitionError

__all__ = [
    "SCHEMA_DEPTH",
    "function_schema",
    "inline_refs",
    "model_schema",
    "nests_deeper_than",
    "strict_schema",
    "to_gemini_schema",
]

JsonSchema = dict[str, Any]

# Parameters that receive the run's context instead of an argument from the model.
CONTEXT_PARAMETER = "ctx"

_NATIVE = (str, int, float, bool, type(None), dict, list, Any)

# The deepest a tool's input schema may nest, as the engine reads it: the schema object is level 1, each
# object or array in it one more.
SCHEMA_DEPTH = 256


# pydantic's validators, as ``Annotated`` metadata.
_VALIDATORS = frozenset(
    {
        pydantic.AfterValidator,
        pydantic.BeforeValidator,
        pydantic.PlainValidator,
        pydantic.WrapValidator,
    }
)


def _transforms(metadata: Any) -> bool:
    """Whether ``Annotated`` metadata makes the model do more than check: a validator, or another name."""
    if type(metadata) in _VALIDATORS:
        return True
    return isinstance(metadata, pydantic.fields.FieldInfo) and (
        metadata.alias is not None or metadata.validation_alias is not None
    )


def _is_json_native(annotation: Any) -> bool:
    """Whether values of this type arrive from JSON already as the Python type."""
    if annotation in _NATIVE or annotation is inspect.Parameter.empty:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        # A validator in the metadata changes or checks the value: only the model runs it.
        base, *metadata = typing.get_args(annotation)
        return _is_json_native(base) and not any(_transforms(item) for item in metadata)
    if origin is Literal:
        return True
    if origin in (list, dict, Union, types.UnionType, Mapping) or origin is typing.Union:
        return all(_is_json_native(arg) for arg in typing.get_args(annotation))
    return False


def _strip_titles(schema: Any) -> Any:
    """Removes pydantic's generated ``title`` keys (noise for a model); keeps property names intact."""
    if isinstance(schema, dict):
        cleaned = {}
        for key, value in schema.items():
            if key == "title" and isinstance(value, str):
                continue
            if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
                cleaned[key] = {name: _strip_titles(sub) for name, sub in value.items()}
            else:
                cleaned[key] = _strip_titles(value)
        return cleaned
    if isinstance(schema, list):
        return [_strip_titles(item) for item in schema]
    return schema


def model_schema(model: type[pydantic.BaseModel]) -> JsonSchema:
    """The JSON Schema of a pydantic model's fields, with ``$ref`` inlined."""
    return inline_refs(_strip_titles(model.model_json_schema()))


def function_schema(
    fn: Callable[..., Any], *, injected: Collection[str] = ()
) -> tuple[JsonSchema, type[pydantic.BaseModel] | None, bool]:
    """Describes ``fn``'s parameters as a JSON Schema.

    Returns the schema, a pydantic model to coerce arguments with when some
    parameter is not a plain JSON type (else None), and whether ``fn`` takes ``ctx``.
    Parameters named in ``injected`` are filled in by the tool, not the model: they are left out.
    """
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
    except (NameError, TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"cannot read the signature of {fn!r}: {exc}") from exc
    fields: dict[str, Any] = {}
    wants_ctx = False
    open_ended = False
    for name, parameter in signature.parameters.items():
        if name == CONTEXT_PARAMETER:
            wants_ctx = True
            continue
        if name in injected:
            continue
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            open_ended = True
            continue
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY):
            raise ToolDefinitionError(f"tool function {fn.__name__}: parameter `{name}` must be passable by keyword")
        annotation = hints.get(name, Any)
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[name] = (annotation, default)
    config = pydantic.ConfigDict(extra="allow" if open_ended else "forbid", arbitrary_types_allowed=False)
    try:
        model = pydantic.create_model(f"{fn.__name__}_arguments", __config__=config, **fields)
        schema = model_schema(model)
    except (pydantic.PydanticSchemaGenerationError, pydantic.errors.PydanticUserError, TypeError) as exc:
        raise ToolDefinitionError(f"tool function {fn.__name__}: cannot describe its parameters: {exc}") from exc
    schema.setdefault("properties", {})
    schema["type"] = "object"
    # A ``Field(default_factory=...)`` default is made by the model: the function's own default is the ``FieldInfo``.
    native = all(
        _is_json_native(annotation) and not isinstance(default, pydantic.fields.FieldInfo)
        for annotation, default in fields.values()
    )
    return schema, None if native else model, wants_ctx


def nests_deeper_than(schema: Any, limit: int) -> bool:
    """Whether ``schema`` has an object or array more than ``limit`` levels deep (itself level 1), walked
    without recursion: any depth is answered, where what walks a schema recursively would overflow."""
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping):
            children: Collection[Any] = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def inline_refs(schema: JsonSchema) -> JsonSchema:
    """Replaces local ``$ref``s to ``$defs`` by their targets.

    Recursive definitions cannot be inlined, and neither can a reference to
    anything but a definition (``{"$ref": "#"}`` is the whole schema again):
    both raise ``SchemaError``.
    """
    defs: dict[str, Any] = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    if not defs and "$ref" not in str(schema):
        return schema

    def resolve(node: Any, trail: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and not ref.startswith(("#/$defs/", "#/definitions/")):
                if ref.startswith("#"):
                    raise SchemaError(
                        f"schema refers to `{ref}`, which is not under `$defs`: it cannot be inlined "
                        "(a reference to the schema itself or into it is recursive)"
                    )
                raise SchemaError(f"schema refers to `{ref}`, outside the schema; inline it under `$defs`")
            if isinstance(ref, str):
                name = ref.rsplit("/", 1)[1]
                if name in trail:
                    raise SchemaError(f"schema definition `{name}` is recursive and cannot be inlined")
                if name not in defs:
                    raise SchemaError(f"schema refers to `{ref}`, which is not defined")
                target = resolve(copy.deepcopy(defs[name]), (*trail, name))
                siblings = {k: resolve(v, trail) for k, v in node.items() if k != "$ref"}
                return {**target, **siblings}
            return {k: resolve(v, trail) for k, v in node.items() if k not in ("$defs", "definitions")}
        if isinstance(node, list):
            return [resolve(item, trail) for item in node]
        return node

    resolved: JsonSchema = resolve(schema, ())
    return resolved


class NotStrictError(SchemaError):
    """A schema says something OpenAI's strict mode cannot: a map with free keys (``dict[str, int]``)."""


def strict_schema(schema: JsonSchema) -> JsonSchema:
    """OpenAI strict form: every object closed, every property required (optional ones nullable).

    Raises ``NotStrictError`` for what strict mode cannot express (an object
    whose keys are free, as ``dict[str, int]``): closing it would let the model
    send only ``{}``.
    """

    def transform(node: Any) -> Any:
        if isinstance(node, list):
            return [transform(item) for item in node]
        if not isinstance(node, dict):
            return node
        extra = node.get("additionalProperties")
        if (extra is True or isinstance(extra, dict)) or node.get("patternProperties"):
            raise NotStrictError("an object with free keys (a map such as dict[str, int])")
        node = {k: transform(v) for k, v in node.items() if k != "default"}
        if node.get("type") == "object" or "properties" in node:
            properties: dict[str, Any] = node.get("properties", {})
            required = set(node.get("required", []))
            node["properties"] = {name: sub if name in required else _nullable(sub) for name, sub in properties.items()}
            node["required"] = list(properties)
            node["additionalProperties"] = False
        return node

    result: JsonSchema = transform(inline_refs(schema))
    return result


def _nullable(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    if "const" in schema:
        return {"anyOf": [schema, {"type": "null"}]}
    enum = schema.get("enum")
    if isinstance(enum, list) and None not in enum:
        # An optional Literal: null must be one of the values too, or strict mode never lets it through.
        schema = {**schema, "enum": [*enum, None]}
    kind = schema.get("type")
    if isinstance(kind, str) and kind != "null":
        return {**schema, "type": [kind, "null"]}
    if isinstance(kind, list) and "null" not in kind:
        return {**schema, "type": [*kind, "null"]}
    if "anyOf" in schema:
        options = schema["anyOf"]
        if not any(isinstance(o, dict) and o.get("type") == "null" for o in options):
            return {**schema, "anyOf": [*options, {"type": "null"}]}
        return schema
    return {"anyOf": [schema, {"type": "null"}]}


# Keywords of JSON Schema that Gemini's function declarations do not accept.
_GEMINI_DROPPED = frozenset({"additionalProperties", "$schema", "$id", "default", "examples", "const"})


def to_gemini_schema(schema: JsonSchema) -> JsonSchema:
    """Gemini's OpenAPI subset: no ``additionalProperties``, ``default`` or ``$schema``."""

    def transform(node: Any) -> Any:
        if isinstance(node, list):
            return [transform(item) for item in node]
        if not isinstance(node, dict):
            return node
        cleaned = {k: transform(v) for k, v in node.items() if k not in _GEMINI_DROPPED}
        if "const" in node:
            cleaned["enum"] = [node["const"]]
        return cleaned

    result: JsonSchema = transform(inline_refs(schema))
    return result


# What makes integers of the integral floats a schema's ``integer`` admits (``1.0`` is an integer to JSON Schema):
# the value itself when nothing in it changes.
IntegerFix = Callable[[Any], Any]


def integer_fix(spec: Any) -> IntegerFix | None:
    """How to hand a tool ints wherever ``spec`` says ``integer`` (nested in arrays, objects and unions
    included), or None when nothing in it does. A number that may be a float where it stands (``number``,
    or a union with a ``number`` branch) is left as it is."""
    if not isinstance(spec, Mapping) or _takes_number(spec):
        return None
    fixes: list[IntegerFix] = []
    if _takes_integer(spec):
        fixes.append(_integral)
    items = integer_fix(spec.get("items"))
    if items is not None:
        fixes.append(lambda value: _each_item(value, items))
    properties = spec.get("properties")
    named = {
        name: fix
        for name, sub in (properties.items() if isinstance(properties, Mapping) else ())
        if (fix := integer_fix(sub)) is not None
    }
    extra = integer_fix(spec.get("additionalProperties"))
    if named or extra is not None:
        known = frozenset(properties) if isinstance(properties, Mapping) else frozenset()
        fixes.append(lambda value: _each_value(value, named, extra, known))
    for key in ("anyOf", "oneOf", "allOf"):
        options = spec.get(key)
        if isinstance(options, list):
            fixes.extend(fix for option in options if (fix := integer_fix(option)) is not None)
    if not fixes:
        return None
    if len(fixes) == 1:
        return fixes[0]

    def every(value: Any) -> Any:
        for fix in fixes:
            value = fix(value)
        return value

    return every


def _takes_number(spec: Mapping[str, Any]) -> bool:
    """Whether a float may stand here as itself: ``number``, directly or as a branch of a union."""
    kind = spec.get("type")
    if kind == "number" or (isinstance(kind, list) and "number" in kind):
        return True
    for key in ("anyOf", "oneOf"):
        options = spec.get(key)
        if isinstance(options, list) and any(
            isinstance(option, Mapping) and option.get("type") in ("number", ["number"]) for option in options
        ):
            return True
    values = spec.get("enum", [spec["const"]] if "const" in spec else [])
    return isinstance(values, list) and any(type(value) is float for value in values)


def _takes_integer(spec: Mapping[str, Any]) -> bool:
    kind = spec.get("type")
    if kind == "integer" or (isinstance(kind, list) and "integer" in kind):
        return True
    values = spec.get("enum", [spec["const"]] if "const" in spec else [])
    return isinstance(values, list) and any(type(value) is int for value in values)


def _integral(value: Any) -> Any:
    return int(value) if type(value) is float and value.is_integer() else value


def _each_item(value: Any, fix: IntegerFix) -> Any:
    if type(value) is not list:
        return value
    fixed = [fix(item) for item in value]
    return value if all(new is old for new, old in zip(fixed, value, strict=True)) else fixed


def _each_value(value: Any, named: Mapping[str, IntegerFix], extra: IntegerFix | None, known: frozenset[str]) -> Any:
    if type(value) is not dict:
        return value
    fixed: dict[str, Any] | None = None
    for key, item in value.items():
        fix = named.get(key) if key in known else extra
        if fix is not None:
            new = fix(item)
            if new is not item:
                fixed = dict(value) if fixed is None else fixed
                fixed[key] = new
    return value if fixed is None else fixed


def integer_scalar(schema: Mapping[str, Any]) -> str | None:
    """The top-level property that holds an integer (or nothing), when it is the only place the schema says
    ``integer``: the usual case, fixed with one lookup rather than ``integer_fix``'s walk."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return None
    fixed = [name for name, sub in properties.items() if integer_fix(sub) is not None]
    rest = {key: value for key, value in schema.items() if key != "properties"}
    # ``_integral`` alone: an integer, a nullable one, or a union or literal whose one number is an integer.
    if len(fixed) != 1 or integer_fix(properties[fixed[0]]) is not _integral or integer_fix(rest) is not None:
        return None
    return str(fixed[0])
