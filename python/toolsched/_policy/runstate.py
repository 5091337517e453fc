"""Approvals and resumable runs: ``ApprovalRequest`` and ``RunState``, the records it is made of and its JSON form.

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

The records (``CallRecord``, a nested run's ``ChildRecord``) and the JSON form (sealed with SHA-256 or
signed with HMAC-SHA256) live here with ``RunState`` itself: a nested run's record holds its own
``RunState``, so the three make one recursive type, and split apart they import one another.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import math
import re
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from toolsched._policy.claims import claim_interruption, release_interruption
from toolsched._policy.standing import Standing, in_force, parse_scope
from toolsched._values.calls import Duplicate, args_copy
from toolsched._values.codec import RESULT_FIELD_TYPES, encode_output
from toolsched._values.decisions import Decision
from toolsched._values.digest import args_digest
from toolsched._values.effects import ExternalCall, idempotency_key, new_identity
from toolsched._values.results import (
    ERROR_KINDS,
    ErrorKind,
    ToolResult,
    edited_result,
    new_result,
    result_fields,
    shown_result,
)
from toolsched.errors import ApprovalError, OptionError, StateError

__all__ = [
    "EXTERNAL_STATUSES",
    "FORMAT",
    "STATUSES",
    "VERSION",
    "ApprovalRequest",
    "Approver",
    "CallRecord",
    "CallSignature",
    "ChildRecord",
    "DecisionTarget",
    "LoadState",
    "Pending",
    "RunState",
    "Status",
    "StepEntry",
    "TurnEntry",
    "call_signature",
    "canonical",
    "child_from_json",
    "child_to_json",
    "claim",
    "duplicate_from_json",
    "duplicate_to_json",
    "interruption",
    "listed",
    "load_child",
    "new_state",
    "record_from_json",
    "record_to_json",
    "records_by_id",
    "run_identity",
    "seal",
    "standing_for",
    "standing_of",
    "waiting_children",
]

Status = Literal["done", "pending", "approved", "rejected", "nested", "external", "completed"]
STATUSES = ("done", "pending", "approved", "rejected", "nested", "external", "completed")


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
    whose nested run (``child``) waits for decisions. An ``external`` record is
    a call of an external tool handed out with ``request_args`` at ``handed_out``
    (seconds since the epoch), waiting for its answer until ``deadline`` (None:
    no limit); once answered (``RunState.complete`` / ``fail``) it is
    ``completed`` and holds the answer as ``result`` until the run resumes.
    An ``approved`` record approved with a person's own arguments holds them as
    ``edited_args`` (their digest ``edited_digest``, which the approval is bound
    to instead of ``digest``); ``always`` is the scope of a standing approval
    given with it (``"call"``, ``"tool"`` or a rule), journaled with the approval.

    A call admitted from other arguments than ``args`` before it asked holds them as ``input_args`` (their
    digest is in the JSON form): a person's own, from an earlier approval that was asked about again (a hook
    rewrote them, the tool changed), with ``edited`` set. The resume admits the call from them, so that the
    hooks give again what the person was shown (``request_args``), and approving that runs it.
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
    handed_out: float | None = None
    deadline: float | None = None
    edited_args: Any = None
    edited_digest: str | None = None
    always: str | None = None
    # An external call handed out with the arguments a person approved it with, or a call admitted from them
    # (``input_args``): its answer is ``edited``.
    edited: bool = False
    input_args: Any = None

    @property
    def bound_digest(self) -> str | None:
        """The digest of the arguments a decision is bound to: the person's, when they edited them."""
        return self.edited_digest if self.edited_digest is not None else self.digest


class StandingGiven(ApprovalError):
    """A call approved with a standing scope (``always``) decided otherwise on the same state (internal): the scope
    decided more than the call, and is not taken back. ``call_id`` as the caller named it (prefixed when nested)."""

    def __init__(self, call_id: str, always: str | None, verb: str) -> None:
        super().__init__(
            f"cannot {verb} call {call_id!r} otherwise: it was approved with always={always!r}, which approves "
            "more than this call for the rest of the run, and that is not taken back on this state; decide again "
            "on a fresh copy of the interruption (outcome.state, or the saved JSON)"
        )
        self.always = always


# Held while a decision or an external call's answer is checked and recorded, and while a resume takes a state's
# records.
_ANSWERING = threading.Lock()


@dataclass(frozen=True, slots=True)
class DecisionTarget:
    """A call that a decision by ID could reach (internal): the run state holding it and its ID there."""

    state: RunState
    call_id: str
    tool_name: str
    # The prefixed ID of the call whose nested run holds it; None for a call of the top-level run.
    parent_call_id: str | None


FORMAT = "toolsched.RunState"
VERSION = 1

#: The statuses of an external call's record: handed out and waiting, or answered and waiting for the resume.
EXTERNAL_STATUSES = ("external", "completed")

#: Reads a nested run's own state from its JSON body (``RunState._from_body``), naming ``where`` in errors.
LoadState = Callable[[Any, str], "RunState"]


def canonical(body: Mapping[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def checked_key(key: Any) -> bytes | str | None:
    """``key`` as ``to_json``/``from_json`` take it: None, or a non-empty ``bytes``/``str`` (an empty key signs
    nothing: anyone could sign an altered state with it)."""
    if key is None:
        return None
    if isinstance(key, bytearray):
        key = bytes(key)
    if not isinstance(key, (bytes, str)):
        raise OptionError(f"key= takes the secret as bytes or str, got {type(key).__name__}")
    if not key:
        raise OptionError("key= is empty: an empty key signs nothing (give the secret, or None for no signature)")
    return key


def seal(canonical: str, key: bytes | str | None) -> str:
    if key is None:
        return "sha256:" + hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
    secret = key.encode() if isinstance(key, str) else key
    return "hmac-sha256:" + hmac.new(secret, canonical.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


_RESULT_FIELDS = result_fields()
# A surrogate code point: Python strings may hold one alone, UTF-8 cannot; JSON text writes it as an escape.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escaped(text: str) -> str:
    """JSON text with every surrogate written as a ``\\u`` escape (JSON syntax outside strings is ASCII)."""
    if _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def record_to_json(record: CallRecord) -> dict[str, Any]:
    item: dict[str, Any] = {"id": record.call_id, "name": record.name, "args": record.args, "status": record.status}
    if record.status == "done":
        assert record.result is not None
        item["result"] = _result_to_json(record.result)
    else:
        item["tool"] = record.tool
        item["fingerprint"] = record.fingerprint
        item["request"] = {"args": record.request_args, "reason": record.reason, "digest": record.digest}
        item["message"] = record.message
        if record.edited_digest is not None:
            item["edit"] = {"args": record.edited_args, "digest": record.edited_digest}
        if record.always is not None:
            item["always"] = record.always
        if record.input_args is not None:
            item["input"] = {"args": record.input_args, "digest": args_digest(record.input_args)}
            if record.edited:
                item["input"]["edited"] = True
        if record.status in EXTERNAL_STATUSES:
            item["external"] = {"handed_out": record.handed_out, "deadline": record.deadline}
            if record.edited:
                item["external"]["edited"] = True
            if record.result is not None:
                item["result"] = _result_to_json(record.result)
    if record.child is not None:
        item["child"] = child_to_json(record.child)
    return item


def duplicate_to_json(duplicate: Duplicate) -> list[Any]:
    return [duplicate.call_id, duplicate.index, duplicate.first_index, duplicate.args_differ]


def duplicate_from_json(row: Any, where: str) -> Duplicate:
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
                    "duplicates": [duplicate_to_json(d) for d in entry.duplicates],
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


def child_from_json(value: Any, where: str, load_state: LoadState) -> ChildRecord:
    """A nested run's record from ``child_to_json``'s form; ``StateError`` (naming ``where``) when malformed.

    ``load_state`` reads the nested run's own state from its body (``RunState._from_body``).
    """
    if not isinstance(value, dict):
        raise StateError(f"{where} must be an object")
    state = load_state(value.get("state"), f"{where}.state")
    journal: list[TurnEntry | StepEntry] = []
    for i, item in enumerate(listed(value, "journal", where)):
        at = f"{where}.journal[{i}]"
        if not isinstance(item, dict) or item.get("kind") not in ("turn", "step"):
            raise StateError(f"{at} must be a step or a turn")
        if item["kind"] == "step":
            journal.append(StepEntry(item.get("value")))
            continue
        calls = _signature_from_json(item.get("calls"), f"{at}.calls")
        results = tuple(
            _result_from_json(result, _result_call_id(result), f"{at}.results[{j}]")
            for j, result in enumerate(listed(item, "results", at))
        )
        duplicates = tuple(
            duplicate_from_json(row, f"{at}.duplicates[{j}]") for j, row in enumerate(listed(item, "duplicates", at))
        )
        journal.append(TurnEntry(calls, results, duplicates, tuple(listed(item, "steering_messages", at))))
    return ChildRecord(state, tuple(journal), _signature_from_json(value.get("waiting"), f"{where}.waiting"))


def _result_call_id(value: Any) -> str:
    call_id = value.get("call_id") if isinstance(value, dict) else None
    return call_id if isinstance(call_id, str) else ""


def listed(body: Mapping[str, Any], key: str, where: str) -> list[Any]:
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


def record_from_json(item: Any, where: str, load_state: LoadState) -> CallRecord:
    if not isinstance(item, dict):
        raise StateError(f"{where} must be an object")
    call_id = _text(item, "id", where)
    name = _text(item, "name", where)
    status = item.get("status")
    if status not in STATUSES:
        raise StateError(f"{where}.status must be one of {', '.join(STATUSES)}")
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
        child = child_from_json(item.get("child"), f"{where}.child", load_state)
    elif "child" in item:
        raise StateError(f"{where}: only a nested call carries a child run")
    handed_out = deadline = None
    external_edited = False
    result = None
    if status in EXTERNAL_STATUSES:
        handed_out, deadline = _handout_from_json(item.get("external"), f"{where}.external")
        external_edited = item["external"].get("edited", False)
        if not isinstance(external_edited, bool):
            raise StateError(f"{where}.external.edited must be true or false")
        if status == "completed":
            result = _result_from_json(item.get("result"), call_id, where)
        elif "result" in item:
            raise StateError(f"{where}: an external call waiting for its answer carries no result")
    elif "external" in item or "result" in item:
        raise StateError(f"{where}: only an external call carries a hand-out and an answer")
    edited_args, edited_digest = _edit_from_json(item, status, where)
    input_args, input_edited = _input_from_json(item, status, where)
    always = item.get("always")
    if always is not None and (status != "approved" or not isinstance(always, str)):
        raise StateError(f"{where}.always must be the scope of an approval, on an approved call")
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
        result=result,
        handed_out=handed_out,
        deadline=deadline,
        edited_args=edited_args,
        edited_digest=edited_digest,
        always=always,
        edited=external_edited or input_edited,
        input_args=input_args,
    )


def _edit_from_json(item: Mapping[str, Any], status: str, where: str) -> tuple[Any, str | None]:
    """The arguments a person approved a call with (``edit``), checked against their digest: (None, None) when
    the call was not edited."""
    edit = item.get("edit")
    if edit is None:
        return None, None
    if status != "approved":
        raise StateError(f"{where}: only an approved call carries the arguments it was approved with")
    if not isinstance(edit, dict) or not isinstance(edit.get("args"), dict) or not isinstance(edit.get("digest"), str):
        raise StateError(f"{where}.edit must hold the approved arguments and their digest")
    if edit["digest"] != args_digest(edit["args"]):
        raise StateError(f"{where}: the approved arguments do not match their digest")
    return edit["args"], edit["digest"]


def _input_from_json(item: Mapping[str, Any], status: str, where: str) -> tuple[Any, bool]:
    """The arguments a call was admitted from when they were not the model's (``input``), checked against their
    digest, and whether they are a person's: (None, False) when there are none."""
    given = item.get("input")
    if given is None:
        return None, False
    if status not in ("pending", "approved", "rejected"):
        raise StateError(
            f"{where}: only a call waiting for a decision, or decided, carries the input it was admitted from"
        )
    if (
        not isinstance(given, dict)
        or not isinstance(given.get("args"), dict)
        or not isinstance(given.get("digest"), str)
    ):
        raise StateError(f"{where}.input must hold the arguments the call was admitted from and their digest")
    if given["digest"] != args_digest(given["args"]):
        raise StateError(f"{where}: the input the call was admitted from does not match its digest")
    edited = given.get("edited", False)
    if not isinstance(edited, bool):
        raise StateError(f"{where}.input.edited must be true or false")
    return given["args"], edited


def _seconds(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _handout_from_json(value: Any, where: str) -> tuple[float, float | None]:
    """An external call's hand-out: when it was handed out and its deadline (seconds since the epoch)."""
    if not isinstance(value, dict) or not _seconds(value.get("handed_out")):
        raise StateError(f"{where} must hold when the call was handed out (seconds since the epoch)")
    deadline = value.get("deadline")
    if deadline is not None and not _seconds(deadline):
        raise StateError(f"{where}.deadline must be seconds since the epoch or null")
    return float(value["handed_out"]), None if deadline is None else float(deadline)


def _result_from_json(value: Any, call_id: str, where: str) -> ToolResult:
    if isinstance(value, dict) and "attempts" not in value:
        value = {**value, "attempts": 1}  # a state saved before results counted their attempts
    if isinstance(value, dict) and "repaired" not in value:
        value = {**value, "repaired": False}  # a state saved before results said whether they were repaired
    if isinstance(value, dict) and "edited" not in value:
        value = {**value, "edited": False}  # a state saved before results said whether a person edited the call
    if not isinstance(value, dict) or set(value) != set(_RESULT_FIELDS):
        raise StateError(f"{where}.result must hold exactly the fields of a ToolResult")
    if value["call_id"] != call_id or not isinstance(value["tool_name"], str):
        raise StateError(f"{where}.result does not belong to call {call_id!r}")
    kind = value["error_kind"]
    if kind is not None and (not isinstance(kind, str) or kind not in ERROR_KINDS):
        raise StateError(f"{where}.result.error_kind {kind!r} is not an error kind")
    for name, types in RESULT_FIELD_TYPES.items():
        if name in ("call_id", "tool_name", "error_kind"):
            continue  # checked above
        if not isinstance(value[name], types):
            raise StateError(f"{where}.result.{name} has the wrong type")
    if value["is_error"] != (kind is not None):
        raise StateError(f"{where}.result: is_error and error_kind disagree")
    return ToolResult(**value)


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
        "_always",
        "_duplicates",
        "_identity",
        "_records",
        "_resumed",
        "_run_id",
        "_stage",
    )

    _records: list[CallRecord]
    _duplicates: list[Duplicate]
    # The standing decisions of the run (``approve``/``reject`` with ``always``).
    _always: Standing
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
    def _create(cls, records: list[CallRecord], duplicates: list[Duplicate], always: Standing) -> RunState:
        state = object.__new__(cls)
        state._records = records
        state._duplicates = duplicates
        state._always = always
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
        """The results of the calls that completed, in model order (each output a copy: changing one changes
        neither this state nor any copy of it)."""
        return [shown_result(r.result) for r in self._records if r.status == "done" and r.result is not None]

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
        if self._resumed:
            # Too late for this decision: an ``ApprovalError`` (a ``StateError``) as for a call no longer waiting.
            raise ApprovalError(
                f"cannot {verb} call {call_id!r}: this state was already resumed; decide on the resumed run's "
                "Outcome.state"
            )
        if not isinstance(call_id, str):
            raise ApprovalError(
                f"cannot {verb} call {call_id!r}: call IDs are text (those of outcome.pending), "
                f"got {type(call_id).__name__}"
            )
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

    def approve(self, call_id: str, *, args: Mapping[str, Any] | None = None, always: bool | str | None = None) -> None:
        """Approves a waiting call, with the person's own arguments (``args``) if given, and for the rest of the
        run within a scope (``always``).

        ``args`` replaces the model's arguments: on resume they are checked
        against the tool's schema (a failure answers the call ``invalid_input``),
        judged by the rules (a deny rule still wins), seen by hooks and
        guardrails, and the call runs with them; its result has ``edited``
        set. The approval is bound to them. ``always`` approves, for the rest of
        the run: ``"call"`` the same tool with the same arguments (the approved
        ones), ``"tool"`` (or ``True``) every call of the tool, or a permission
        rule's text (``"bash(npm test *)"``) every call the rule matches. A
        deny still wins over each. ``OptionError`` for ``args`` that are not a
        JSON object or an ``always`` of another kind, ``RuleError`` for a rule
        that does not parse; nothing is decided then.

        A call of a nested run is approved under its prefixed ID (``"p1/c2"``);
        ``always`` then holds within that nested run. An ID that names no call
        waiting for a decision (unknown, or answered already), or more than one
        (a call ID spelled like a prefixed one), raises ``ApprovalError`` (a
        ``StateError``) and decides nothing.
        """
        scope = parse_scope(always)
        edited = _approved_args(args)
        # One decision at a time, and none while a resume takes the records: a decision checked before a resume
        # in another thread took them, and written after, would be reported taken and never obeyed.
        with _ANSWERING:
            self._approve_now(call_id, edited, scope)

    def _approve_now(self, call_id: str, edited: dict[str, Any] | None, scope: str | None) -> None:
        holder, local_id = self._target(call_id, "approve")
        if holder is not self:
            try:
                holder._approve_now(local_id, edited, scope)
            except StandingGiven as exc:
                raise StandingGiven(call_id, exc.always, "approve") from None
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
        digest = args_digest(edited) if edited is not None else None
        if digest is not None and digest == record.digest:
            # The person approved the arguments the model gave: nothing was edited.
            edited = digest = None
        if record.status == "approved" and record.always is not None:
            if record.always == scope and record.edited_digest == digest:
                return  # the same decision again
            raise StandingGiven(call_id, record.always, "approve")
        record = replace(
            record, status="approved", message=None, edited_args=edited, edited_digest=digest, always=scope
        )
        self._records[position] = record
        if scope is None or record.tool is None or record.fingerprint is None:
            return
        if scope == "tool":
            self._always.allow[record.tool] = record.fingerprint
            self._always.reject.pop(record.tool, None)
            self._decide_tool(record.tool, record.fingerprint, "approved", None)
        elif scope == "call":
            bound = record.bound_digest
            assert bound is not None
            self._always.calls.add((record.tool, record.fingerprint, bound))
            self._decide_tool(record.tool, record.fingerprint, "approved", None, bound)
        elif scope not in self._always.rules:
            # The calls the rule matches are approved when the run resumes (matching needs the tool itself).
            self._always.rules.append(scope)

    def reject(self, call_id: str, message: str | None = None, *, always: bool = False) -> None:
        """Rejects a waiting call (``message`` tells the model why); ``always`` rejects every call of its tool.

        A call of a nested run is rejected under its prefixed ID (``"p1/c2"``).
        Rejecting a ``nested`` call itself abandons its nested run: the call is
        answered ``permission_denied``. An ID that names more than one waiting
        call raises ``ApprovalError`` and decides nothing.
        """
        if message is not None and not isinstance(message, str):
            raise TypeError(f"reject(message=...) must be a string, got {type(message).__name__}")
        if not isinstance(always, bool):
            # A scope such as "call" would otherwise read as True, and reject every call of the tool.
            raise OptionError(f"reject(always=...) takes True or False (every call of the tool), got {always!r}")
        with _ANSWERING:  # as ``approve``
            self._reject_now(call_id, message, always)

    def _reject_now(self, call_id: str, message: str | None, always: bool) -> None:
        holder, local_id = self._target(call_id, "reject")
        if holder is not self:
            try:
                holder._reject_now(local_id, message, always)
            except StandingGiven as exc:
                raise StandingGiven(call_id, exc.always, "reject") from None
            except ApprovalError:
                raise self._refusal(call_id, "reject") from None
            return
        position = self._undecided(call_id, "reject")
        record = self._records[position]
        if record.status == "approved" and record.always is not None:
            raise StandingGiven(call_id, record.always, "reject")
        self._records[position] = replace(
            record, status="rejected", message=message, child=None, edited_args=None, edited_digest=None, always=None
        )
        if always and record.tool is not None and record.fingerprint is not None:
            self._always.reject[record.tool] = (record.fingerprint, message)
            self._always.allow.pop(record.tool, None)
            self._decide_tool(record.tool, record.fingerprint, "rejected", message)

    def _decide_tool(
        self, tool: str, fingerprint: str, status: Status, message: str | None, digest: str | None = None
    ) -> None:
        """Decides every call still waiting of ``tool`` (with the arguments of ``digest`` alone, if given)."""
        for position, record in enumerate(self._records):
            if (
                record.status == "pending"
                and record.tool == tool
                and record.fingerprint == fingerprint
                and (digest is None or record.digest == digest)
            ):
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
        # One answer at a time, and none while a resume takes the records: threads of a web server answering
        # the same call (or answering while the run resumes) could each pass the checks before either wrote.
        with _ANSWERING:
            self._answer_now(call_id, verb, output, error)

    def _answer_now(self, call_id: str, verb: str, output: Any, error: str | None) -> None:
        self._check_live()
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
        if record.edited:
            result = edited_result(result)
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
        state = RunState._create(records, list(self._duplicates), self._always.copy())
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
        with _ANSWERING:
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

    # -- serialisation ------------------------------------------------------------

    def to_json(self, *, key: bytes | str | None = None) -> str:
        """The state as JSON text; with ``key`` (a non-empty secret, bytes or str), signed so that ``from_json`` refuses
        any alteration."""
        self._check_live()
        key = checked_key(key)
        body = self._body()
        try:
            text = canonical(body)
        except (TypeError, ValueError) as exc:
            raise StateError(f"the run state holds a value that JSON cannot carry: {exc}") from None
        if _SURROGATE.search(text) is not None:
            # Surrogates (in a tool's output, say) cannot be written as UTF-8: they are written as ``\u`` escapes,
            # and sealed as they read back (an escaped pair reads back as the one character it encodes).
            body = json.loads(_escaped(text))
            text = canonical(body)
        body["seal"] = seal(text, key)
        return _escaped(json.dumps(body, ensure_ascii=False))

    @classmethod
    def from_json(cls, text: str | bytes, *, key: bytes | str | None = None) -> RunState:
        """Loads a state saved by ``to_json``; a malformed, truncated or altered text raises ``StateError``."""
        key = checked_key(key)
        try:
            body = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise StateError(f"the run state is not valid JSON (truncated?): {exc}") from None
        except RecursionError:
            raise StateError("the run state nests deeper than JSON text can be read here") from None
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            raise StateError("the text is not a toolsched run state")
        # An int, not a bool that equals one (``True == 1``).
        if type(body.get("version")) is not int or body.get("version") != VERSION:
            raise StateError(f"run state version {body.get('version')!r} is not supported (expected {VERSION})")
        sealed = body.pop("seal", None)
        if not isinstance(sealed, str):
            raise StateError("the run state has no seal; it was not written by RunState.to_json")
        try:
            if not hmac.compare_digest(sealed, seal(canonical(body), key)):
                if key is None and sealed.startswith("hmac-sha256:"):
                    raise StateError("the run state is signed; load it with the key it was saved with")
                raise StateError("the run state was altered or corrupted after it was saved (its seal does not match)")
            return cls._from_body(body, "state")
        except RecursionError:
            raise StateError("the run state nests deeper than JSON text can be read here") from None

    def _body(self) -> dict[str, Any]:
        body = {
            "format": FORMAT,
            "version": VERSION,
            "calls": [record_to_json(record) for record in self._records],
            "duplicates": [duplicate_to_json(d) for d in self._duplicates],
        }
        self._always.to_json(body)
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
        always = Standing.from_json(body, where)
        run_id = body.get("run_id")
        if run_id is not None and not isinstance(run_id, str):
            raise StateError(f"{where}.run_id must be a string")
        state = cls._create(records, duplicates, always)
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
    """The state of a run that ends waiting: its records, keeping the standing decisions of ``prior`` and those in
    force (a tool loop's); ``identity`` is the run's (its calls' idempotency keys derive from it)."""
    always = standing_for(prior)
    state = RunState._create(records, duplicates, always.copy() if always is not None else Standing())
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


def standing_for(prior: RunState | None) -> Standing | None:
    """The standing decisions a run goes by: those of the state it resumes, after those a tool loop holds in force."""
    current = in_force()
    if prior is None:
        return current
    return prior._always if current is None else current.merged(prior._always)


def standing_of(state: RunState) -> Standing:
    """The standing decisions ``state`` carries (a copy)."""
    return state._always.copy()


def _approved_args(args: Any) -> dict[str, Any] | None:
    """The arguments a person approves a call with, as a plain JSON object (None: the model's); ``OptionError``
    for anything JSON cannot carry as an object."""
    if args is None:
        return None
    if not isinstance(args, Mapping):
        raise OptionError(
            f"approve(args=...) takes the arguments as a mapping (a JSON object), got {type(args).__name__}"
        )
    try:
        # JSON would write a key that is not text as text (``1`` and ``"1"`` both as ``"1"``, one lost): refused.
        _text_keys(args)
        text = json.dumps(dict(args), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise OptionError(f"approve(args=...) must be JSON (a tool's arguments are): {exc}") from None
    plain: dict[str, Any] = json.loads(text)
    return plain


def _text_keys(value: Any) -> None:
    """``TypeError`` naming the first key of a mapping within ``value`` that is not text."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"keys must be text, got the {type(key).__name__} key {key!r}")
            _text_keys(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _text_keys(item)
