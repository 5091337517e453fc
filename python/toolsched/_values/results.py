"""The values every phase shares: calls, results, duplicates, decisions and rewrites (all frozen),
the one digest of a call's arguments, and the one codec that turns outputs and results into JSON
(run states and journals both use it).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any, Literal

from toolsched import _core
from toolsched._values.content import Image, image_of
from toolsched._values.fastpath import call_init, positional_builder

__all__ = [
    "ERROR_KINDS",
    "RESULT_FIELD_TYPES",
    "Behavior",
    "Decision",
    "Duplicate",
    "ErrorKind",
    "Rewrite",
    "ToolCall",
    "ToolResult",
    "args_digest",
    "detached",
    "encode_output",
    "jsonable",
    "plain_call",
    "plain_calls",
    "result_fields",
]

ErrorKind = Literal[
    "unknown_tool",
    "invalid_input",
    "semantic_error",
    "permission_denied",
    "hook_blocked",
    "guardrail_rejected",
    "execution_error",
    "timeout",
    "cancelled",
    "skipped",
    "interaction_required",
    "interrupted",
    "unavailable",
    "model_retry",
    "retries_exhausted",
    "limit_exceeded",
]

ERROR_KINDS: frozenset[str] = frozenset(ErrorKind.__args__)  # type: ignore[attr-defined]


class _NoArgs:
    """The default of ``ToolCall.args``: a fresh empty mapping for each call."""

    def __repr__(self) -> str:
        return "{}"


_NO_ARGS: Any = _NoArgs()


def _check_call(id: str, name: str, args: Any) -> None:
    # Told by the real type: an object can claim to be text through its ``__class__``.
    if not issubclass(type(id), str) or not id:
        raise ValueError(f"ToolCall.id must be a non-empty string, got {id!r}")
    if not issubclass(type(name), str):
        raise TypeError(f"ToolCall.name must be a string, got {type(name).__name__}")
    if not issubclass(type(args), (str, Mapping)):
        raise TypeError(f"ToolCall.args must be a mapping or JSON text, got {type(args).__name__}")


@dataclass(frozen=True, slots=True, init=False)
class ToolCall:
    """One tool call as the model emitted it.

    ``args`` is a mapping, or JSON text as OpenAI sends it (an empty mapping when not given).
    """

    id: str
    name: str
    args: Mapping[str, Any] | str = field(default_factory=dict)

    # Written out rather than generated: a turn builds one per call, and setting the
    # slots directly costs half of what the generated ``__init__`` does.
    def __init__(self, id: str, name: str, args: Mapping[str, Any] | str = _NO_ARGS) -> None:
        if args is _NO_ARGS:
            args = {}
        if not (type(id) is str and id and type(name) is str and (type(args) is str or type(args) is dict)):
            # Anything but the usual call (told by exact types) is checked in full.
            _check_call(id, name, args)
            # An ID or name of a text subclass is kept as plain text: its own equality and hash
            # could make one ID two, or two IDs one, wherever calls are told apart by their IDs.
            id, name = str.__str__(id), str.__str__(name)
            if not isinstance(args, (str, dict)):
                # A mapping of another kind (a ``MappingProxyType``, a ``Mapping`` class) as the dict it reads as:
                # what the engine reads and checks.
                args = dict(args)
        _set_call_id(self, id)
        _set_call_name(self, name)
        _set_call_args(self, args)

    def __post_init__(self) -> None:
        # Not called by the ``__init__`` above; a dataclass subclass's generated ``__init__`` calls it.
        _check_call(self.id, self.name, self.args)


_set_call_id = vars(ToolCall)["id"].__set__
_set_call_name = vars(ToolCall)["name"].__set__
_set_call_args = vars(ToolCall)["args"].__set__
# The usual call (ID, name and arguments given positionally, of the exact types) is made in C, every other
# one by the ``__init__`` above (``fastpath.call_init``).
init_in_python = ToolCall.__init__
setattr(ToolCall, "__init__", call_init(ToolCall, init_in_python))  # noqa: B010 (mypy: no method assignment)


def plain_call(call: Any, position: int) -> ToolCall:
    """``call`` as a plain ``ToolCall``, each of its fields read once: the call the executor holds from then on.

    A subclass may compute its fields on every read, or change them after it
    was handed over; the executor reads a call once, when it takes it, so that
    its result carries the ID it was taken with. ``TypeError`` names the
    call's position (``calls[position]``) when it is not a ToolCall, when
    reading a field raises, or when a field is not what a ToolCall holds.
    """
    if type(call) is ToolCall:
        return call
    if not isinstance(call, ToolCall):
        raise TypeError(f"calls[{position}] must be a ToolCall, got {type(call).__name__}")
    fields: list[Any] = []
    for field_name in ("id", "name", "args"):
        try:
            fields.append(getattr(call, field_name))
        except Exception as exc:
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise TypeError(f"calls[{position}]: reading {type(call).__name__}.{field_name} raised {detail}") from exc
    try:
        return ToolCall(*fields)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"calls[{position}]: {exc}") from exc


def plain_calls(calls: list[Any]) -> list[ToolCall]:
    """The turn's calls with each one that is not exactly a ``ToolCall`` replaced by its ``plain_call``."""
    return [plain_call(call, position) for position, call in enumerate(calls)]


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The one result of one call.

    ``output`` is what the tool returned (shaped if it was over budget);
    ``error``/``error_kind`` say what went wrong when ``is_error``.
    """

    call_id: str
    tool_name: str
    output: Any = None
    error: str | None = None
    error_kind: ErrorKind | None = None
    is_error: bool = False
    duration_ms: float = 0.0
    was_concurrent: bool = False
    batch: int | None = None
    truncated: bool = False
    offload_path: str | None = None
    # How many times the tool ran for this call (its ``Retry`` policy may run it again); 0 when it never ran.
    attempts: int = 1


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A call dropped because an earlier call of the turn had the same ID."""

    call_id: str
    index: int
    first_index: int
    args_differ: bool


# Results are made once per call on the hot path: ``new_result(call_id, tool_name, output, error,
# error_kind, is_error, duration_ms, was_concurrent, batch, truncated, offload_path, attempts)``.
new_result: Callable[
    [str, str, Any, str | None, ErrorKind | None, bool, float, bool, int | None, bool, str | None, int], ToolResult
] = positional_builder(ToolResult)


Behavior = Literal["allow", "ask", "deny"]


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether a call may run: ``Decision.allow()``, ``Decision.deny(reason)`` or ``Decision.ask(reason)``.

    Returned by a tool's ``check_permissions``, by ``pre_tool_use`` hooks and by
    approvers. ``reason`` is what the model (deny) or the person (ask) reads.
    """

    behavior: Behavior
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.behavior not in ("allow", "ask", "deny"):
            raise ValueError(f"Decision.behavior must be 'allow', 'ask' or 'deny', got {self.behavior!r}")
        if self.reason is not None and not isinstance(self.reason, str):
            raise TypeError(f"Decision.reason must be a string or None, got {type(self.reason).__name__}")

    @classmethod
    def allow(cls, reason: str | None = None) -> Decision:
        """The call may run."""
        return cls("allow", reason)

    @classmethod
    def deny(cls, reason: str) -> Decision:
        """The call must not run; ``reason`` tells the model why."""
        if not isinstance(reason, str) or not reason:
            raise TypeError("Decision.deny(reason) needs a non-empty reason: the model reads it")
        return cls("deny", reason)

    @classmethod
    def ask(cls, reason: str | None = None) -> Decision:
        """A person must approve the call before it runs."""
        return cls("ask", reason)


@dataclass(frozen=True, slots=True)
class Rewrite:
    """Returned by a ``pre_tool_use`` hook: continue with ``args`` as the call's input.

    The final input is validated against the tool's schema again.
    """

    args: Mapping[str, Any] | str

    def __post_init__(self) -> None:
        if not isinstance(self.args, Mapping | str):
            raise TypeError(f"Rewrite(args) takes a mapping or JSON text, got {type(self.args).__name__}")


# ``detached(args)``: a copy of a call's input that shares nothing mutable with the original. A dict whose
# values are each exactly text, an int, a float, a bool or None is copied shallowly, anything else deep-copied.
# Made in the engine: each hook's event takes one per call, and the engine's type checks and copy cost half
# of the same loop in Python (1.6k against 3.1k instructions, ``python benches/pieces.py``).
detached: Callable[[Any], Any] = _core.detached


# -- the codec: arguments and outputs as JSON -------------------------------------------


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
}


def result_fields() -> tuple[str, ...]:
    """The names of ``ToolResult``'s fields, in declaration order."""
    return _RESULT_FIELDS


_RESULT_FIELDS = tuple(f.name for f in fields(ToolResult))
