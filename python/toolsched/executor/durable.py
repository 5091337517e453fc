"""What a durable run writes to its journal as it goes (internal to the executor).

A ``RunJournal`` is one run's handle on a ``Journal``: every write is
shielded from cancellation (a call that finished is journaled even while the
run is being cancelled) and completes before the run takes its next step. The
first failed write is kept in ``failure``: the run then ends by raising it,
and nothing that was not journaled is reported as done.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import anyio

from toolsched.journal import Journal, JournalError, RunClaimedError, Transition, UnstorableOutputError
from toolsched.results import Behavior, ToolCall, ToolResult, args_digest, detached
from toolsched.runstate import CallRecord

__all__ = ["JournalFailed", "RunJournal", "storable"]

logger = logging.getLogger("toolsched")


class JournalFailed(Exception):
    """A journal write failed mid-run (internal): carried past the tool-failure handlers to the run."""

    def __init__(self, error: JournalError) -> None:
        super().__init__(str(error))
        self.error = error


# The runs each journal object holds for a run in progress in this process: a recover or a
# resume of one of them here is refused (the journal itself lets its own owner claim again).
_live: weakref.WeakKeyDictionary[Journal, set[str]] = weakref.WeakKeyDictionary()


def _live_runs(journal: Journal) -> set[str]:
    runs = _live.get(journal)
    if runs is None:
        runs = _live[journal] = set()
    return runs


class RunJournal:
    """One run's writes to a journal (internal)."""

    __slots__ = ("failure", "held", "journal", "run_id")

    def __init__(self, journal: Journal, run_id: str) -> None:
        self.journal = journal
        self.run_id = run_id
        self.failure: JournalError | None = None
        # Whether this process holds the run (begun or claimed here), so it must release it.
        self.held = False

    async def begin(self, calls: Sequence[ToolCall]) -> None:
        self._hold()
        try:
            with anyio.CancelScope(shield=True):
                await self.journal.begin_run(self.run_id, calls)
        except BaseException:
            _live_runs(self.journal).discard(self.run_id)
            raise
        self.held = True

    async def add(self, position: int, call: ToolCall) -> None:
        """Journals a call of a streamed turn as it arrives (*planned*), before anything else of it."""
        if self.failure is not None:
            raise JournalFailed(self.failure)
        try:
            with anyio.CancelScope(shield=True):
                await self.journal.add_calls(self.run_id, position, [call])
        except JournalError as exc:
            if self.failure is None:
                self.failure = exc
            raise JournalFailed(exc) from exc

    async def claim(self, force: bool) -> Any:
        self._hold()
        try:
            with anyio.CancelScope(shield=True):
                record = await self.journal.claim(self.run_id, force=force)
        except BaseException:
            _live_runs(self.journal).discard(self.run_id)
            raise
        self.held = True
        return record

    def _hold(self) -> None:
        """Marks the run as in progress here; refused while another run of this process holds it."""
        runs = _live_runs(self.journal)
        if self.run_id in runs:
            raise RunClaimedError(self.run_id, f"{self.journal.owner} (a run in progress in this process)", None)
        runs.add(self.run_id)

    async def keep_alive(self) -> None:
        """Renews the run's lease while the run lives, so that no other process takes it from a long call."""
        interval = max(self.journal.lease.total_seconds() / 3, 0.01)
        while True:
            await anyio.sleep(interval)
            if not self.held:
                continue
            try:
                with anyio.CancelScope(shield=True):
                    await self.journal.renew(self.run_id)
            except JournalError:
                logger.warning("renewing the lease of run %s failed", self.run_id, exc_info=True)

    async def write(self, call_id: str, transition: Transition, payload: Any = None) -> None:
        if self.failure is not None:
            raise JournalFailed(self.failure)
        try:
            with anyio.CancelScope(shield=True):
                await self.journal.record(self.run_id, call_id, transition, payload)
        except UnstorableOutputError:
            # Refused before anything was written: the journal itself is fine.
            raise
        except JournalError as exc:
            if self.failure is None:
                self.failure = exc
            raise JournalFailed(exc) from exc

    async def finished(self, result: ToolResult) -> ToolResult:
        """Journals a call's result; returns the result journaled.

        An output with no JSON form cannot be journaled: the call then ends as an
        ``execution_error`` saying so, journaled in its place (the tool did run).
        """
        try:
            await self.write(result.call_id, "finished", result)
        except UnstorableOutputError as exc:
            result = replace(
                result,
                output=None,
                error=str(exc),
                error_kind="execution_error",
                is_error=True,
                truncated=False,
                offload_path=None,
            )
            await self.write(result.call_id, "finished", result)
        return result

    async def started(self, call_id: str, args: Any) -> None:
        await self.write(call_id, "started", {"args": storable(args)})

    async def resumed(self, records: Sequence[CallRecord]) -> None:
        """Claims a journaled run being resumed and journals the decisions a person made since."""
        await self.claim(False)
        for record in records:
            if record.status == "approved":
                await self.write(record.call_id, "approved", {"args": record.request_args, "digest": record.digest})
            elif record.status == "rejected":
                await self.write(record.call_id, "rejected", {"message": record.message})

    async def decided(
        self, call_id: str, behavior: Behavior, args: Any, reason: str | None, fingerprint: str, message: str | None
    ) -> None:
        """Journals how a call that asked was settled: held for a person (ask), approved or rejected."""
        if behavior == "ask":
            payload = {
                "args": detached(args),
                "reason": reason,
                "digest": args_digest(args),
                "fingerprint": fingerprint,
            }
            await self.write(call_id, "pending", payload)
        elif behavior == "allow":
            await self.write(call_id, "approved", {"args": detached(args), "digest": args_digest(args)})
        else:
            await self.write(call_id, "rejected", {"message": message})

    async def release(self) -> None:
        """Lets go of the run; a failure here is logged, never raised (the run's outcome stands)."""
        if not self.held:
            return
        self.held = False
        _live_runs(self.journal).discard(self.run_id)
        try:
            with anyio.CancelScope(shield=True):
                await self.journal.release(self.run_id)
        except Exception:
            logger.warning("releasing run %s in the journal failed", self.run_id, exc_info=True)


def storable(args: Any) -> Any:
    """The arguments a call runs with, as the journal stores them (a mapping becomes a dict)."""
    if isinstance(args, Mapping):
        return dict(args)
    if hasattr(args, "model_dump"):
        return args.model_dump(mode="json")
    return args
