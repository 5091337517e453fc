"""Nested holds: a call whose nested run waits for decisions, and the waiting nested runs a resume hands back."""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar

from toolsched._policy.runstate import CallRecord, ChildRecord

__all__ = ["NestedHold", "resuming"]


class NestedHold(Exception):
    """Raised out of a call whose nested run waits for approvals (internal): the call has no result yet."""

    def __init__(self, record: ChildRecord) -> None:
        super().__init__("the nested run waits for decisions")
        self.record = record


# The calls of the run being resumed whose nested runs wait, by call ID (set by Executor.resume).
resuming: ContextVar[Mapping[str, CallRecord] | None] = ContextVar("toolsched_resuming", default=None)
