"""Retries the model sees and the limits of an agent run: ``ModelRetry`` and ``Limits``.

A tool (or its ``validate_input``) raises ``ModelRetry(message)`` to have the
call answered ``error_kind="model_retry"`` with that message for the model.
Each tool's ``max_model_retries`` (default 3) is how many times the model may
try again after a ``model_retry``, ``invalid_input`` or ``semantic_error``
answer within one run: once a tool has had more such answers than that, its
next calls are answered ``retries_exhausted`` without running (0: the first
mistake is the last).

``Limits`` holds the caps of an agent run and its counts: pass the same object
to ``run`` / ``stream`` / ``resume`` on every turn of the run (the loops do).
Counts are taken when a call is admitted, before anything of it is awaited, so
calls of one turn that run concurrently never go past a cap. A call is counted
once by its run and ID: resuming or recovering a run does not count its calls again.
Runs that share one ``Limits`` share its budget; ``copy.copy(limits)`` gives a
``Limits`` with the same caps and the counts so far, counted apart from then on,
and ``limits.fresh()`` one with the same caps and no counts.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any

from toolsched._values.calls import ToolCall
from toolsched._values.digest import value_digest
from toolsched._values.numeric_options import numeric_fault, shown
from toolsched._values.results import ToolResult
from toolsched.errors import OptionError

__all__ = ["RETRY_KINDS", "Limits", "ModelRetry", "active_limits", "bare_limits", "limits_in_force"]

# The answers that count against a tool's ``max_model_retries``.
RETRY_KINDS = frozenset({"model_retry", "invalid_input", "semantic_error"})
# The answers of a limit: the call was not made.
_LIMIT_KINDS = frozenset({"limit_exceeded", "retries_exhausted"})

_PREVIEW_CHARS = 200


class ModelRetry(Exception):
    """Raised by a tool body or ``validate_input``: the call is answered ``model_retry`` with ``message``,
    for the model to fix its call."""

    def __init__(self, message: str) -> None:
        if not isinstance(message, str):
            raise TypeError(f"ModelRetry(message) takes a string for the model, got {type(message).__name__}")
        super().__init__(message)
        self.message = message


def _times(count: int) -> str:
    """``count`` as a number of times, in words the model reads: "once", "2 times"."""
    return "once" if count == 1 else f"{count} times"


def _counted(count: int, one: str, many: str) -> str:
    """``count`` with its noun in the right number: "1 retry", "2 retries"."""
    return f"{count} {one if count == 1 else many}"


def _cap(field: str, value: Any) -> int | None:
    if value is None:
        return None
    fault = numeric_fault(value, integer=True, above=False, most=None, infinite=False)
    if fault is not None:
        raise OptionError(f"Limits({field}=...) must be None or {fault}; got {shown(value)}")
    return int(value)


def _per_tool_cap(value: Any) -> int | dict[str, int] | None:
    """``max_calls_per_tool`` checked: None, a whole number, or a plain dict of tool name to a whole number."""
    if isinstance(value, Mapping):
        per_tool: dict[str, int] = {}
        for name, cap in value.items():
            if not isinstance(name, str) or not name:
                raise OptionError(f"Limits(max_calls_per_tool=...) keys must be tool names; got {name!r}")
            checked = _cap(f"max_calls_per_tool[{name!r}]", cap)
            if checked is None:
                raise OptionError(f"Limits(max_calls_per_tool[{name!r}]) must be a whole number >= 0; got None")
            per_tool[name] = checked
        return per_tool
    if isinstance(value, (str, bytes)) or not (value is None or isinstance(value, int)):
        raise OptionError(
            "Limits(max_calls_per_tool=...) must be None, a whole number or a mapping of tool name to "
            f"a whole number; got {shown(value)}"
        )
    return _cap("max_calls_per_tool", value)


class Limits:
    """Caps on one agent run's calls, and the run's counts (see the module's docstring).

    - ``max_calls``: calls admitted in the run, every tool together;
    - ``max_calls_per_tool``: an int (the same cap for every tool) or a mapping of tool name to cap;
    - ``max_model_retries``: overrides every tool's ``max_model_retries``;
    - ``max_repeats``: how many times the same call (tool and canonical arguments, numbers by value) may run.

    Each cap is ``None`` (no cap) or a whole number >= 0; anything else raises ``OptionError``, given here or
    set on the object later (a cap raised or lowered between turns holds from the next call admitted).
    """

    __slots__ = (
        "_calls",
        "_counted",
        "_lock",
        "_max_calls",
        "_max_calls_per_tool",
        "_max_model_retries",
        "_max_repeats",
        "_repeats",
        "_retries",
        "_settled",
        "_tool_calls",
    )

    def __init__(
        self,
        max_calls: int | None = None,
        max_calls_per_tool: int | Mapping[str, int] | None = None,
        max_model_retries: int | None = None,
        max_repeats: int | None = None,
    ) -> None:
        self._max_calls = _cap("max_calls", max_calls)
        self._max_calls_per_tool = _per_tool_cap(max_calls_per_tool)
        self._max_model_retries = _cap("max_model_retries", max_model_retries)
        self._max_repeats = _cap("max_repeats", max_repeats)
        self._lock = threading.Lock()
        self._calls = 0
        self._tool_calls: dict[str, int] = {}
        self._retries: dict[str, int] = {}
        # (tool, args digest) -> [times admitted, preview of what it returned last]
        self._repeats: dict[tuple[str, str], list[Any]] = {}
        # (run identity, call ID) -> the (tool, args digest) it was counted under: a resumed call counts once,
        # and runs that share the Limits never take each other's calls for their own.
        self._counted: dict[tuple[str, str], tuple[str, str]] = {}
        # The counted calls whose answers are taken into the counts: an answer is settled once.
        self._settled: set[tuple[str, str]] = set()

    @property
    def max_calls(self) -> int | None:
        """Calls admitted in the run, every tool together (None: no cap)."""
        return self._max_calls

    @max_calls.setter
    def max_calls(self, value: int | None) -> None:
        self._max_calls = _cap("max_calls", value)

    @property
    def max_calls_per_tool(self) -> int | Mapping[str, int] | None:
        """Calls of each tool: one cap for every tool, or a read-only mapping of tool name to cap (None: no cap);
        set it whole to change it."""
        caps = self._max_calls_per_tool
        return MappingProxyType(caps) if isinstance(caps, dict) else caps

    @max_calls_per_tool.setter
    def max_calls_per_tool(self, value: int | Mapping[str, int] | None) -> None:
        self._max_calls_per_tool = _per_tool_cap(value)

    @property
    def max_model_retries(self) -> int | None:
        """Overrides every tool's ``max_model_retries`` (None: each tool's own)."""
        return self._max_model_retries

    @max_model_retries.setter
    def max_model_retries(self, value: int | None) -> None:
        self._max_model_retries = _cap("max_model_retries", value)

    @property
    def max_repeats(self) -> int | None:
        """How many times the same call may be made (None: no cap)."""
        return self._max_repeats

    @max_repeats.setter
    def max_repeats(self, value: int | None) -> None:
        self._max_repeats = _cap("max_repeats", value)

    def __repr__(self) -> str:
        return (
            f"Limits(max_calls={self.max_calls!r}, max_calls_per_tool={self._max_calls_per_tool!r}, "
            f"max_model_retries={self.max_model_retries!r}, max_repeats={self.max_repeats!r})"
        )

    def __copy__(self) -> Limits:
        twin = self.fresh()
        with self._lock:
            twin._calls = self._calls
            twin._tool_calls = dict(self._tool_calls)
            twin._retries = dict(self._retries)
            twin._repeats = {key: list(value) for key, value in self._repeats.items()}
            twin._counted = dict(self._counted)
            twin._settled = set(self._settled)
        return twin

    def __deepcopy__(self, memo: dict[int, Any]) -> Limits:
        return copy.copy(self)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as ``copy.copy`` copies it: the caps and the counts so far (its lock is made anew)."""
        twin = copy.copy(self)
        counts = (twin._calls, twin._tool_calls, twin._retries, twin._repeats, twin._counted, twin._settled)
        caps = (twin._max_calls, twin._max_calls_per_tool, twin._max_model_retries, twin._max_repeats)
        return _limits_from, (caps, counts)

    def fresh(self) -> Limits:
        """A ``Limits`` with the same caps and no counts (for a new agent run)."""
        return Limits(self.max_calls, self._max_calls_per_tool, self.max_model_retries, self.max_repeats)

    @property
    def calls(self) -> int:
        """Calls admitted in the run so far."""
        return self._calls

    def calls_of(self, tool_name: str) -> int:
        """Calls of ``tool_name`` admitted in the run so far."""
        return self._tool_calls.get(tool_name, 0)

    def retries_of(self, tool_name: str) -> int:
        """``model_retry``, ``invalid_input`` and ``semantic_error`` answers ``tool_name`` had in the run."""
        return self._retries.get(tool_name, 0)

    def _tool_cap(self, tool_name: str) -> int | None:
        caps = self._max_calls_per_tool
        if isinstance(caps, dict):
            return caps.get(tool_name)
        return caps

    def retry_budget(self, tool_name: str, tool_budget: int) -> int:
        return tool_budget if self.max_model_retries is None else self.max_model_retries

    def exhausted(self, tool_name: str, tool_budget: int) -> str | None:
        """The ``retries_exhausted`` message for ``tool_name`` once its retry budget is spent, else None."""
        with self._lock:
            return self._exhausted(tool_name, tool_budget)

    def _exhausted(self, tool_name: str, tool_budget: int) -> str | None:
        retries = self._retries.get(tool_name, 0)
        budget = self.retry_budget(tool_name, tool_budget)
        if retries <= budget:
            return None
        return (
            f"`{tool_name}` was answered with errors to fix {_times(retries)} in this run, past its limit of "
            f"{_counted(budget, 'retry', 'retries')}: it is not called again in this run; stop calling it and "
            "answer with what you have"
        )

    def admit(
        self, call_id: str, tool_name: str, args: Any, tool_budget: int, *, resumed: bool = False, run: str = ""
    ) -> tuple[str, str] | None:
        """Counts one call of the run ``run`` (its identity), or refuses it: ``(error kind, message)`` when it
        must not run.

        A resumed call (``resumed``) this ``Limits`` already counted is let through uncounted.
        """
        with self._lock:
            if resumed and (run, call_id) in self._counted:
                return None
            exhausted = self._exhausted(tool_name, tool_budget)
            if exhausted is not None:
                return "retries_exhausted", exhausted
            if self.max_calls is not None and self._calls >= self.max_calls:
                return (
                    "limit_exceeded",
                    f"the call to `{tool_name}` was not run: this run's limit of "
                    f"{_counted(self.max_calls, 'tool call', 'tool calls')} is "
                    "reached; make no more tool calls and answer with what you have",
                )
            cap = self._tool_cap(tool_name)
            made = self._tool_calls.get(tool_name, 0)
            if cap is not None and made >= cap:
                return (
                    "limit_exceeded",
                    f"the call to `{tool_name}` was not run: `{tool_name}` may be called {_times(cap)} in this run "
                    "and that is reached; use another tool or answer with what you have",
                )
            key = (tool_name, value_digest(args))
            seen = self._repeats.get(key)
            if self.max_repeats is not None and seen is None and self.max_repeats == 0:
                # No call may be made even once: as ``max_calls=0`` refuses the first call.
                return (
                    "limit_exceeded",
                    f"the call to `{tool_name}` was not run: this run's limit of 0 calls with the same arguments "
                    "allows none; make no more tool calls and answer with what you have",
                )
            if self.max_repeats is not None and seen is not None and seen[0] >= self.max_repeats:
                before = seen[1] if seen[1] is not None else "(its answer is given in this same turn)"
                return (
                    "limit_exceeded",
                    f"the call to `{tool_name}` was not run: the same call with the same arguments was already "
                    f"made {_times(seen[0])} in this run; it returned: {before}",
                )
            self._count((run, call_id), tool_name, key)
            return None

    def admitted(self, call_id: str, tool_name: str, args: Any, *, run: str = "") -> None:
        """Counts a call admitted before, whatever the caps say now: a call a crashed process had admitted (or
        started) that a recovery runs or holds. One this ``Limits`` counted already is not counted again."""
        with self._lock:
            if (run, call_id) not in self._counted:
                self._count((run, call_id), tool_name, (tool_name, value_digest(args)))

    def _count(self, call_id: tuple[str, str], tool_name: str, key: tuple[str, str]) -> None:
        self._calls += 1
        self._tool_calls[tool_name] = self._tool_calls.get(tool_name, 0) + 1
        seen = self._repeats.get(key)
        if seen is None:
            self._repeats[key] = [1, None]
        else:
            seen[0] += 1
        self._counted[call_id] = key
        self._settled.discard(call_id)

    def settle(self, results: Sequence[ToolResult], *, run: str = "") -> None:
        """Takes a turn's answers into the counts: retries per tool, what each repeated call returned."""
        with self._lock:
            for result in results:
                self._settle(result, run)

    def carry(self, results: Sequence[ToolResult], calls: Sequence[ToolCall], *, run: str = "") -> None:
        """Takes answers from an earlier part of the run (a journal, a resumed state) into the counts.

        A call this ``Limits`` has not counted yet counts as made (unless a limit answered it) and its answer
        is settled; one it counted has its answer settled unless it was already (an external call counted when
        it was handed out is answered later, on a resume or recover).
        """
        arguments = {call.id: call.args for call in calls}
        with self._lock:
            for result in results:
                counted = (run, result.call_id)
                if counted in self._counted:
                    if counted not in self._settled:
                        self._settle(result, run)
                    continue
                if counted in self._settled:
                    # Answered in a turn this ``Limits`` saw without being admitted (the engine refused its
                    # arguments): taken into the counts then, not again (a second mistake the model never made).
                    continue
                if result.error_kind not in _LIMIT_KINDS:
                    made = (result.tool_name, value_digest(arguments.get(result.call_id, {})))
                    self._calls += 1
                    self._tool_calls[result.tool_name] = self._tool_calls.get(result.tool_name, 0) + 1
                    self._repeats.setdefault(made, [0, None])[0] += 1
                    self._counted[counted] = made
                self._settle(result, run)

    def _settle(self, result: ToolResult, run: str) -> None:
        self._settled.add((run, result.call_id))
        if result.error_kind in RETRY_KINDS:
            self._retries[result.tool_name] = self._retries.get(result.tool_name, 0) + 1
        counted = self._counted.get((run, result.call_id))
        if counted is not None and counted in self._repeats:
            self._repeats[counted][1] = _preview(result)


def _preview(result: ToolResult) -> str:
    """What a call returned, as a repeat of it is told (at most ``_PREVIEW_CHARS``). Any output has one: a value
    ``repr`` cannot show (an integer past Python's 4,300 digits, a structure nested past the recursion limit,
    a ``__repr__`` that raises) is named by its type."""
    if result.is_error:
        text = f"an error ({result.error_kind}): {result.error}"
    elif isinstance(result.output, str):
        text = result.output
    else:
        try:
            text = repr(result.output)
        except Exception:
            text = f"a {type(result.output).__name__} that cannot be shown"
    return text if len(text) <= _PREVIEW_CHARS else text[:_PREVIEW_CHARS] + "…"


def _limits_from(caps: tuple[Any, ...], counts: tuple[Any, ...]) -> Limits:
    """A pickled ``Limits`` loaded: its caps checked again, its counts as they were."""
    limits = Limits(*caps)
    (
        limits._calls,
        limits._tool_calls,
        limits._retries,
        limits._repeats,
        limits._counted,
        limits._settled,
    ) = counts
    return limits


_active: ContextVar[Limits | None] = ContextVar("toolsched_limits", default=None)


def active_limits() -> Limits | None:
    """The ``Limits`` of the run in progress in this context, if it was given one."""
    return _active.get()


def bare_limits() -> Limits:
    """The counts of a run given no ``Limits`` (no caps): resumed or recovered, the answers it carries from before
    count against each tool's ``max_model_retries``, as they would in a ``Limits`` given to every part of it."""
    return Limits()


@contextmanager
def limits_in_force(limits: Limits | None) -> Iterator[None]:
    """Makes ``limits`` the run's for the block (checked: a ``Limits`` or None)."""
    if limits is not None and not isinstance(limits, Limits):
        raise OptionError(f"limits= takes a ts.Limits or None, got {type(limits).__name__}")
    token = _active.set(limits)
    try:
        yield
    finally:
        _active.reset(token)
