"""Anthropic Messages: ``tool_use`` blocks in, ``tool_result`` blocks out, in one user message.

Works on the ``anthropic`` SDK's objects (``Message`` and its content blocks)
and on plain dicts from raw HTTP; the SDK itself is never imported here.
Server tool blocks (``server_tool_use``, ``web_search_tool_result``, ...) and
text or thinking blocks are left alone; a block of a type this module does
not know is left alone too, with a warning on the ``toolsched.providers``
logger.

::

    response = await client.messages.create(model=..., messages=messages, tools=tool_definitions(executor))
    turn = await execute(executor, response)
    messages += [turn.assistant, turn.message]

``turn.assistant`` is the response's assistant message with every ``tool_use``
block carrying the ID its ``tool_result`` answers (the same as
``response.content`` whenever the model gave every block an ID).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toolsched._executor.executor import Executor, Steering
from toolsched._tools.registry import ToolRegistry
from toolsched._values.calls import ToolCall
from toolsched._values.content import Image
from toolsched._values.results import ToolResult
from toolsched.errors import IncompleteStreamError, OptionError, ResponseFormatError
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
    object_arguments,
    output_parts,
    output_text,
    positions_of,
    read,
    registry_of,
    results_by_call,
    sequence_of,
    with_ids,
)

__all__ = [
    "AnthropicExecution",
    "MessageAssembler",
    "assistant_message",
    "calls_from",
    "execute",
    "execute_stream",
    "results_to_blocks",
    "results_to_message",
    "resume",
    "tool_definitions",
]

PROVIDER = "anthropic"

# Blocks that are not client tool calls: model text, reasoning, and server (hosted) tools.
_KNOWN = frozenset(
    {
        "text",
        "thinking",
        "redacted_thinking",
        "server_tool_use",
        "mcp_tool_use",
        "mcp_tool_result",
        "container_upload",
        "image",
        "document",
        "search_result",
        "tool_result",
    }
)
_HOSTED_SUFFIXES = ("_tool_result",)


@dataclass(frozen=True, slots=True)
class AnthropicExecution(Execution):
    """``calls``, ``outcome`` and ``message``: the user message with every ``tool_result``.

    ``message`` is None when the response had no tool calls, or while the run
    is interrupted (then ``resume`` builds it).
    """

    message: dict[str, Any] | None
    # What the model said, as the next request takes it (``assistant_message``; assembled by ``execute_stream``).
    assistant: Any = None


def _content(response: Any) -> Sequence[Any]:
    if isinstance(response, (list, tuple)):
        return response
    if not is_record(response):
        raise ResponseFormatError(
            f"{PROVIDER}: expected a Message, a message dict or a list of content blocks, got {type(response).__name__}"
        )
    content = read(response, "content")
    if isinstance(content, str):
        return []
    if content is None:
        raise ResponseFormatError(f"{PROVIDER}: the response has no `content`")
    return sequence_of(content, PROVIDER, "content")


def calls_from(response: Any) -> list[ToolCall]:
    """The ``tool_use`` blocks of a response, as calls in the model's order.

    ``response`` is an SDK ``Message``, its dict form, an assistant message
    (``{"role": "assistant", "content": [...]}``) or a list of content blocks.
    A ``tool_use`` without an ``id`` gets ``toolsched_call_{position}_{digest}``
    (its index among the response's tool calls and a digest of its name and
    input; ``assistant_message`` carries the same ID); a missing or non-object
    ``input`` (text too, whatever it holds) is passed on for the engine to
    answer with ``invalid_input``.
    Raises ``ResponseFormatError`` for something that is not a response.
    """
    content = _content(response)
    positions = _tool_uses(content, warn=True)
    uses = [content[position] for position in positions]
    return _calls(uses, [object_arguments(read(block, "input")) for block in uses])


def _calls(uses: Sequence[Any], arguments: Sequence[Any]) -> list[ToolCall]:
    """The calls of ``uses`` (``tool_use`` blocks), each with its arguments as the engine takes them."""
    return [
        ToolCall(call_id, call_name(read(block, "name")), given)
        for call_id, block, given in zip(_ids(uses), uses, arguments, strict=True)
    ]


def _tool_uses(content: Sequence[Any], *, warn: bool) -> list[int]:
    return positions_of(content, "tool_use", PROVIDER, "content", _KNOWN, _HOSTED_SUFFIXES, warn=warn)


def _ids(uses: Sequence[Any]) -> list[str]:
    return assign_ids([read(block, "id") for block in uses], [(read(b, "name"), read(b, "input")) for b in uses])


def assistant_message(response: Any) -> dict[str, Any]:
    """The assistant message that records ``response`` in the conversation: ``{"role": "assistant", "content": ...}``.

    Every ``tool_use`` block carries the ID its ``tool_result`` answers: a block
    without one becomes a plain copy with the ID ``calls_from`` gives it, and
    one whose ``input`` is no object (answered ``invalid_input``) a plain copy
    with an empty input, the only kind the API takes back; every other block
    is the response's own. Raises ``ResponseFormatError`` for
    something that is not a response.
    """
    return _assistant(response, None)


def _assistant(response: Any, ids: list[str] | None) -> dict[str, Any]:
    """``assistant_message``, with the calls' IDs when they are known already (``calls_from``'s, in order)."""
    if is_record(response) and not isinstance(response, (list, tuple)) and isinstance(read(response, "content"), str):
        return {"role": "assistant", "content": read(response, "content")}
    content = _content(response)
    positions = _tool_uses(content, warn=False)
    if ids is None:
        ids = _ids([content[position] for position in positions])
    filled = with_ids(content, positions, ids, "id")
    blocks = list(content) if filled is None else filled
    for position in positions:
        if not isinstance(read(blocks[position], "input"), Mapping):
            blocks[position] = _with_empty_input(blocks[position])
    return {"role": "assistant", "content": blocks}


def _with_empty_input(block: Any) -> dict[str, Any]:
    """A plain copy of a ``tool_use`` block whose input is no object (its call answered ``invalid_input``, or run
    with no arguments when it had none), with the one input the API takes back: an empty object."""
    copy = as_record(block)
    if not isinstance(copy, dict):
        raise ResponseFormatError(f"{PROVIDER}: a tool_use block must be an object, got {type(block).__name__}")
    copy["input"] = {}
    return copy


def _result_block(call: ToolCall, result: ToolResult, registry: ToolRegistry | None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.id}
    if result.is_error:
        block["content"] = fit_to_budget(error_text(result), result.tool_name, registry)
        block["is_error"] = True
        return block
    parts = output_parts(result.output, result.tool_name, registry, shaped=result.truncated)
    if parts is not None:
        block["content"] = [_part_block(part) for part in parts]
        return block
    text = fit_to_budget(output_text(result.output), result.tool_name, registry, shaped=result.truncated)
    if text:
        block["content"] = text
    return block


def _part_block(part: str | Image) -> dict[str, Any]:
    if isinstance(part, str):
        return {"type": "text", "text": part}
    return {"type": "image", "source": {"type": "base64", "media_type": part.media_type, "data": part.base64()}}


def results_to_blocks(
    calls: Sequence[ToolCall], results: Sequence[ToolResult], *, registry: ToolRegistry | None = None
) -> list[dict[str, Any]]:
    """One ``tool_result`` block per unique call ID, in the model's order.

    Text outputs go as they are, outputs with images (``toolsched._values.content``)
    as a list of text and image blocks, other outputs as JSON, ``None`` as a
    block without content; failures carry the error message and ``is_error: true``.
    With ``registry``, every text is held to its tool's result budget.
    Raises ``MissingResultError`` when a call has no result, ``OptionError`` for calls or results of the wrong kind.
    """
    return [
        _result_block(call, result, registry) for call, result in results_by_call(calls, results, PROVIDER, registry)
    ]


def results_to_message(
    calls: Sequence[ToolCall], results: Sequence[ToolResult], *, registry: ToolRegistry | None = None
) -> dict[str, Any]:
    """The user message that answers every call: ``{"role": "user", "content": [tool_result, ...]}``."""
    return {"role": "user", "content": results_to_blocks(calls, results, registry=registry)}


def tool_definitions(tools: Executor | ToolRegistry) -> list[dict[str, Any]]:
    """The ``tools`` parameter: the registry's Anthropic export (sorted by name, ``$ref``-free)."""
    return registry_of(tools).to_anthropic()


_FLOW = Flow(AnthropicExecution, results_to_message, lambda: None, lambda turn: [call.id for call in calls_from(turn)])


async def execute(
    executor: Executor, response: Any, *, steering: Steering | None = None, context: Any = None
) -> AnthropicExecution:
    """Runs a response's tool calls and builds the reply: ``calls_from`` + ``Executor.run`` + ``results_to_message``.

    The execution's ``assistant`` is ``assistant_message(response)``: append it, then ``message``.
    """
    check_executor(executor)
    calls = calls_from(response)
    assistant = _assistant(response, [call.id for call in calls])
    return await _FLOW.execute(executor, calls, steering=steering, context=context, assistant=assistant)


async def resume(executor: Executor, execution: AnthropicExecution, state: Any) -> AnthropicExecution:
    """Finishes an interrupted ``execute``: ``state`` is its ``RunState`` with the held calls decided.

    Read the state once (``state = execution.outcome.state``), approve or
    reject on it, then pass that same object here.
    """
    return await _FLOW.resume(executor, execution, state)


class MessageAssembler:
    """Reads a streamed Messages response (the SDK's events, or their dicts from raw SSE).

    A ``tool_use`` block is a complete call at its ``content_block_stop``, and
    the message is whole at ``message_stop``. ``assembled()`` is the assistant
    message (every block, text and thinking included) to append to the
    conversation, each ``tool_use`` block carrying its call's ID (the one
    ``calls_from`` gives the whole message). An ``error`` event, or an end
    before ``message_stop``, is an ``IncompleteStreamError``; a block started
    twice a ``ResponseFormatError``.
    """

    def __init__(self) -> None:
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        # The text and thinking pieces of each block, joined into it when it stops (or is read): text grown
        # by ``+`` at every delta would copy all of it each time.
        self._texts: dict[tuple[int, str], list[str]] = {}
        # The finished tool_use blocks as calls_from reads them, and each one's arguments for the engine (an
        # input streamed as text that does not parse kept as that text, for the engine to report).
        self._uses: list[dict[str, Any]] = []
        self._arguments: list[Any] = []
        self._taken = 0
        self._stopped: set[Any] = set()
        self._ended = False
        # Whether it was given an event: it reads one stream (``execute_stream`` refuses it for another).
        self._fed = False
        # The message's stop reason, from its ``message_delta`` (``pause_turn``, ``tool_use``, ...).
        self.stop_reason: str | None = None

    def feed(self, event: Any) -> list[ToolCall]:
        self._fed = True
        kind = read(event, "type")
        if self._ended:
            return []
        if kind == "message_delta":
            delta = read(event, "delta")
            reason = read(delta, "stop_reason") if delta is not None else None
            if isinstance(reason, str):
                self.stop_reason = reason
        elif kind == "content_block_start":
            block = as_record(read(event, "content_block"))
            if not isinstance(block, dict):
                raise ResponseFormatError(f"{PROVIDER}: content_block_start without a content block")
            index = _index(event, kind)
            if index in self._blocks:
                raise ResponseFormatError(f"{PROVIDER}: content block {index!r} started twice in one message")
            if block.get("type") in ("tool_use", "server_tool_use", "mcp_tool_use"):
                self._json[index] = []
            self._blocks[index] = block
        elif kind == "content_block_delta":
            self._delta(_index(event, kind), read(event, "delta"))
        elif kind == "content_block_stop":
            return self._stop(_index(event, kind))
        elif kind == "message_stop":
            self._ended = True
        elif kind == "error":
            detail = _error_detail(read(event, "error"))
            raise IncompleteStreamError(PROVIDER, f"the stream reported an error: {detail}")
        return []

    def _delta(self, index: int, delta: Any) -> None:
        block = self._blocks.get(index)
        if delta is None:
            return
        if not is_record(delta):
            # Read as a delta of no known kind, its input would be dropped and the call run without it.
            raise ResponseFormatError(
                f"{PROVIDER}: the delta of content block {index!r} must be an object, got {type(delta).__name__}"
            )
        kind = read(delta, "type")
        if block is None or index in self._stopped:
            if kind == "input_json_delta":
                # Input for a call not open: run as it stands, the call would not be the one the model made.
                state = "was never started" if block is None else "had stopped"
                raise ResponseFormatError(f"{PROVIDER}: input for content block {index!r}, which {state}")
            return
        if kind == "input_json_delta" and index in self._json:
            self._json[index].append(_piece(delta, "partial_json"))
        elif kind in ("text_delta", "thinking_delta"):
            field = "text" if kind == "text_delta" else "thinking"
            piece = _piece(delta, field)
            pieces = self._texts.get((index, field))
            if pieces is None:
                start = block.get(field)
                pieces = self._texts[index, field] = [start] if isinstance(start, str) and start else []
            pieces.append(piece)
        elif kind == "signature_delta":
            block["signature"] = read(delta, "signature")
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(as_record(read(delta, "citation")))

    def _stop(self, index: int) -> list[ToolCall]:
        block = self._blocks.get(index)
        if block is None or index in self._stopped:
            return []
        self._stopped.add(index)
        self._join_texts(index)
        text = "".join(self._json.pop(index)) if index in self._json else None
        if text is not None and not text.strip():
            # No input streamed (no input_json_delta, or only blank ones, as the API sends for a call it
            # started with its whole input): the input the block started with is the whole input (as the SDK
            # reads it).
            arguments: Any = block.get("input")
            given: Any = object_arguments(arguments)
            if not isinstance(arguments, dict):
                # Answered invalid_input (or run with no arguments); the message keeps an input the API accepts.
                block["input"] = {}
        elif text is not None:
            # Text that does not parse is answered invalid_input, the engine saying where it stops being JSON.
            arguments = given = text
            try:
                arguments = json.loads(text)
            except ValueError:
                pass
            else:
                given = object_arguments(arguments)
            # Answered invalid_input when it is no object: the message keeps an input the API accepts.
            block["input"] = arguments if isinstance(arguments, dict) else {}
        else:
            arguments = block.get("input")
            given = object_arguments(arguments)
        if block.get("type") != "tool_use":
            return []
        self._uses.append({**block, "input": arguments})
        self._arguments.append(given)
        calls = _calls(self._uses, self._arguments)
        fresh = calls[self._taken :]
        self._taken = len(calls)
        for call in fresh:
            # The ID the call got, in the block the next request sends back (and in what later stops read).
            block["id"] = self._uses[-1]["id"] = call.id
        return fresh

    @property
    def complete(self) -> bool:
        """Whether ``message_stop`` came."""
        return self._ended

    def end(self) -> list[ToolCall]:
        open_blocks = [self._blocks[index] for index in self._json]
        cut = "".join(
            f"; its `{block.get('type')}` block {block.get('name')!r} ({block.get('id')}) was cut off"
            for block in open_blocks
        )
        if not self._ended:
            raise IncompleteStreamError(PROVIDER, f"the stream ended before `message_stop`{cut}")
        if open_blocks:
            raise IncompleteStreamError(PROVIDER, f"`message_stop` came before every block's `content_block_stop`{cut}")
        return []

    def _join_texts(self, index: int) -> None:
        """Writes the text and thinking pieces of block ``index`` into it (they stay, joined, for later deltas)."""
        for field in ("text", "thinking"):
            pieces = self._texts.get((index, field))
            if pieces is None:
                continue
            if len(pieces) != 1:
                pieces[:] = ["".join(pieces)]
            self._blocks[index][field] = pieces[0]

    def assembled(self) -> dict[str, Any]:
        for index in list(self._blocks):
            self._join_texts(index)
        return {"role": "assistant", "content": [self._blocks[index] for index in sorted(self._blocks)]}


def _index(event: Any, kind: str) -> int:
    """The block ``index`` of a content block event; an event without an integer one is malformed (it names no
    block: a list or a dict there could not even be looked up)."""
    index = read(event, "index")
    if isinstance(index, bool) or not isinstance(index, int):
        raise ResponseFormatError(f"{PROVIDER}: {kind} has no integer `index`, got {type(index).__name__}")
    return index


def _piece(delta: Any, field: str) -> str:
    """A delta's piece of text (``partial_json``, ``text``, ...); one that is not text is a malformed stream."""
    piece = read(delta, field)
    if piece is None:
        return ""
    if not isinstance(piece, str):
        raise ResponseFormatError(f"{PROVIDER}: a delta's `{field}` must be a string, got {type(piece).__name__}")
    return piece


def _error_detail(error: Any) -> str:
    """The type and message of an ``error`` event's error."""
    if error is None:
        return "no detail"
    kind, message = read(error, "type"), read(error, "message")
    return ": ".join(str(part) for part in (kind, message) if part) or "no detail"


async def execute_stream(
    executor: Executor,
    stream: AsyncIterable[Any] | Iterable[Any],
    *,
    steering: Steering | None = None,
    context: Any = None,
    assembler: MessageAssembler | None = None,
) -> AnthropicExecution:
    """Runs a streamed response's tool calls, each starting the moment its ``tool_use`` block is complete.

    ``stream`` is what ``client.messages.create(..., stream=True)`` returns (or
    the ``MessageStream`` of ``client.messages.stream(...)``, or raw event
    dicts). Returns what ``execute`` returns, with ``assistant`` set to the
    assistant message: append it and then ``message``. If the stream breaks
    (the connection drops, an ``error`` event, an end before ``message_stop``:
    ``IncompleteStreamError``), ``StreamFailed`` carries the results of the
    calls already complete and no reply is built.
    Pass an ``assembler`` to read more of the stream afterwards (its ``stop_reason``): a new one for each
    stream (one that read a stream already would take the next for the same message: ``OptionError``).
    """
    check_executor(executor)
    if assembler is not None and assembler._fed:
        raise OptionError(
            "this MessageAssembler has read a stream already; pass a new MessageAssembler() for each stream"
        )
    reader = MessageAssembler() if assembler is None else assembler
    return await _FLOW.execute_stream(executor, stream, reader, steering=steering, context=context)
