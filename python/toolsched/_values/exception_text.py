"""An exception as text for a message: ``Type: its words``, or its type alone when it has none or they cannot be
read (an exception's ``__str__`` is user code: one that raises must not replace the failure being reported)."""

from __future__ import annotations

__all__ = ["described", "words_of"]


def words_of(exc: BaseException) -> str:
    """``str(exc)``, or ``""`` when that raises."""
    try:
        return str(exc)
    except Exception:
        return ""


def described(exc: BaseException) -> str:
    """``Type: words`` of ``exc``, or ``Type`` when it has no readable words."""
    words = words_of(exc)
    return f"{type(exc).__name__}: {words}" if words else type(exc).__name__
