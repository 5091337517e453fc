"""The journal's row codec: calls, results and payloads as stored, and checks of what is read back."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar, cast

from toolsched._values.calls import ToolCall
from toolsched._values.codec import RESULT_FIELD_TYPES, encode_output
from toolsched._values.digest import args_digest
from toolsched._values.results import ERROR_KINDS, ToolResult
from toolsched.errors import (
    JournalCorruptError,
    JournalError,
    UnstorableOutputError,
)
from toolsched.journal._records import ALLOWED_FROM, JournaledCall, RunRecord, Transition

__all__ = [
    "StoredTime",
    "args_fault",
    "build_record",
    "check_payload_args",
    "check_run_id",
    "check_text",
    "damaged_column",
    "decode_call",
    "decode_result",
    "encode_call",
    "encode_payload",
    "encode_result",
    "stored",
    "stored_lease",
    "stored_or_none",
    "stored_owner",
    "stored_stamps",
    "to_json",
]

_DECISIONS = frozenset({"pending", "approved", "rejected"})
_MAX_RUN_ID = 200
_RESULT_SCALARS = (
    "error",
    "error_kind",
    "is_error",
    "duration_ms",
    "was_concurrent",
    "batch",
    "truncated",
    "attempts",
    "repaired",
    "edited",
)
_CALL_TEXT_COLUMNS = ("call_id", "tool_name", "args", "args_form", "args_digest")
_TYPE_NAMES: dict[type, str] = {str: "text", int: "an integer", bool: "true or false", datetime: "a timestamp"}

T = TypeVar("T")


# -- values as stored ----------------------------------------------------------------


def check_run_id(run_id: object) -> str:
    if not isinstance(run_id, str) or not run_id:
        raise JournalError(f"run_id must be a non-empty string, got {run_id!r}")
    if len(run_id) > _MAX_RUN_ID:
        raise JournalError(f"run_id must be at most {_MAX_RUN_ID} characters, got {len(run_id)}")
    check_text("run_id", run_id)
    return run_id


def check_text(label: str, value: str) -> None:
    """Text a journal stores as a column: no NUL character, valid Unicode (no lone surrogates)."""
    if "\x00" in value:
        raise JournalError(f"{label} {value!r} contains a NUL character, which a journal cannot store")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise JournalError(f"{label} {value!r} is not valid Unicode text (a lone surrogate)") from None


def to_json(value: Any) -> str:
    """Storage form of a JSON value: ASCII only, so any string survives any database."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))


def encode_call(position: int, call: ToolCall) -> tuple[int, str, str, str, str, str]:
    """``(position, call_id, tool_name, args, args_form, digest)`` as stored; refuses what cannot be stored."""
    if not isinstance(call, ToolCall):
        raise JournalError(f"calls[{position}] must be a ToolCall, got {type(call).__name__}")
    check_text(f"calls[{position}].id", call.id)
    check_text(f"calls[{position}].name", call.name)
    if isinstance(call.args, str):
        return position, call.id, call.name, to_json(call.args), "text", args_digest(call.args)
    try:
        args = dict(call.args)
        stored = to_json(args)
        digest = args_digest(args)
    except (TypeError, ValueError) as exc:
        raise JournalError(
            f"the arguments of call {call.id!r} ({call.name}) are not JSON, so a journal cannot store them: {exc}"
        ) from None
    return position, call.id, call.name, stored, "object", digest


def args_fault(args: Any) -> str | None:
    """Why a journal cannot store a call's arguments (``encode_call`` would refuse them), or None."""
    if isinstance(args, str):
        return None
    try:
        mapping = dict(args)
        to_json(mapping)
        args_digest(mapping)
    except (TypeError, ValueError) as exc:
        return str(exc) or type(exc).__name__
    return None


def damaged_column(where: str, column: str, found: object, expected: str) -> JournalCorruptError:
    """The error for a column that holds what the journal never writes there (altered behind its back)."""
    shown = repr(found)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return JournalCorruptError(f"{where}: {column} holds {shown} ({type(found).__name__}), not {expected}")


def stored(where: str, column: str, found: object, expected: type[T]) -> T:
    """A value read from a row, refused as damage unless it has the type the journal writes in its column.

    A database that does not enforce column types (SQLite) hands back whatever
    was put there; comparing or converting it unchecked fails with a bare
    ``TypeError`` far from the row.
    """
    # bool is an int to isinstance, but no journal column holds one where an integer belongs.
    if isinstance(found, expected) and (expected is bool or not isinstance(found, bool)):
        return found
    raise damaged_column(where, column, found, _TYPE_NAMES.get(expected, expected.__name__))


def stored_or_none(where: str, column: str, found: object, expected: type[T]) -> T | None:
    """``stored`` for a column that may be NULL."""
    return None if found is None else stored(where, column, found, expected)


# How a backend reads one of its stored times: (run ID, column, what the row holds) -> the time in UTC, or
# ``JournalCorruptError`` when the row holds anything else.
StoredTime = Callable[[str, str, object], datetime]


def stored_owner(run_id: str, found: object) -> str | None:
    """The stored ``owner``: ``None`` when nobody holds the run."""
    return stored_or_none(f"run {run_id!r}", "toolsched_runs.owner", found, str)


def stored_lease(run_id: str, found: object, read_time: StoredTime) -> datetime | None:
    """The stored ``lease_until``: ``None`` when nobody holds the run."""
    return None if found is None else read_time(run_id, "lease_until", found)


def stored_stamps(
    run_id: str, row: Sequence[object], read_time: StoredTime
) -> tuple[str | None, datetime | None, datetime, datetime]:
    """A run row's ``(owner, lease_until, created_at, updated_at)`` as read, each checked (``build_record``'s
    ``run_row``)."""
    owner, lease_until, created_at, updated_at = row
    return (
        stored_owner(run_id, owner),
        stored_lease(run_id, lease_until, read_time),
        read_time(run_id, "created_at", created_at),
        read_time(run_id, "updated_at", updated_at),
    )


def decode_call(run_id: str, position: int, call_id: str, name: str, args: str, form: str, digest: str) -> ToolCall:
    where = f"run {run_id!r}, call {call_id!r}"
    try:
        value = json.loads(args)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than any value the journal writes
        raise JournalCorruptError(f"{where}: the stored arguments are not JSON") from None
    if form == "text" and isinstance(value, str):
        restored: Mapping[str, Any] | str = value
    elif form == "object" and isinstance(value, dict):
        restored = value
    else:
        raise JournalCorruptError(f"{where}: the stored arguments do not match their form {form!r}")
    if args_digest(restored) != digest:
        raise JournalCorruptError(f"{where}: the stored arguments do not match their digest (altered?)")
    try:
        return ToolCall(call_id, name, restored)
    except (TypeError, ValueError) as exc:
        raise JournalCorruptError(f"{where}: {exc}") from None


def encode_result(result: ToolResult) -> str:
    if not isinstance(result, ToolResult):
        raise JournalError(f"a finished transition carries a ToolResult, got {type(result).__name__}")
    try:
        output, exact = encode_output(result.output)
    except ValueError as exc:
        raise UnstorableOutputError(f"the output of call {result.call_id!r} cannot be journaled: {exc}") from None
    body = {name: getattr(result, name) for name in _RESULT_SCALARS}
    body["call_id"] = result.call_id
    body["tool_name"] = result.tool_name
    body["offload_path"] = result.offload_path
    # What ``decode_result`` would refuse is refused here: once finished, a call cannot be written again.
    for name, types in RESULT_FIELD_TYPES.items():
        if type(body[name]) not in types:
            allowed = " or ".join("None" if kind is type(None) else kind.__name__ for kind in types)
            raise JournalError(
                f"the result of call {result.call_id!r} cannot be journaled: its {name} must be {allowed}, "
                f"got {body[name]!r}"
            )
    if body["error_kind"] is not None and body["error_kind"] not in ERROR_KINDS:
        raise JournalError(
            f"the result of call {result.call_id!r} cannot be journaled: its error_kind {body['error_kind']!r} "
            f"is none of {', '.join(sorted(ERROR_KINDS))}"
        )
    body["exact"] = exact
    try:
        scalars = to_json(body)
    except (TypeError, ValueError) as exc:
        raise JournalError(f"the result of call {result.call_id!r} has a field JSON cannot hold: {exc}") from None
    # The output is spliced in as stored text, so it is encoded only once.
    return scalars[:-1] + ',"output":' + output + "}"


# A stored result: the fields of a ToolResult (one table with run states), and whether its output is exact.
_RESULT_TYPES: dict[str, tuple[type, ...]] = {**RESULT_FIELD_TYPES, "exact": (bool,)}


def decode_result(where: str, call_id: str, text: str | None) -> tuple[ToolResult, bool]:
    try:
        body = json.loads(text) if text is not None else None
    except (ValueError, RecursionError):
        raise JournalCorruptError(f"{where}: the stored result is not JSON") from None
    if isinstance(body, dict) and "attempts" not in body:
        body["attempts"] = 1  # stored before results counted their attempts
    if isinstance(body, dict) and "repaired" not in body:
        body["repaired"] = False  # stored before results said whether they were repaired
    if isinstance(body, dict) and "edited" not in body:
        body["edited"] = False  # stored before results said whether a person edited the call
    if not isinstance(body, dict) or set(body) != {*_RESULT_TYPES, "output"}:
        raise JournalCorruptError(f"{where}: the stored result does not hold the fields of a ToolResult")
    for name, types in _RESULT_TYPES.items():
        if type(body[name]) not in types:
            raise JournalCorruptError(f"{where}: the stored result's {name} has the wrong type")
    kind = body["error_kind"]
    if body["call_id"] != call_id or (kind is not None and kind not in ERROR_KINDS):
        raise JournalCorruptError(f"{where}: the stored result does not belong to this call")
    exact = body.pop("exact")
    return ToolResult(**body), exact


def encode_payload(transition: str, call_id: str, payload: Any) -> str | None:
    if transition == "finished":
        return encode_result(payload)
    if payload is None:
        return None
    if not isinstance(payload, Mapping):
        kind = type(payload).__name__
        raise JournalError(f"the payload of a {transition!r} transition must be a mapping, got {kind}")
    try:
        text = to_json(dict(payload))
    except (TypeError, ValueError) as exc:
        raise JournalError(f"the payload of {transition!r} for call {call_id!r} is not JSON: {exc}") from None
    if "args" in payload and "digest" in payload:
        # Checked as ``build_record`` reads it back (``check_payload_args``): a mismatch stored would make every
        # later read of the run take it for damage.
        stored_form = json.loads(text)
        if stored_form["digest"] != args_digest(stored_form["args"]):
            raise JournalError(
                f"the payload of {transition!r} for call {call_id!r} has arguments that do not match its digest"
            )
    return text


def build_record(
    run_id: str,
    run_row: tuple[str | None, datetime | None, datetime, datetime],
    call_rows: Sequence[Sequence[object]],
    transition_rows: Sequence[Sequence[object]],
) -> RunRecord:
    """A ``RunRecord`` from the stored rows: calls by position, transitions by sequence.

    ``run_row`` is checked by the backend (its timestamps are its own); the
    call and transition rows come as read, and each column is checked here.
    """
    owner, lease_until, created_at, updated_at = run_row
    turn: list[ToolCall] = []
    first: dict[str, tuple[int, ToolCall, str]] = {}
    for row in call_rows:
        position = stored(f"run {run_id!r}", "toolsched_calls.position", row[0], int)
        where = f"run {run_id!r}, call at position {position}"
        call_id, name, args, form, digest = (
            stored(where, f"toolsched_calls.{column}", found, str)
            for column, found in zip(_CALL_TEXT_COLUMNS, row[1:], strict=True)
        )
        call = decode_call(run_id, position, call_id, name, args, form, digest)
        turn.append(call)
        first.setdefault(call_id, (position, call, digest))
    state: dict[str, Transition] = dict.fromkeys(first, "planned")
    starts: dict[str, int] = dict.fromkeys(first, 0)
    decisions: dict[str, Mapping[str, Any] | None] = {}
    run_with: dict[str, Mapping[str, Any] | None] = {}
    results: dict[str, tuple[ToolResult, bool]] = {}
    for row in transition_rows:
        call_id = stored(f"run {run_id!r}", "toolsched_transitions.call_id", row[0], str)
        where = f"run {run_id!r}, call {call_id!r}"
        kind = stored(where, "toolsched_transitions.kind", row[1], str)
        payload = stored_or_none(where, "toolsched_transitions.payload", row[2], str)
        if call_id not in first:
            raise JournalCorruptError(f"{where}: a transition names a call the run does not have")
        if kind not in ALLOWED_FROM:
            raise JournalCorruptError(f"{where}: unknown transition {kind!r}")
        if state[call_id] not in ALLOWED_FROM[kind]:
            raise JournalCorruptError(f"{where}: transition {kind!r} cannot follow {state[call_id]!r}")
        state[call_id] = cast(Transition, kind)
        if kind == "started":
            starts[call_id] += 1
        elif kind == "finished":
            results[call_id] = decode_result(where, call_id, payload)
        if kind == "started" or kind in _DECISIONS:
            try:
                decoded = json.loads(payload) if payload is not None else None
            except (ValueError, RecursionError):
                raise JournalCorruptError(f"{where}: the payload of {kind!r} is not JSON") from None
            if decoded is not None and not isinstance(decoded, dict):
                raise JournalCorruptError(f"{where}: the payload of {kind!r} is not an object")
            if decoded is not None and "args" in decoded and "digest" in decoded:
                check_payload_args(where, kind, decoded)
            (run_with if kind == "started" else decisions)[call_id] = decoded
    calls = []
    for call_id, (position, call, digest) in first.items():
        finished = results.get(call_id)
        calls.append(
            JournaledCall(
                call_id,
                call.name,
                position,
                digest,
                state[call_id],
                starts[call_id],
                decisions.get(call_id),
                finished[0] if finished else None,
                finished[1] if finished else True,
                run_with.get(call_id),
            )
        )
    return RunRecord(run_id, tuple(turn), tuple(calls), owner, lease_until, created_at, updated_at)


def check_payload_args(where: str, kind: str, payload: Mapping[str, Any]) -> None:
    """Refuses as damage a transition whose arguments (what a call was approved or started with) do not match
    the digest written beside them: recovery runs a call with them."""
    if payload["digest"] != args_digest(payload["args"]):
        raise JournalCorruptError(
            f"{where}: the arguments of its {kind!r} transition do not match their digest (altered?)"
        )
