"""Whether a call may run, and the input it runs with: ``Decision`` and ``Rewrite``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Behavior", "Decision", "Rewrite"]


Behavior = Literal["allow", "ask", "deny"]


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether a call may run: ``Decision.allow()``, ``Decision.deny(reason)`` or ``Decision.ask(reason)``.

    Returned by a tool's ``check_permissions``, by ``pre_tool_use`` hooks and by
    approvers. ``reason`` is what the model (deny) or the person (ask) reads.
    """

    behavior: Behavior
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.behavior not in ("allow", "ask", "deny"):
            raise ValueError(f"Decision.behavior must be 'allow', 'ask' or 'deny', got {self.behavior!r}")
        if self.reason is not None and not isinstance(self.reason, str):
            raise TypeError(f"Decision.reason must be a string or None, got {type(self.reason).__name__}")

    @classmethod
    def allow(cls, reason: str | None = None) -> Decision:
        """The call may run."""
        return cls("allow", reason)

    @classmethod
    def deny(cls, reason: str) -> Decision:
        """The call must not run; ``reason`` tells the model why."""
        if not isinstance(reason, str) or not reason:
            raise TypeError("Decision.deny(reason) needs a non-empty reason: the model reads it")
        return cls("deny", reason)

    @classmethod
    def ask(cls, reason: str | None = None) -> Decision:
        """A person must approve the call before it runs."""
        return cls("ask", reason)


@dataclass(frozen=True, slots=True)
class Rewrite:
    """Returned by a ``pre_tool_use`` hook: continue with ``args`` as the call's input.

    The final input is validated against the tool's schema again.
    """

    args: Mapping[str, Any] | str

    def __post_init__(self) -> None:
        if not isinstance(self.args, Mapping | str):
            raise TypeError(f"Rewrite(args) takes a mapping or JSON text, got {type(self.args).__name__}")
