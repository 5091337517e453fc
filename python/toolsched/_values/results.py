"""The one result of one call: ``ToolResult``, its error kinds, and its fields."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from toolsched._values.fastpath import positional_builder

__all__ = [
    "ERROR_KINDS",
    "ErrorKind",
    "ToolResult",
    "edited_result",
    "error_result",
    "new_result",
    "repaired_result",
    "result_fields",
    "shown_output",
    "shown_result",
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


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The one result of one call.

    ``output`` is what the tool returned (shaped if it was over budget);
    ``error``/``error_kind`` say what went wrong when ``is_error``; ``repaired``
    says the call's arguments were repaired (``Executor(repair_arguments=...)``),
    whatever it was answered with; ``edited`` is True when a person approved
    the call with arguments of their own (``RunState.approve(call_id,
    args=...)``): the result answers those, not the model's.
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
    # Whether the call's arguments were repaired (``Executor(repair_arguments=...)``) before it was answered.
    repaired: bool = False
    # Whether the call ran (or was answered) with arguments a person gave when approving it.
    edited: bool = False


# Results are made once per call on the hot path: ``new_result(call_id, tool_name, output, error,
# error_kind, is_error, duration_ms, was_concurrent, batch, truncated, offload_path, attempts)``, the fields
# after ``attempts`` taking their defaults (``repaired=False``, ``edited=False``; ``repaired_result`` and
# ``edited_result`` mark a repaired call's, an edited call's).
new_result: Callable[
    [str, str, Any, str | None, ErrorKind | None, bool, float, bool, int | None, bool, str | None, int], ToolResult
] = positional_builder(ToolResult, given=12)


# Outputs that cannot change in place: an observer is shown them as they are.
_UNCHANGEABLE = frozenset({str, bytes, int, float, bool, type(None)})


def shown_output(output: Any) -> Any:
    """An output as an observer (a post hook, an output guardrail) is shown it: as it is when it cannot change
    in place (text, a number, None), else a deep copy, so that what the observer changes in it reaches
    neither the result nor the model. An output that cannot be copied (it holds a lock, a socket) is shown
    as it is."""
    if type(output) in _UNCHANGEABLE:
        return output
    try:
        return copy.deepcopy(output)
    except Exception:
        return output


# ``_every_field(call_id, ..., edited)``: a result with every field given, in declaration order.
_every_field: Callable[..., ToolResult] = positional_builder(ToolResult)


def shown_result(result: ToolResult) -> ToolResult:
    """The result post hooks (or batch hooks) are shown: ``result`` itself when its output is shown as it is
    (``shown_output``), else a copy holding the output's copy. One is made per call and shared by the
    call's hooks: what a hook changes in it changes neither the result nor what the model is sent."""
    output = result.output
    shown = shown_output(output)
    if shown is output:
        return result
    return _every_field(
        result.call_id,
        result.tool_name,
        shown,
        result.error,
        result.error_kind,
        result.is_error,
        result.duration_ms,
        result.was_concurrent,
        result.batch,
        result.truncated,
        result.offload_path,
        result.attempts,
        result.repaired,
        result.edited,
    )


def repaired_result(result: ToolResult) -> ToolResult:
    """``result`` marked as the answer of a call whose arguments were repaired."""
    return result if result.repaired else replace(result, repaired=True)


def edited_result(result: ToolResult) -> ToolResult:
    """``result`` marked as the answer to a call a person approved with arguments of their own."""
    return result if result.edited else replace(result, edited=True)


def error_result(
    call_id: str, tool: str, kind: ErrorKind, message: str, batch: int | None = None, *, attempts: int = 0
) -> ToolResult:
    """The error result of a call that did not run (again): no output, no duration; ``attempts`` is how many
    times its tool had started on it."""
    return new_result(call_id, tool, None, message, kind, True, 0.0, False, batch, False, None, attempts)


def result_fields() -> tuple[str, ...]:
    """The names of ``ToolResult``'s fields, in declaration order."""
    return _RESULT_FIELDS


_RESULT_FIELDS = tuple(f.name for f in fields(ToolResult))
