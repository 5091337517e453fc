"""The values that cross phases: calls, results and duplicates. All frozen."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from toolsched.frozen import positional_builder

__all__ = ["ERROR_KINDS", "Duplicate", "ErrorKind", "ToolCall", "ToolResult"]

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
]

ERROR_KINDS: frozenset[str] = frozenset(ErrorKind.__args__)  # type: ignore[attr-defined]


class _NoArgs:
    """The default of ``ToolCall.args``: a fresh empty mapping for each call."""

    def __repr__(self) -> str:
        return "{}"


_NO_ARGS: Any = _NoArgs()


def _check_call(id: str, name: str, args: Any) -> None:
    if not isinstance(id, str) or not id:
        raise ValueError(f"ToolCall.id must be a non-empty string, got {id!r}")
    if not isinstance(name, str):
        raise TypeError(f"ToolCall.name must be a string, got {type(name).__name__}")
    if not isinstance(args, (str, Mapping)):
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
        _check_call(id, name, args)
        _set_call_id(self, id)
        _set_call_name(self, name)
        _set_call_args(self, args)

    def __post_init__(self) -> None:
        # Not called by the ``__init__`` above; a dataclass subclass's generated ``__init__`` calls it.
        _check_call(self.id, self.name, self.args)


_set_call_id = vars(ToolCall)["id"].__set__
_set_call_name = vars(ToolCall)["name"].__set__
_set_call_args = vars(ToolCall)["args"].__set__


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


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A call dropped because an earlier call of the turn had the same ID."""

    call_id: str
    index: int
    first_index: int
    args_differ: bool


# Results are made once per call on the hot path: ``new_result(call_id, tool_name, output, error,
# error_kind, is_error, duration_ms, was_concurrent, batch, truncated, offload_path)``.
new_result = positional_builder(ToolResult)
