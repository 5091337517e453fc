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


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call as the model emitted it.

    ``args`` is a mapping, or JSON text as OpenAI sends it.
    """

    id: str
    name: str
    args: Mapping[str, Any] | str = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"ToolCall.id must be a non-empty string, got {self.id!r}")
        if not isinstance(self.name, str):
            raise TypeError(f"ToolCall.name must be a string, got {type(self.name).__name__}")
        if not isinstance(self.args, (str, Mapping)):
            raise TypeError(f"ToolCall.args must be a mapping or JSON text, got {type(self.args).__name__}")


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
