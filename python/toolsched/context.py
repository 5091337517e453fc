"""What a running tool can see and do: ``ToolContext``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toolsched.errors import ResourceError
from toolsched.events import Event, ToolProgress, ToolUpdated

__all__ = ["ToolContext"]


class ToolContext:
    """Handed to a tool that takes a ``ctx`` parameter.

    ``context`` is the object the caller passed to ``Executor.run``.
    """

    __slots__ = ("_cancelled", "_emit", "_resource", "call_id", "context", "interactive", "tool_name")

    # Set only for tools with a per-run resource, just before the call (see ``resource``).
    _resource: Any

    def __init__(
        self,
        call_id: str,
        tool_name: str,
        context: Any,
        interactive: bool,
        emit: Callable[[Event], None] | None,
    ) -> None:
        self.call_id = call_id
        self.tool_name = tool_name
        self.context = context
        self.interactive = interactive
        self._emit = emit
        self._cancelled = False

    def report_progress(self, fraction: float, message: str | None = None) -> None:
        """Reports how far along the call is, as a fraction from 0 to 1."""
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"progress fraction must be between 0 and 1, got {fraction}")
        if self._emit is not None:
            self._emit(ToolProgress(self.call_id, self.tool_name, fraction, message))

    def update(self, partial_output: Any) -> None:
        """Streams partial output; the final result is still what the tool returns."""
        if self._emit is not None:
            self._emit(ToolUpdated(self.call_id, self.tool_name, partial_output))

    @property
    def resource(self) -> Any:
        """This tool's per-run resource: what its ``open`` (or ``run_resource`` factory) gave for this run.

        The run opens it on the tool's first call and closes it when the run
        ends; every call of the tool in the run sees the same one.
        """
        try:
            return self._resource
        except AttributeError:
            raise ResourceError(
                f"`{self.tool_name}` has no per-run resource: define open()/close() or run_resource on the tool"
            ) from None

    @property
    def cancelled(self) -> bool:
        """Whether this call has been asked to stop (check it in long loops)."""
        return self._cancelled

    def _cancel(self) -> None:
        self._cancelled = True
