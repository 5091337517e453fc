"""What a journal holds for one run, as recovery reads it back: transitions, ``JournaledCall``, ``RunRecord``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from toolsched._values.calls import ToolCall
from toolsched._values.results import ToolResult

__all__ = ["ALLOWED_FROM", "TRANSITIONS", "JournaledCall", "RunRecord", "Transition"]

Transition = Literal["planned", "pending", "approved", "rejected", "started", "finished"]
"""One step of a call's life in the journal; ``JournaledCall.state`` is the latest."""
TRANSITIONS: tuple[Transition, ...] = ("planned", "pending", "approved", "rejected", "started", "finished")
"""Every ``Transition``, in the order a call can take them."""

# The states a call may be in for each transition to be written. A finished
# call is final; a started call can only start again (an idempotent call re-run
# by recovery, another attempt of a retry policy), finish, or wait for a person
# when its nested run does; a call waiting for a person cannot start (its
# decision, ``approved``, comes first, and only once per wait).
ALLOWED_FROM: dict[str, frozenset[str]] = {
    "pending": frozenset({"planned", "pending", "approved", "started"}),
    "approved": frozenset({"planned", "pending"}),
    "rejected": frozenset({"planned", "pending"}),
    "started": frozenset({"planned", "approved", "started"}),
    "finished": frozenset({"planned", "pending", "approved", "rejected", "started"}),
}


# -- records --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JournaledCall:
    """What the journal knows of one call (one per unique call ID).

    ``state`` is the latest transition; ``starts`` how many times the call
    started (more than once only when recovery re-ran an idempotent call);
    ``decision`` the payload of the latest ``pending``/``approved``/``rejected``
    transition; ``run_with`` the payload of the latest ``started`` transition
    (what the call was started with); ``result`` the finished result. ``output_exact`` is False when
    the output was not a value JSON holds exactly and ``result.output`` is the
    form it was stored in (see ``encode_output``).
    """

    call_id: str
    tool_name: str
    position: int
    digest: str
    state: Transition
    starts: int = 0
    decision: Mapping[str, Any] | None = None
    result: ToolResult | None = None
    output_exact: bool = True
    run_with: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run as the journal holds it.

    ``turn`` is every call as it was given to ``begin_run`` (repeated IDs
    included), in model order, so the turn can be planned again; ``calls`` has
    one entry per unique call ID, in order of first appearance.
    """

    run_id: str
    turn: tuple[ToolCall, ...]
    calls: tuple[JournaledCall, ...]
    owner: str | None
    lease_until: datetime | None
    created_at: datetime
    updated_at: datetime

    def call(self, call_id: str) -> JournaledCall:
        """The entry of one call; ``KeyError`` when the run has no such call."""
        for entry in self.calls:
            if entry.call_id == call_id:
                return entry
        raise KeyError(call_id)

    @property
    def results(self) -> list[ToolResult]:
        """The results of the finished calls, in model order."""
        return [entry.result for entry in self.calls if entry.result is not None]

    @property
    def complete(self) -> bool:
        """Whether every call finished."""
        return all(entry.state == "finished" for entry in self.calls)
