"""Durable runs: journals that record every call's transitions, so a run survives a crash.

``SqliteJournal`` keeps the journal in one local file; ``PostgresJournal`` in
a PostgreSQL database shared by a fleet. Both implement ``Journal``.
"""

from toolsched._values.digest import args_digest
from toolsched.errors import (
    JournalCorruptError,
    JournalError,
    JournalVersionError,
    LeaseLostError,
    RunClaimedError,
    RunExistsError,
    UnknownRunError,
    UnstorableOutputError,
)
from toolsched.journal._records import TRANSITIONS, JournaledCall, RunRecord, Transition
from toolsched.journal.base import SCHEMA_VERSION, Journal
from toolsched.journal.postgres import PostgresJournal
from toolsched.journal.sqlite import SqliteJournal

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
