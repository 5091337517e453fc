"""Errors that toolsched users catch by name."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from toolsched._values.exception_text import described

if TYPE_CHECKING:
    from toolsched._values.results import ToolResult

__all__ = [
    "ApprovalError",
    "AssemblyError",
    "BackendError",
    "BackendUnavailableError",
    "GuardrailTripped",
    "IncompleteStreamError",
    "JournalCorruptError",
    "JournalError",
    "JournalVersionError",
    "LeaseLostError",
    "LoopFailed",
    "MalformedCallError",
    "McpConnectionError",
    "McpToolError",
    "MissingResultError",
    "OptionError",
    "RefreshError",
    "ResourceError",
    "ResponseFormatError",
    "ResultTooLargeError",
    "RuleError",
    "RunClaimedError",
    "RunExistsError",
    "SchemaError",
    "SemanticError",
    "StateError",
    "StreamFailed",
    "ToolCallFailed",
    "ToolDefinitionError",
    "ToolNameError",
    "ToolTimeoutError",
    "ToolschedError",
    "TurnStateError",
    "UnknownOptionError",
    "UnknownRunError",
    "UnknownToolError",
    "UnpicklableError",
    "UnstorableOutputError",
    "WorkerLostError",
    "WorkloadError",
]


class ToolschedError(Exception):
    """Base class of the errors toolsched raises on purpose.

    Every one pickles and copies as it is (its message, its type and the fields it carries), though most
    subclasses take those fields rather than the message: an error raised in a worker process travels back.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its ``args`` without ``__init__`` (which takes the fields, not the message), then given
        # its fields back; pickle's default calls ``type(self)(*self.args)``.
        return _rebuilt, (type(self), self.args), self.__dict__ or None


def _rebuilt(cls: type[ToolschedError], args: tuple[Any, ...]) -> ToolschedError:
    """An error of ``cls`` with ``args``, its ``__init__`` not run (its fields follow from the pickle)."""
    error = cls.__new__(cls, *args)
    error.args = args  # an ``OSError`` subclass with an ``__init__`` of its own leaves them to it
    return error


class SchemaError(ToolschedError, ValueError):
    """A tool's input schema is not a valid, self-contained JSON Schema (raised by the engine too)."""


class ToolNameError(ToolschedError, ValueError):
    """A tool name or alias is malformed or used twice (raised by the engine too)."""


class OptionError(ToolschedError, ValueError):
    """An option is out of its range or of the wrong kind (raised by the engine too)."""


class AssemblyError(ToolschedError, RuntimeError):
    """The results of a turn do not answer every call exactly once (an internal fault, raised by the engine)."""


class ToolDefinitionError(ToolschedError, ValueError):
    """A tool is declared wrongly: bad metadata, a signature toolsched cannot describe."""


class UnknownOptionError(ToolDefinitionError, TypeError):
    """An option ``@tool`` (or an integration's wrapper) does not take.

    A ``ToolDefinitionError`` as the README promises for bad metadata, and a ``TypeError`` as
    Python's own unexpected keyword argument is, for code that catches that.
    """


class SemanticError(ToolschedError):
    """Raised by a tool's ``validate_input`` when arguments are well-formed but unacceptable.

    The message is what the model sees, so say what to change.
    """


class UnknownToolError(ToolschedError, LookupError):
    """A call named a tool that does not exist (raised when ``unknown_tool="raise"``)."""

    def __init__(self, message: str, *, call_id: str, tool_name: str) -> None:
        super().__init__(message)
        self.call_id = call_id
        self.tool_name = tool_name


class ToolCallFailed(ToolschedError):
    """Raised with ``on_error="raise"``: the first failed call in model order.

    It is raised once the failing batch has settled. ``result`` is that call's
    result; ``others`` are the other failures that would have raised; ``results``
    holds every result of the turn, in model order (calls after the failing
    batch are ``skipped``), so nothing is lost. The exception the tool raised,
    when there was one, is the ``__cause__``.
    """

    def __init__(self, result: ToolResult, others: Sequence[ToolResult], results: Sequence[ToolResult]) -> None:
        extra = f" (and {len(others)} more failed calls)" if others else ""
        super().__init__(f"tool call {result.call_id} ({result.tool_name}) failed: {result.error}{extra}")
        self.result = result
        self.others = tuple(others)
        self.results = tuple(results)


class ToolTimeoutError(ToolCallFailed, TimeoutError):
    """Raised when a tool with ``timeout_behavior="raise"`` runs past its timeout.

    Like ``ToolCallFailed`` it is raised after the batch settles, and carries
    the ``timeout`` result, the other failures and every result of the turn.
    """


class RuleError(ToolschedError, ValueError):
    """A permission rule or a hook matcher that does not parse; raised when it is built."""


class StateError(ToolschedError, ValueError):
    """A saved run state that cannot be used: malformed, truncated, altered, or already resumed."""


class ApprovalError(StateError, LookupError):
    """An approval or rejection names a call that is not waiting for one (unknown, or answered already)."""


class TurnStateError(ToolschedError, RuntimeError):
    """A streamed turn used out of order: a call submitted after ``close``, or outside the turn's block."""


class StreamFailed(ToolschedError):
    """The stream of a turn's calls broke midway (``Executor.turn``, ``run`` of an async iterable).

    ``outcome`` holds a result for every call submitted before it broke: calls
    that had finished keep their results, running calls of tools with
    ``interrupt_behavior="cancel"`` are ``cancelled``, ``"block"`` calls ran to
    the end (one waiting for a rate-limit token or a retry ran no more attempts),
    calls not started are ``skipped``. The error of the stream is the
    ``__cause__``.

    A tool loop (``toolsched.loops``) whose streamed answer broke sets ``history``: the conversation
    before the request that broke, every earlier turn answered, ready to be sent again (None elsewhere).
    """

    def __init__(self, outcome: Any, cause: BaseException) -> None:
        detail = described(cause)  # a message that cannot be read must not lose the outcome
        answered = len(outcome.results)
        super().__init__(f"the stream of calls broke after {answered} calls were answered ({detail})")
        self.outcome = outcome
        self.history: list[Any] | None = None


class LoopFailed(ToolschedError):
    """A tool loop (``toolsched.loops``) failed after it had answered a turn's calls: the request for the next
    answer failed (the connection, an HTTP error, the SDK), the answer could not be read, running its calls
    failed (a journal that cannot be written, say), or ``refresh_tools`` failed. The error is the ``__cause__``.

    Nothing the tools did is lost: ``history`` is the conversation before the request that failed, every
    turn answered (an answer whose calls were not all answered is left out), ready to be sent again;
    ``outcome`` is the last answered turn's ``Outcome``, ``turns`` the requests this call of the loop made,
    ``executor`` the executor in use then (None once the error was pickled). A failure before the loop
    answered any call (its first request) is raised as it is: the conversation given is still the one to send.
    """

    def __init__(self, history: list[Any], outcome: Any, turns: int, executor: Any, cause: BaseException) -> None:
        super().__init__(
            f"the tool loop failed after {turns} request{'s' if turns != 1 else ''} with its calls answered "
            f"({described(cause)}); its history is kept on this error"
        )
        self.history = history
        self.outcome = outcome
        self.turns = turns
        self.executor = executor

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled without its executor (which holds what cannot leave this process): ``executor`` is None then.
        return _rebuilt, (type(self), self.args), {**self.__dict__, "executor": None}

    def __copy__(self) -> LoopFailed:
        copied = _rebuilt(type(self), self.args)
        copied.__dict__.update(self.__dict__)
        return copied  # type: ignore[return-value]


class IncompleteStreamError(ToolschedError):
    """A model's streamed answer that is not a whole turn: it ended before the provider's final event
    (``message_stop``, ``response.completed``, a ``finish_reason``, Gemini's ``finishReason``), or the
    provider reported an error in it.

    The adapters' ``execute_stream`` raise it as the ``__cause__`` of ``StreamFailed`` (which keeps the
    results of the calls the stream completed); no reply is built from a cut turn, since a call in it may
    be cut off. Send the request again. ``provider`` names the API.
    """

    def __init__(self, provider: str, message: str) -> None:
        super().__init__(f"{provider}: {message}")
        self.provider = provider


class GuardrailTripped(ToolschedError):
    """Raised by a guardrail to stop the whole run (rather than reject one call).

    The executor lets the calls already running settle, then raises it from
    ``run``/``resume`` with ``results`` set to every result of the turn so far.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.call_id: str | None = None
        self.results: tuple[ToolResult, ...] = ()


class MalformedCallError(ToolschedError, ValueError, TypeError):
    """A ``ToolCall`` given a field it cannot hold: an ID that is not non-empty text, a name that is not
    text, arguments neither a mapping nor JSON text; or, handed to the executor, something that is not a
    ``ToolCall`` or whose fields cannot be read. The message names the field (and the call's position)
    and the rule. A ``ValueError`` and a ``TypeError``, so either catches it.
    """


class UnpicklableError(ToolschedError, TypeError):
    """An object pickle was asked to serialize that cannot be: the message names it and says why (a tool of a
    scheduled agent runs its calls through an executor of this process). A ``TypeError``, as pickle raises for
    objects it cannot serialize."""


class ResponseFormatError(ToolschedError, ValueError):
    """A provider response (or message) that an adapter cannot read: the message names the field and the rule."""


class MissingResultError(ToolschedError, ValueError):
    """A reply was asked for while a call still has no result (resume an interrupted run first)."""


class McpConnectionError(ToolschedError, ConnectionError):
    """An MCP server could not be reached, or its connection dropped."""


class McpToolError(ToolschedError):
    """An MCP server reported that a tool call failed; the message is the server's."""


class WorkloadError(ToolschedError, ValueError):
    """A benchmark workload file is malformed; the message names the line and the field."""


class RefreshError(ToolschedError):
    """A registry's ``refresh_tools`` failed or gave something other than tools; the previous tool set stays."""


class ResourceError(ToolschedError):
    """A tool's per-run resource could not be opened, or is asked for where there is none."""


class BackendError(ToolschedError):
    """A backend could not run a call: it is unreachable, or the call could not be sent or answered."""


class BackendUnavailableError(BackendError, ConnectionError):
    """The backend cannot be reached (a Ray cluster address that does not answer) or is not installed."""


class WorkerLostError(BackendError):
    """The worker process or node running a call died before it returned a result."""


class ResultTooLargeError(BackendError):
    """A call's result is too large to send back (``RayBackend(max_result_bytes=...)`` or the object store)."""


# -- journals ----------------------------------------------------------------------


class JournalError(ToolschedError):
    """The journal could not do what was asked; the run must not go on as if it had.

    Raised for a database that went away or is locked past the busy timeout, a
    write that breaks a call's order of transitions, and values a journal
    cannot store.
    """


class UnstorableOutputError(JournalError):
    """A result's output has no JSON form (a list that holds itself, a dict with tuple keys): nothing was written."""


class JournalVersionError(JournalError):
    """The journal was written by a newer toolsched (a higher schema version); it was left untouched."""

    def __init__(self, message: str, *, found: int, supported: int) -> None:
        super().__init__(message)
        self.found = found
        self.supported = supported


class JournalCorruptError(JournalError):
    """The file or database is not a toolsched journal, or is damaged; nothing in it was overwritten."""


class UnknownRunError(JournalError, LookupError):
    """No run with this ID is in the journal (never begun, or pruned)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"the journal has no run {run_id!r} (never begun here, or pruned)")
        self.run_id = run_id


class RunExistsError(JournalError):
    """A run with this ID was already begun; recover it, or begin the new run under another ID."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} is already in the journal; recover it or choose another run ID")
        self.run_id = run_id


class RunClaimedError(JournalError):
    """Another owner holds the run: it is running or recovering it.

    ``owner`` names the holder (``None`` when nobody holds the run and this
    process must ``claim`` it before writing); ``lease_until`` is when the
    holder's lease runs out unless it keeps writing.
    """

    def __init__(self, run_id: str, owner: str | None, lease_until: datetime | None) -> None:
        if owner is None:
            message = f"run {run_id!r} is not held by this process; claim it before writing to it"
        else:
            until = f" until {lease_until.isoformat()}" if lease_until is not None else ""
            message = f"run {run_id!r} is held by {owner!r}{until}; it is being run or recovered there"
        super().__init__(message)
        self.run_id = run_id
        self.owner = owner
        self.lease_until = lease_until


class LeaseLostError(RunClaimedError):
    """A run in progress here lost its lease: this process can no longer vouch that it alone runs it.

    Either a renewal or a write found another owner holding the run (``owner``; ``None`` when the
    run is gone from the journal), or three quarters of the lease went by without a renewal landing
    (``expired``: the journal unreachable or slow, or this process paused), so that another process
    may soon take the run over. The run stopped when it noticed: no call of it starts after that,
    nothing more of it is written, and its calls in flight are cancelled. Recover it.
    """

    def __init__(self, run_id: str, owner: str | None, *, expired: bool, lease: timedelta) -> None:
        if expired:
            why = (
                f"no renewal of its {lease.total_seconds():g} s lease landed in time (the journal unreachable or "
                "slow, or this process paused), so another process may take it over"
            )
        elif owner is None:
            why = "the journal no longer holds it for this process (it was released or pruned elsewhere)"
        else:
            why = f"it is held by {owner!r} now"
        JournalError.__init__(self, f"run {run_id!r} lost its lease: {why}; it stopped here, recover it")
        self.run_id = run_id
        self.owner = owner
        self.lease_until = None
        self.expired = expired
