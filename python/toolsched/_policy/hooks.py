"""Hooks: platform code that runs around each call and each batch.

``pre_tool_use`` hooks run before a call is admitted, one after another in
registration order; each sees a frozen ``HookEvent`` and returns ``None``
(continue), a ``Decision`` (allow, deny, ask) or a ``Rewrite`` (continue with
new input). ``post_tool_use`` / ``post_tool_use_failure`` observe a call's
final result, ``pre_batch`` / ``post_batch`` a whole batch, ``tool_update``
the partial output a call streams with ``ctx.update`` (and may suppress it).
Hooks may be plain or async callables, except ``tool_update`` hooks: they run
inside ``ctx.update``, which tools call without awaiting, so they are plain.
"""

from __future__ import annotations

import inspect
import logging
import re
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import anyio.from_thread

from toolsched._values.calls import ToolCall
from toolsched._values.decisions import Rewrite
from toolsched._values.events import Event, ToolUpdated
from toolsched._values.fastpath import positional_builder
from toolsched._values.numeric_options import numeric_fault, shown
from toolsched._values.results import ToolResult
from toolsched.errors import OptionError, RuleError

__all__ = ["BatchEvent", "HookEvent", "Hooks", "Rewrite", "UpdateFilter"]

logger = logging.getLogger("toolsched")

Stage = Literal["pre_tool_use", "post_tool_use", "post_tool_use_failure", "pre_batch", "post_batch", "tool_update"]
HookFunction = Callable[[Any], Any]

_NAME_LIST = re.compile(r"[A-Za-z0-9_.\-]+(?:\|[A-Za-z0-9_.\-]+)*")


@dataclass(frozen=True, slots=True)
class HookEvent:
    """What a call hook sees.

    ``args`` is the call's validated input (a copy: changing it changes nothing;
    return a ``Rewrite`` instead). ``batch`` and ``result`` are set for post
    hooks; ``context`` is the object given to ``Executor.run``.
    """

    call_id: str
    tool_name: str
    args: Mapping[str, Any]
    batch: int | None = None
    result: ToolResult | None = None
    context: Any = None


# ``new_hook_event(call_id, tool_name, args, batch, result, context)``: hook events are made per call and hook stage.
new_hook_event: Callable[[str, str, Any, int | None, ToolResult | None, Any], HookEvent] = positional_builder(HookEvent)


@dataclass(frozen=True, slots=True)
class BatchEvent:
    """What a batch hook sees: the batch's calls (with their final input), and after it, their results."""

    batch: int
    calls: tuple[ToolCall, ...]
    concurrent: bool
    results: tuple[ToolResult, ...] = ()
    context: Any = None


class Matcher:
    """Which tools a hook applies to: ``*`` (all), a name, ``a|b``, or a regular expression (full match)."""

    __slots__ = ("_names", "_regex", "text")

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise RuleError(f"a hook matcher is a string (a tool name, `a|b`, a regex or `*`), got {text!r}")
        # Plain text: a subclass's own equality could make any matcher equal to `*`.
        text = str.__str__(text)
        self.text = text
        self._names: frozenset[str] | None = None
        self._regex: re.Pattern[str] | None = None
        if text in ("", "*"):
            return
        if _NAME_LIST.fullmatch(text):
            self._names = frozenset(text.split("|"))
            return
        try:
            self._regex = re.compile(text)
        except re.error as exc:
            raise RuleError(f"hook matcher {text!r} is neither a tool name, `a|b`, nor a valid regex: {exc}") from None

    def matches(self, names: Iterable[str]) -> bool:
        if self._names is not None:
            return any(name in self._names for name in names)
        if self._regex is not None:
            regex = self._regex
            return any(regex.fullmatch(name) for name in names)
        return True


class Hook:
    """One registered hook (internal): its stage, matcher, function and timeout."""

    __slots__ = ("direct", "fn", "invoke", "is_async", "label", "matcher", "stage", "timeout")

    def __init__(self, stage: Stage, matcher: Matcher, fn: HookFunction, timeout: float | None) -> None:
        self.stage = stage
        self.matcher = matcher
        self.fn = fn
        self.timeout = timeout
        self.is_async = inspect.iscoroutinefunction(fn)
        # An async hook without a timeout is awaited as it is: no wrapper coroutine per call.
        self.direct = self.is_async and timeout is None
        # What to call with an event, its answer to be awaited: the hook itself when direct.
        self.invoke: Callable[[Any], Awaitable[Any]] = fn if self.direct else self._guarded
        self.label = f"{stage} hook {getattr(fn, '__qualname__', None) or repr(fn)}"

    def __call__(self, event: Any) -> Awaitable[Any]:
        """The hook's answer to ``event``, to be awaited."""
        return self.invoke(event)

    async def _guarded(self, event: Any) -> Any:
        if self.timeout is None:
            return await self._call(event)
        with anyio.move_on_after(self.timeout) as scope:
            answer = await self._call(event)
        # Past its timeout, whatever it answered: a sync hook holds the event loop, so nothing could stop it,
        # and an async one may have caught its cancellation and answered anyway. Its answer is not obeyed.
        if scope.cancel_called or anyio.current_time() >= scope.deadline:
            raise HookTimeout(f"did not finish within {self.timeout} seconds")
        return answer

    async def _call(self, event: Any) -> Any:
        if self.is_async:
            return await self.fn(event)
        answer = self.fn(event)
        return await answer if inspect.isawaitable(answer) else answer


class HookTimeout(Exception):
    """A hook ran past its timeout (internal)."""


class ToolHooks:
    """The hooks that apply to one tool, resolved once per executor (internal)."""

    __slots__ = ("post_failure", "post_success", "pre", "update")

    def __init__(
        self,
        pre: tuple[Hook, ...],
        post_success: tuple[Hook, ...],
        post_failure: tuple[Hook, ...],
        update: tuple[Hook, ...] = (),
    ) -> None:
        self.pre = pre
        self.post_success = post_success
        self.post_failure = post_failure
        self.update = update


class UpdateFilter:
    """The event sink of one call whose tool has ``tool_update`` hooks (internal).

    The call's own ``ToolUpdated`` events pass through the hooks, in
    registration order, on the event loop's thread; a hook that returns
    False suppresses the event (later hooks and listeners never see it), as
    does a hook that raises or returns anything but None, True or False
    (fail closed). Every other event goes straight on, including those of a
    nested run (they carry a ``parent_call_id``).
    """

    __slots__ = ("_emit", "_hooks", "_loop_thread")

    def __init__(self, hooks: tuple[Hook, ...], emit: Callable[[Event], None] | None) -> None:
        self._hooks = hooks
        self._emit = emit
        self._loop_thread = threading.get_ident()

    def __call__(self, event: Event) -> None:
        if threading.get_ident() != self._loop_thread:
            anyio.from_thread.run_sync(self, event)
            return
        if isinstance(event, ToolUpdated) and event.parent_call_id is None and not self._passes(event):
            return
        if self._emit is not None:
            self._emit(event)

    def _passes(self, event: ToolUpdated) -> bool:
        for hook in self._hooks:
            try:
                answer = hook.fn(event)
            except Exception:
                logger.warning(
                    "%s failed on an update of call %s; the update was suppressed",
                    hook.label,
                    event.call_id,
                    exc_info=True,
                )
                return False
            if answer is False:
                return False
            if answer is not None and answer is not True:
                logger.warning("%s returned %r, not None, True or False; the update was suppressed", hook.label, answer)
                return False
        return True

    async def flush(self) -> None:
        """Delivers what async listeners still wait for."""
        flush = getattr(self._emit, "flush", None)
        if flush is not None:
            await flush()


def _check_timeout(timeout: Any) -> float | None:
    """A hook's timeout in seconds (``inf``: none), by ``numeric_fault``'s rule; ``OptionError`` if it fails."""
    if timeout is None:
        return None
    fault = numeric_fault(timeout, integer=False, infinite=True)
    if fault is not None:
        raise OptionError(f"a hook timeout must be {fault} of seconds, got {shown(timeout)}")
    return float(timeout)


_UNSET: Any = object()


class Hooks:
    """Hooks by stage, each with a matcher on the tool name (or an alias).

    Register with ``Hooks().pre_tool_use("edit_file", fn).post_tool_use("*", fn2)``;
    each method returns the ``Hooks`` so calls chain. ``timeout`` (seconds) is
    the default for every hook; a ``pre_tool_use`` or ``pre_batch`` hook that
    raises or runs past its timeout blocks its call(s) (``hook_blocked``).
    An ``Executor`` resolves which hooks apply to each tool when it is built:
    register hooks before building it.
    """

    __slots__ = ("_hooks", "timeout")

    def __init__(self, *, timeout: float | None = None) -> None:
        self.timeout = _check_timeout(timeout)
        self._hooks: list[Hook] = []

    def __len__(self) -> int:
        return len(self._hooks)

    def __repr__(self) -> str:
        return f"Hooks({', '.join(f'{h.stage}({h.matcher.text!r})' for h in self._hooks)})"

    def _add(self, stage: Stage, matcher: str, fn: HookFunction, timeout: Any) -> Hooks:
        if not callable(fn):
            raise TypeError(f"{stage} hook must be callable, got {fn!r}")
        limit = self.timeout if timeout is _UNSET else _check_timeout(timeout)
        self._hooks.append(Hook(stage, Matcher(matcher), fn, limit))
        return self

    def pre_tool_use(self, matcher: str, fn: HookFunction, *, timeout: float | None = _UNSET) -> Hooks:
        """``fn(HookEvent) -> None | Decision | Rewrite``, before a matching call is admitted."""
        return self._add("pre_tool_use", matcher, fn, timeout)

    def post_tool_use(self, matcher: str, fn: HookFunction, *, timeout: float | None = _UNSET) -> Hooks:
        """``fn(HookEvent)`` after a matching call succeeded; ``event.result`` is its result."""
        return self._add("post_tool_use", matcher, fn, timeout)

    def post_tool_use_failure(self, matcher: str, fn: HookFunction, *, timeout: float | None = _UNSET) -> Hooks:
        """``fn(HookEvent)`` after a matching call that reached execution failed."""
        return self._add("post_tool_use_failure", matcher, fn, timeout)

    def pre_batch(self, matcher: str, fn: HookFunction, *, timeout: float | None = _UNSET) -> Hooks:
        """``fn(BatchEvent) -> None | Decision`` before a batch holding a matching call; deny blocks the batch."""
        return self._add("pre_batch", matcher, fn, timeout)

    def post_batch(self, matcher: str, fn: HookFunction, *, timeout: float | None = _UNSET) -> Hooks:
        """``fn(BatchEvent)`` after a batch holding a matching call; ``event.results`` are its results."""
        return self._add("post_batch", matcher, fn, timeout)

    def tool_update(self, matcher: str, fn: Callable[[ToolUpdated], bool | None]) -> Hooks:
        """``fn(ToolUpdated) -> None | bool`` on each partial output a matching call streams (``ctx.update``).

        Observe it, or return False to suppress it: listeners never see a
        suppressed update. The call's final result is never affected. ``fn``
        must be a plain function: it runs inside ``ctx.update`` (so no timeout
        applies). A hook that raises suppresses the update (and is logged).
        """
        if inspect.iscoroutinefunction(fn):
            raise TypeError(
                f"tool_update hook {getattr(fn, '__qualname__', fn)!r} must be a plain function, not async: "
                "it runs inside ctx.update, which tools call without awaiting"
            )
        return self._add("tool_update", matcher, fn, None)

    def for_tool(self, names: Iterable[str]) -> ToolHooks | None:
        """The call hooks that match a tool's names, in registration order; None when there are none."""
        names = tuple(names)
        chosen: dict[str, list[Hook]] = {
            "pre_tool_use": [],
            "post_tool_use": [],
            "post_tool_use_failure": [],
            "tool_update": [],
        }
        for hook in self._hooks:
            if hook.stage in chosen and hook.matcher.matches(names):
                chosen[hook.stage].append(hook)
        if not any(chosen.values()):
            return None
        return ToolHooks(
            tuple(chosen["pre_tool_use"]),
            tuple(chosen["post_tool_use"]),
            tuple(chosen["post_tool_use_failure"]),
            tuple(chosen["tool_update"]),
        )

    def batch_hooks(self, stage: Literal["pre_batch", "post_batch"]) -> tuple[Hook, ...]:
        return tuple(hook for hook in self._hooks if hook.stage == stage)
