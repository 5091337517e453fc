"""What a saved run holds, call by call: the records a ``RunState`` is made of (and a nested run's record)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from toolsched._values.calls import Duplicate
from toolsched._values.digest import args_digest
from toolsched._values.results import ToolResult

if TYPE_CHECKING:
    from toolsched._policy.runstate import RunState

__all__ = [
    "STATUSES",
    "CallRecord",
    "CallSignature",
    "ChildRecord",
    "DecisionTarget",
    "Status",
    "StepEntry",
    "TurnEntry",
    "call_signature",
]

Status = Literal["done", "pending", "approved", "rejected", "nested", "external", "completed"]
STATUSES = ("done", "pending", "approved", "rejected", "nested", "external", "completed")


CallSignature = tuple[tuple[str, str, str], ...]


def call_signature(calls: Any) -> CallSignature:
    """What identifies a turn's calls on replay: each call's ID, tool name and argument digest."""
    return tuple((call.id, call.name, args_digest(call.args)) for call in calls)


@dataclass(frozen=True, slots=True)
class TurnEntry:
    """A child turn that completed before its run was interrupted: replayed on resume, never run again."""

    calls: CallSignature
    results: tuple[ToolResult, ...]
    duplicates: tuple[Duplicate, ...] = ()
    steering_messages: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class StepEntry:
    """The value of a step (``ChildRun.step``) taken before the nested run was interrupted."""

    value: Any


@dataclass(frozen=True, slots=True)
class ChildRecord:
    """The nested run of a call that waits (internal): what happened in it, and where it stopped.

    ``journal`` holds the steps and completed child turns in order;
    ``waiting`` identifies the child turn that was interrupted, and ``state``
    is that turn's own run state.
    """

    state: RunState
    journal: tuple[TurnEntry | StepEntry, ...]
    waiting: CallSignature

    def copy(self) -> ChildRecord:
        return replace(self, state=self.state.copy(), journal=copy.deepcopy(self.journal))


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One call of a saved run (internal). ``args`` is the input as the model sent it.

    A ``done`` record holds its result; the others hold the request a person
    sees (``request_args``, ``reason``, ``digest``) and, once decided, the
    decision. A ``nested`` record is a call that was admitted and ran, and
    whose nested run (``child``) waits for decisions. An ``external`` record is
    a call of an external tool handed out with ``request_args`` at ``handed_out``
    (seconds since the epoch), waiting for its answer until ``deadline`` (None:
    no limit); once answered (``RunState.complete`` / ``fail``) it is
    ``completed`` and holds the answer as ``result`` until the run resumes.
    An ``approved`` record approved with a person's own arguments holds them as
    ``edited_args`` (their digest ``edited_digest``, which the approval is bound
    to instead of ``digest``); ``always`` is the scope of a standing approval
    given with it (``"call"``, ``"tool"`` or a rule), journaled with the approval.
    """

    call_id: str
    name: str
    args: Any
    status: Status
    result: ToolResult | None = None
    tool: str | None = None
    fingerprint: str | None = None
    request_args: Any = None
    reason: str | None = None
    digest: str | None = None
    message: str | None = None
    child: ChildRecord | None = None
    handed_out: float | None = None
    deadline: float | None = None
    edited_args: Any = None
    edited_digest: str | None = None
    always: str | None = None
    # An external call handed out with the arguments a person approved it with (its answer is ``edited``).
    edited: bool = False

    @property
    def bound_digest(self) -> str | None:
        """The digest of the arguments a decision is bound to: the person's, when they edited them."""
        return self.edited_digest if self.edited_digest is not None else self.digest


@dataclass(frozen=True, slots=True)
class DecisionTarget:
    """A call that a decision by ID could reach (internal): the run state holding it and its ID there."""

    state: RunState
    call_id: str
    tool_name: str
    # The prefixed ID of the call whose nested run holds it; None for a call of the top-level run.
    parent_call_id: str | None
