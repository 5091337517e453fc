"""Events emitted while a run proceeds (``on_event=`` and ``Executor.stream``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolsched.results import ToolResult

if TYPE_CHECKING:
    from toolsched.outcome import Outcome

__all__ = [
    "BatchFinished",
    "BatchStarted",
    "Event",
    "RunFinished",
    "ToolFinished",
    "ToolProgress",
    "ToolStarted",
    "ToolUpdated",
]


@dataclass(frozen=True, slots=True)
class ToolStarted:
    """A call entered execution (or was answered without running: then ``ran`` is False)."""

    call_id: str
    tool_name: str
    batch: int | None
    ran: bool = True


@dataclass(frozen=True, slots=True)
class ToolProgress:
    """A tool reported progress through ``ctx.report_progress``."""

    call_id: str
    tool_name: str
    fraction: float
    message: str | None = None


@dataclass(frozen=True, slots=True)
class ToolUpdated:
    """A tool streamed partial output through ``ctx.update``."""

    call_id: str
    tool_name: str
    partial: Any


@dataclass(frozen=True, slots=True)
class ToolFinished:
    """A call has its final result."""

    result: ToolResult


@dataclass(frozen=True, slots=True)
class BatchStarted:
    """A batch of calls is about to run."""

    batch: int
    call_ids: tuple[str, ...]
    concurrent: bool


@dataclass(frozen=True, slots=True)
class BatchFinished:
    """Every call of a batch has its result."""

    batch: int
    call_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RunFinished:
    """The last event of ``Executor.stream``: the run's outcome."""

    outcome: Outcome


Event = ToolStarted | ToolProgress | ToolUpdated | ToolFinished | BatchStarted | BatchFinished | RunFinished
