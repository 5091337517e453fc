"""Effects in the world: idempotency keys, what ``reconcile`` finds (``Done``, ``NotDone``), and ``ExternalCall``.

A call's idempotency key is derived from its run's identity and its call ID:
the same for every attempt of the call (a retry, ``resume``, ``recover``,
another process), different for every other call. A journaled run's identity
is its run ID; any other run gets a random one when it starts, carried by its
``RunState``.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Done", "ExternalCall", "NotDone", "Reconciled", "child_identity", "idempotency_key", "new_identity"]


@dataclass(frozen=True, slots=True)
class Done:
    """What ``reconcile`` returns for a call whose effect happened: ``output`` answers the call; it never runs."""

    output: Any = None


@dataclass(frozen=True, slots=True)
class NotDone:
    """What ``reconcile`` returns for a call whose effect did not happen: the call runs now."""


#: What a tool's ``reconcile`` returns: ``Done(output)``, ``NotDone()``, or None when it cannot tell.
Reconciled = Done | NotDone | None


@dataclass(frozen=True, slots=True)
class ExternalCall:
    """A call of an external tool, handed out to be answered from outside (``Outcome.pending``).

    Answer it with ``state.complete(call_id, output=...)`` or ``state.fail(call_id, error=...)`` and
    ``executor.resume(state)``, or, for a journaled run, ``await executor.complete(run_id, call_id, output=...)``
    from any process. ``idempotency_key`` is the call's key (``ToolContext.idempotency_key``). For a call of a
    nested run, ``call_id`` is prefixed with the parent call's (``"p1/c2"``) and ``parent_call_id`` names it.
    """

    call_id: str
    tool_name: str
    args: Mapping[str, Any]
    idempotency_key: str
    parent_call_id: str | None = None


def new_identity() -> str:
    """A fresh run identity: random, for a run that has no run ID of a journal."""
    return uuid.uuid4().hex


def _digest(*parts: str) -> bytes:
    hasher = hashlib.sha256()
    for part in parts:
        encoded = part.encode("utf-8", "surrogatepass")
        # Each part length-prefixed: ("ab", "c") and ("a", "bc") never hash alike.
        hasher.update(len(encoded).to_bytes(8, "big"))
        hasher.update(encoded)
    return hasher.digest()


def idempotency_key(identity: str, call_id: str) -> str:
    """The idempotency key of call ``call_id`` of the run ``identity``: a UUID-shaped string (RFC 9562 version 8)
    derived by SHA-256, so that any downstream that takes UUIDs takes it."""
    raw = bytearray(_digest("toolsched.idempotency_key", identity, call_id)[:16])
    raw[6] = (raw[6] & 0x0F) | 0x80  # version 8: custom
    raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 9562 variant
    return str(uuid.UUID(bytes=bytes(raw)))


def child_identity(parent_key: str, ordinal: int) -> str:
    """The identity of the ``ordinal``-th child turn of a nested run, from its parent call's idempotency key: the
    same on every attempt of the parent call, different for every other parent call and child turn."""
    return _digest("toolsched.child_run", parent_key, str(ordinal)).hex()
