"""Google Gemini: ``functionCall`` parts in, ``functionResponse`` parts out.

Works on the ``google-genai`` SDK's objects (``GenerateContentResponse``,
``Content``, ``Part``) and on plain dicts from the REST API (camelCase or
snake_case keys); the SDK itself is never imported here. Text, thoughts and
hosted code execution parts are left alone; a dict part of a kind this module
does not know is left alone too, with a warning on the ``toolsched.providers``
logger.

Gemini may send function calls without IDs: those get
``toolsched_call_{position}_{digest}`` for the run, and their ``functionResponse``
carries no ``id`` (the API matches them by order and name); a call the model
gave an ID is answered with that ID.

::

    response = await client.aio.models.generate_content(model=..., contents=contents,
                                                        config={"tools": tool_definitions(executor)})
    turn = await execute(executor, response)
    contents += [turn.assistant, turn.content]     # turn.assistant: response.candidates[0].content
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toolsched._executor.executor import Executor, Steering
from toolsched._tools.registry import ToolRegistry
from toolsched._values.calls import ToolCall
from toolsched._values.content import Image
from toolsched._values.results import ToolResult
from toolsched.errors import IncompleteStreamError, ResponseFormatError
from toolsched.providers._flow import Flow
from toolsched.providers._wire import (
    Execution,
    as_record,
    assign_ids,
    call_name,
    check_executor,
    error_text,
    fit_to_budget,
    is_record,
    left_alone,
    object_arguments,
    output_parts,
    output_text,
    position_option,
    read,
    registry_of,
    results_by_call,
    sequence_of,
    synthesised,
)

__all__ = [
    "ContentAssembler",
    "GeminiExecution",
    "calls_from",
    "execute",
    "execute_stream",
    "model_content",
    "results_to_content",
    "results_to_parts",
    "resume",
    "tool_definitions",
]

PROVIDER = "gemini"

# Part fields that are not client function calls, in both spellings the REST API accepts.
_KNOWN_FIELDS = frozenset(
    {
        "text",
        "thought",
        "thoughtSignature",
        "thought_signature",
        "inlineData",
        "inline_data",
        "fileData",
        "file_data",
        "executableCode",
        "executable_code",
        "codeExecutionResult",
        "code_execution_result",
        "functionResponse",
        "function_response",
        "videoMetadata",
        "video_metadata",
        "mediaResolution",
        "media_resolution",
        "partMetadata",
        "part_metadata",
        "toolCall",
        "tool_call",
        "toolResponse",
        "tool_response",
    }
)


# Fields that mark a whole response (rather than one Content), in both spellings.
_RESPONSE_FIELDS = ("candidates", "promptFeedback", "prompt_feedback", "usageMetadata", "usage_metadata")


def _has(item: Any, field: str) -> bool:
    return field in item if isinstance(item, Mapping) else hasattr(item, field)


@dataclass(frozen=True, slots=True)
class GeminiExecution(Execution):
    """``calls``, ``outcome`` and ``content``: ``{"role": "user", "parts": [functionResponse, ...]}``.

    ``content`` is None when the response had no function calls, or while the
    run is interrupted (then ``resume`` builds it).
    """

    content: dict[str, Any] | None
    # What the model said, as the next request takes it (``model_content``; assembled by ``execute_stream``).
    assistant: Any = None

    @property
    def parts(self) -> list[dict[str, Any]]:
        """The ``functionResponse`` parts alone."""
        return [] if self.content is None else list(self.content["parts"])


def model_content(response: Any, *, candidate: int = 0) -> Any:
    """The model's ``Content`` of a response (``candidates[candidate].content``), or None when it has none.

    A ``Content`` (with ``parts``) is returned as it is.
    """
    candidate = position_option(candidate, "candidate")
    if not is_record(response):
        raise ResponseFormatError(
            f"{PROVIDER}: expected a GenerateContentResponse, a response dict, a Content or a list of parts, "
            f"got {type(response).__name__}"
        )
    if _has(response, "parts") and not _has(response, "candidates"):
        return response
    if not any(_has(response, key) for key in _RESPONSE_FIELDS):
        raise ResponseFormatError(f"{PROVIDER}: the response has neither `candidates` nor `parts`")
    # A response without candidates (a blocked prompt) has nothing to call.
    candidates = sequence_of(read(response, "candidates"), PROVIDER, "candidates")
    if not candidates:
        return None
    if not 0 <= candidate < len(candidates):
        raise ResponseFormatError(
            f"{PROVIDER}: the response has {len(candidates)} candidates; candidate {candidate} does not exist"
        )
    return read(candidates[candidate], "content")


def _sendable(content: Any) -> Any:
    """``content`` as the next request takes it back: the same, unless a ``functionCall``'s ``args`` is no object
    (its call answered ``invalid_input``); then a plain copy in which those calls have empty args."""
    if content is None:
        return None
    parts = read(content, "parts")
    if not isinstance(parts, Sequence) or isinstance(parts, (str, bytes)):
        return content
    fixed = [_sendable_part(part) for part in parts]
    if all(new is old for new, old in zip(fixed, parts, strict=True)):
        return content
    copy = as_record(content)
    copy["parts"] = fixed
    return copy


def _sendable_part(part: Any) -> Any:
    """``part``, or a plain copy whose ``functionCall`` has empty args when its args is no object (the SDK's
    ``FunctionCall``, as the API, takes only an object there)."""
    function_call = read(part, "function_call", "functionCall")
    args = read(function_call, "args") if function_call is not None and is_record(function_call) else None
    if _sent_args(args) is args:
        return part
    copy = as_record(part)
    field = "functionCall" if "functionCall" in copy else "function_call"
    call = as_record(function_call)
    call["args"] = {}
    copy[field] = call
    return copy


def _sent_args(args: Any) -> Any:
    """A ``functionCall``'s ``args`` as the content sent back holds them: an object (or none) as it is, anything
    else empty (``_sendable_part``). A call's synthesised ID is digested from them, so that the turn sent back
    (a streamed turn's ``assembled()``, the execution's ``assistant``) gives each call the ID it ran under."""
    return args if args is None or isinstance(args, Mapping) else {}


def _parts(response: Any, candidate: int) -> Sequence[Any]:
    if isinstance(response, (list, tuple)):
        return response
    content = model_content(response, candidate=candidate)
    return [] if content is None else sequence_of(read(content, "parts"), PROVIDER, "parts")


def calls_from(response: Any, *, candidate: int = 0) -> list[ToolCall]:
    """The ``functionCall`` parts of a response, as calls in the model's order.

    ``response`` is an SDK ``GenerateContentResponse``, its REST dict, a
    ``Content`` or a list of parts. A call without an ``id`` gets
    ``toolsched_call_{position}_{digest}`` (its index among the response's
    calls and a digest of its name and arguments, as the content sent back
    holds them: the same from ``model_content`` and from the execution's
    ``assistant``), and its answer no ``id``; ``args`` that are no object (text too, whatever it holds) are answered
    ``invalid_input``. A response without candidates has no calls. Raises
    ``ResponseFormatError`` for something that is not a response.
    """
    function_calls = []
    for index, part in enumerate(_parts(response, candidate)):
        if not is_record(part):
            raise ResponseFormatError(f"{PROVIDER}: parts[{index}] must be an object, got {type(part).__name__}")
        function_call = read(part, "function_call", "functionCall")
        if function_call is not None:
            function_calls.append(function_call)
        elif isinstance(part, Mapping) and part and not _KNOWN_FIELDS.intersection(part):
            left_alone(PROVIDER, f"parts[{index}]", "/".join(sorted(map(str, part))), frozenset())
    ids = assign_ids(
        [read(function_call, "id") for function_call in function_calls],
        [(read(function_call, "name"), _sent_args(read(function_call, "args"))) for function_call in function_calls],
    )
    return [
        ToolCall(call_id, call_name(read(function_call, "name")), object_arguments(read(function_call, "args")))
        for call_id, function_call in zip(ids, function_calls, strict=True)
    ]


def _response_part(call: ToolCall, result: ToolResult, registry: ToolRegistry | None) -> dict[str, Any]:
    media: list[dict[str, Any]] = []
    parts = (
        None if result.is_error else output_parts(result.output, result.tool_name, registry, shaped=result.truncated)
    )
    if result.is_error:
        response: dict[str, Any] = {"error": fit_to_budget(error_text(result), result.tool_name, registry)}
    elif parts is not None:
        response = {"output": "\n".join(part for part in parts if isinstance(part, str))}
        media = [
            {"inlineData": {"mimeType": part.media_type, "data": part.base64()}}
            for part in parts
            if isinstance(part, Image)
        ]
    else:
        output = result.output
        text = output_text(output)
        fitted = fit_to_budget(text, result.tool_name, registry, shaped=result.truncated)
        value: Any
        if fitted is not text or isinstance(output, (str, bytes)):
            value = fitted
        elif output is None or isinstance(output, bool) or (isinstance(output, float) and math.isfinite(output)):
            value = output
        else:
            value = _json_value(text)
        response = {"output": value}
    function_response: dict[str, Any] = {"name": call.name, "response": response}
    if not synthesised(call):
        function_response["id"] = call.id
    if media:
        function_response["parts"] = media
    return {"functionResponse": function_response}


# The API reads a functionResponse's ``response`` as a ``google.protobuf.Struct``, whose numbers are doubles:
# integers past 2**53 would reach the model rounded (a 64-bit ID as another ID), or not be read at all.
_EXACT_INT = 2**53


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _exact_int(digits: str) -> int:
    value = int(digits)
    if not -_EXACT_INT <= value <= _EXACT_INT:
        raise ValueError(f"{digits} is past what a double holds exactly")
    return value


def _json_value(text: str) -> Any:
    """The JSON the budget was measured on, read back: the value the model sees.

    Text that is no strict JSON (the ``str()`` of a value JSON cannot hold, an int past Python's digit
    limit, NaN or an infinity), or that holds an integer the API's doubles cannot hold exactly (past
    2**53), goes as the text itself, every digit in it: any HTTP client can send it.
    """
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_int=_exact_int)
    except (ValueError, RecursionError):
        return text


def results_to_parts(
    calls: Sequence[ToolCall], results: Sequence[ToolResult], *, registry: ToolRegistry | None = None
) -> list[dict[str, Any]]:
    """One ``functionResponse`` part per unique call ID, in the model's order.

    ``response`` is ``{"output": value}`` (the tool's value as JSON) or
    ``{"error": message}``; an output with images (``toolsched._values.content``) has
    its text as ``output`` and its images as the response's ``parts``
    (``inlineData``, base64); ``name`` is the name the model called. With
    ``registry``, outputs and errors are held to their tool's result budget.
    Raises ``MissingResultError`` when a call has no result, ``OptionError`` for calls or results of the wrong kind.
    """
    return [
        _response_part(call, result, registry) for call, result in results_by_call(calls, results, PROVIDER, registry)
    ]


def results_to_content(
    calls: Sequence[ToolCall], results: Sequence[ToolResult], *, registry: ToolRegistry | None = None
) -> dict[str, Any]:
    """The ``Content`` that answers every call: ``{"role": "user", "parts": [functionResponse, ...]}``."""
    return {"role": "user", "parts": results_to_parts(calls, results, registry=registry)}


def tool_definitions(tools: Executor | ToolRegistry) -> list[dict[str, Any]]:
    """The ``tools`` config entry: the registry's Gemini export (one entry with every function declaration)."""
    return registry_of(tools).to_gemini()


_FLOW = Flow(GeminiExecution, results_to_content, lambda: None, lambda turn: [call.id for call in calls_from(turn)])


async def execute(
    executor: Executor, response: Any, *, candidate: int = 0, steering: Steering | None = None, context: Any = None
) -> GeminiExecution:
    """Runs a response's function calls and builds the reply: ``calls_from`` + run + ``results_to_content``.

    The execution's ``assistant`` is ``model_content(response)``: append it, then ``content``. A
    ``functionCall`` whose ``args`` is no object (answered ``invalid_input``) is given empty args there, the
    only kind the API takes back.
    """
    check_executor(executor)
    calls = calls_from(response, candidate=candidate)
    assistant = None if isinstance(response, (list, tuple)) else _sendable(model_content(response, candidate=candidate))
    return await _FLOW.execute(executor, calls, steering=steering, context=context, assistant=assistant)


async def resume(executor: Executor, execution: GeminiExecution, state: Any) -> GeminiExecution:
    """Finishes an interrupted ``execute``: ``state`` is its ``RunState`` with the held calls decided.

    Read the state once (``state = execution.outcome.state``), approve or
    reject on it, then pass that same object here.
    """
    return await _FLOW.resume(executor, execution, state)


class ContentAssembler:
    """Reads a streamed Gemini answer (``generate_content_stream`` chunks, or their REST dicts).

    Each ``functionCall`` part arrives whole in one chunk: a complete call.
    The answer is whole at the chunk whose candidate has a ``finishReason``
    (or at a blocked prompt's ``promptFeedback``). ``assembled()`` is the
    model's ``Content`` (adjacent text pieces joined) to append before the
    function responses. An error chunk, or an end before the final chunk,
    is an ``IncompleteStreamError``; a call streamed in pieces
    (``willContinue``, Vertex AI's ``stream_function_call_arguments``) a
    ``ResponseFormatError``.
    """

    def __init__(self, candidate: int = 0) -> None:
        self._candidate = position_option(candidate, "candidate")
        self._parts: list[Any] = []
        # The pieces of the last part while it is text joined from several chunks.
        self._text: list[str] | None = None
        self._calls: list[Any] = []
        self._taken = 0
        # The candidate's finish reason (``STOP``, ``MAX_TOKENS``, ...), or the prompt's block reason, once it came.
        self.finish_reason: str | None = None

    def feed(self, chunk: Any) -> list[ToolCall]:
        if self.finish_reason is not None:
            return []
        error = read(chunk, "error") if is_record(chunk) else None
        if error is not None:
            raise IncompleteStreamError(PROVIDER, f"the stream reported an error: {_error_detail(error)}")
        if not _has_candidates(chunk):
            feedback = read(chunk, "prompt_feedback", "promptFeedback") if is_record(chunk) else None
            blocked = read(feedback, "block_reason", "blockReason") if feedback is not None else None
            if blocked is not None:
                self.finish_reason = str(getattr(blocked, "value", blocked))
            return []
        content = model_content(chunk, candidate=self._candidate)
        found: list[Any] = []
        if content is not None:
            for number, part in enumerate(sequence_of(read(content, "parts") or [], PROVIDER, "parts")):
                if not is_record(part):
                    # As in a whole response: a turn holding it could not be sent back.
                    raise ResponseFormatError(
                        f"{PROVIDER}: parts[{number}] must be an object, got {type(part).__name__}"
                    )
                function_call = read(part, "function_call", "functionCall")
                if function_call is not None and (
                    read(function_call, "will_continue", "willContinue")
                    or read(function_call, "partial_args", "partialArgs")
                ):
                    raise ResponseFormatError(
                        f"{PROVIDER}: a function call streamed in pieces (`willContinue`/`partialArgs`) cannot be "
                        "run; turn off stream_function_call_arguments"
                    )
                self._add(as_record(_sendable_part(part)))
                if function_call is not None:
                    self._calls.append(part)
                    found.append(part)
        entry = sequence_of(read(chunk, "candidates"), PROVIDER, "candidates")[self._candidate]
        reason = read(entry, "finish_reason", "finishReason")
        if reason is not None:
            self.finish_reason = str(getattr(reason, "value", reason))
        if not found:
            return []
        calls = calls_from(self._calls)
        fresh = calls[self._taken :]
        self._taken = len(calls)
        return fresh

    def _add(self, part: Any) -> None:
        previous = self._parts[-1] if self._parts else None
        if (
            isinstance(part, dict)
            and isinstance(previous, dict)
            and set(part) == {"text"}
            and set(previous) == {"text"}
            and isinstance(part["text"], str)
            and isinstance(previous["text"], str)
        ):
            # Joined when read (``_join``): text grown by `+=` at every chunk would copy all of it each time.
            if self._text is None:
                self._text = [previous["text"]]
            self._text.append(part["text"])
        else:
            self._join()
            self._parts.append(part)

    def _join(self) -> None:
        """Writes the pieces of the last text part into it."""
        if self._text is not None:
            self._parts[-1]["text"] = "".join(self._text)
            self._text = None

    @property
    def complete(self) -> bool:
        """Whether the chunk with the candidate's ``finishReason`` (or the prompt's block reason) came."""
        return self.finish_reason is not None

    def end(self) -> list[ToolCall]:
        if self.finish_reason is None:
            raise IncompleteStreamError(PROVIDER, "the stream ended before a chunk with the candidate's `finishReason`")
        return []

    def assembled(self) -> dict[str, Any]:
        self._join()
        return {"role": "model", "parts": self._parts}


def _has_candidates(chunk: Any) -> bool:
    candidates = read(chunk, "candidates")
    return bool(candidates)


def _error_detail(error: Any) -> str:
    """The status and message of an error chunk's error."""
    if not is_record(error):
        return str(error)
    status, message = read(error, "status") or read(error, "code"), read(error, "message")
    return ": ".join(str(part) for part in (status, message) if part) or "no detail"


async def execute_stream(
    executor: Executor,
    stream: AsyncIterable[Any] | Iterable[Any],
    *,
    candidate: int = 0,
    steering: Steering | None = None,
    context: Any = None,
) -> GeminiExecution:
    """Runs a streamed answer's function calls, each starting the moment its chunk arrives.

    ``stream`` is what ``client.aio.models.generate_content_stream(...)``
    returns (or REST chunk dicts). Returns what ``execute`` returns, with
    ``assistant`` set to the model's ``Content``: append it, then ``content``.
    If the stream breaks (the connection drops, an error chunk, an end before
    the chunk with the ``finishReason``: ``IncompleteStreamError``),
    ``StreamFailed`` carries the results of the calls already complete and no
    reply is built.
    """
    check_executor(executor)
    assembler = ContentAssembler(candidate)
    return await _FLOW.execute_stream(executor, stream, assembler, steering=steering, context=context)
