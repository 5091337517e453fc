"""The outcome of a run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toolsched._policy.runstate import ApprovalRequest, RunState
from toolsched._values.calls import Duplicate
from toolsched._values.fastpath import positional_builder
from toolsched._values.results import ToolResult

__all__ = ["Outcome"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What ``Executor.run`` and ``Executor.resume`` return.

    ``results`` holds one result per unique call ID, in the model's order;
    ``duplicates`` the calls dropped for repeating an ID; ``steering_messages``
    what the steering callback returned when it stopped the run.

    When calls wait for a person's decision, ``interrupted`` is True,
    ``results`` holds only the calls answered so far and ``pending`` the
    ``ApprovalRequest``s; ``state`` is what ``Executor.resume`` continues from.
    """

    results: list[ToolResult]
    duplicates: list[Duplicate] = field(default_factory=list)
    steering_messages: list[Any] = field(default_factory=list)
    interrupted: bool = False
    pending: list[ApprovalRequest] = field(default_factory=list)
    _state: RunState | None = field(default=None, repr=False, compare=False)
    run_id: str | None = None

    @property
    def state(self) -> RunState | None:
        """The interrupted run's state: a new, independent copy each time it is read (None when not interrupted)."""
        return None if self._state is None else self._state.copy()


# ``new_outcome(results, duplicates, steering_messages, interrupted, pending, _state, run_id)``:
# one per run, every field given.
new_outcome: Callable[
    [list[ToolResult], list[Duplicate], list[Any], bool, list[ApprovalRequest], RunState | None, str | None], Outcome
] = positional_builder(Outcome)
