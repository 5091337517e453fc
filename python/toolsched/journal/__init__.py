"""Durable runs: journals that record every call's transitions, so a run survives a crash.

``SqliteJournal`` keeps the journal in one local file; ``PostgresJournal`` in
a PostgreSQL database shared by a fleet. Both implement ``Journal``.
"""

from toolsched.journal.base import (
    SCHEMA_VERSION,
    TRANSITIONS,
    Journal,
    JournalCorruptError,
    JournaledCall,
    JournalError,
    JournalVersionError,
    LeaseLostError,
    RunClaimedError,
    RunExistsError,
    RunRecord,
    Transition,
    UnknownRunError,
    UnstorableOutputError,
)
from toolsched.journal.postgres import PostgresJournal
from toolsched.journal.sqlite import SqliteJournal
from toolsched.results import args_digest

__all__ = [
    "SCHEMA_VERSION",
    "TRANSITIONS",
    "Journal",
    "JournalCorruptError",
    "JournalError",
    "JournalVersionError",
    "JournaledCall",
    "LeaseLostError",
    "PostgresJournal",
    "RunClaimedError",
    "RunExistsError",
    "RunRecord",
    "SqliteJournal",
    "Transition",
    "UnknownRunError",
    "UnstorableOutputError",
    "args_digest",
]
