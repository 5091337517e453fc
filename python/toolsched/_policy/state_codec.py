"""A run state's JSON form: its records, results and nested runs, sealed with SHA-256 or signed with HMAC-SHA256."""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from toolsched._policy.state_records import (
    STATUSES,
    CallRecord,
    CallSignature,
    ChildRecord,
    StepEntry,
    TurnEntry,
)
from toolsched._values.calls import Duplicate
from toolsched._values.codec import RESULT_FIELD_TYPES, encode_output
from toolsched._values.digest import args_digest
from toolsched._values.results import ERROR_KINDS, ToolResult, result_fields
from toolsched.errors import StateError

if TYPE_CHECKING:
    from toolsched._policy.runstate import RunState

__all__ = [
    "EXTERNAL_STATUSES",
    "FORMAT",
    "VERSION",
    "LoadState",
    "canonical",
    "child_from_json",
    "child_to_json",
    "duplicate_from_json",
    "duplicate_to_json",
    "listed",
    "record_from_json",
    "record_to_json",
    "seal",
]

FORMAT = "toolsched.RunState"
VERSION = 1

#: The statuses of an external call's record: handed out and waiting, or answered and waiting for the resume.
EXTERNAL_STATUSES = ("external", "completed")

#: Reads a nested run's own state from its JSON body (``RunState._from_body``), naming ``where`` in errors.
LoadState = Callable[[Any, str], "RunState"]


def canonical(body: Mapping[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def seal(canonical: str, key: bytes | str | None) -> str:
    if key is None:
        return "sha256:" + hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
    secret = key.encode() if isinstance(key, str) else key
    return "hmac-sha256:" + hmac.new(secret, canonical.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


_RESULT_FIELDS = result_fields()


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
        if record.status in EXTERNAL_STATUSES:
            item["external"] = {"handed_out": record.handed_out, "deadline": record.deadline}
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
    result = None
    if status in EXTERNAL_STATUSES:
        handed_out, deadline = _handout_from_json(item.get("external"), f"{where}.external")
        if status == "completed":
            result = _result_from_json(item.get("result"), call_id, where)
        elif "result" in item:
            raise StateError(f"{where}: an external call waiting for its answer carries no result")
    elif "external" in item or "result" in item:
        raise StateError(f"{where}: only an external call carries a hand-out and an answer")
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
    )


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
