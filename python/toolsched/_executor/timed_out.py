"""What a tool raises to end its call as ``timeout`` when a deadline of its own passed first.

A tool that waits on something with its own bound (an MCP request's read timeout) raises a subclass
of ``CallTimedOut``: the call ends ``timeout`` with the exception's message, as it would past the
tool's ``timeout`` (``timeout_behavior``, retries and the circuit treat it the same), not
``execution_error``. Internal: the public exception a caller catches is the subclass's other base.
"""

from __future__ import annotations

__all__ = ["CallTimedOut"]


class CallTimedOut(TimeoutError):
    """The call's work did not finish within a deadline the tool keeps itself; the message says which."""
