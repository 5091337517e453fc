"""Approvals and resumable runs: ``ApprovalRequest`` and ``RunState``.

A run whose calls need a person's decision, and that has no approver, ends
interrupted: ``Outcome.pending`` lists the requests and ``Outcome.state`` holds
everything needed to finish it later, in this process or another one. An
approval is bound to the call ID, the tool (a fingerprint of its name,
description, schema and implementation) and a digest of the arguments the
person saw: if any of them differs when the run resumes, the call is asked
again instead of run.

A call whose tool runs a nested run (``toolsched._executor.nested``) may wait too: its
child run was interrupted. The child's requests appear among the parent's,
their call IDs prefixed with the parent call's (``"p1/c2"``), and the parent's
state carries the child's, so that resuming the parent resumes the child.
Call IDs may hold ``/`` themselves, so a prefixed ID can be spelled like
another call's: a decision by an ID that names more than one waiting call is
refused, so that it never reaches a call other than the one the person saw.

A run may wait for the world too: a call of an external tool is handed out
(``ExternalCall`` among ``pending``) and answered with ``complete`` or
``fail`` before the run resumes. The state carries the run's identity, which
every call's idempotency key derives from, so keys stay the same across a
resume in this process or another.
"""

from __future__ import annotations

import copy
import hmac
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from toolsched._policy.claims import claim_interruption, release_interruption
from toolsched._policy.state_codec import (
    EXTERNAL_STATUSES,
    FORMAT,
    VERSION,
    canonical,
    child_from_json,
    duplicate_from_json,
    duplicate_to_json,
    listed,
    record_from_json,
    record_to_json,
    seal,
)
from toolsched._policy.state_records import (
    STATUSES,
    CallRecord,
    ChildRecord,
    DecisionTarget,
    Status,
    TurnEntry,
)
from toolsched._values.calls import Duplicate, args_copy
from toolsched._values.decisions import Decision
from toolsched._values.effects import ExternalCall, idempotency_key, new_identity
from toolsched._values.results import ErrorKind, ToolResult, new_result
from toolsched.errors import ApprovalError, StateError

__all__ = [
    "ApprovalRequest",
    "Approver",
    "Pending",
    "RunState",
    "claim",
    "interruption",
    "load_child",
    "new_state",
    "records_by_id",
    "run_identity",
    "standing_decision",
    "waiting_children",
]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A call waiting for a person: the tool, the input that would run, and why it asks.

    For a call of a nested run, ``call_id`` is prefixed with the parent call's
    ID (``"p1/c2"``: decide it under that ID) and ``parent_call_id`` names the
    parent call (``"p1"``). When another waiting call has the same ID, deciding
    by it raises ``ApprovalError`` and decides neither.
    """

    call_id: str
    tool_name: str
    args: Mapping[str, Any]
    reason: str | None = None
    parent_call_id: str | None = None


Approver = Callable[[ApprovalRequest], Awaitable[bool | Decision] | bool | Decision]

#: What an interrupted run waits for: a person's decision, or the answer to an external call.
Pending = ApprovalRequest | ExternalCall


class RunState:
    """Everything needed to finish an interrupted run, in this process or another.

    Decide pending calls with ``approve`` / ``reject``, answer external
    calls with ``complete`` / ``fail``, then ``await executor.resume(state)``:
    calls that completed are never run again. ``to_json()`` / ``RunState.from_json(text)`` carry a state between
    processes; with ``key=`` the text is signed (HMAC-SHA256) so that an
    altered state is refused, otherwise a checksum catches corruption.
    Each state is an independent copy; a state can be resumed once.
    """

    __slots__ = (
        "_always_allow",
        "_always_reject",
        "_duplicates",
        "_identity",
        "_records",
        "_resumed",
        "_run_id",
        "_stage",
    )

    _records: list[CallRecord]
    _duplicates: list[Duplicate]
    _always_allow: dict[str, str]
    _always_reject: dict[str, tuple[str, str | None]]
    _resumed: bool
    # The journaled run this state continues (None when the run is not durable).
    _run_id: str | None
    # Which interruption of the run this is: shared by every copy (``copy``, ``to_json``), so that
    # only one of them resumes the run.
    _stage: str
    # The run's identity, which its calls' idempotency keys derive from (``toolsched._values.effects``).
    _identity: str

    def __init__(self) -> None:
        raise TypeError("RunState comes from Outcome.state or RunState.from_json")

    @classmethod
    def _create(
        cls,
        records: list[CallRecord],
        duplicates: list[Duplicate],
        always_allow: dict[str, str],
        always_reject: dict[str, tuple[str, str | None]],
    ) -> RunState:
        state = object.__new__(cls)
        state._records = records
        state._duplicates = duplicates
        state._always_allow = always_allow
        state._always_reject = always_reject
        state._resumed = False
        state._run_id = None
        state._stage = uuid.uuid4().hex
        state._identity = new_identity()
        return state

    # -- reading ------------------------------------------------------------------

    @property
    def pending(self) -> list[Pending]:
        """The calls still waiting, in model order (those of nested runs in their parent's place): an
        ``ApprovalRequest`` for a decision, an ``ExternalCall`` for an answer from outside."""
        requests: list[Pending] = []
        for r in self._records:
            if r.status == "pending":
                requests.append(ApprovalRequest(r.call_id, r.tool or r.name, args_copy(r.request_args), r.reason))
            elif r.status == "external":
                key = idempotency_key(self._identity, r.call_id)
                requests.append(ExternalCall(r.call_id, r.tool or r.name, args_copy(r.request_args), key))
            elif r.child is not None:
                prefix = r.call_id
                for inner in r.child.state.pending:
                    parent = prefix if inner.parent_call_id is None else f"{prefix}/{inner.parent_call_id}"
                    requests.append(replace(inner, call_id=f"{prefix}/{inner.call_id}", parent_call_id=parent))
        return requests

    @property
    def run_id(self) -> str | None:
        """The journaled run this state continues (None when the run is not durable)."""
        return self._run_id

    @property
    def duplicates(self) -> list[Duplicate]:
        """The calls of the run dropped for repeating an ID."""
        return list(self._duplicates)

    @property
    def results(self) -> list[ToolResult]:
        """The results of the calls that completed, in model order."""
        return [r.result for r in self._records if r.status == "done" and r.result is not None]

    @property
    def decisions(self) -> dict[str, Status]:
        """Every call's status: ``done``, ``pending``, ``approved``, ``rejected``, ``nested``, ``external`` or
        ``completed``.

        ``nested`` is a call whose nested run waits; the calls of that run
        follow it, under prefixed IDs (``"p1/c2"``). ``external`` is an external
        call waiting for its answer, ``completed`` one answered (``complete`` /
        ``fail``) that the resume delivers.
        """
        decisions: dict[str, Status] = {}
        for r in self._records:
            decisions[r.call_id] = r.status
            if r.child is not None:
                for entry in r.child.journal:
                    if isinstance(entry, TurnEntry):
                        for result in entry.results:
                            decisions[f"{r.call_id}/{result.call_id}"] = "done"
                for call_id, status in r.child.state.decisions.items():
                    decisions[f"{r.call_id}/{call_id}"] = status
        return decisions

    def __repr__(self) -> str:
        counts = {status: 0 for status in STATUSES}
        for record in self._records:
            counts[record.status] += 1
        return "RunState(" + ", ".join(f"{status}={count}" for status, count in counts.items()) + ")"

    # -- deciding -----------------------------------------------------------------

    def _undecided(self, call_id: str, verb: str) -> int:
        self._check_live()
        for position, record in enumerate(self._records):
            if record.call_id == call_id:
                if record.status == "done":
                    raise ApprovalError(f"cannot {verb} call {call_id!r}: it already completed")
                if record.status in EXTERNAL_STATUSES:
                    raise ApprovalError(
                        f"cannot {verb} call {call_id!r}: it is a call of the external tool `{record.tool}`, "
                        "answered with complete() or fail(), not decided"
                    )
                return position
        raise self._refusal(call_id, verb)

    def _refusal(self, call_id: str, verb: str) -> ApprovalError:
        """Why ``call_id`` cannot be decided, from this run's point of view (nested calls by prefixed ID)."""
        if self.decisions.get(call_id) == "done":
            return ApprovalError(f"cannot {verb} call {call_id!r}: it already completed")
        known = ", ".join(repr(request.call_id) for request in self.pending) or "none"
        return ApprovalError(f"cannot {verb} call {call_id!r}: this run has no such call (waiting: {known})")

    def _decidable(self, call_id: str, owner: str | None) -> list[DecisionTarget]:
        """Every call still open to a decision that ``call_id`` names, in this run or a nested one.

        Call IDs may hold ``/`` themselves, so one text can name a call of this run and a
        prefixed call of a nested run, or calls of two nested runs: all are collected, for
        the caller to refuse the ID when there is more than one. ``owner`` is the prefixed
        ID of the call whose nested run this state is (None for the top-level run).
        """
        found = []
        for record in self._records:
            if record.call_id == call_id and record.status != "done":
                found.append(DecisionTarget(self, call_id, record.tool or record.name, owner))
            if record.child is not None and call_id.startswith(record.call_id + "/"):
                parent = record.call_id if owner is None else f"{owner}/{record.call_id}"
                found.extend(record.child.state._decidable(call_id[len(record.call_id) + 1 :], parent))
        return found

    def _target(self, call_id: str, verb: str) -> tuple[RunState, str]:
        """The run state that holds the one call ``call_id`` names (a prefixed ID for a nested call), and its ID there.

        An ID naming two calls is refused rather than resolved by a preference: the person
        decided on one request of ``pending``, and a decision must never reach another.
        """
        self._check_live()
        targets = self._decidable(call_id, None)
        if len(targets) > 1:
            raise self._ambiguity(call_id, verb, targets)
        if not targets:
            raise self._refusal(call_id, verb)
        return targets[0].state, targets[0].call_id

    def _ambiguity(self, call_id: str, verb: str, targets: list[DecisionTarget]) -> ApprovalError:
        named = "; ".join(
            f"`{target.tool_name}` call {target.call_id!r} "
            + ("of this run" if target.parent_call_id is None else f"of the nested run of {target.parent_call_id!r}")
            for target in targets
        )
        parents = ", ".join(repr(target.parent_call_id) for target in targets if target.parent_call_id is not None)
        return ApprovalError(
            f"cannot {verb} call {call_id!r}: the ID is ambiguous, it names {len(targets)} waiting calls ({named}), "
            f"so none of them is decided by it; rejecting a parent call ({parents}) abandons its nested run and "
            "leaves the ID naming one call fewer"
        )

    def approve(self, call_id: str, *, always: bool = False) -> None:
        """Approves a waiting call; ``always`` approves every call of its tool in this run.

        A call of a nested run is approved under its prefixed ID (``"p1/c2"``);
        ``always`` then holds within that nested run. An ID that names more than
        one waiting call (a call ID spelled like a prefixed one) raises
        ``ApprovalError`` and decides nothing.
        """
        holder, local_id = self._target(call_id, "approve")
        if holder is not self:
            try:
                holder.approve(local_id, always=always)
            except ApprovalError:
                raise self._refusal(call_id, "approve") from None
            return
        position = self._undecided(call_id, "approve")
        if self._records[position].status == "nested":
            inner = ", ".join(repr(r.call_id) for r in self.pending if r.parent_call_id == call_id) or "none"
            raise ApprovalError(
                f"cannot approve call {call_id!r}: it already runs; its nested run waits for decisions on {inner}"
            )
        record = self._records[position]
        self._records[position] = replace(record, status="approved", message=None)
        if always and record.tool is not None and record.fingerprint is not None:
            self._always_allow[record.tool] = record.fingerprint
            self._always_reject.pop(record.tool, None)
            self._decide_tool(record.tool, record.fingerprint, "approved", None)

    def reject(self, call_id: str, message: str | None = None, *, always: bool = False) -> None:
        """Rejects a waiting call (``message`` tells the model why); ``always`` rejects every call of its tool.

        A call of a nested run is rejected under its prefixed ID (``"p1/c2"``).
        Rejecting a ``nested`` call itself abandons its nested run: the call is
        answered ``permission_denied``. An ID that names more than one waiting
        call raises ``ApprovalError`` and decides nothing.
        """
        if message is not None and not isinstance(message, str):
            raise TypeError(f"reject(message=...) must be a string, got {type(message).__name__}")
        holder, local_id = self._target(call_id, "reject")
        if holder is not self:
            try:
                holder.reject(local_id, message, always=always)
            except ApprovalError:
                raise self._refusal(call_id, "reject") from None
            return
        position = self._undecided(call_id, "reject")
        record = self._records[position]
        self._records[position] = replace(record, status="rejected", message=message, child=None)
        if always and record.tool is not None and record.fingerprint is not None:
            self._always_reject[record.tool] = (record.fingerprint, message)
            self._always_allow.pop(record.tool, None)
            self._decide_tool(record.tool, record.fingerprint, "rejected", message)

    def _decide_tool(self, tool: str, fingerprint: str, status: Status, message: str | None) -> None:
        for position, record in enumerate(self._records):
            if record.status == "pending" and record.tool == tool and record.fingerprint == fingerprint:
                self._records[position] = replace(record, status=status, message=message)

    # -- answering external calls -------------------------------------------------

    def complete(self, call_id: str, *, output: Any = None) -> None:
        """Answers the external call ``call_id`` with ``output``; ``executor.resume(state)`` then delivers it in
        model order (shaped as any output of its tool is).

        A call of a nested run is answered under its prefixed ID (``"p1/c2"``).
        ``StateError`` for an ID that names no external call waiting for its
        answer (unknown, not external, or answered already) or names two.
        """
        self._answer(call_id, "complete", output, None)

    def fail(self, call_id: str, *, error: str) -> None:
        """Answers the external call ``call_id`` with a failure: its result is an ``execution_error`` carrying
        ``error`` (a message for the model). ``StateError`` as for ``complete``."""
        if not isinstance(error, str):
            raise TypeError(f"fail(error=...) must be a string, got {type(error).__name__}")
        self._answer(call_id, "fail", None, error)

    def _answer(self, call_id: str, verb: str, output: Any, error: str | None) -> None:
        self._check_live()
        if not isinstance(call_id, str):
            raise TypeError(f"{verb}() takes a call ID string, got {type(call_id).__name__}")
        targets = self._externals(call_id)
        if len(targets) > 1:
            raise StateError(f"cannot {verb} call {call_id!r}: the ID is ambiguous, it names {len(targets)} calls")
        if not targets:
            raise self._unanswerable(call_id, verb)
        holder, position = targets[0]
        record = holder._records[position]
        if record.status == "completed":
            raise StateError(f"cannot {verb} call {call_id!r}: it was answered already")
        handed_out = record.handed_out if record.handed_out is not None else time.time()
        took = max(0.0, (time.time() - handed_out) * 1000.0)
        tool = record.tool or record.name
        failed = error is not None
        kind: ErrorKind | None = "execution_error" if failed else None
        result = new_result(record.call_id, tool, output, error, kind, failed, took, False, None, False, None, 1)
        holder._records[position] = replace(record, status="completed", result=result)

    def _externals(self, call_id: str) -> list[tuple[RunState, int]]:
        """The external calls ``call_id`` names, in this run or (by prefixed ID) a nested one: (state, position)."""
        found: list[tuple[RunState, int]] = []
        for position, record in enumerate(self._records):
            if record.call_id == call_id and record.status in EXTERNAL_STATUSES:
                found.append((self, position))
            if record.child is not None and call_id.startswith(record.call_id + "/"):
                found.extend(record.child.state._externals(call_id[len(record.call_id) + 1 :]))
        return found

    def _unanswerable(self, call_id: str, verb: str) -> StateError:
        status = self.decisions.get(call_id)
        if status == "done":
            return StateError(f"cannot {verb} call {call_id!r}: it was answered already")
        if status is not None:
            return StateError(
                f"cannot {verb} call {call_id!r}: it is not a call of an external tool (it is {status!r}); "
                "only external calls are answered from outside"
            )
        waiting = ", ".join(repr(p.call_id) for p in self.pending if isinstance(p, ExternalCall)) or "none"
        return StateError(
            f"cannot {verb} call {call_id!r}: this run has no such call (external calls waiting: {waiting})"
        )

    # -- copies and resumption ----------------------------------------------------

    def _check_live(self) -> None:
        if self._resumed:
            raise StateError("this state was already resumed; continue from the resumed run's Outcome.state")

    def copy(self) -> RunState:
        """An independent copy: deciding in one never affects the other."""
        self._check_live()
        return self._twin()

    def __copy__(self) -> RunState:
        # ``copy.copy`` gives an independent copy too (the default would share the records), and so does
        # ``copy.deepcopy``; a copy of a state already resumed is resumed as well.
        return self._twin()

    def __deepcopy__(self, memo: dict[int, Any]) -> RunState:
        return self._twin()

    def _twin(self) -> RunState:
        records = [
            r
            if r.child is None
            else replace(r, child=replace(r.child, state=r.child.state._twin(), journal=copy.deepcopy(r.child.journal)))
            for r in self._records
        ]
        state = RunState._create(records, list(self._duplicates), dict(self._always_allow), dict(self._always_reject))
        state._run_id = self._run_id
        state._stage = self._stage
        state._identity = self._identity
        state._resumed = self._resumed
        return state

    def _claim(self) -> list[CallRecord]:
        """Marks the state as resumed and returns its records.

        A run resumes once from each interruption, whichever copy of its state
        is used: a second resume (another copy, the same JSON loaded twice) is
        refused, so an approved call never runs twice.
        """
        self._check_live()
        claim_interruption(self._stage)
        self._resumed = True
        return list(self._records)

    def _unclaim(self) -> None:
        release_interruption(self._stage)
        self._resumed = False

    def _children(self) -> dict[str, CallRecord]:
        """The calls whose nested runs wait, by call ID."""
        return {record.call_id: record for record in self._records if record.child is not None}

    def _standing(self, tool: str, fingerprint: str) -> tuple[Status, str | None] | None:
        """A decision given with ``always=True`` for this tool, if it still is the same tool."""
        rejected = self._always_reject.get(tool)
        if rejected is not None and rejected[0] == fingerprint:
            return "rejected", rejected[1]
        if self._always_allow.get(tool) == fingerprint:
            return "approved", None
        return None

    # -- serialisation ------------------------------------------------------------

    def to_json(self, *, key: bytes | str | None = None) -> str:
        """The state as JSON text; with ``key``, signed so that ``from_json`` refuses any alteration."""
        self._check_live()
        body = self._body()
        try:
            text = canonical(body)
        except (TypeError, ValueError) as exc:
            raise StateError(f"the run state holds a value that JSON cannot carry: {exc}") from None
        body["seal"] = seal(text, key)
        return json.dumps(body, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | bytes, *, key: bytes | str | None = None) -> RunState:
        """Loads a state saved by ``to_json``; a malformed, truncated or altered text raises ``StateError``."""
        try:
            body = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise StateError(f"the run state is not valid JSON (truncated?): {exc}") from None
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            raise StateError("the text is not a toolsched run state")
        if body.get("version") != VERSION:
            raise StateError(f"run state version {body.get('version')!r} is not supported (expected {VERSION})")
        sealed = body.pop("seal", None)
        if not isinstance(sealed, str):
            raise StateError("the run state has no seal; it was not written by RunState.to_json")
        if not hmac.compare_digest(sealed, seal(canonical(body), key)):
            if key is None and sealed.startswith("hmac-sha256:"):
                raise StateError("the run state is signed; load it with the key it was saved with")
            raise StateError("the run state was altered or corrupted after it was saved (its seal does not match)")
        return cls._from_body(body, "state")

    def _body(self) -> dict[str, Any]:
        body = {
            "format": FORMAT,
            "version": VERSION,
            "calls": [record_to_json(record) for record in self._records],
            "duplicates": [duplicate_to_json(d) for d in self._duplicates],
            "always_allow": dict(self._always_allow),
            "always_reject": {tool: [fp, message] for tool, (fp, message) in self._always_reject.items()},
        }
        if self._run_id is not None:
            body["run_id"] = self._run_id
        body["stage"] = self._stage
        body["identity"] = self._identity
        return body

    @classmethod
    def _from_body(cls, body: Any, where: str) -> RunState:
        if not isinstance(body, dict):
            raise StateError(f"{where} must be an object")
        calls = listed(body, "calls", where)
        records = [record_from_json(item, f"{where}.calls[{i}]", RunState._from_body) for i, item in enumerate(calls)]
        ids = [record.call_id for record in records]
        if len(set(ids)) != len(ids):
            raise StateError(f"{where} repeats a call ID")
        duplicates = [
            duplicate_from_json(row, f"{where}.duplicates[{i}]")
            for i, row in enumerate(listed(body, "duplicates", where))
        ]
        always_allow = body.get("always_allow")
        always_reject = body.get("always_reject")
        if not (isinstance(always_allow, dict) and all(isinstance(v, str) for v in always_allow.values())):
            raise StateError(f"{where}.always_allow is malformed")
        if not (
            isinstance(always_reject, dict)
            and all(isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) for v in always_reject.values())
        ):
            raise StateError(f"{where}.always_reject is malformed")
        run_id = body.get("run_id")
        if run_id is not None and not isinstance(run_id, str):
            raise StateError(f"{where}.run_id must be a string")
        state = cls._create(
            records, duplicates, dict(always_allow), {tool: (v[0], v[1]) for tool, v in always_reject.items()}
        )
        state._run_id = run_id
        stage = body.get("stage")
        if stage is not None:
            if not isinstance(stage, str) or not stage:
                raise StateError(f"{where}.stage must be a non-empty string")
            state._stage = stage
        identity = body.get("identity")
        if identity is not None:
            if not isinstance(identity, str) or not identity:
                raise StateError(f"{where}.identity must be a non-empty string")
            state._identity = identity
        return state


def load_child(value: Any, where: str) -> ChildRecord:
    """A nested run's record from its JSON form (``child_to_json``); ``StateError`` naming ``where`` if malformed."""
    return child_from_json(value, where, RunState._from_body)


# -- what the executor does with a state (internal) -----------------------------------


def new_state(
    records: list[CallRecord], duplicates: list[Duplicate], prior: RunState | None, run_id: str | None, identity: str
) -> RunState:
    """The state of a run that ends waiting: its records, keeping the standing decisions of ``prior``; ``identity``
    is the run's (its calls' idempotency keys derive from it)."""
    always_allow = dict(prior._always_allow) if prior is not None else {}
    always_reject = dict(prior._always_reject) if prior is not None else {}
    state = RunState._create(records, duplicates, always_allow, always_reject)
    state._run_id = run_id
    state._identity = identity
    return state


def run_identity(state: RunState) -> str:
    """The identity of the run ``state`` continues: its calls' idempotency keys derive from it."""
    return state._identity


def claim(state: RunState) -> list[CallRecord]:
    """Marks the state as resumed (a state resumes once) and returns its records."""
    return state._claim()


def unclaim(state: RunState) -> None:
    """Takes back ``claim``: the resume was refused before anything of it ran or was journaled."""
    state._unclaim()


def interruption(state: RunState) -> str:
    """Which interruption of its run ``state`` continues from: the same for every copy of it (``copy``,
    ``to_json``), new each time the run stops to wait."""
    return state._stage


def waiting_children(state: RunState) -> dict[str, CallRecord]:
    """The calls whose nested runs wait, by call ID."""
    return state._children()


def records_by_id(state: RunState) -> dict[str, CallRecord]:
    """The state's records by call ID."""
    return {record.call_id: record for record in state._records}


def standing_decision(state: RunState, tool: str, fingerprint: str) -> tuple[Status, str | None] | None:
    """A decision given with ``always=True`` for this tool, if it still is the same tool."""
    return state._standing(tool, fingerprint)
