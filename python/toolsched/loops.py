"""Tool loops for the official SDKs: send, execute, reinject, repeat.

Each loop sends the conversation with the executor's tools, runs the tool
calls of the reply through the executor, appends the assistant turn and the
results to the conversation, and repeats until the model stops calling tools
or ``max_turns`` requests have been made. What needs a person surfaces to
the caller instead of being decided here:

- calls held for approval end the loop with ``stop="interrupted"`` (the
  pending requests are in ``result.pending``); decide them on
  ``result.state`` (``approve``/``reject``) and call the loop again with
  ``messages=result.history`` (or ``input=``/``contents=``),
  ``resume=result`` and ``result.executor``; an approval given with
  ``always=`` (``"call"``, ``"tool"`` or a permission rule) holds for every
  later turn of the loop, and the state of a later interruption carries it on. The resumed calls run
  with the resuming call's ``context=`` and ``steering=``, as every later turn's.
  A resume whose results could not answer the turn (``resume=`` no ``LoopResult``, one of another API's
  loop, or a history that does not end with the turn the loop stopped at: the first messages only, a
  message added after it, the history of an earlier interruption) is refused with ``OptionError`` before
  any call runs or anything is sent, and the result still resumes; earlier entries may change;
- calls of external tools end the loop with ``stop="external"`` when nothing
  else waits (with approvals waiting too, ``stop="interrupted"``; either way
  ``result.pending`` holds every ``ExternalCall`` and ``ApprovalRequest``):
  answer them on ``result.state`` (``complete``/``fail``) and resume as above;
- a steering callback that returns messages ends the loop with
  ``stop="steered"`` after the skipped calls are answered
  (``result.steering_messages``);
- ``limits=`` (a ``ts.Limits``) holds the run's caps across its turns: every turn
  is run under it (without one, a ``ts.Limits()`` of this call of the loop, so
  each tool's ``max_model_retries`` holds across its turns), and the loop ends with ``stop="limit"`` after a turn with a
  ``limit_exceeded`` answer, or ``stop="retries_exhausted"`` after one with a
  ``retries_exhausted`` answer (the answers are in the history first);
- cancelling the task that runs the loop cancels the request or the tools
  in flight and propagates; with ``stream=True`` the turn is wound down as a
  broken stream first (calls of tools with ``interrupt_behavior="cancel"`` are
  cancelled, ``"block"`` calls finish), as ``Executor.turn`` does.

``stream=True`` streams each answer and starts every tool call the moment
the stream completes it (``execute_stream``), results still in model order.
An answer whose stream breaks (the connection drops, the provider reports an
error, or it ends before its final event) is never sent back: the loop raises
``StreamFailed`` with the results of the calls it completed (``outcome``) and
the conversation before that request (``history``), ready to be sent again.

A request that fails once the loop has answered a turn's calls (the connection,
an HTTP error, the SDK; an answer that cannot be read; its calls' run), or a
``refresh_tools`` that fails, raises
``LoopFailed`` (the error is its ``__cause__``) with the conversation so far,
every turn answered (``history``), ready to be sent again: the tools that ran
are never run again to get it back. A failure before the loop answered any
call is raised as it is.

The assistant turn appended to the history carries, for every call, the ID
its result answers (a call the model sent without an ID gets the one the
adapter's ``calls_from`` gives it).

``refresh_tools`` (a plain or async callable returning a new ``Executor``,
or None to keep the current one) is consulted after each turn's results are
complete, so the next request carries the new tool list; the executor in
use at the end is ``result.executor``.
"""

from __future__ import annotations

import abc
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from toolsched._executor.executor import Executor, Steering
from toolsched._policy.limits import Limits, limits_in_force
from toolsched._policy.runstate import RunState, records_by_id, standing_of
from toolsched._policy.standing import standing_in_force
from toolsched._tools.registry import ToolRegistry
from toolsched._values.calls import ToolCall
from toolsched._values.effects import ExternalCall
from toolsched._values.outcome import Outcome
from toolsched._values.results import ToolResult
from toolsched.errors import LoopFailed, OptionError, ResponseFormatError, StreamFailed
from toolsched.providers import anthropic, gemini, openai_chat, openai_responses
from toolsched.providers._wire import read

__all__ = ["LoopResult", "anthropic_loop", "gemini_loop", "openai_chat_loop", "openai_responses_loop"]

Stop = Literal["done", "max_turns", "interrupted", "external", "steered", "limit", "retries_exhausted"]
RefreshTools = Callable[[], Awaitable[Executor | None] | Executor | None]
# The stops a loop resumes from (``resume=``): calls wait for a person or for answers from outside.
_WAITING = ("interrupted", "external")


@dataclass(frozen=True, slots=True)
class LoopResult:
    """How a tool loop ended.

    - ``history``: the conversation as the API takes it (messages for
      Anthropic and Chat, input items for Responses, contents for Gemini),
      ready to be sent again;
    - ``response``: the last response from the model;
    - ``text``: the text of that response, if any;
    - ``stop``: ``"done"`` (no more tool calls), ``"max_turns"``,
      ``"interrupted"`` (calls wait for approval), ``"external"`` (calls wait only
      for answers from outside), ``"steered"``, ``"limit"`` or ``"retries_exhausted"``;
    - ``turns``: requests made by this call of the loop;
    - ``outcome``: the last turn's ``Outcome`` (None if no tool ran);
    - ``executor``: the executor in use at the end (after ``refresh_tools``);
    - ``state``: when interrupted (or external), the run's ``RunState`` (read once
      from the outcome): approve, reject, complete or fail on it, then pass ``resume=`` this result.
    """

    history: list[Any]
    response: Any
    text: str | None
    stop: Stop
    turns: int
    outcome: Outcome | None
    executor: Executor
    state: Any = None

    @property
    def pending(self) -> list[Any]:
        """What an interrupted loop waits for: ``ApprovalRequest``s and ``ExternalCall``s, in model order."""
        return [] if self.outcome is None else self.outcome.pending

    @property
    def steering_messages(self) -> list[Any]:
        """What the steering callback returned when it stopped the loop."""
        return [] if self.outcome is None else self.outcome.steering_messages


class _Dialect(abc.ABC):
    """What differs between APIs: the request, the assistant turn, the calls and the reply."""

    # The loop's keyword for the conversation.
    keyword = "messages"

    @abc.abstractmethod
    async def request(self, history: list[Any], executor: Executor) -> Any:
        """Sends the conversation so far with the executor's tools; returns the response."""

    @abc.abstractmethod
    def assistant_turn(self, response: Any) -> list[Any]:
        """The history entries that record the model's turn."""

    @abc.abstractmethod
    def calls(self, response: Any, registry: ToolRegistry) -> list[ToolCall]:
        """The tool calls of a response."""

    @abc.abstractmethod
    def reply(self, calls: list[ToolCall], results: list[ToolResult], registry: ToolRegistry) -> list[Any]:
        """The history entries that answer the calls."""

    def recorded_calls(self, history: list[Any], registry: ToolRegistry) -> list[ToolCall]:
        """The calls of the assistant turn the history ends with (its last entry)."""
        return self.calls(history[-1], registry) if history else []

    @abc.abstractmethod
    def text(self, response: Any) -> str | None:
        """The response's text, if any."""

    def paused(self, response: Any) -> bool:
        """Whether the model paused a long server-side turn and expects the conversation back as it is."""
        return False

    def used_tools(self) -> None:
        """A turn used tools: a forced tool choice is dropped from the next requests (the model chooses again).

        Forcing a tool on every request leaves the loop only ``max_turns`` to stop at.
        """
        self.options.pop("tool_choice", None)

    options: dict[str, Any]

    @abc.abstractmethod
    async def execute_stream(
        self, history: list[Any], executor: Executor, steering: Steering | None, context: Any
    ) -> tuple[Any, list[ToolCall], Outcome]:
        """Streams the next answer, its calls starting while it streams: (the answer as a response, calls, outcome)."""


def _async_method(method: Any, client: Any, wanted: str) -> Any:
    """``method`` when it is a coroutine function; a sync client is refused before anything is sent."""
    if not inspect.iscoroutinefunction(inspect.unwrap(method)):
        raise OptionError(
            f"the loop needs an async client ({wanted}), got {type(client).__name__}: a sync client would "
            "block the event loop; nothing was sent"
        )
    return method


def _conversation(value: Any, keyword: str, what: str, *, empty: bool = False) -> list[Any]:
    """The conversation a loop starts from, as a list: a one-message value (text, a dict, an SDK object) is
    refused before anything is sent (read as a list it would be its characters, or its keys), and so is an
    empty one unless ``empty`` (the Responses API's, which may go on from ``previous_response_id``): the other
    APIs refuse a request without a message (the Gemini SDK with its own ``ValueError``)."""
    if (
        value is None
        or isinstance(value, (str, bytes, bytearray, Mapping))
        or hasattr(value, "model_dump")
        or not isinstance(value, Iterable)
    ):
        raise OptionError(f"{keyword}= takes a list of {what}, got {type(value).__name__}; nothing was sent")
    conversation = list(value)
    if not conversation and not empty:
        raise OptionError(f"{keyword}= is empty: the API takes at least one message; nothing was sent")
    return conversation


def _with_tools(request: dict[str, Any], tools: list[Any]) -> dict[str, Any]:
    """The request keywords with the executor's tools first and the caller's own (hosted) tools after.

    The caller's ``tools`` is a list (or tuple); None or an SDK's "not given" (a false value) is none. A single
    tool, or anything else, is refused with ``OptionError`` before anything is sent.
    """
    own = request.get("tools")
    if not isinstance(own, (list, tuple)):
        if own is not None and own:
            raise OptionError(
                f"tools= takes a list of the API's own tools (sent after the executor's), got {type(own).__name__}; "
                "nothing was sent"
            )
        own = ()
    merged = [*tools, *own]
    options = {key: value for key, value in request.items() if key != "tools"}
    if merged:
        options["tools"] = merged
    return options


class _Anthropic(_Dialect):
    def __init__(self, client: Any, request: dict[str, Any]) -> None:
        self.create = _async_method(client.messages.create, client, "anthropic.AsyncAnthropic")
        self.options = dict(request)

    async def request(self, history: list[Any], executor: Executor) -> Any:
        return await self.create(messages=history, **_with_tools(self.options, anthropic.tool_definitions(executor)))

    def assistant_turn(self, response: Any) -> list[Any]:
        return [anthropic.assistant_message(response)]

    def calls(self, response: Any, registry: ToolRegistry) -> list[ToolCall]:
        return anthropic.calls_from(response)

    def reply(self, calls: list[ToolCall], results: list[ToolResult], registry: ToolRegistry) -> list[Any]:
        return [anthropic.results_to_message(calls, results, registry=registry)]

    def text(self, response: Any) -> str | None:
        texts = [read(block, "text") for block in read(response, "content") or () if read(block, "type") == "text"]
        return "".join(text for text in texts if isinstance(text, str)) if texts else None

    def paused(self, response: Any) -> bool:
        return bool(read(response, "stop_reason") == "pause_turn")

    async def execute_stream(
        self, history: list[Any], executor: Executor, steering: Steering | None, context: Any
    ) -> tuple[Any, list[ToolCall], Outcome]:
        options = _with_tools(self.options, anthropic.tool_definitions(executor))
        events = await self.create(messages=history, stream=True, **options)
        reader = anthropic.MessageAssembler()
        execution = await anthropic.execute_stream(
            executor, events, steering=steering, context=context, assembler=reader
        )
        response = {**execution.assistant, "stop_reason": reader.stop_reason}
        return response, execution.calls, execution.outcome


def _output_item(item: Any) -> bool:
    """Whether an input item is one the model gave (not a message of the user's, nor a call's output)."""
    return read(item, "type") != "function_call_output" and read(item, "role") in (None, "assistant")


class _Responses(_Dialect):
    keyword = "input"

    def __init__(self, client: Any, request: dict[str, Any], strict: bool) -> None:
        # A structured output (``text_format=`` a pydantic model) goes through ``parse``.
        method = client.responses.parse if "text_format" in request else client.responses.create
        self.create = _async_method(method, client, "openai.AsyncOpenAI")
        self.options = dict(request)
        self.strict = strict

    async def request(self, history: list[Any], executor: Executor) -> Any:
        tools = openai_responses.tool_definitions(executor, strict=self.strict)
        return await self.create(input=history, **_with_tools(self.options, tools))

    def assistant_turn(self, response: Any) -> list[Any]:
        return [] if read(response, "output") is None else openai_responses.output_items(response)

    def calls(self, response: Any, registry: ToolRegistry) -> list[ToolCall]:
        return openai_responses.calls_from(response, registry=registry)

    def recorded_calls(self, history: list[Any], registry: ToolRegistry) -> list[ToolCall]:
        # The turn is the model's items at the end of the input (as many as the caller kept of it): after the
        # last input message or call output.
        start = len(history)
        while start > 0 and _output_item(history[start - 1]):
            start -= 1
        return openai_responses.calls_from(history[start:], registry=registry)

    def reply(self, calls: list[ToolCall], results: list[ToolResult], registry: ToolRegistry) -> list[Any]:
        return list(openai_responses.results_to_items(calls, results, registry=registry))

    async def execute_stream(
        self, history: list[Any], executor: Executor, steering: Steering | None, context: Any
    ) -> tuple[Any, list[ToolCall], Outcome]:
        if "text_format" in self.options:
            raise OptionError("stream=True cannot parse a structured output (text_format=); leave stream off")
        tools = openai_responses.tool_definitions(executor, strict=self.strict)
        events = await self.create(input=history, stream=True, **_with_tools(self.options, tools))
        execution = await openai_responses.execute_stream(executor, events, steering=steering, context=context)
        return {"output": execution.assistant}, execution.calls, execution.outcome

    def text(self, response: Any) -> str | None:
        texts = [
            read(part, "text")
            for item in read(response, "output") or ()
            if read(item, "type") == "message"
            for part in read(item, "content") or ()
            if read(part, "type") == "output_text"
        ]
        return "".join(text for text in texts if isinstance(text, str)) if texts else None


class _Chat(_Dialect):
    def __init__(self, client: Any, request: dict[str, Any], strict: bool) -> None:
        # A structured output (``response_format=`` a pydantic model) goes through ``parse``.
        structured = isinstance(request.get("response_format"), type)
        method = client.chat.completions.parse if structured else client.chat.completions.create
        self.create = _async_method(method, client, "openai.AsyncOpenAI")
        self.options = dict(request)
        self.strict = strict

    async def request(self, history: list[Any], executor: Executor) -> Any:
        tools = openai_chat.tool_definitions(executor, strict=self.strict)
        return await self.create(messages=history, **_with_tools(self.options, tools))

    def assistant_turn(self, response: Any) -> list[Any]:
        return [openai_chat.assistant_message(response)]

    def calls(self, response: Any, registry: ToolRegistry) -> list[ToolCall]:
        return openai_chat.calls_from(response, registry=registry)

    def reply(self, calls: list[ToolCall], results: list[ToolResult], registry: ToolRegistry) -> list[Any]:
        return list(openai_chat.results_to_messages(calls, results, registry=registry))

    async def execute_stream(
        self, history: list[Any], executor: Executor, steering: Steering | None, context: Any
    ) -> tuple[Any, list[ToolCall], Outcome]:
        if isinstance(self.options.get("response_format"), type):
            raise OptionError("stream=True cannot parse a structured output (response_format=); leave stream off")
        tools = openai_chat.tool_definitions(executor, strict=self.strict)
        events = await self.create(messages=history, stream=True, **_with_tools(self.options, tools))
        execution = await openai_chat.execute_stream(executor, events, steering=steering, context=context)
        return execution.assistant, execution.calls, execution.outcome

    def text(self, response: Any) -> str | None:
        content = read(openai_chat.assistant_message(response), "content")
        return content if isinstance(content, str) else None


class _Gemini(_Dialect):
    keyword = "contents"

    def __init__(self, client: Any, model: str, config: Any) -> None:
        self.generate = _async_method(
            getattr(client, "aio", client).models.generate_content, client, "google.genai.Client"
        )
        self.generate_stream = getattr(client, "aio", client).models.generate_content_stream
        self.model = model
        if config is None:
            self.config: dict[str, Any] = {}
        elif isinstance(config, dict):
            self.config = dict(config)
        elif hasattr(config, "model_dump"):
            self.config = config.model_dump(exclude_none=True)
        else:
            raise TypeError(f"config must be a dict or a GenerateContentConfig, got {type(config).__name__}")

    async def request(self, history: list[Any], executor: Executor) -> Any:
        config = _with_tools(self.config, gemini.tool_definitions(executor))
        return await self.generate(model=self.model, contents=history, config=config)

    async def execute_stream(
        self, history: list[Any], executor: Executor, steering: Steering | None, context: Any
    ) -> tuple[Any, list[ToolCall], Outcome]:
        config = _with_tools(self.config, gemini.tool_definitions(executor))
        events = await self.generate_stream(model=self.model, contents=history, config=config)
        execution = await gemini.execute_stream(executor, events, steering=steering, context=context)
        return {"candidates": [{"content": execution.assistant}]}, execution.calls, execution.outcome

    def used_tools(self) -> None:
        # Gemini forces calls with function_calling_config.mode ANY (or names the allowed functions).
        self.config.pop("tool_config", None)

    def assistant_turn(self, response: Any) -> list[Any]:
        content = gemini.model_content(response)
        return [] if content is None else [content]

    def calls(self, response: Any, registry: ToolRegistry) -> list[ToolCall]:
        return gemini.calls_from(response)

    def reply(self, calls: list[ToolCall], results: list[ToolResult], registry: ToolRegistry) -> list[Any]:
        return [gemini.results_to_content(calls, results, registry=registry)]

    def text(self, response: Any) -> str | None:
        content = gemini.model_content(response)
        texts = [read(part, "text") for part in (read(content, "parts") or ()) if not read(part, "thought")]
        found = [text for text in texts if isinstance(text, str)]
        return "".join(found) if found else None


async def _refreshed(executor: Executor, refresh_tools: RefreshTools | None) -> Executor:
    if refresh_tools is None:
        return executor
    fresh = refresh_tools()
    if inspect.isawaitable(fresh):
        fresh = await fresh
    if fresh is None:
        return executor
    if not isinstance(fresh, Executor):
        raise TypeError(f"refresh_tools must return an Executor or None, got {type(fresh).__name__}")
    return fresh


def _resumed_calls(dialect: _Dialect, history: list[Any], resume: Any, registry: ToolRegistry) -> list[ToolCall]:
    """The calls of the turn ``resume`` stopped at, once it is sure their results can answer them: ``resume`` is
    the ``LoopResult`` of an interrupted loop of this API, whose state holds those calls, and ``history`` ends
    with that turn (the results are appended after it). ``OptionError`` otherwise, before anything runs."""
    if not isinstance(resume, LoopResult):
        raise OptionError(
            f"resume= takes the LoopResult of an interrupted loop, got {type(resume).__name__}; nothing was run or sent"
        )
    if resume.stop not in _WAITING or not isinstance(resume.state, RunState):
        raise OptionError(f"resume= takes the result of an interrupted loop, got one that stopped {resume.stop!r}")
    try:
        calls = dialect.calls(resume.response, registry)
    except ResponseFormatError as error:
        raise OptionError(
            f"resume= holds a response this loop cannot read (a result of another API's loop?): {error}; "
            "nothing was run or sent"
        ) from error
    ids = [call.id for call in calls]
    if not calls or set(ids) != set(records_by_id(resume.state)):
        raise OptionError(
            "resume= holds a state of other calls than its response's (a result of another API's loop?); "
            "nothing was run or sent"
        )
    try:
        recorded = [call.id for call in dialect.recorded_calls(history, registry)]
    except ResponseFormatError:
        recorded = []
    if recorded != ids:
        raise OptionError(
            f"{dialect.keyword}= must end with the assistant turn the loop stopped at (pass result.history, whose "
            "earlier entries may change): the results answer that turn's calls; nothing was run or sent"
        )
    return calls


async def _run_loop(
    dialect: _Dialect,
    executor: Executor,
    history: list[Any],
    *,
    max_turns: int,
    refresh_tools: RefreshTools | None,
    steering: Steering | None,
    context: Any,
    resume: LoopResult | None,
    reset_tool_choice: bool = True,
    stream: bool = False,
    limits: Limits | None = None,
) -> LoopResult:
    if limits is not None and not isinstance(limits, Limits):
        raise OptionError(f"limits= takes a ts.Limits or None, got {type(limits).__name__}")
    # A person's standing approvals (``approve(..., always=...)``) hold for the rest of the loop's turns.
    standing = (
        standing_of(resume.state) if isinstance(resume, LoopResult) and isinstance(resume.state, RunState) else None
    )
    with (
        limits_in_force(limits if limits is not None else Limits()),
        standing_in_force(standing) if standing else contextlib.nullcontext(),
    ):
        return await _loop(
            dialect,
            executor,
            history,
            max_turns=max_turns,
            refresh_tools=refresh_tools,
            steering=steering,
            context=context,
            resume=resume,
            reset_tool_choice=reset_tool_choice,
            stream=stream,
        )


async def _loop(
    dialect: _Dialect,
    executor: Executor,
    history: list[Any],
    *,
    max_turns: int,
    refresh_tools: RefreshTools | None,
    steering: Steering | None,
    context: Any,
    resume: LoopResult | None,
    reset_tool_choice: bool,
    stream: bool,
) -> LoopResult:
    if not isinstance(stream, bool):
        raise OptionError(f"stream must be True or False, got {stream!r}")
    if not isinstance(reset_tool_choice, bool):
        raise OptionError(f"reset_tool_choice must be True or False, got {reset_tool_choice!r}")
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise OptionError(f"max_turns must be a positive integer, got {max_turns!r}")
    if not isinstance(executor, Executor):
        raise TypeError(f"executor must be a toolsched Executor, got {type(executor).__name__}")
    turns = 0
    outcome: Outcome | None = None
    response: Any = None
    # Whether this call of the loop has answered a turn's calls: a failure after that raises ``LoopFailed``,
    # which keeps the history with their results (before it, the conversation given is the one to send).
    answered = False

    def finish(stop: Stop) -> LoopResult:
        state = outcome.state if stop in _WAITING and outcome is not None else None
        return LoopResult(history, response, dialect.text(response), stop, turns, outcome, executor, state)

    async def answer(calls: list[ToolCall], settled: Outcome) -> Stop | None:
        """Appends the reply to a turn's calls; says why the loop must stop, if it must."""
        nonlocal executor, answered
        if settled.interrupted:
            if settled.pending and all(isinstance(waiting, ExternalCall) for waiting in settled.pending):
                return "external"
            return "interrupted"
        history.extend(dialect.reply(calls, settled.results, executor.registry))
        answered = True
        if reset_tool_choice:
            dialect.used_tools()
        try:
            executor = await _refreshed(executor, refresh_tools)
        except Exception as exc:
            raise LoopFailed(list(history), settled, turns, executor, exc) from exc
        if settled.steering_messages:
            return "steered"
        kinds = {result.error_kind for result in settled.results}
        if "retries_exhausted" in kinds:
            return "retries_exhausted"
        return "limit" if "limit_exceeded" in kinds else None

    if resume is not None:
        # Read and checked before the state is taken: a resume refused here runs nothing and may be made again.
        calls = _resumed_calls(dialect, history, resume, executor.registry)
        response = resume.response
        # The resumed calls run as the loop's other calls do: with its context, steering asked between them.
        outcome = await executor.resume(resume.state, steering=steering, context=context)
        stop = await answer(calls, outcome)
        if stop is not None:
            return finish(stop)

    while True:
        # The conversation and outcome as they stand before this request: what ``LoopFailed`` keeps if anything of
        # this pass fails once the loop has answered calls (the request, reading the answer, running its calls).
        sent, kept = len(history), outcome
        try:
            if stream:
                # Each call starts while the answer is still streaming.
                try:
                    response, calls, streamed = await dialect.execute_stream(history, executor, steering, context)
                except StreamFailed as failed:
                    failed.history = list(history)
                    raise
                turns += 1
                history.extend(dialect.assistant_turn(response))
            else:
                response = await dialect.request(history, executor)
                turns += 1
                history.extend(dialect.assistant_turn(response))
                calls = dialect.calls(response, executor.registry)
            if not calls:
                if dialect.paused(response) and turns < max_turns:
                    continue
                return finish("max_turns" if dialect.paused(response) else "done")
            outcome = streamed if stream else await executor.run(calls, steering=steering, context=context)
            stop = await answer(calls, outcome)
        except (LoopFailed, StreamFailed):
            raise
        except Exception as exc:
            if not answered:
                raise
            del history[sent:]  # an answer whose calls were not all answered is never sent back
            raise LoopFailed(list(history), kept, turns, executor, exc) from exc
        if stop is not None:
            return finish(stop)
        if turns >= max_turns:
            return finish("max_turns")


async def anthropic_loop(
    client: Any,
    executor: Executor,
    *,
    messages: Sequence[Any],
    max_turns: int = 10,
    refresh_tools: RefreshTools | None = None,
    steering: Steering | None = None,
    context: Any = None,
    resume: LoopResult | None = None,
    reset_tool_choice: bool = True,
    stream: bool = False,
    limits: Limits | None = None,
    **request: Any,
) -> LoopResult:
    """Runs the Anthropic Messages tool loop with an ``anthropic.AsyncAnthropic`` client.

    ``messages`` is the list of messages so far (one message, or text, is
    refused with ``OptionError`` before anything is sent). ``request`` holds
    the other ``messages.create`` keywords (``model``, ``max_tokens``,
    ``system``, ...); ``tools`` given there (server tools such as web search)
    are sent after the executor's. A ``pause_turn`` response is sent back as
    it is. See the module doc for stops, approvals and refresh.
    """
    return await _run_loop(
        _Anthropic(client, request),
        executor,
        _conversation(messages, "messages", "messages"),
        max_turns=max_turns,
        refresh_tools=refresh_tools,
        steering=steering,
        context=context,
        resume=resume,
        reset_tool_choice=reset_tool_choice,
        stream=stream,
        limits=limits,
    )


async def openai_responses_loop(
    client: Any,
    executor: Executor,
    *,
    input: str | Sequence[Any],
    max_turns: int = 10,
    strict: bool = False,
    refresh_tools: RefreshTools | None = None,
    steering: Steering | None = None,
    context: Any = None,
    resume: LoopResult | None = None,
    reset_tool_choice: bool = True,
    stream: bool = False,
    limits: Limits | None = None,
    **request: Any,
) -> LoopResult:
    """Runs the OpenAI Responses tool loop with an ``openai.AsyncOpenAI`` client.

    ``input`` is the first user text or a list of input items (one item alone
    is refused with ``OptionError`` before anything is sent); the loop keeps
    the whole conversation in ``input`` (it works with ``store=False``).
    ``strict=True`` exports the tools in strict form. ``request`` holds the
    other ``responses.create`` keywords; ``tools`` given there (hosted tools)
    are sent after the executor's.
    """
    history: list[Any] = (
        [{"role": "user", "content": input}]
        if isinstance(input, str)
        else _conversation(input, "input", "input items (or the user's text)", empty=True)
    )
    return await _run_loop(
        _Responses(client, request, strict),
        executor,
        history,
        max_turns=max_turns,
        refresh_tools=refresh_tools,
        steering=steering,
        context=context,
        resume=resume,
        reset_tool_choice=reset_tool_choice,
        stream=stream,
        limits=limits,
    )


async def openai_chat_loop(
    client: Any,
    executor: Executor,
    *,
    messages: Sequence[Any],
    max_turns: int = 10,
    strict: bool = False,
    refresh_tools: RefreshTools | None = None,
    steering: Steering | None = None,
    context: Any = None,
    resume: LoopResult | None = None,
    reset_tool_choice: bool = True,
    stream: bool = False,
    limits: Limits | None = None,
    **request: Any,
) -> LoopResult:
    """Runs the OpenAI Chat Completions tool loop with an ``openai.AsyncOpenAI`` client.

    ``messages`` is the list of messages so far (one message, or text, is
    refused with ``OptionError`` before anything is sent). ``strict=True``
    exports the tools in strict form. ``request`` holds the other
    ``chat.completions.create`` keywords (``model``, ...).
    """
    return await _run_loop(
        _Chat(client, request, strict),
        executor,
        _conversation(messages, "messages", "messages"),
        max_turns=max_turns,
        refresh_tools=refresh_tools,
        steering=steering,
        context=context,
        resume=resume,
        reset_tool_choice=reset_tool_choice,
        stream=stream,
        limits=limits,
    )


async def gemini_loop(
    client: Any,
    executor: Executor,
    *,
    model: str,
    contents: str | Sequence[Any],
    config: Any = None,
    max_turns: int = 10,
    refresh_tools: RefreshTools | None = None,
    steering: Steering | None = None,
    context: Any = None,
    resume: LoopResult | None = None,
    reset_tool_choice: bool = True,
    stream: bool = False,
    limits: Limits | None = None,
) -> LoopResult:
    """Runs the Gemini tool loop with a ``google.genai.Client`` (its ``aio`` side).

    ``contents`` is the first user text or a list of contents (one ``Content``
    alone is refused with ``OptionError`` before anything is sent); ``config`` a
    dict or ``GenerateContentConfig`` whose ``tools`` (hosted tools) are sent
    after the executor's function declarations.
    """
    history: list[Any] = (
        [{"role": "user", "parts": [{"text": contents}]}]
        if isinstance(contents, str)
        else _conversation(contents, "contents", "contents (or the user's text)")
    )
    return await _run_loop(
        _Gemini(client, model, config),
        executor,
        history,
        max_turns=max_turns,
        refresh_tools=refresh_tools,
        steering=steering,
        context=context,
        resume=resume,
        reset_tool_choice=reset_tool_choice,
        stream=stream,
        limits=limits,
    )
