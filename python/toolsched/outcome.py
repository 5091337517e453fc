"""The outcome of a run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolsched.results import Duplicate, ToolResult

__all__ = ["Outcome"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What ``Executor.run`` returns.

    ``results`` holds one result per unique call ID, in the model's order;
    ``duplicates`` the calls dropped for repeating an ID; ``steering_messages``
    what the steering callback returned when it stopped the run.
    """

    results: list[ToolResult]
    duplicates: list[Duplicate] = field(default_factory=list)
    steering_messages: list[Any] = field(default_factory=list)
    interrupted: bool = False
    pending: list[Any] = field(default_factory=list)
    state: Any = None
    run_id: str | None = None
