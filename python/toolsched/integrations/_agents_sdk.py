"""Every private name of the OpenAI Agents SDK that ``toolsched.integrations.agents`` reads, in one place.

A scheduled tool keeps the SDK's own steps around its body (argument preparation for approval policies,
the failure policy, handled-error reporting); the SDK offers them through no public name, so they are
read here and nowhere else. Checked against openai-agents 0.24.0. On an SDK upgrade, check each:

- ``agents.tool._FailureHandlingFunctionToolInvoker``: the invoker ``function_tool`` tools carry; its
  constructor ``(invoke_tool_impl, on_handled_error, *, function_tool=...)`` and its attributes
  ``_invoke_tool_impl`` (the tool's body) and ``_on_handled_error`` (the SDK's error reporting);
- ``agents.tool._FUNCTION_TOOL_WRAPPED_CALLABLE_MARKER`` (on a body: the callable it wraps) and
  ``agents.tool._SYNC_FUNCTION_TOOL_MARKER`` (on an invoker: the tool's function is synchronous);
- ``__agents_prepare_arguments__``: the attribute, on a body, through which the SDK prepares a call's
  arguments for its approval policy;
- ``ToolContext._function_tool_arguments``: the arguments the SDK already parsed for the call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agents.tool import (
    _FUNCTION_TOOL_WRAPPED_CALLABLE_MARKER,
    _SYNC_FUNCTION_TOOL_MARKER,
    _FailureHandlingFunctionToolInvoker,
)

__all__ = ["FailureHandlingInvoker", "body_of", "forget_parsed_arguments", "like_invoker"]

SdkInvoke = Callable[[Any, str], Awaitable[Any]]

FailureHandlingInvoker = _FailureHandlingFunctionToolInvoker
# What a body carries for the SDK to read: its argument preparation, the callable it wraps.
_BODY_MARKERS = ("__agents_prepare_arguments__", _FUNCTION_TOOL_WRAPPED_CALLABLE_MARKER)


def body_of(invoker: SdkInvoke) -> SdkInvoke:
    """The body of an SDK invoker: what a failure-handling invoker wraps, or the invoker itself."""
    if isinstance(invoker, _FailureHandlingFunctionToolInvoker):
        body: SdkInvoke = invoker._invoke_tool_impl
        return body
    return invoker


def like_invoker(invoke: SdkInvoke, sdk_invoker: _FailureHandlingFunctionToolInvoker, function_tool: Any) -> Any:
    """A failure-handling invoker of ``function_tool`` around ``invoke`` that the SDK treats as ``sdk_invoker``:
    the same argument preparation, wrapped callable, error reporting and synchronous marker."""
    body = sdk_invoker._invoke_tool_impl
    for marker in _BODY_MARKERS:
        if hasattr(body, marker):
            setattr(invoke, marker, getattr(body, marker))
    made = _FailureHandlingFunctionToolInvoker(invoke, sdk_invoker._on_handled_error, function_tool=function_tool)
    if getattr(sdk_invoker, _SYNC_FUNCTION_TOOL_MARKER, False):
        setattr(made, _SYNC_FUNCTION_TOOL_MARKER, True)
    return made


def forget_parsed_arguments(sdk_context: Any) -> None:
    """Makes the SDK parse a call's arguments again (after they were changed)."""
    if hasattr(sdk_context, "_function_tool_arguments"):
        sdk_context._function_tool_arguments = None
