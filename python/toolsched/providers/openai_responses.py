"""OpenAI Responses: ``function_call`` items in, ``function_call_output`` items out, keyed by ``call_id``.

Works on the ``openai`` SDK's ``Response`` (and its output items) and on plain
dicts from raw HTTP; the SDK itself is never imported here. Arguments arrive
as JSON text and are validated by the engine straight from the text. Hosted
tool items (``web_search_call``, ``file_search_call``, ``mcp_call``, ...),
messages and reasoning are left alone; an item of a type this module does not
know is left alone too, with a warning on the ``toolsched.providers`` logger.

With ``tool_definitions(executor, strict=True)`` the model sends ``null`` for
optional parameters; ``calls_from`` drops those nulls when the parameter's own
schema does not admit null (see ``toolsched.providers._strict``).

::

    response = await client.responses.create(model=..., input=items, tools=tool_definitions(executor))
    turn = await execute(executor, response)
    items += [*turn.assistant, *turn.items]

``turn.assistant`` is ``output_items(response)``: the response's output, every
``function_call`` carrying the ``call_id`` its output answers.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from toolsched._executor.executor import Executor, Steering
from toolsched._tools.registry import ToolRegistry
from toolsched._values.calls import ToolCall
from toolsched._values.content import Image
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
    call_arguments,
    call_name,
    check_executor,
    error_text,
    fit_to_budget,
    is_record,
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
    "ResponseAssembler",
    "ResponsesExecution",
    "calls_from",
    "execute",
    "execute_stream",
    "output_items",
    "results_to_items",
    "resume",
    "tool_definitions",
]

PROVIDER = "openai responses"

# Output items that are not client function calls.
_KNOWN = frozenset(
    {
        "message",
        "reasoning",
        "compaction",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
        "function_call_output",
        "item_reference",
    }
)
_HOSTED_SUFFIXES = ("_call", "_call_output")


@dataclass(frozen=True, slots=True)
class ResponsesExecution(Execution):
    """``calls``, ``outcome`` and ``items``: one ``function_call_output`` per call (empty while interrupted)."""

    items: list[dict[str, Any]]
    # What the model said, as the next request takes it (``output_items``; assembled by ``execute_stream``).
    assistant: Any = None


def _output(response: Any) -> Sequence[Any]:
    if isinstance(response, (list, tuple)):
        return response
    if not is_record(response):
        raise ResponseFormatError(
            f"{PROVIDER}: expected a Response, a response dict or a list of output items, got {type(response).__name__}"
        )
    output = read(response, "output")
    if output is None:
        raise ResponseFormatError(f"{PROVIDER}: the response has no `output`")
    return sequence_of(output, PROVIDER, "output")


def calls_from(response: Any, *, registry: ToolRegistry | None = None) -> list[ToolCall]:
    """The ``function_call`` items of a response, as calls in the model's order.

    ``response`` is an SDK ``Response``, its dict form, or a list of output
    items. A ``function_call`` without a ``call_id`` gets
    ``toolsched_call_{position}_{digest}`` (its index among the response's
    calls and a digest of its name and arguments); ``output_items`` carries
    the same ID, so send those items back, not the response's own.
    Arguments stay JSON text (text that does not parse is answered by the
    engine with ``invalid_input``). With ``registry``, strict mode's nulls for
    optional parameters are dropped. Raises ``ResponseFormatError`` for
    something that is not a response.
    """
    output = _output(response)
    function_calls = [output[position] for position in _function_calls(output, warn=True)]
    calls = []
    for call_id, item in zip(_ids(function_calls), function_calls, strict=True):
        name = call_name(read(item, "name"))
        calls.append(
            ToolCall(call_id, name, drop_strict_nulls_for(name, call_arguments(read(item, "arguments")), registry))
        )
    return calls


def _function_calls(output: Sequence[Any], *, warn: bool) -> list[int]:
    return positions_of(output, "function_call", PROVIDER, "output", _KNOWN, _HOSTED_SUFFIXES, warn=warn)


def _ids(function_calls: Sequence[Any]) -> list[str]:
    return assign_ids(
        [read(item, "call_id") for item in function_calls],
        [(read(item, "name"), read(item, "arguments")) for item in function_calls],
    )


def output_items(response: Any) -> list[Any]:
    """A response's output items, as the next request's ``input`` takes them.

    Every ``function_call`` carries the ``call_id`` its ``function_call_output``
    answers: an item without one becomes a plain copy with the ID ``calls_from``
    gives it, and one whose ``arguments`` are no text (a gateway's object) a
    plain copy with their JSON text, the only kind the API takes back; every
    other item is the response's own. Raises ``ResponseFormatError`` for
    something that is not a response.
    """
    return _output_items(response, None)


def _output_items(response: Any, ids: list[str] | None) -> list[Any]:
    """``output_items``, with the calls' IDs when they are known already (``calls_from``'s, in order)."""
    output = _output(response)
    positions = _function_calls(output, warn=False)
    if ids is None:
        ids = _ids([output[position] for position in positions])
    filled = with_ids(output, positions, ids, "call_id")
    items = list(output) if filled is None else filled
    for position in positions:
        arguments = read(items[position], "arguments")
        if not isinstance(arguments, str):
            # The API takes a call's arguments back as text only: the JSON text of what the call was run with.
            copy = as_record(items[position])
            if not isinstance(copy, dict):
                raise ResponseFormatError(f"{PROVIDER}: a function call must be an object, got {type(copy).__name__}")
            copy["arguments"] = argument_text(arguments)
            items[position] = copy
    return items


def _output_item(call: ToolCall, result: ToolResult, registry: ToolRegistry | None) -> dict[str, Any]:
    parts = (
        None if result.is_error else output_parts(result.output, result.tool_name, registry, shaped=result.truncated)
    )
    if parts is not None:
        return {"type": "function_call_output", "call_id": call.id, "output": [_part_item(part) for part in parts]}
    text = ERROR_PREFIX + error_text(result) if result.is_error else output_text(result.output)
    return {
        "type": "function_call_output",
        "call_id": call.id,
        "output": fit_to_budget(text, result.tool_name, registry, shaped=result.truncated),
    }


def _part_item(part: str | Image) -> dict[str, Any]:
    if isinstance(part, str):
        return {"type": "input_text", "text": part}
    return {"type": "input_image", "image_url": part.data_url(), "detail": "auto"}


def results_to_items(
    calls: Sequence[ToolCall], results: Sequence[ToolResult], *, registry: ToolRegistry | None = None
) -> list[dict[str, Any]]:
    """One ``function_call_output`` item per unique call ID, in the model's order.

    ``output`` is the text the tool returned, a list of ``input_text`` and
    ``input_image`` parts for outputs with images (``toolsched._values.content``), or
    JSON for other values (empty for ``None``); a failure's output is ``"Error: "`` and the message. With
    ``registry``, every text is held to its tool's result budget. Raises
    ``MissingResultError`` when a call has no result, ``OptionError`` for calls or results of the wrong kind.
    """
    return [
        _output_item(call, result, registry) for call, result in results_by_call(calls, results, PROVIDER, registry)
    ]


def tool_definitions(tools: Executor | ToolRegistry, *, strict: bool = False) -> list[dict[str, Any]]:
    """The ``tools`` parameter: the registry's Responses export (sorted, ``$ref``-free, strict on request)."""
    return registry_of(tools).to_openai(strict=strict)


_FLOW = Flow(ResponsesExecution, results_to_items, list, lambda turn: [call.id for call in calls_from(turn)])


async def execute(
    executor: Executor, response: Any, *, steering: Steering | None = None, context: Any = None
) -> ResponsesExecution:
    """Runs a response's function calls and builds the output items: ``calls_from`` + run + ``results_to_items``.

    The execution's ``assistant`` is ``output_items(response)``: add them, then ``items``, to the next ``input``.
    """
    check_executor(executor)
    calls = calls_from(response, registry=executor.registry)
    assistant = _output_items(response, [call.id for call in calls])
    return await _FLOW.execute(executor, calls, steering=steering, context=context, assistant=assistant)


async def resume(executor: Executor, execution: ResponsesExecution, state: Any) -> ResponsesExecution:
    """Finishes an interrupted ``execute``: ``state`` is its ``RunState`` with the held calls decided.

    Read the state once (``state = execution.outcome.state``), approve or
    reject on it, then pass that same object here.
    """
    return await _FLOW.resume(executor, execution, state)


class ResponseAssembler:
    """Reads a streamed Responses answer (the SDK's events, or their dicts from raw SSE).

    A ``function_call`` item is a complete call at its
    ``response.output_item.done``; the answer is whole at ``response.completed``
    (or ``response.incomplete``: the model stopped at its output limit).
    ``assembled()`` is the list of output items (the final event's, when it
    has them) to add to the next request's ``input``, each ``function_call``
    carrying its call's ID. A ``response.failed`` or ``error`` event, or an
    end before the final event, is an ``IncompleteStreamError``; a final
    output whose function calls are not the streamed ones a ``ResponseFormatError``.
    """

    def __init__(self, registry: ToolRegistry | None = None) -> None:
        self._registry = registry
        self._items: dict[int, Any] = {}
        self._calls: list[Any] = []
        # The output index of each streamed call, in the order of ``_calls`` (the order they were done).
        self._indexes: list[int] = []
        self._taken = 0
        self._final: list[Any] | None = None
        self._ended = False
        # The function calls begun (``response.output_item.added``) and not done yet, by output index.
        self._open: dict[Any, Any] = {}

    def feed(self, event: Any) -> list[ToolCall]:
        kind = read(event, "type")
        if self._ended:
            return []
        if kind == "response.output_item.added":
            item = read(event, "item")
            if read(item, "type") == "function_call":
                self._open[_output_index(event)] = item
        elif kind == "response.output_item.done":
            item = as_record(read(event, "item"))
            index = _output_index(event)
            self._open.pop(index, None)
            if index is None:
                index = max(self._items, default=-1) + 1
            if index in self._items:
                raise ResponseFormatError(f"{PROVIDER}: output item {index} was done twice")
            self._items[index] = item
            if isinstance(item, dict) and item.get("type") == "function_call":
                self._indexes.append(index)
                return self._add_calls([item])
        elif kind in ("response.completed", "response.incomplete"):
            self._ended = True
            response = read(event, "response")
            output = read(response, "output") if response is not None else None
            if output is not None:
                self._final = [as_record(item) for item in sequence_of(output, PROVIDER, f"{kind} output")]
        elif kind == "response.failed":
            response = read(event, "response")
            error = read(response, "error") if response is not None else None
            raise IncompleteStreamError(PROVIDER, f"the response failed: {_error_detail(error)}")
        elif kind == "error":
            raise IncompleteStreamError(PROVIDER, f"the stream reported an error: {_error_detail(event)}")
        return []

    def _add_calls(self, items: list[dict[str, Any]]) -> list[ToolCall]:
        self._calls += items
        calls = calls_from(self._calls, registry=self._registry)
        fresh = calls[self._taken :]
        self._taken = len(calls)
        for item, call in zip(items, fresh, strict=True):
            # The ID the call got, in the item the next request sends back (and in what later calls read).
            item["call_id"] = call.id
        return fresh

    @property
    def complete(self) -> bool:
        """Whether the final event (``response.completed`` or ``response.incomplete``) came."""
        return self._ended

    def end(self) -> list[ToolCall]:
        if not self._ended:
            cut = "".join(
                f"; function call {read(item, 'name')!r} ({read(item, 'call_id')}) was cut off"
                for item in self._open.values()
            )
            raise IncompleteStreamError(PROVIDER, f"the stream ended before `response.completed`{cut}")
        if self._final is None:
            return []
        # The final output is the answer as the API keeps it: its function calls must be the streamed ones, in
        # the order of their output indexes (the first ones carrying their IDs; the stream may finish a later
        # item first), and one the stream never finished is a call now.
        positions = [index for index, item in enumerate(self._final) if _is_function_call(item)]
        if len(positions) < len(self._calls):
            raise ResponseFormatError(
                f"{PROVIDER}: the final output has {len(positions)} function calls; "
                f"the stream finished {len(self._calls)}"
            )
        in_output_order = [item for _, item in sorted(zip(self._indexes, self._calls, strict=True), key=_first)]
        for position, streamed in zip(positions, in_output_order, strict=False):
            item = self._final[position]
            if item.get("call_id") not in (None, "", streamed["call_id"]):
                raise ResponseFormatError(
                    f"{PROVIDER}: the final output's function call {item.get('call_id')!r} is not the streamed "
                    f"call {streamed['call_id']!r}"
                )
            for field in ("name", "arguments"):
                if item.get(field) is not None and item.get(field) != streamed.get(field):
                    # The call ran as streamed: a turn that says otherwise would answer a call never made.
                    raise ResponseFormatError(
                        f"{PROVIDER}: the final output's function call {streamed['call_id']!r} has another "
                        f"`{field}` than the streamed call"
                    )
            item["call_id"] = streamed["call_id"]
        return self._add_calls([self._final[position] for position in positions[len(self._calls) :]])

    def assembled(self) -> list[Any]:
        if self._final is not None:
            return self._final
        return [self._items[index] for index in sorted(self._items)]


def _output_index(event: Any) -> int | None:
    """An output item event's ``output_index``; None when it has no integer one (the item is placed after the
    others)."""
    index = read(event, "output_index")
    return None if isinstance(index, bool) or not isinstance(index, int) else index


def _first(pair: tuple[int, Any]) -> int:
    return pair[0]


def _is_function_call(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "function_call"


def _error_detail(error: Any) -> str:
    """The code and message of an error (an ``error`` event, or a failed response's ``error``)."""
    if error is None:
        return "no detail"
    code, message = read(error, "code"), read(error, "message")
    return ": ".join(str(part) for part in (code, message) if part) or "no detail"


async def execute_stream(
    executor: Executor,
    stream: AsyncIterable[Any] | Iterable[Any],
    *,
    steering: Steering | None = None,
    context: Any = None,
) -> ResponsesExecution:
    """Runs a streamed answer's function calls, each starting the moment its output item is done.

    ``stream`` is what ``client.responses.create(..., stream=True)`` returns
    (or raw event dicts). Returns what ``execute`` returns, with ``assistant``
    set to the answer's output items: add them, then ``items``, to the next
    ``input``. If the stream breaks (the connection drops, ``response.failed``
    or an ``error`` event, an end before ``response.completed``:
    ``IncompleteStreamError``), ``StreamFailed`` carries the results of the
    calls already complete and no reply is built.
    """
    check_executor(executor)
    assembler = ResponseAssembler(executor.registry)
    return await _FLOW.execute_stream(executor, stream, assembler, steering=steering, context=context)
