"""What every provider adapter shares: reading SDK objects and plain dicts alike,
call IDs, and results turned into wire text within each tool's budget."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolsched._executor.shaping import cut_text, shown_as_text
from toolsched._values.calls import ToolCall
from toolsched._values.codec import jsonable
from toolsched._values.content import Image, content_parts, content_text
from toolsched._values.digest import args_digest
from toolsched._values.outcome import Outcome
from toolsched._values.results import ToolResult
from toolsched.errors import MissingResultError, OptionError, ResponseFormatError

if TYPE_CHECKING:
    from toolsched._executor.executor import Executor
    from toolsched._tools.registry import ToolRegistry

__all__ = [
    "ERROR_PREFIX",
    "SYNTHETIC_ID_PREFIX",
    "Execution",
    "argument_text",
    "assign_ids",
    "block_type",
    "call_arguments",
    "call_name",
    "check_executor",
    "error_text",
    "fit_to_budget",
    "is_record",
    "left_alone",
    "object_arguments",
    "output_parts",
    "output_text",
    "position_option",
    "read",
    "registry_of",
    "results_by_call",
    "resume_outcome",
    "sendable",
    "sequence_of",
    "synthesised",
    "with_ids",
]

logger = logging.getLogger("toolsched.providers")

# What a failed call's text starts with in APIs that have no error flag (OpenAI's).
ERROR_PREFIX = "Error: "

# A call that arrives without an ID gets this prefix and its position among the response's calls.
SYNTHETIC_ID_PREFIX = "toolsched_call_"
_SYNTHETIC_ID = re.compile(re.escape(SYNTHETIC_ID_PREFIX) + r"[0-9]+_[0-9a-f]{12}_*")


@dataclass(frozen=True, slots=True)
class Execution:
    """One turn's tool calls, run: what ``execute`` returns (each provider adds its wire payload).

    ``outcome`` is the executor's ``Outcome``; when it is ``interrupted``
    (calls held for approval) the wire payload is None until the run is resumed.
    """

    calls: list[ToolCall]
    outcome: Outcome

    @property
    def results(self) -> list[ToolResult]:
        """One result per unique call ID, in the model's order."""
        return self.outcome.results

    @property
    def interrupted(self) -> bool:
        """Whether calls are waiting for approval or for answers from outside (see ``outcome.pending``)."""
        return self.outcome.interrupted


def read(item: Any, *names: str) -> Any:
    """The first of ``names`` present on ``item``: a key of a dict, or an attribute of an SDK object."""
    if type(item) is dict or isinstance(item, Mapping):
        for name in names:
            if name in item:
                return item[name]
        return None
    for name in names:
        value = getattr(item, name, None)
        if value is not None:
            return value
    return None


def is_record(item: Any) -> bool:
    """Whether ``item`` can hold fields: a mapping or an SDK model object."""
    if type(item) is dict:
        return True
    return isinstance(item, Mapping) or (
        hasattr(item, "__dict__") and not isinstance(item, (str, bytes, int, float, list, tuple))
    )


def sequence_of(value: Any, provider: str, where: str) -> Sequence[Any]:
    """``value`` as a list of items, or a ``ResponseFormatError`` naming what was expected."""
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ResponseFormatError(f"{provider}: `{where}` must be a list, got {type(value).__name__}")
    return value


def block_type(item: Any, provider: str, where: str) -> str:
    """The ``type`` of a content block or output item; a block without one is malformed."""
    if not is_record(item):
        raise ResponseFormatError(f"{provider}: {where} must be an object with a `type`, got {type(item).__name__}")
    kind = read(item, "type")
    if not isinstance(kind, str) or not kind:
        raise ResponseFormatError(f"{provider}: {where} has no `type` string")
    return kind


def left_alone(provider: str, where: str, kind: str, known: frozenset[str], suffixes: tuple[str, ...] = ()) -> None:
    """Notes a block the adapter does not execute: silent for known kinds, a warning for unknown ones."""
    if kind in known or kind.endswith(suffixes):
        return
    logger.warning("%s: %s has type %r, which toolsched does not know; it is left alone", provider, where, kind)


def positions_of(
    items: Sequence[Any],
    wanted: str,
    provider: str,
    field: str,
    known: frozenset[str],
    suffixes: tuple[str, ...],
    *,
    warn: bool,
) -> list[int]:
    """The positions of the items of type ``wanted`` in ``items`` (the list named ``field``); other kinds are
    noted (``left_alone``) when ``warn``."""
    positions = []
    for index, item in enumerate(items):
        kind = block_type(item, provider, f"{field}[{index}]")
        if kind == wanted:
            positions.append(index)
        elif warn:
            left_alone(provider, f"{field}[{index}]", kind, known, suffixes)
    return positions


def assign_ids(raw_ids: Sequence[object], contents: Sequence[tuple[object, object]] = ()) -> list[str]:
    """Every call's ID: the one the model sent when it is a non-empty string, else a synthesised one.

    A synthesised ID is ``toolsched_call_{position}_{digest}``: ``position`` is
    the call's index among the response's tool calls and ``digest`` a short
    hash of its ``contents`` entry (tool name and arguments), so re-parsing the
    same response (after a crash, say) gives the same IDs, while calls of other
    responses get other IDs (an executor shared by many conversations can tell
    them apart). It never equals an ID the model sent (a ``_`` is added until
    it is unique). Each call still gets exactly one result.
    """
    taken = {raw for raw in raw_ids if isinstance(raw, str) and raw}
    ids: list[str] = []
    for position, raw in enumerate(raw_ids):
        if isinstance(raw, str) and raw:
            ids.append(raw)
            continue
        candidate = f"{SYNTHETIC_ID_PREFIX}{position}"
        if position < len(contents):
            name, args = contents[position]
            content = f"{name!s}\x00{args_digest(call_arguments(args))}"
            candidate += "_" + hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        while candidate in taken:
            candidate += "_"
        taken.add(candidate)
        ids.append(candidate)
    return ids


def synthesised(call: ToolCall) -> bool:
    """Whether ``call``'s ID has the form ``assign_ids`` gives a call the model sent without one.

    The form is ``toolsched_call_{position}_{12 hex digits}`` (with any ``_``
    added for uniqueness): an ID the model sent that merely starts like it
    (``toolsched_call_0``) is the model's. The digest is not recomputed: where
    this is asked (Gemini), synthesised IDs are never sent to the model, so it
    could send one of that form only by chance.
    """
    return _SYNTHETIC_ID.fullmatch(call.id) is not None


def with_ids(entries: Sequence[Any], positions: Sequence[int], ids: Sequence[str], field: str) -> list[Any] | None:
    """``entries`` with the entry at each of ``positions`` carrying its call's ID as ``field``.

    An entry whose ``field`` is not that ID already becomes a plain copy
    (``as_record``) with it; the others stay as they are. None when every
    entry carries its ID already (nothing to change).
    """
    filled: list[Any] | None = None
    for position, call_id in zip(positions, ids, strict=True):
        entry = entries[position]
        if read(entry, field) == call_id:
            continue
        if filled is None:
            filled = list(entries)
        copy = as_record(entry)
        if not isinstance(copy, dict):
            raise ResponseFormatError(f"a tool call must be an object, got {type(entry).__name__}")
        copy[field] = call_id
        filled[position] = copy
    return filled


def call_arguments(raw: Any) -> Mapping[str, Any] | str:
    """Arguments as the engine takes them: a mapping, or JSON text it parses and validates.

    Anything else (a list, a number) is passed on as JSON so that the engine
    answers it with an ``invalid_input`` result naming the rule.
    """
    if type(raw) is dict or type(raw) is str:
        return raw
    if raw is None:
        return {}
    if isinstance(raw, (str, Mapping)):
        return raw
    if hasattr(raw, "model_dump"):
        dumped = raw.model_dump(mode="json")
        if isinstance(dumped, Mapping):
            return dumped
    return json.dumps(raw, default=str)


def object_arguments(raw: Any) -> Mapping[str, Any] | str:
    """Arguments of an API that carries them as a JSON object (Anthropic's ``input``, Gemini's ``args``), as the
    engine takes them.

    Text there is no object, whatever it holds: it is passed on as a JSON string, which the engine answers with
    ``invalid_input``, never parsed and run. Anything else is read as ``call_arguments`` reads it.
    """
    if isinstance(raw, str):
        return json.dumps(raw)
    return call_arguments(raw)


def argument_text(raw: Any) -> str:
    """A call's arguments that came as something other than text, as the JSON text an API that carries them
    as text (OpenAI's) takes back: what the call was run with (an empty object for none)."""
    arguments = call_arguments(raw)
    return arguments if isinstance(arguments, str) else output_text(dict(arguments))


def as_record(item: Any) -> Any:
    """A plain, mutable copy of an SDK object (its JSON form, unset fields left out) or of a dict."""
    if isinstance(item, Mapping):
        return dict(item)
    if hasattr(item, "model_dump"):
        return item.model_dump(mode="json", exclude_none=True)
    return item


def position_option(value: Any, name: str) -> int:
    """A ``choice=``/``candidate=`` option: a whole number not below 0, else ``OptionError`` (a bool or text would
    pick another choice, or none)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise OptionError(f"{name} must be a whole number from 0, got {value!r}")
    return int(value)


def call_name(raw: Any) -> str:
    """The tool name of a call; a missing or non-string name is answered as an unknown tool."""
    return raw if isinstance(raw, str) else ""


# One encoder for every reply: building one per call costs more than encoding a small output.
_ENCODER = json.JSONEncoder(ensure_ascii=False, default=jsonable)


def sendable(text: str) -> str:
    """``text`` as valid Unicode, the only text a request body can carry (the SDKs encode it as UTF-8).

    A lone surrogate (a file name read with ``surrogateescape``, a string cut inside a pair) becomes
    U+FFFD; a pair written as two code units becomes the character it encodes; other text is returned
    as it is.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def output_text(output: Any) -> str:
    """A tool's output as the text a function-call reply carries.

    Text stays as it is, ``None`` is empty, an output with images
    (``toolsched._values.content``) its text with a short stand-in for each image,
    other bytes are decoded as UTF-8, and anything else is JSON (pydantic
    models and dataclasses as their fields; what JSON cannot hold as its ``str``).
    It never raises: whatever a tool returns, the turn's results go out, as
    text a request can carry (``sendable``).
    """
    return sendable(_as_text(output))


def _as_text(output: Any) -> str:
    if output is None:
        return ""
    if isinstance(output, str):
        return output
    parts = content_parts(output)
    if parts is not None:
        return content_text(parts)
    if isinstance(output, bytes):
        return output.decode("utf-8", errors="replace")
    try:
        return _ENCODER.encode(output)
    except (TypeError, ValueError, RecursionError):
        # Keys JSON cannot hold, a value that contains itself or nests too deep, an int past Python's digit
        # limit: the text the budget measured.
        return shown_as_text(output)


def output_parts(
    output: Any, tool_name: str, registry: ToolRegistry | None, *, shaped: bool = False
) -> list[str | Image] | None:
    """An output with images as its text and image parts, in order: the images whole, the text in budget.

    Text over the tool's result budget is cut as one text and put first
    (unless ``shaped``: see ``fit_to_budget``).
    None when the output holds no image (``toolsched._values.content``): send it as text.
    """
    parts = content_parts(output)
    if parts is None:
        return None
    text = content_text(parts, describe=False)
    fitted = fit_to_budget(text, tool_name, registry, shaped=shaped)
    if fitted is text:
        return [
            sendable(part) if isinstance(part, str) else part for part in parts if not isinstance(part, str) or part
        ]
    return [sendable(fitted), *(part for part in parts if isinstance(part, Image))]


def error_text(result: ToolResult) -> str:
    """The message the model sees for a failed call."""
    return sendable(result.error or f"the call of `{result.tool_name}` failed ({result.error_kind or 'error'})")


def fit_to_budget(text: str, tool_name: str, registry: ToolRegistry | None, *, shaped: bool = False) -> str:
    """``text`` cut to the tool's result budget (``max_result_chars``, ``max_result_lines``).

    Outputs are already shaped by the executor; this also bounds error
    messages and the JSON of outputs that grew when serialised. The text of
    a result the executor cut (``shaped``: its ``truncated``) is left as it
    is: cut again, its marker would count the wrong characters, and an
    offloaded output's note, which names the file, would be lost.
    """
    if registry is None or shaped:
        return text
    member = registry.get(tool_name)
    if member is None or (len(text) <= member.max_result_chars and member.max_result_lines is None):
        return text
    cut = "tail" if member.truncate == "offload" else member.truncate
    fitted = cut_text(text, member.max_result_chars, max_lines=member.max_result_lines, cut=cut)[1]
    return text if fitted is None else fitted


def results_by_call(
    calls: Sequence[ToolCall], results: Sequence[ToolResult], provider: str, registry: ToolRegistry | None = None
) -> list[tuple[ToolCall, ToolResult]]:
    """Pairs each unique call ID with its result, in the model's order.

    Every call must have a result: an interrupted run must be resumed first
    (``MissingResultError``). A repeated call ID is answered once. Calls that
    are no ``ToolCall``s, results no ``ToolResult``s (the ``Outcome`` itself,
    say) or a ``registry`` that is none are refused with ``OptionError``.
    """
    calls, results = _reply_inputs(calls, results, registry)
    by_id = {result.call_id: result for result in results}
    pairs: list[tuple[ToolCall, ToolResult]] = []
    seen: set[str] = set()
    for call in calls:
        if call.id in seen:
            continue
        seen.add(call.id)
        result = by_id.get(call.id)
        if result is None:
            raise MissingResultError(
                f"{provider}: call {call.id!r} ({call.name}) has no result; "
                "resume an interrupted run before building the reply"
            )
        pairs.append((call, result))
    return pairs


def _reply_inputs(calls: Any, results: Any, registry: Any) -> tuple[list[ToolCall], list[ToolResult]]:
    """The calls and results a reply is built from, as lists (any collection of each: a list, a tuple, a
    generator); what a reply cannot be built from is refused, naming the argument (``OptionError``)."""
    from toolsched._tools.registry import ToolRegistry

    listed: list[list[Any]] = []
    for name, items, kind in (("calls", calls, ToolCall), ("results", results, ToolResult)):
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
            hint = "; pass outcome.results" if hasattr(items, "results") and hasattr(items, "pending") else ""
            raise OptionError(f"{name} must be a list of {kind.__name__}, got {type(items).__name__}{hint}")
        items = list(items)
        for index, item in enumerate(items):
            if not isinstance(item, kind):
                raise OptionError(f"{name}[{index}] must be a {kind.__name__}, got {type(item).__name__}")
        listed.append(items)
    if registry is not None and not isinstance(registry, ToolRegistry):
        raise OptionError(
            f"registry must be a ToolRegistry or None, got {type(registry).__name__}; pass executor.registry"
        )
    return listed[0], listed[1]


def check_executor(executor: Any) -> None:
    """Refuses what is no ``Executor`` (``OptionError``) before any of a response is read or run: the response
    given first, the executor's registry."""
    from toolsched._executor.executor import Executor

    if not isinstance(executor, Executor):
        raise OptionError(
            f"executor must be a toolsched Executor, got {type(executor).__name__}; "
            "the executor comes first: execute(executor, response)"
        )


def registry_of(tools: Executor | ToolRegistry) -> ToolRegistry:
    """The registry behind an executor (or the registry itself)."""
    from toolsched._executor.executor import Executor
    from toolsched._tools.registry import ToolRegistry

    if isinstance(tools, Executor):
        return tools.registry
    if isinstance(tools, ToolRegistry):
        return tools
    raise TypeError(f"expected a toolsched Executor or ToolRegistry, got {type(tools).__name__}")


async def resume_outcome(executor: Executor, state: Any) -> Outcome:
    """``executor.resume(state)``: the full outcome once held calls are decided."""
    outcome: Outcome = await executor.resume(state)
    return outcome
