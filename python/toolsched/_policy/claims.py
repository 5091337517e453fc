"""The process-wide registry of resumed interruptions: a run resumes once from each, whichever copy is used."""

from __future__ import annotations

import threading

from toolsched.errors import StateError

__all__ = ["RESUMED_REMEMBERED", "claim_interruption", "release_interruption"]

# How many resumed interruptions this process remembers to refuse a second resume of (oldest forgotten first).
RESUMED_REMEMBERED = 100_000
_RESUMED: dict[str, None] = {}
_RESUMED_LOCK = threading.Lock()


def claim_interruption(stage: str) -> None:
    """Records that the run resumes from interruption ``stage``; ``StateError`` if it already did here."""
    with _RESUMED_LOCK:
        if stage in _RESUMED:
            raise StateError(
                "this run was already resumed from another copy of this state (Outcome.state read twice, or "
                "RunState.from_json of the same text): continue from that resume's outcome"
            )
        _RESUMED[stage] = None
        while len(_RESUMED) > RESUMED_REMEMBERED:
            del _RESUMED[next(iter(_RESUMED))]


def release_interruption(stage: str) -> None:
    """Takes back ``claim_interruption``: the resume was refused before anything of it ran."""
    with _RESUMED_LOCK:
        _RESUMED.pop(stage, None)
