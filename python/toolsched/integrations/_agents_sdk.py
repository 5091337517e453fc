"""Every private name of the OpenAI Agents SDK that ``toolsched.integrations.agents`` reads, in one place.

A scheduled tool keeps the SDK's own steps around its body (argument preparation for approval policies,
the failure policy, handled-error reporting); the SDK offers them through no public name, so they are
read here and nowhere else. Checked against openai-agents 0.24.0. On an SDK upgrade, check each:

- ``agents.tool._FailureHandlingFunctionToolInvoker``: the invoker ``function_tool`` tools carry; its
  constructor ``(invoke_tool_impl, on_handled_error, *, function_tool=...)`` and its attributes
  ``_invoke_tool_impl`` (the tool's body, which it awaits with the ``ToolContext`` the SDK hands it, and
  which a scheduled agent's tool has routed: see ``route_body``) and ``_on_handled_error`` (the SDK's
  error reporting);
- ``agents.tool._FUNCTION_TOOL_WRAPPED_CALLABLE_MARKER`` (on a body: the callable it wraps) and
  ``agents.tool._SYNC_FUNCTION_TOOL_MARKER`` (on an invoker: the tool's function is synchronous);
- ``__agents_prepare_arguments__``: the attribute, on a body, through which the SDK prepares a call's
  arguments for its approval policy;
- ``ToolContext._function_tool_arguments``: the arguments the SDK already parsed for the call;
- ``agents.tool._annotation_mentions_context_type``: how ``_get_function_tool_invoke_context`` reads an
  invoker's first parameter to choose the context it passes (on every call);
- ``agents.strict_schema.ensure_strict_json_schema``: ``FunctionTool.__post_init__``'s normalization of a
  strict tool's schema.
"""

from __future__ import annotations

import copy
import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import Any, SupportsIndex, get_type_hints

from agents.run_context import RunContextWrapper
from agents.strict_schema import ensure_strict_json_schema
from agents.tool import (
    _FUNCTION_TOOL_WRAPPED_CALLABLE_MARKER,
    _SYNC_FUNCTION_TOOL_MARKER,
    _annotation_mentions_context_type,
    _FailureHandlingFunctionToolInvoker,
)
from agents.tool_context import ToolContext

__all__ = [
    "FailureHandlingInvoker",
    "RoutedBody",
    "body_of",
    "forget_parsed_arguments",
    "like_invoker",
    "pin_context_choice",
    "route_body",
    "strict_schema",
]

SdkInvoke = Callable[[Any, str], Awaitable[Any]]

FailureHandlingInvoker = _FailureHandlingFunctionToolInvoker
# What a body carries for the SDK to read: its argument preparation, the callable it wraps.
_BODY_MARKERS = ("__agents_prepare_arguments__", _FUNCTION_TOOL_WRAPPED_CALLABLE_MARKER)


def body_of(invoker: SdkInvoke) -> SdkInvoke:
    """The body of an SDK invoker: what a failure-handling invoker wraps (the tool's own body where it was
    routed), or the invoker itself."""
    if isinstance(invoker, _FailureHandlingFunctionToolInvoker):
        body: SdkInvoke = invoker._invoke_tool_impl
        return body.body if isinstance(body, RoutedBody) else body
    return invoker


class RoutedBody:
    """The body of a failure-handling invoker, routed: called with the SDK's ``ToolContext``, it returns
    ``route(body, context, input)`` when ``route`` answers for that context (not None), else the body's
    own coroutine, ``body(context, input)``, untouched. It reads as the body reads (the SDK's markers on
    it: its argument preparation, its wrapped callable); copied or pickled, it is its body's like."""

    __slots__ = ("body", "route")

    def __init__(self, body: SdkInvoke, route: Callable[[Any, Any], Any]) -> None:
        self.body = body
        self.route = route

    def __call__(self, ctx: Any, input: str) -> Awaitable[Any]:
        routed = self.route(self, ctx)
        if routed is None:
            return self.body(ctx, input)
        made: Awaitable[Any] = routed(self.body, ctx, input)
        return made

    def __getattr__(self, name: str) -> Any:
        if name in RoutedBody.__slots__:
            raise AttributeError(name)
        return getattr(self.body, name)

    def __copy__(self) -> RoutedBody:
        return self  # a function is its own copy

    def __deepcopy__(self, memo: dict[int, Any]) -> RoutedBody:
        return self

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        # Pickled as its body (which pickles, or not, as it does without toolsched): the copy is unrouted.
        return (_same, (self.body,))


def _same(value: Any) -> Any:
    return value


_ROUTING = threading.Lock()


def route_body(invoker: _FailureHandlingFunctionToolInvoker, route: Callable[[Any, Any], Any]) -> RoutedBody:
    """Routes the body of ``invoker`` (once: every later call returns the same ``RoutedBody``), in place: the
    invoker, its tool and the tool's copies (which share the body) stay the SDK's objects."""
    with _ROUTING:
        body = invoker._invoke_tool_impl
        if not isinstance(body, RoutedBody):
            body = invoker._invoke_tool_impl = RoutedBody(body, route)
        return body


def like_invoker(invoke: SdkInvoke, sdk_invoker: _FailureHandlingFunctionToolInvoker, function_tool: Any) -> Any:
    """A failure-handling invoker of ``function_tool`` around ``invoke`` that the SDK treats as ``sdk_invoker``:
    the same argument preparation, wrapped callable, error reporting and synchronous marker."""
    body = body_of(sdk_invoker)
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


def pin_context_choice(invoker: Any) -> None:
    """Pins on ``invoker`` the context the SDK chooses for it, read once.

    On every call the SDK reads the invoker's signature and type hints to choose the context it passes
    (a ``ToolContext``, or a plain ``RunContextWrapper`` when the first parameter asks for one). The
    choice is made here as the SDK makes it, and kept as a ``__signature__`` and ``__annotations__``
    whose first parameter names the chosen type itself: the SDK's reading then finds the same choice
    without parsing an annotation or resolving hints.
    """
    try:
        signature = inspect.signature(invoker)
    except (TypeError, ValueError):
        return
    parameters = list(signature.parameters.values())
    if not parameters:
        return
    first = parameters[0]
    annotation = first.annotation
    try:
        hints = get_type_hints(invoker, include_extras=True)
    except Exception:
        pass
    else:
        annotation = hints.get(first.name, annotation)
    pinned: Any
    if _annotation_mentions_context_type(annotation, context_type=ToolContext):
        pinned = ToolContext
    elif _annotation_mentions_context_type(annotation, context_type=RunContextWrapper):
        pinned = RunContextWrapper
    else:
        pinned = inspect.Parameter.empty
    parameters[0] = first.replace(annotation=pinned)
    invoker.__signature__ = signature.replace(parameters=parameters)
    invoker.__annotations__ = {} if pinned is inspect.Parameter.empty else {first.name: pinned}


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` as the SDK makes a strict tool's (on a copy; ``schema`` is unchanged)."""
    made: dict[str, Any] = ensure_strict_json_schema(copy.deepcopy(schema))
    return made
