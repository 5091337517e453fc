"""What a durable run writes to its journal as it goes (internal to the executor).

A ``RunJournal`` is one run's handle on a ``Journal``: every write is
shielded from cancellation (a call that finished is journaled even while the
run is being cancelled) and completes before the run takes its next step. The
first failed write is kept in ``failure``: the run then ends by raising it,
and nothing that was not journaled is reported as done.

A run whose lease is lost (``LeaseLostError``: taken by another owner, or run
out before a renewal landed) fails the same way, at once: ``watch`` notices and
stops the run, and every write after that is refused without reaching the
journal, so no call of the run starts after the loss.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import anyio

from toolsched._policy.runstate import CallRecord, ChildRecord, child_to_json, interruption, load_child
from toolsched._policy.standing import Standing, parse_scope
from toolsched._values.calls import ToolCall, args_copy
from toolsched._values.decisions import Behavior
from toolsched._values.digest import args_digest
from toolsched._values.results import ToolResult
from toolsched.errors import OptionError, RuleError, StateError
from toolsched.journal import (
    Journal,
    JournalCorruptError,
    JournalError,
    LeaseLostError,
    RunClaimedError,
    RunRecord,
    Transition,
    UnstorableOutputError,
)
from toolsched.journal._leases import Lease
from toolsched.journal._rows import args_fault, check_run_id

__all__ = ["JournalFailed", "RunJournal", "journaled_child", "journaled_handout", "storable"]

logger = logging.getLogger("toolsched")


class JournalFailed(Exception):
    """A journal write failed mid-run (internal): carried past the tool-failure handlers to the run."""

    def __init__(self, error: JournalError) -> None:
        super().__init__(str(error))
        self.error = error


# The runs each journal object holds for a run in progress in this process: a recover or a
# resume of one of them here is refused (the journal itself lets its own owner claim again).
_live: weakref.WeakKeyDictionary[Journal, set[str]] = weakref.WeakKeyDictionary()


# Held while ``_live`` is read and changed: runs on executors in other threads (each with its event loop) may
# start at the same moment, and the check and the mark of ``RunJournal._hold`` must be one step.
_live_lock = threading.Lock()


def _after_fork() -> None:
    """A forked child runs none of its parent's runs (its journal objects take owners of their own: ``Journal``),
    and takes a lock of its own: another thread of the parent may have held this one as it forked."""
    global _live_lock
    _live_lock = threading.Lock()
    _live.clear()


os.register_at_fork(after_in_child=_after_fork)


def _live_runs(journal: Journal) -> set[str]:
    runs = _live.get(journal)
    if runs is None:
        runs = _live[journal] = set()
    return runs


def _let_go(journal: Journal, run_id: str) -> None:
    with _live_lock:
        _live_runs(journal).discard(run_id)


class RunJournal:
    """One run's writes to a journal (internal)."""

    __slots__ = ("failure", "held", "journal", "lease", "run_id")

    def __init__(self, journal: Journal, run_id: str) -> None:
        self.journal = journal
        # Checked before the run is looked for among this process's runs (an unhashable ID would fail there).
        self.run_id = check_run_id(run_id)
        self.failure: JournalError | None = None
        # Whether this process holds the run (begun or claimed here), so it must release it.
        self.held = False
        # This process's hold on the run while it holds it, kept by the journal's lease keeper.
        self.lease: Lease | None = None

    async def begin(self, calls: Sequence[ToolCall]) -> None:
        self._hold()
        try:
            with anyio.CancelScope(shield=True):
                try:
                    since = await self.journal._begin_run_at(self.run_id, calls)
                except JournalError:
                    # The calls are encoded before anything is written: arguments the journal cannot store
                    # failed there, and are stored as their fault instead; any other refusal stands.
                    stored = journaled_calls(calls)
                    if stored is None:
                        raise
                    since = await self.journal._begin_run_at(self.run_id, stored)
        except BaseException:
            _let_go(self.journal, self.run_id)
            raise
        self._taken(since)

    async def add(self, position: int, call: ToolCall) -> None:
        """Journals a call of a streamed turn as it arrives (*planned*), before anything else of it."""
        self._check_lease()
        if self.failure is not None:
            raise JournalFailed(self.failure)
        try:
            with anyio.CancelScope(shield=True):
                try:
                    await self.journal.add_calls(self.run_id, position, [call])
                except JournalError:
                    stored = journaled_calls([call])
                    if stored is None:
                        raise
                    await self.journal.add_calls(self.run_id, position, stored)
        except JournalError as exc:
            error = self._lost(exc)
            if self.failure is None:
                self.failure = error
            raise JournalFailed(error) from exc

    async def claim(self, force: bool) -> Any:
        self._hold()
        try:
            with anyio.CancelScope(shield=True):
                record, since = await self.journal._claim_at(self.run_id, force=force)
        except BaseException:
            _let_go(self.journal, self.run_id)
            raise
        self._taken(since)
        return record

    def _hold(self) -> None:
        """Marks the run as in progress here; refused while another run of this process holds it."""
        with _live_lock:
            runs = _live_runs(self.journal)
            if self.run_id in runs:
                raise RunClaimedError(self.run_id, f"{self.journal.owner} (a run in progress in this process)", None)
            runs.add(self.run_id)

    def _taken(self, since: float) -> None:
        """The run is this process's now (begun or claimed by a statement sent at ``since``): its lease is kept."""
        self.held = True
        self.lease = self.journal.leases.hold(self.run_id, since)

    def _check_lease(self) -> None:
        """Notices a lost lease before anything more is written (``failure`` is then the ``LeaseLostError``)."""
        lease = self.lease
        if lease is not None and self.failure is None and self.held and lease.lost(time.monotonic()):
            self.failure = LeaseLostError(
                self.run_id, lease.taken_by, expired=not lease.taken, lease=self.journal.lease
            )

    def _lost(self, error: JournalError) -> JournalError:
        """A write refused because another owner holds the run: for a run held here, its lease was lost."""
        if self.held and isinstance(error, RunClaimedError) and not isinstance(error, LeaseLostError):
            lost = LeaseLostError(self.run_id, error.owner, expired=False, lease=self.journal.lease)
            lost.__cause__ = error
            return lost
        return error

    async def watch(self, stop: Callable[[JournalError], object]) -> None:
        """Watches the run's lease while the run lives; the moment it is lost, ``failure`` becomes the
        ``LeaseLostError`` and ``stop`` is called with it, once (the run must stop: its calls in flight,
        and everything after them). Checked at the lease's ``stop_at`` and every quarter of the lease."""
        interval = max(self.journal.lease.total_seconds() / 4, 0.01)
        while True:
            self._check_lease()
            if isinstance(self.failure, LeaseLostError):
                stop(self.failure)
                return
            lease = self.lease
            wait = interval
            if lease is not None and self.held:
                wait = min(interval, max(lease.stop_at - time.monotonic(), 0.0))
            await anyio.sleep(wait)

    async def write(self, call_id: str, transition: Transition, payload: Any = None) -> None:
        self._check_lease()
        if self.failure is not None:
            raise JournalFailed(self.failure)
        try:
            with anyio.CancelScope(shield=True):
                await self.journal.record(self.run_id, call_id, transition, payload)
        except UnstorableOutputError:
            # Refused before anything was written: the journal itself is fine.
            raise
        except JournalError as exc:
            error = self._lost(exc)
            if self.failure is None:
                self.failure = error
            raise JournalFailed(error) from exc

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
        """Journals that a call starts; the call may start only once this returns. A lease lost while the write
        waited (its statement sent too long ago for the lease it set to be sure) raises instead."""
        stored = storable(args)
        await self.write(call_id, "started", {"args": stored, "digest": args_digest(stored)})
        self._check_lease()
        if self.failure is not None:
            raise JournalFailed(self.failure)

    async def handed_out(self, call_id: str, args: Any, at: float, deadline: float | None) -> None:
        """Journals that a call of an external tool is handed out (*started*, with when and its deadline); it is
        handed out only once this returns."""
        stored = storable(args)
        payload = {"args": stored, "digest": args_digest(stored), "external": {"handed_out": at, "deadline": deadline}}
        await self.write(call_id, "started", payload)
        self._check_lease()
        if self.failure is not None:
            raise JournalFailed(self.failure)

    async def resuming(self, records: Sequence[CallRecord]) -> RunRecord:
        """Claims a journaled run being resumed, writing nothing, and returns it as journaled: ``RunClaimedError``
        while another process holds it, and ``StateError`` for a state whose nested run no longer waits where
        the journal has it (resumed before, in this process or another)."""
        run: RunRecord = await self.claim(False)
        for record in records:
            if record.child is not None:
                self._check_waiting(run, record.call_id, record.child)
        return run

    async def resumed(self, records: Sequence[CallRecord]) -> None:
        """Journals the decisions a person made on a resumed run's state (after ``resuming``).

        A call whose nested run waits is journaled ``approved`` again, with the nested run's record as
        decided: it resumes once from each wait.
        """
        for record in records:
            if record.status == "approved":
                await self.write(record.call_id, "approved", approval_payload(record))
            elif record.status == "rejected":
                await self.write(record.call_id, "rejected", {"message": record.message})
            elif record.child is not None:
                assert record.fingerprint is not None
                payload = nested_payload(record.call_id, record.request_args, record.fingerprint, record.child)
                await self.write(record.call_id, "approved", payload)

    def _check_waiting(self, run: RunRecord, call_id: str, child: ChildRecord) -> None:
        """Refuses a nested run to resume unless the journal has its call waiting at this very interruption."""
        entries = [entry for entry in run.calls if entry.call_id == call_id]
        state = entries[0].state if entries else None
        if state == "pending":
            journaled = journaled_child(run.run_id, call_id, entries[0].decision)
            if journaled is not None and interruption(journaled.state) == interruption(child.state):
                return
        if state is None:
            found = "has no such call"
        elif state == "pending":
            found = "has it waiting at a later interruption"
        else:
            found = f"has it {state!r}"
        raise StateError(
            f"call {call_id!r} of run {self.run_id!r} no longer waits for the decisions of this state (the journal "
            f"{found}): the state was resumed before, in this process or another, so its nested run is not resumed "
            "again; recover the run to see where it stands"
        )

    async def nested_hold(self, call_id: str, args: Any, fingerprint: str, child: ChildRecord) -> None:
        """Journals a started call whose nested run waits for a person: *pending*, with the nested run's record.

        ``UnstorableOutputError`` when the record has no JSON form (a step's value, say); nothing is written.
        """
        await self.write(call_id, "pending", nested_payload(call_id, args, fingerprint, child))

    async def decided(
        self,
        call_id: str,
        behavior: Behavior,
        args: Any,
        reason: str | None,
        fingerprint: str,
        message: str | None,
        source: tuple[Any, bool] | None = None,
    ) -> None:
        """Journals how a call that asked was settled: held for a person (ask), approved or rejected; a hold
        and an approval name the tool they were given for (``fingerprint``). A hold of a call admitted from
        other arguments than the model's keeps them (``source``: the arguments, and whether they are a
        person's rather than a repair's): ``recover`` admits it from them again."""
        if behavior == "ask":
            payload = {
                "args": args_copy(args),
                "reason": reason,
                "digest": args_digest(args),
                "fingerprint": fingerprint,
            }
            if source is not None:
                given, edited = source
                payload["input"] = {"args": args_copy(given), "digest": args_digest(given), "edited": edited}
            await self.write(call_id, "pending", payload)
        elif behavior == "allow":
            payload = {"args": args_copy(args), "digest": args_digest(args), "fingerprint": fingerprint}
            await self.write(call_id, "approved", payload)
        else:
            await self.write(call_id, "rejected", {"message": message})

    async def release(self) -> None:
        """Lets go of the run; a failure here is logged, never raised (the run's outcome stands)."""
        if not self.held:
            return
        self.held = False
        if self.lease is not None:
            self.journal.leases.drop(self.lease)
        _let_go(self.journal, self.run_id)
        if self.lease is not None and self.lease.taken:
            # Another owner holds the run: there is nothing of this process's to let go.
            return
        try:
            with anyio.CancelScope(shield=True):
                await self.journal.release(self.run_id)
        except RunClaimedError:
            if not isinstance(self.failure, LeaseLostError):
                logger.warning("releasing run %s in the journal failed", self.run_id, exc_info=True)
        except Exception:
            logger.warning("releasing run %s in the journal failed", self.run_id, exc_info=True)


def approval_payload(record: CallRecord) -> dict[str, Any]:
    """What the journal holds for a call a person approved: the arguments it runs with and their digest, and the
    tool the approval was given for (``fingerprint``: ``recover`` asks again when the tool changed since); for
    arguments the person edited, ``edited`` and what the model asked for (``requested``); the scope of a
    standing approval given with it (``always``); for a call admitted from a person's arguments and approved as
    shown, those arguments (``input``)."""
    if record.edited_digest is None:
        payload: dict[str, Any] = {"args": record.request_args, "digest": record.digest}
        if record.input_args is not None and record.edited:
            payload["input"] = {"args": record.input_args, "digest": args_digest(record.input_args), "edited": True}
    else:
        payload = {
            "args": record.edited_args,
            "digest": record.edited_digest,
            "edited": True,
            "requested": {"args": record.request_args, "digest": record.digest},
        }
    if record.fingerprint is not None:
        payload["fingerprint"] = record.fingerprint
    if record.always is not None:
        # The standing approval, with the tool it holds for (``recover`` keeps it in force: ``journaled_standing``).
        payload["always"] = record.always
        payload["tool"] = record.tool
    return payload


def journaled_standing(run: RunRecord) -> Standing:
    """The standing approvals a journaled run's approvals were given with (``approval_payload``'s ``always``)."""
    standing = Standing()
    for entry in run.calls:
        decision = entry.decision or {}
        scope, tool, fingerprint = decision.get("always"), decision.get("tool"), decision.get("fingerprint")
        if not (isinstance(scope, str) and isinstance(tool, str) and isinstance(fingerprint, str)):
            continue
        if scope == "tool":
            standing.allow[tool] = fingerprint
        elif scope == "call":
            digest = decision.get("digest")
            if isinstance(digest, str):
                standing.calls.add((tool, fingerprint, digest))
        elif scope not in standing.rules:
            try:
                parse_scope(scope)
            except (RuleError, OptionError):
                continue  # not a rule this version reads: no standing approval from it
            standing.rules.append(scope)
    return standing


def nested_payload(call_id: str, args: Any, fingerprint: str, child: ChildRecord) -> dict[str, Any]:
    """What the journal holds for a call whose nested run waits: its arguments, its tool, the nested run."""
    try:
        record = child_to_json(child)
        json.dumps(record)
    except (StateError, TypeError, ValueError) as exc:
        raise UnstorableOutputError(f"the nested run of call {call_id!r} cannot be journaled: {exc}") from None
    return {"args": args_copy(args), "digest": args_digest(args), "fingerprint": fingerprint, "child": record}


def journaled_child(run_id: str, call_id: str, decision: Mapping[str, Any] | None) -> ChildRecord | None:
    """The nested run a call's latest decision holds (None for a call of its own); ``JournalCorruptError``
    when it is damaged."""
    if decision is None or "child" not in decision:
        return None
    where = f"run {run_id!r}, call {call_id!r}: the nested run journaled for it"
    try:
        return load_child(decision["child"], where)
    except StateError as exc:
        raise JournalCorruptError(str(exc)) from None


def journaled_handout(
    run_id: str, call_id: str, run_with: Mapping[str, Any] | None
) -> tuple[float, float | None] | None:
    """When a started call was handed out to be answered from outside, and its deadline (seconds since the epoch),
    or None for a call that ran here; ``JournalCorruptError`` when the hand-out is damaged."""
    if run_with is None or "external" not in run_with:
        return None
    handout = run_with["external"]

    def seconds(value: Any) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)

    if not (
        isinstance(handout, Mapping)
        and seconds(handout.get("handed_out"))
        and (handout.get("deadline") is None or seconds(handout.get("deadline")))
    ):
        raise JournalCorruptError(f"run {run_id!r}, call {call_id!r}: the hand-out journaled for it is damaged")
    deadline = handout.get("deadline")
    return float(handout["handed_out"]), None if deadline is None else float(deadline)


def journaled_calls(calls: Sequence[ToolCall]) -> list[ToolCall] | None:
    """``calls`` as their run's journal stores them when some have arguments it cannot store (not JSON: a key
    that is not text beside text keys, an integer of more digits than Python converts, a value of another
    type), else None (the journal's refusal of them was for something else). Such arguments are never valid,
    and the run answers the call ``invalid_input`` without running it: the journal stores in their place text
    that is not JSON and says why, which a recovery answers ``invalid_input`` too."""
    stored: list[ToolCall] = []
    faulty = False
    for call in calls:
        fault = args_fault(call.args) if isinstance(call, ToolCall) else None
        if fault is None:
            stored.append(call)  # a call that is not a ToolCall is refused by the journal, naming its position
        else:
            faulty = True
            stored.append(ToolCall(call.id, call.name, f"<arguments the journal cannot store: {fault}>"))
    return stored if faulty else None


def storable(args: Any) -> Any:
    """The arguments a call runs with, as the journal stores them (a mapping becomes a dict)."""
    if isinstance(args, Mapping):
        return dict(args)
    if hasattr(args, "model_dump"):
        return args.model_dump(mode="json")
    return args
