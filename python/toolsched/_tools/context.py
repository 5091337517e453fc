"""What a running tool can see and do: ``ToolContext``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

import anyio.from_thread

from toolsched._values.effects import idempotency_key, new_identity
from toolsched._values.event_loops import hand_to_loop, loop_handle, run_on_loop
from toolsched._values.events import Event, ToolProgress, ToolUpdated
from toolsched._values.numeric_options import numeric_fault, shown
from toolsched.errors import OptionError, ResourceError

__all__ = ["RunIdentity", "ToolContext"]


class RunIdentity(Protocol):
    """What gives a call's run its identity (internal: the run's turn)."""

    def run_identity(self) -> str: ...


class ToolContext:
    """Handed to a tool that takes a ``ctx`` parameter.

    ``context`` is the object the caller passed to ``Executor.run``;
    ``idempotency_key`` the call's key for downstream APIs.
    """

    __slots__ = (
        "_cancel_call",
        "_cancelled",
        "_emit",
        "_key",
        "_loop_thread",
        "_resource",
        "_run",
        "call_id",
        "context",
        "interactive",
        "tool_name",
    )

    # Set only for tools with a per-run resource, just before the call (see ``resource``).
    _resource: Any

    def __init__(
        self,
        call_id: str,
        tool_name: str,
        context: Any,
        interactive: bool,
        emit: Callable[[Event], None] | None,
        cancel_call: Callable[[str], object] | None = None,
        run: RunIdentity | None = None,
    ) -> None:
        self.call_id = call_id
        self.tool_name = tool_name
        self.context = context
        self.interactive = interactive
        self._emit = emit
        self._cancelled = False
        self._cancel_call = cancel_call
        self._loop_thread = threading.get_ident()
        self._run = run
        self._key: str | None = None

    @property
    def idempotency_key(self) -> str:
        """This call's idempotency key, for a downstream API that drops repeated requests (an
        ``Idempotency-Key`` header, say).

        The same for every attempt of this call: its retries, and its runs after ``resume``, after ``recover``
        and in another process. Different for every other call, the same call ID in another run included.
        """
        key = self._key
        if key is None:
            run = self._run
            identity = run.run_identity() if run is not None else new_identity()
            key = self._key = idempotency_key(identity, self.call_id)
        return key

    def report_progress(self, fraction: float, message: str | None = None) -> None:
        """Reports how far along the call is, as a fraction from 0 to 1 (an ``int`` or a ``float``, sent as a
        float), with an optional message (a string). Anything else raises ``OptionError``."""
        if numeric_fault(fraction, integer=False, above=False, most=1) is not None:
            raise OptionError(f"ctx.report_progress(fraction=...) must be a number from 0 to 1, got {shown(fraction)}")
        _check_text("ctx.report_progress(message=...)", message)
        if self._emit is not None:
            self._send(ToolProgress(self.call_id, self.tool_name, float(fraction), message))

    def update(self, partial_output: Any) -> None:
        """Streams partial output; the final result is still what the tool returns."""
        if self._emit is not None:
            self._send(ToolUpdated(self.call_id, self.tool_name, partial_output))

    def _send(self, event: Event) -> None:
        if threading.get_ident() != self._loop_thread:
            # Nobody is listening any more when the run's event loop is gone.
            self._on_loop(self._send, event)
            return
        # Checked again on the event loop: nothing is reported after the call's result.
        if self._emit is not None:
            self._emit(event)

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
        """Whether this call has been asked to stop, or was stopped (a timeout, an interrupt).

        Sync tools cannot be interrupted inside their thread: check this in long loops.
        """
        return self._cancelled

    def cancel(self, reason: str | None = None) -> None:
        """Cancels this call: it ends with a ``cancelled`` result carrying ``reason``.

        Whatever the tool returns or raises afterwards is discarded, so return
        promptly. A call that runs in a cancel scope (a tool with a ``timeout``,
        ``interrupt_behavior="cancel"`` or ``isolation="process"``) is also
        stopped at its next ``await``, or, in a worker thread, answered at once
        while the thread is left to return. Callable from the tool, its thread,
        or any code the tool hands the context to. A ``reason`` that is not a
        string (or None) raises ``OptionError``.
        """
        _check_text("ctx.cancel(reason=...)", reason)
        message = f"`{self.tool_name}` was cancelled" + (f": {reason}" if reason else "")
        self._cancelled = True
        if self._cancel_call is None:
            return
        if threading.get_ident() == self._loop_thread:
            self._cancel_call(message)
            return
        # The call is over already when the run's event loop is gone.
        self._on_loop(self._cancel_on_loop, message)

    def _cancel_on_loop(self, message: str) -> None:
        cancel_call = self._cancel_call
        if cancel_call is not None:
            cancel_call(message)

    def _on_loop(self, fn: Callable[[Any], object], arg: Any) -> None:
        """``fn(arg)`` on the run's event loop, from another thread (one of anyio's workers, a thread the tool
        started, another loop's), waiting until it has run; nothing when that loop has ended. From a thread that
        runs an event loop of its own it is handed over without waiting: waiting would stop that loop, and two
        loops each waiting for the other would wait for good. So it is to an asyncio loop that is stopped, not
        closed (``run_on_loop``): it runs when that loop runs again."""
        loop = getattr(self._run, "loop", None)
        if loop is not None:
            if loop_handle() is not None:
                hand_to_loop(loop, fn, arg)
            else:
                run_on_loop(loop, fn, arg)
            return
        try:
            anyio.from_thread.run_sync(fn, arg)
        except RuntimeError:
            return

    @property
    def event_sink(self) -> Callable[[Event], None] | None:
        """Where this call's events go (internal to toolsched: a nested run sends its events there too)."""
        return self._emit

    def attach_resource(self, value: Any) -> None:
        """Sets this call's per-run resource (internal to toolsched: the run's resources do it)."""
        self._resource = value

    def request_cancel(self) -> None:
        """Marks the call as asked to stop (``cancelled`` turns true); the executor decides what else happens."""
        self._cancelled = True

    def finish(self, stopped: bool) -> None:
        """The call has its result (internal to toolsched): later progress is dropped; a stopped call reads as
        cancelled."""
        self._emit = None
        self._cancel_call = None
        if stopped:
            self._cancelled = True


def _check_text(argument: str, value: object) -> None:
    """Refuses ``value`` unless it is a string or None (``argument`` names it in the error)."""
    if value is not None and not isinstance(value, str):
        raise OptionError(f"{argument} must be a string or None, got {shown(value)}")
