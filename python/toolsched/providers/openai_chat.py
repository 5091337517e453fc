"""OpenAI Chat Completions: ``tool_calls`` in, ``role: "tool"`` messages out, keyed by ``tool_call_id``.

Works on the ``openai`` SDK's ``ChatCompletion`` (or one of its messages) and
on plain dicts from raw HTTP; the SDK itself is never imported here.
Arguments arrive as JSON text and are validated by the engine straight from
the text. ``custom`` tool calls are left alone; a tool call of a type this
module does not know is left alone too, with a warning on the
``toolsched.providers`` logger.

With ``tool_definitions(executor, strict=True)`` the model sends ``null`` for
optional parameters; ``calls_from`` drops those nulls when the parameter's own
schema does not admit null (see ``toolsched.providers._strict``).

::

    completion = await client.chat.completions.create(model=..., messages=messages, tools=tool_definitions(executor))
    turn = await execute(executor, completion)
    messages += [turn.assistant, *turn.messages]

``turn.assistant`` is ``assistant_message(completion)``: the completion's
message, every tool call carrying the ID its tool message answers.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from toolsched._executor.executor import Executor, Steering
from toolsched._tools.registry import ToolRegistry
from toolsched._values.calls import ToolCall
from toolsched._values.results import ToolResult
from toolsched.errors import IncompleteStreamError, ResponseFormatError
from toolsched.providers._flow import Flow
from toolsched.providers._strict import drop_strict_nulls_for
from toolsched.providers._wire import (
    ERROR_PREFIX,
    Execution,
    argument_text,
    as_record,
    assign_ids,
    block_type,
    call_arguments,
    call_name,
    check_executor,
    error_text,
    fit_to_budget,
    is_record,
    left_alone,
    output_parts,
    output_text,
    position_option,
    read,
    registry_of,
    results_by_call,
    sequence_of,
    with_ids,
)

__all__ = [
    "ChatExecution",
    "CompletionAssembler",
    "assistant_message",
    "calls_from",
    "execute",
    "execute_stream",
    "results_to_messages",
    "resume",
    "tool_definitions",
]

PROVIDER = "openai chat"

_KNOWN = frozenset({"custom"})


@dataclass(frozen=True, slots=True)
class ChatExecution(Execution):
    """``calls``, ``outcome`` and ``messages``: one ``role: "tool"`` message per call, then a user message
    with any images (see ``results_to_messages``); empty while interrupted."""

    messages: list[dict[str, Any]]
    # What the model said, as the next request takes it (``assistant_message``; assembled by ``execute_stream``).
    assistant: Any = None


def _message(response: Any, choice: int) -> Any:
    """The assistant message of a completion (``choices[choice].message``); a message is returned as it is."""
    choice = position_option(choice, "choice")
    if not is_record(response):
        raise ResponseFormatError(
            f"{PROVIDER}: expected a ChatCompletion, a completion dict or a message, got {type(response).__name__}"
        )
    choices = read(response, "choices")
    if choices is None:
        if read(response, "role") is None and read(response, "tool_calls") is None:
            raise ResponseFormatError(f"{PROVIDER}: the response has neither `choices` nor a message's `role`")
        return response
    choices = sequence_of(choices, PROVIDER, "choices")
    if not 0 <= choice < len(choices):
        raise ResponseFormatError(
            f"{PROVIDER}: the response has {len(choices)} choices; choice {choice} does not exist"
        )
    message = read(choices[choice], "message")
    if message is None or not is_record(message):
        raise ResponseFormatError(f"{PROVIDER}: choices[{choice}] has no `message`")
    return message


def _functions(entries: Sequence[Any], *, warn: bool) -> list[int]:
    """The positions of the ``function`` tool calls among ``entries`` (other kinds noted when ``warn``)."""
    positions = []
    for index, entry in enumerate(entries):
        kind = block_type(entry, PROVIDER, f"tool_calls[{index}]")
        if kind == "function":
            positions.append(index)
        elif warn:
            left_alone(PROVIDER, f"tool_calls[{index}]", kind, _KNOWN)
    return positions


def _ids(functions: Sequence[Any]) -> list[str]:
    return assign_ids([read(entry, "id") for entry in functions], [_content(entry) for entry in functions])


def assistant_message(response: Any, *, choice: int = 0) -> Any:
    """The assistant message of a completion (``choices[choice].message``), as the next request takes it.

    Every function tool call carries the ID its tool message answers, and its
    arguments as JSON text (the only kind the API takes back): when one has no
    ``id``, or arguments that are no text (a gateway's object), the message is
    a plain copy whose tool calls carry the IDs ``calls_from`` gives them and
    the JSON text of what they were run with; otherwise it is the completion's
    own message. A message is taken as it is. Raises ``ResponseFormatError``
    for something that is not a completion.
    """
    return _assistant(response, choice, None)


def _assistant(response: Any, choice: int, ids: list[str] | None) -> Any:
    """``assistant_message``, with the calls' IDs when they are known already (``calls_from``'s, in order)."""
    message = _message(response, choice)
    entries = sequence_of(read(message, "tool_calls"), PROVIDER, "tool_calls")
    positions = _functions(entries, warn=False)
    if ids is None:
        ids = _ids([entries[position] for position in positions])
    filled = with_ids(entries, positions, ids, "id")
    filled = _with_text_arguments(entries if filled is None else filled, positions) or filled
    if filled is None:
        return message
    copy = as_record(message)
    copy["tool_calls"] = filled
    return copy


def _with_text_arguments(entries: Sequence[Any], positions: Sequence[int]) -> list[Any] | None:
    """``entries`` with every function call whose ``arguments`` are no text a plain copy carrying them as JSON
    text, the only kind the API takes back (``argument_text``); None when every call has text already."""
    filled: list[Any] | None = None
    for position in positions:
        entry = entries[position]
        function = read(entry, "function")
        if function is None or not is_record(function) or isinstance(read(function, "arguments"), str):
            continue
        copy, function_copy = as_record(entry), as_record(function)
        if not isinstance(copy, dict) or not isinstance(function_copy, dict):
            raise ResponseFormatError(f"{PROVIDER}: a tool call must be an object, got {type(entry).__name__}")
        function_copy["arguments"] = argument_text(read(function, "arguments"))
        copy["function"] = function_copy
        if filled is None:
            filled = list(entries)
        filled[position] = copy
    return filled


def calls_from(response: Any, *, choice: int = 0, registry: ToolRegistry | None = None) -> list[ToolCall]:
    """The function ``tool_calls`` of a completion's message, as calls in the model's order.

    ``response`` is an SDK ``ChatCompletion``, its dict form, or an assistant
    message (SDK object or dict). A tool call without an ``id`` gets
    ``toolsched_call_{position}_{digest}`` (its index among the message's
    function calls and a digest of its name and arguments); ``assistant_message``
    carries the same ID, so send that message back, not the completion's own.
    Arguments stay JSON text (text that does not parse is answered by the
    engine with ``invalid_input``). With ``registry``, strict mode's nulls for
    optional parameters are dropped. Raises ``ResponseFormatError`` for
    something that is not a completion.
    """
    message = _message(response, choice)
    entries = sequence_of(read(message, "tool_calls"), PROVIDER, "tool_calls")
    functions = [entries[position] for position in _functions(entries, warn=True)]
    calls = []
    for call_id, entry in zip(_ids(functions), functions, strict=True):
        function = read(entry, "function")
        if function is None or not is_record(function):
            calls.append(ToolCall(call_id, "", {}))
            continue
        name = call_name(read(function, "name"))
        arguments = call_arguments(read(function, "arguments"))
        calls.append(ToolCall(call_id, name, drop_strict_nulls_for(name, arguments, registry)))
    return calls


def _content(entry: Any) -> tuple[object, object]:
    """A tool call's name and arguments as the wire has them (for the ID of a call that has none)."""
    function = read(entry, "function")
    if function is None or not is_record(function):
        return "", None
    return read(function, "name"), read(function, "arguments")


def _tool_message(
    call: ToolCall, result: ToolResult, registry: ToolRegistry | None, images: list[dict[str, Any]]
) -> dict[str, Any]:
    parts = (
        None if result.is_error else output_parts(result.output, result.tool_name, registry, shaped=result.truncated)
    )
    if parts is None:
        text = ERROR_PREFIX + error_text(result) if result.is_error else output_text(result.output)
        content = fit_to_budget(text, result.tool_name, registry, shaped=result.truncated)
        return {"role": "tool", "tool_call_id": call.id, "content": content}
    pieces: list[str] = []
    label = {"type": "text", "text": f"The images returned by tool call {call.id} ({call.name}):"}
    images.append(label)
    for part in parts:
        if isinstance(part, str):
            pieces.append(part)
        else:
            images.append({"type": "image_url", "image_url": {"url": part.data_url()}})
            pieces.append(f"[{part.media_type} image, {len(part.data):,} bytes, in the user message that follows]")
    return {"role": "tool", "tool_call_id": call.id, "content": "\n".join(pieces)}


def results_to_messages(
    calls: Sequence[ToolCall], results: Sequence[ToolResult], *, registry: ToolRegistry | None = None
) -> list[dict[str, Any]]:
    """One ``role: "tool"`` message per unique call ID, in the model's order.

    ``content`` is the text the tool returned, or JSON for other values (empty
    for ``None``); a failure's content is ``"Error: "`` and the message. With
    ``registry``, every text is held to its tool's result budget. Raises
    ``MissingResultError`` when a call has no result, ``OptionError`` for calls or results of the wrong kind.

    Chat Completions takes no images in tool messages: an output with images
    (``toolsched._values.content``) answers its call with its text and a stand-in for
    each image, and the images follow, after every tool message, in one
    ``role: "user"`` message of ``image_url`` parts, each call's images under
    a line naming the call.
    """
    images: list[dict[str, Any]] = []
    messages = [
        _tool_message(call, result, registry, images)
        for call, result in results_by_call(calls, results, PROVIDER, registry)
    ]
    if images:
        messages.append({"role": "user", "content": images})
    return messages


def tool_definitions(tools: Executor | ToolRegistry, *, strict: bool = False) -> list[dict[str, Any]]:
    """The ``tools`` parameter: the registry's Chat Completions export (sorted, ``$ref``-free, strict on request)."""
    return registry_of(tools).to_openai_chat(strict=strict)


_FLOW = Flow(ChatExecution, results_to_messages, list, lambda turn: [call.id for call in calls_from(turn)])


async def execute(
    executor: Executor, response: Any, *, choice: int = 0, steering: Steering | None = None, context: Any = None
) -> ChatExecution:
    """Runs a completion's tool calls and builds the tool messages: ``calls_from`` + run + ``results_to_messages``.

    The execution's ``assistant`` is ``assistant_message(response)``: append it, then ``messages``.
    """
    check_executor(executor)
    calls = calls_from(response, choice=choice, registry=executor.registry)
    assistant = _assistant(response, choice, [call.id for call in calls])
    return await _FLOW.execute(executor, calls, steering=steering, context=context, assistant=assistant)


async def resume(executor: Executor, execution: ChatExecution, state: Any) -> ChatExecution:
    """Finishes an interrupted ``execute``: ``state`` is its ``RunState`` with the held calls decided.

    Read the state once (``state = execution.outcome.state``), approve or
    reject on it, then pass that same object here.
    """
    return await _FLOW.resume(executor, execution, state)


class CompletionAssembler:
    """Reads a streamed chat completion (the SDK's chunks, or their dicts from raw SSE).

    Tool calls arrive as deltas by index: a call is complete when a later
    index begins or the choice's ``finish_reason`` arrives, and the choice is
    whole at its ``finish_reason``. ``assembled()`` is the assistant message
    to append before the tool messages, each tool call carrying its call's ID.
    An error chunk, or an end before the ``finish_reason``, is an
    ``IncompleteStreamError``; a delta that changes a call already complete
    (one that began before a later index did) is a ``ResponseFormatError``.
    """

    def __init__(self, registry: ToolRegistry | None = None, choice: int = 0) -> None:
        self._registry = registry
        self._choice = position_option(choice, "choice")
        self._text: list[str] = []
        self._entries: dict[int, dict[str, Any]] = {}
        # The argument pieces of each call not complete yet.
        self._arguments: dict[int, list[str]] = {}
        # The indexes of the complete calls, in the order they were completed.
        self._completed: list[int] = []
        self._taken = 0
        self._last: int | None = None
        # The choice's finish reason, once it came (``tool_calls``, ``stop``, ``length``, ...).
        self.finish_reason: str | None = None

    def feed(self, chunk: Any) -> list[ToolCall]:
        if self.finish_reason is not None:
            return []
        error = read(chunk, "error") if is_record(chunk) else None
        if error is not None:
            raise IncompleteStreamError(PROVIDER, f"the stream reported an error: {_error_detail(error)}")
        for position, entry in enumerate(sequence_of(read(chunk, "choices") or [], PROVIDER, "choices")):
            if not is_record(entry):
                raise ResponseFormatError(
                    f"{PROVIDER}: choices[{position}] must be an object, got {type(entry).__name__}"
                )
            if read(entry, "index") not in (self._choice, None):
                continue
            delta = read(entry, "delta")
            if delta is not None:
                if not is_record(delta):
                    # Text or a call's pieces in something that is no delta: read as one, they would be lost.
                    raise ResponseFormatError(
                        f"{PROVIDER}: a choice's `delta` must be an object, got {type(delta).__name__}"
                    )
                content = read(delta, "content")
                if isinstance(content, str):
                    self._text.append(content)
                parts = sequence_of(read(delta, "tool_calls"), PROVIDER, "delta.tool_calls")
                for number, part in enumerate(parts):
                    if not is_record(part):
                        # Read as a call, it would be one the model never made (and the real one lost).
                        raise ResponseFormatError(
                            f"{PROVIDER}: delta.tool_calls[{number}] must be an object, got {type(part).__name__}"
                        )
                    self._merge(part)
            reason = read(entry, "finish_reason")
            if reason is not None:
                self.finish_reason = str(reason)
                return self._complete(list(self._entries))
        last = self._last
        return self._complete([index for index in self._entries if last is not None and index != last])

    def _merge(self, part: Any) -> None:
        index = read(part, "index")
        function = read(part, "function")
        name = read(function, "name") if function is not None else None
        arguments = read(function, "arguments") if function is not None else None
        call_id = read(part, "id")
        for field, value in (("function.name", name), ("function.arguments", arguments)):
            if value is not None and not isinstance(value, str):
                # Pieces of text joined across deltas: anything else is no part of a call.
                raise ResponseFormatError(
                    f"{PROVIDER}: a tool call delta's `{field}` must be a string, got {type(value).__name__}"
                )
        if isinstance(index, bool) or not isinstance(index, int):
            # A delta without an index: a new call when it carries another ID than the last call, else more of
            # the last call.
            last = self._entries.get(self._last) if self._last is not None else None
            opens = last is None or (call_id and call_id != last["id"])
            index = (max(self._entries, default=-1) + 1) if opens else self._last
        entry = self._entries.get(index)
        if entry is None:
            entry = self._entries[index] = {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            self._arguments[index] = []
        changed = False
        if call_id and call_id != entry["id"]:
            entry["id"] = call_id
            changed = True
        kind = read(part, "type")
        if kind and kind != entry["type"]:
            entry["type"] = kind
            changed = True
        # A name repeated in every delta (as some servers send it) is the name once.
        if name and name != entry["function"]["name"]:
            entry["function"]["name"] += name
            changed = True
        if arguments:
            changed = True
            if index not in self._completed:
                # Joined when the call completes: text grown by `+=` at every delta would copy all of it each time.
                self._arguments[index].append(arguments)
        if index in self._completed and changed:
            raise ResponseFormatError(
                f"{PROVIDER}: tool call {index} changed after a later call began; it was complete and has started"
            )
        self._last = index

    def _complete(self, indexes: list[int]) -> list[ToolCall]:
        """Completes the calls at ``indexes`` not complete yet (in index order); returns the new calls."""
        fresh_indexes = sorted(index for index in indexes if index not in self._completed)
        if not fresh_indexes:
            return []
        self._completed += fresh_indexes
        for index in fresh_indexes:
            self._entries[index]["function"]["arguments"] = "".join(self._arguments.pop(index))
        entries = [self._entries[index] for index in self._completed]
        calls = calls_from({"role": "assistant", "tool_calls": entries}, registry=self._registry)
        fresh = calls[self._taken :]
        functions = [entry for entry in entries if entry["type"] == "function"]
        for entry, call in zip(functions[self._taken :], fresh, strict=True):
            # The ID the call got, in the message the next request sends back (and in what later calls read).
            entry["id"] = call.id
        self._taken = len(calls)
        return fresh

    @property
    def complete(self) -> bool:
        """Whether the choice's ``finish_reason`` came."""
        return self.finish_reason is not None

    def end(self) -> list[ToolCall]:
        if self.finish_reason is None:
            cut = "".join(
                f"; tool call {index} ({self._entries[index]['function']['name']!r}) was cut off"
                for index in sorted(self._entries)
                if index not in self._completed
            )
            raise IncompleteStreamError(PROVIDER, f"the stream ended before the choice's `finish_reason`{cut}")
        return []

    def assembled(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) or None}
        if self._entries:
            message["tool_calls"] = [self._entries[index] for index in self._completed]
        return message


def _error_detail(error: Any) -> str:
    """The message (and code) of an error chunk's error."""
    if not is_record(error):
        return str(error)
    message, code = read(error, "message"), read(error, "code") or read(error, "type")
    return ": ".join(str(part) for part in (code, message) if part) or "no detail"


async def execute_stream(
    executor: Executor,
    stream: AsyncIterable[Any] | Iterable[Any],
    *,
    choice: int = 0,
    steering: Steering | None = None,
    context: Any = None,
) -> ChatExecution:
    """Runs a streamed completion's tool calls, each starting the moment it is complete.

    ``stream`` is what ``client.chat.completions.create(..., stream=True)``
    returns (or raw chunk dicts). Returns what ``execute`` returns, with
    ``assistant`` set to the assistant message: append it, then ``messages``.
    If the stream breaks (the connection drops, an error chunk, an end before
    the ``finish_reason``: ``IncompleteStreamError``), ``StreamFailed``
    carries the results of the calls already complete and no reply is built.
    """
    check_executor(executor)
    assembler = CompletionAssembler(executor.registry, choice)
    return await _FLOW.execute_stream(executor, stream, assembler, steering=steering, context=context)
