"""Events emitted while a run proceeds (``on_event=`` and ``Executor.stream``).

Events of a nested run (a tool whose body runs its own executor, see
``toolsched._executor.nested``) reach the parent run's listeners too, with
``parent_call_id`` naming the parent call: ``"p1"`` for a child of call
``p1``, ``"p1/a2"`` for a grandchild run under the child call ``a2``.
Events of the run itself have ``parent_call_id=None``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolsched._values.fastpath import positional_builder
from toolsched._values.results import ToolResult

if TYPE_CHECKING:
    from toolsched._values.outcome import Outcome

__all__ = [
    "BatchFinished",
    "BatchStarted",
    "CoordinationUnavailable",
    "Event",
    "RunFinished",
    "ToolArgumentsRepaired",
    "ToolFinished",
    "ToolProgress",
    "ToolRetrying",
    "ToolStarted",
    "ToolUpdated",
    "ToolsChanged",
    "ToolsRefreshFailed",
]


@dataclass(frozen=True, slots=True)
class ToolStarted:
    """A call entered execution (or was answered without running: then ``ran`` is False)."""

    call_id: str
    tool_name: str
    batch: int | None
    ran: bool = True
    parent_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolArgumentsRepaired:
    """A call's arguments were repaired (``Executor(repair_arguments=...)``); emitted before the call is admitted.

    ``fixes`` names what was changed, in the order applied: the built-in repair's fixes (``"code_fence"``,
    ``"trailing_comma"``, ``"number_as_string"``, ...), and ``"repair_function"`` when the executor's repair
    callable gave the arguments.
    """

    call_id: str
    tool_name: str
    fixes: tuple[str, ...]
    parent_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolProgress:
    """A tool reported progress through ``ctx.report_progress``."""

    call_id: str
    tool_name: str
    fraction: float
    message: str | None = None
    parent_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolUpdated:
    """A tool streamed partial output through ``ctx.update`` (``tool_update`` hooks may suppress it)."""

    call_id: str
    tool_name: str
    partial: Any
    parent_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolRetrying:
    """A call failed transiently and runs again after ``delay`` seconds (its ``Retry`` policy).

    ``attempt`` is the attempt that failed (1 for the first run); ``error`` says how.
    """

    call_id: str
    tool_name: str
    attempt: int
    delay: float
    error: str
    parent_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolFinished:
    """A call has its final result."""

    result: ToolResult
    parent_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class BatchStarted:
    """A batch of calls is about to run."""

    batch: int
    call_ids: tuple[str, ...]
    concurrent: bool
    parent_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class BatchFinished:
    """Every call of a batch has its result."""

    batch: int
    call_ids: tuple[str, ...]
    parent_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolsChanged:
    """The registry's ``refresh_tools`` gave a new tool set after a run: the next turn sees it."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    parent_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolsRefreshFailed:
    """Refreshing the tool set after a run failed; the previous set stays. ``error`` says why."""

    error: str
    parent_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class CoordinationUnavailable:
    """Redis, which holds the fleet-wide limits, cannot be reached (reported once per outage).

    ``fallback`` is the executor's ``on_unavailable``: ``"local"`` (per-process limits meanwhile)
    or ``"refuse"`` (calls answered ``unavailable``).
    """

    error: str
    fallback: str
    parent_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class RunFinished:
    """The last event of ``Executor.stream``: the run's outcome."""

    outcome: Outcome


Event = (
    ToolStarted
    | ToolArgumentsRepaired
    | ToolProgress
    | ToolUpdated
    | ToolRetrying
    | ToolFinished
    | BatchStarted
    | BatchFinished
    | ToolsChanged
    | ToolsRefreshFailed
    | CoordinationUnavailable
    | RunFinished
)
"""Any of the events above: what an ``on_event=`` callback receives and ``Executor.stream`` yields."""


def under_parent(event: Event, parent_call_id: str) -> Event:
    """``event`` as seen from the run that holds call ``parent_call_id``: its parent path gains that call."""
    if isinstance(event, RunFinished):
        return event
    inner = event.parent_call_id
    return dataclasses.replace(event, parent_call_id=parent_call_id if inner is None else f"{parent_call_id}/{inner}")


# Per-call events on the hot path, every field given:
# ``new_tool_started(call_id, tool_name, batch, ran, parent_call_id)``, ``new_tool_finished(result, parent_call_id)``.
new_tool_started: Callable[[str, str, int | None, bool, str | None], ToolStarted] = positional_builder(ToolStarted)
new_tool_finished: Callable[[ToolResult, str | None], ToolFinished] = positional_builder(ToolFinished)
