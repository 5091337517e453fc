"""Approvals and resumable runs: ``ApprovalRequest`` and ``RunState`` (and the holds of nested runs).

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
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import threading
import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, Literal

from toolsched._values.calls import Duplicate, detached
from toolsched._values.codec import RESULT_FIELD_TYPES, encode_output
from toolsched._values.decisions import Decision
from toolsched._values.digest import args_digest
from toolsched._values.results import ERROR_KINDS, ToolResult, result_fields
from toolsched.errors import ApprovalError, StateError

__all__ = [
    "ApprovalRequest",
    "Approver",
    "NestedHold",
    "RunState",
    "child_from_json",
    "child_to_json",
    "claim",
    "interruption",
    "new_state",
    "records_by_id",
    "resuming",
    "standing_decision",
    "waiting_children",
]

Status = Literal["done", "pending", "approved", "rejected", "nested"]

# How many resumed interruptions this process remembers to refuse a second resume of (oldest forgotten first).
RESUMED_REMEMBERED = 100_000
_RESUMED: dict[str, None] = {}
_RESUMED_LOCK = threading.Lock()
_STATUSES = ("done", "pending", "approved", "rejected", "nested")
_FORMAT = "toolsched.RunState"
_VERSION = 1


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


CallSignature = tuple[tuple[str, str, str], ...]


def call_signature(calls: Any) -> CallSignature:
    """What identifies a turn's calls on replay: each call's ID, tool name and argument digest."""
    return tuple((call.id, call.name, args_digest(call.args)) for call in calls)


@dataclass(frozen=True, slots=True)
class TurnEntry:
    """A child turn that completed before its run was interrupted: replayed on resume, never run again."""

    calls: CallSignature
    results: tuple[ToolResult, ...]
    duplicates: tuple[Duplicate, ...] = ()
    steering_messages: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class StepEntry:
    """The value of a step (``ChildRun.step``) taken before the nested run was interrupted."""

    value: Any


@dataclass(frozen=True, slots=True)
class ChildRecord:
    """The nested run of a call that waits (internal): what happened in it, and where it stopped.

    ``journal`` holds the steps and completed child turns in order;
    ``waiting`` identifies the child turn that was interrupted, and ``state``
    is that turn's own run state.
    """

    state: RunState
    journal: tuple[TurnEntry | StepEntry, ...]
    waiting: CallSignature

    def copy(self) -> ChildRecord:
        return replace(self, state=self.state.copy(), journal=copy.deepcopy(self.journal))


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One call of a saved run (internal). ``args`` is the input as the model sent it.

    A ``done`` record holds its result; the others hold the request a person
    sees (``request_args``, ``reason``, ``digest``) and, once decided, the
    decision. A ``nested`` record is a call that was admitted and ran, and
    whose nested run (``child``) waits for decisions.
    """

    call_id: str
    name: str
    args: Any
    status: Status
    result: ToolResult | None = None
    tool: str | None = None
    fingerprint: str | None = None
    request_args: Any = None
    reason: str | None = None
    digest: str | None = None
    message: str | None = None
    child: ChildRecord | None = None


@dataclass(frozen=True, slots=True)
class DecisionTarget:
    """A call that a decision by ID could reach (internal): the run state holding it and its ID there."""

    state: RunState
    call_id: str
    tool_name: str
    # The prefixed ID of the call whose nested run holds it; None for a call of the top-level run.
    parent_call_id: str | None


class RunState:
    """Everything needed to finish an interrupted run, in this process or another.

    Decide pending calls with ``approve`` / ``reject``, then
    ``await executor.resume(state)``: calls that completed are never run
    again. ``to_json()`` / ``RunState.from_json(text)`` carry a state between
    processes; with ``key=`` the text is signed (HMAC-SHA256) so that an
    altered state is refused, otherwise a checksum catches corruption.
    Each state is an independent copy; a state can be resumed once.
    """

    __slots__ = ("_always_allow", "_always_reject", "_duplicates", "_records", "_resumed", "_run_id", "_stage")

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
        return state

    # -- reading ------------------------------------------------------------------

    @property
    def pending(self) -> list[ApprovalRequest]:
        """The calls still waiting for a decision, in model order (those of nested runs in their parent's place)."""
        requests = []
        for r in self._records:
            if r.status == "pending":
                requests.append(ApprovalRequest(r.call_id, r.tool or r.name, detached(r.request_args), r.reason))
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
        return [r.result for r in self._records if r.result is not None]

    @property
    def decisions(self) -> dict[str, Status]:
        """Every call's status: ``done``, ``pending``, ``approved``, ``rejected`` or ``nested``.

        ``nested`` is a call whose nested run waits; the calls of that run
        follow it, under prefixed IDs (``"p1/c2"``).
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
        counts = {status: 0 for status in _STATUSES}
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

    # -- copies and resumption ----------------------------------------------------

    def _check_live(self) -> None:
        if self._resumed:
            raise StateError("this state was already resumed; continue from the resumed run's Outcome.state")

    def copy(self) -> RunState:
        """An independent copy: deciding in one never affects the other."""
        self._check_live()
        records = [r if r.child is None else replace(r, child=r.child.copy()) for r in self._records]
        state = RunState._create(records, list(self._duplicates), dict(self._always_allow), dict(self._always_reject))
        state._run_id = self._run_id
        state._stage = self._stage
        return state

    def _claim(self) -> list[CallRecord]:
        """Marks the state as resumed and returns its records.

        A run resumes once from each interruption, whichever copy of its state
        is used: a second resume (another copy, the same JSON loaded twice) is
        refused, so an approved call never runs twice.
        """
        self._check_live()
        with _RESUMED_LOCK:
            if self._stage in _RESUMED:
                raise StateError(
                    "this run was already resumed from another copy of this state (Outcome.state read twice, or "
                    "RunState.from_json of the same text): continue from that resume's outcome"
                )
            _RESUMED[self._stage] = None
            while len(_RESUMED) > RESUMED_REMEMBERED:
                del _RESUMED[next(iter(_RESUMED))]
        self._resumed = True
        return list(self._records)

    def _unclaim(self) -> None:
        with _RESUMED_LOCK:
            _RESUMED.pop(self._stage, None)
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
            canonical = _canonical(body)
        except (TypeError, ValueError) as exc:
            raise StateError(f"the run state holds a value that JSON cannot carry: {exc}") from None
        body["seal"] = _seal(canonical, key)
        return json.dumps(body, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | bytes, *, key: bytes | str | None = None) -> RunState:
        """Loads a state saved by ``to_json``; a malformed, truncated or altered text raises ``StateError``."""
        try:
            body = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise StateError(f"the run state is not valid JSON (truncated?): {exc}") from None
        if not isinstance(body, dict) or body.get("format") != _FORMAT:
            raise StateError("the text is not a toolsched run state")
        if body.get("version") != _VERSION:
            raise StateError(f"run state version {body.get('version')!r} is not supported (expected {_VERSION})")
        seal = body.pop("seal", None)
        if not isinstance(seal, str):
            raise StateError("the run state has no seal; it was not written by RunState.to_json")
        if not hmac.compare_digest(seal, _seal(_canonical(body), key)):
            if key is None and seal.startswith("hmac-sha256:"):
                raise StateError("the run state is signed; load it with the key it was saved with")
            raise StateError("the run state was altered or corrupted after it was saved (its seal does not match)")
        return cls._from_body(body, "state")

    def _body(self) -> dict[str, Any]:
        body = {
            "format": _FORMAT,
            "version": _VERSION,
            "calls": [_record_to_json(record) for record in self._records],
            "duplicates": [_duplicate_to_json(d) for d in self._duplicates],
            "always_allow": dict(self._always_allow),
            "always_reject": {tool: [fp, message] for tool, (fp, message) in self._always_reject.items()},
        }
        if self._run_id is not None:
            body["run_id"] = self._run_id
        body["stage"] = self._stage
        return body

    @classmethod
    def _from_body(cls, body: Any, where: str) -> RunState:
        if not isinstance(body, dict):
            raise StateError(f"{where} must be an object")
        calls = _list(body, "calls", where)
        records = [_record_from_json(item, f"{where}.calls[{i}]") for i, item in enumerate(calls)]
        ids = [record.call_id for record in records]
        if len(set(ids)) != len(ids):
            raise StateError(f"{where} repeats a call ID")
        duplicates = [
            _duplicate_from_json(row, f"{where}.duplicates[{i}]")
            for i, row in enumerate(_list(body, "duplicates", where))
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
        return state


def _canonical(body: Mapping[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _seal(canonical: str, key: bytes | str | None) -> str:
    if key is None:
        return "sha256:" + hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
    secret = key.encode() if isinstance(key, str) else key
    return "hmac-sha256:" + hmac.new(secret, canonical.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


_RESULT_FIELDS = result_fields()


def _record_to_json(record: CallRecord) -> dict[str, Any]:
    item: dict[str, Any] = {"id": record.call_id, "name": record.name, "args": record.args, "status": record.status}
    if record.result is not None:
        item["result"] = _result_to_json(record.result)
    else:
        item["tool"] = record.tool
        item["fingerprint"] = record.fingerprint
        item["request"] = {"args": record.request_args, "reason": record.reason, "digest": record.digest}
        item["message"] = record.message
    if record.child is not None:
        item["child"] = child_to_json(record.child)
    return item


def _duplicate_to_json(duplicate: Duplicate) -> list[Any]:
    return [duplicate.call_id, duplicate.index, duplicate.first_index, duplicate.args_differ]


def _duplicate_from_json(row: Any, where: str) -> Duplicate:
    if not (
        isinstance(row, list)
        and len(row) == 4
        and isinstance(row[0], str)
        and all(isinstance(n, int) and not isinstance(n, bool) for n in row[1:3])
        and isinstance(row[3], bool)
    ):
        raise StateError(f"{where} is malformed")
    return Duplicate(row[0], row[1], row[2], row[3])


def _result_to_json(result: ToolResult) -> dict[str, Any]:
    """A result as the state carries it: an output JSON cannot hold goes in the form adapters send."""
    body = {name: getattr(result, name) for name in _RESULT_FIELDS}
    try:
        text, exact = encode_output(result.output)
    except ValueError as exc:
        raise StateError(f"the output of call {result.call_id!r} cannot be saved: {exc}") from None
    if not exact:
        body["output"] = json.loads(text)
    return body


def child_to_json(child: ChildRecord) -> dict[str, Any]:
    """A nested run's record in its JSON form, as a saved state (and a journal) carries it."""
    journal: list[dict[str, Any]] = []
    for entry in child.journal:
        if isinstance(entry, StepEntry):
            journal.append({"kind": "step", "value": entry.value})
        else:
            journal.append(
                {
                    "kind": "turn",
                    "calls": [list(call) for call in entry.calls],
                    "results": [_result_to_json(result) for result in entry.results],
                    "duplicates": [_duplicate_to_json(d) for d in entry.duplicates],
                    "steering_messages": list(entry.steering_messages),
                }
            )
    return {"state": child.state._body(), "journal": journal, "waiting": [list(call) for call in child.waiting]}


def _signature_from_json(value: Any, where: str) -> CallSignature:
    if not (
        isinstance(value, list)
        and all(isinstance(call, list) and len(call) == 3 and all(isinstance(p, str) for p in call) for call in value)
    ):
        raise StateError(f"{where} must list calls as [id, name, digest]")
    return tuple((call[0], call[1], call[2]) for call in value)


def child_from_json(value: Any, where: str) -> ChildRecord:
    """A nested run's record from ``child_to_json``'s form; ``StateError`` (naming ``where``) when malformed."""
    if not isinstance(value, dict):
        raise StateError(f"{where} must be an object")
    state = RunState._from_body(value.get("state"), f"{where}.state")
    journal: list[TurnEntry | StepEntry] = []
    for i, item in enumerate(_list(value, "journal", where)):
        at = f"{where}.journal[{i}]"
        if not isinstance(item, dict) or item.get("kind") not in ("turn", "step"):
            raise StateError(f"{at} must be a step or a turn")
        if item["kind"] == "step":
            journal.append(StepEntry(item.get("value")))
            continue
        calls = _signature_from_json(item.get("calls"), f"{at}.calls")
        results = tuple(
            _result_from_json(result, _result_call_id(result), f"{at}.results[{j}]")
            for j, result in enumerate(_list(item, "results", at))
        )
        duplicates = tuple(
            _duplicate_from_json(row, f"{at}.duplicates[{j}]") for j, row in enumerate(_list(item, "duplicates", at))
        )
        journal.append(TurnEntry(calls, results, duplicates, tuple(_list(item, "steering_messages", at))))
    return ChildRecord(state, tuple(journal), _signature_from_json(value.get("waiting"), f"{where}.waiting"))


def _result_call_id(value: Any) -> str:
    call_id = value.get("call_id") if isinstance(value, dict) else None
    return call_id if isinstance(call_id, str) else ""


def _list(body: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = body.get(key)
    if not isinstance(value, list):
        raise StateError(f"{where}.{key} must be a list")
    return value


def _text(item: Mapping[str, Any], key: str, where: str, *, optional: bool = False) -> Any:
    value = item.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise StateError(f"{where}.{key} must be a string")
    return value


def _record_from_json(item: Any, where: str) -> CallRecord:
    if not isinstance(item, dict):
        raise StateError(f"{where} must be an object")
    call_id = _text(item, "id", where)
    name = _text(item, "name", where)
    status = item.get("status")
    if status not in _STATUSES:
        raise StateError(f"{where}.status must be one of {', '.join(_STATUSES)}")
    args = item.get("args")
    if not isinstance(args, dict | str):
        raise StateError(f"{where}.args must be an object or JSON text")
    if status == "done":
        return CallRecord(call_id, name, args, "done", result=_result_from_json(item.get("result"), call_id, where))
    request = item.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("args"), dict):
        raise StateError(f"{where}.request must hold the arguments the person saw")
    digest = _text(request, "digest", f"{where}.request")
    if digest != args_digest(request["args"]):
        raise StateError(f"{where}: the request's arguments do not match their digest")
    child = None
    if status == "nested":
        child = child_from_json(item.get("child"), f"{where}.child")
    elif "child" in item:
        raise StateError(f"{where}: only a nested call carries a child run")
    return CallRecord(
        call_id,
        name,
        args,
        status,
        tool=_text(item, "tool", where),
        fingerprint=_text(item, "fingerprint", where),
        request_args=request["args"],
        reason=_text(request, "reason", f"{where}.request", optional=True),
        digest=digest,
        message=_text(item, "message", where, optional=True),
        child=child,
    )


def _result_from_json(value: Any, call_id: str, where: str) -> ToolResult:
    if isinstance(value, dict) and "attempts" not in value:
        value = {**value, "attempts": 1}  # a state saved before results counted their attempts
    if not isinstance(value, dict) or set(value) != set(_RESULT_FIELDS):
        raise StateError(f"{where}.result must hold exactly the fields of a ToolResult")
    if value["call_id"] != call_id or not isinstance(value["tool_name"], str):
        raise StateError(f"{where}.result does not belong to call {call_id!r}")
    kind = value["error_kind"]
    if kind is not None and kind not in ERROR_KINDS:
        raise StateError(f"{where}.result.error_kind {kind!r} is not an error kind")
    for name, types in RESULT_FIELD_TYPES.items():
        if name in ("call_id", "tool_name", "error_kind"):
            continue  # checked above
        if not isinstance(value[name], types):
            raise StateError(f"{where}.result.{name} has the wrong type")
    if value["is_error"] != (kind is not None):
        raise StateError(f"{where}.result: is_error and error_kind disagree")
    return ToolResult(**value)


# -- what the executor does with a state (internal) -----------------------------------


class NestedHold(Exception):
    """Raised out of a call whose nested run waits for approvals (internal): the call has no result yet."""

    def __init__(self, record: ChildRecord) -> None:
        super().__init__("the nested run waits for decisions")
        self.record = record


# The calls of the run being resumed whose nested runs wait, by call ID (set by Executor.resume).
resuming: ContextVar[Mapping[str, CallRecord] | None] = ContextVar("toolsched_resuming", default=None)


def new_state(
    records: list[CallRecord], duplicates: list[Duplicate], prior: RunState | None, run_id: str | None
) -> RunState:
    """The state of a run that ends waiting: its records, keeping the standing decisions of ``prior``."""
    always_allow = dict(prior._always_allow) if prior is not None else {}
    always_reject = dict(prior._always_reject) if prior is not None else {}
    state = RunState._create(records, duplicates, always_allow, always_reject)
    state._run_id = run_id
    return state


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
