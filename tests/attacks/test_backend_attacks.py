"""Attacks on the execution backends and the public errors: what docs/concepts/failures.md, DESIGN.md's
isolation and scale-out sections and docs/reference/errors.md promise when a tool body misbehaves in its
worker process (writes to the process's own standard streams, raises or returns what cannot travel back),
and that every public error pickles and copies as it is (an error raised in a worker process travels back)."""

from __future__ import annotations

import copy
import pickle
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import toolsched as ts
from toolsched import errors
from toolsched._values.results import ToolResult

pytestmark = pytest.mark.anyio


# -- every public error pickles as it is -------------------------------------------------------------------

_FAILED = ToolResult("c1", "fetch", error="ValueError: 'bad'\n\x00", error_kind="execution_error", is_error=True)
_TIMED_OUT = ToolResult("c2", "slow", error="`slow` did not finish", error_kind="timeout", is_error=True)


def _sample(name: str) -> BaseException:
    """An instance of the public error ``name``, with odd field values where it takes fields."""
    made: dict[str, Any] = {
        "GuardrailTripped": lambda: errors.GuardrailTripped("stop: 'secrets'\n"),
        "IncompleteStreamError": lambda: errors.IncompleteStreamError("openai_chat", "ended before [DONE]"),
        "JournalVersionError": lambda: errors.JournalVersionError("written by a newer one", found=9, supported=3),
        "LeaseLostError": lambda: errors.LeaseLostError(
            "run/1", "owner 'b'", expired=False, lease=timedelta(seconds=0.5)
        ),
        "RunClaimedError": lambda: errors.RunClaimedError(
            "r\u00e9", "host:9", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
        ),
        "RunExistsError": lambda: errors.RunExistsError("run 'quoted'"),
        "UnknownRunError": lambda: errors.UnknownRunError(""),
        "UnknownToolError": lambda: errors.UnknownToolError("no tool `x`", call_id="c\n1", tool_name="x"),
        "ToolCallFailed": lambda: errors.ToolCallFailed(_FAILED, [_TIMED_OUT], [_FAILED, _TIMED_OUT]),
        "ToolTimeoutError": lambda: errors.ToolTimeoutError(_TIMED_OUT, [], [_TIMED_OUT]),
        "StreamFailed": lambda: errors.StreamFailed(ts.Outcome(results=[_FAILED]), RuntimeError("cut")),
    }
    maker = made.get(name)
    return maker() if maker is not None else getattr(errors, name)(f"{name}: a message with 'quotes'")


_PUBLIC = sorted({*errors.__all__, "BackendError", "BackendUnavailableError", "WorkerLostError", "ResultTooLargeError"})


@pytest.mark.parametrize("name", _PUBLIC)
def test_every_public_error_pickles_and_copies_as_it_is(name: str) -> None:
    """Promise: errors are values a caller catches by name and reads the documented fields of; the process
    backend pickles what a worker raises. Subclasses that take fields rather than the message (a run ID, a
    result, found/supported versions) failed to unpickle (``__init__`` called again with the message alone),
    or came back with the message built around the old message (``run "run 'r1' is already ..."``)."""
    error = _sample(name)
    for back in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert type(back) is type(error)
        assert str(back) == str(error)
        assert back.args == error.args
        assert vars(back) == vars(error)
        assert repr(back) == repr(error)


def test_the_errors_keep_the_kinds_the_docs_promise() -> None:
    """Promise (docs/reference/errors.md): every error toolsched raises on purpose is a ``ToolschedError``,
    and most derive from the built-in they resemble, so either catches them."""
    for name in _PUBLIC:
        assert issubclass(getattr(ts, name, None) or getattr(errors, name), errors.ToolschedError), name
    assert issubclass(ts.ToolTimeoutError, ts.ToolCallFailed) and issubclass(ts.ToolTimeoutError, TimeoutError)
    assert issubclass(ts.BackendUnavailableError, ts.BackendError)
    assert issubclass(ts.BackendUnavailableError, ConnectionError)
    assert issubclass(ts.WorkerLostError, ts.BackendError) and issubclass(ts.ResultTooLargeError, ts.BackendError)
    assert issubclass(errors.LeaseLostError, errors.RunClaimedError)
    assert issubclass(errors.UnknownOptionError, TypeError)
    back = pickle.loads(pickle.dumps(_sample("ToolTimeoutError")))
    assert isinstance(back, TimeoutError) and back.result == _TIMED_OUT


# -- process isolation: what a worker sends back ------------------------------------------------------------


@ts.tool(isolation="process")
def journal_lookup(run_id: str) -> str:
    """Raises a toolsched error that carries fields (a run ID)."""
    raise errors.RunExistsError(run_id)


async def test_a_process_tool_raising_an_error_with_fields_reports_its_own_message(anyio_backend: str) -> None:
    """Promise (docs/concepts/failures.md): the tool raised -> ``execution_error`` with its message. A
    toolsched error whose ``__init__`` takes a field came back garbled across the process boundary."""
    outcome = await ts.Executor([journal_lookup]).run(
        [ts.ToolCall(id="c1", name="journal_lookup", args={"run_id": "r9"})]
    )
    (result,) = outcome.results
    assert result.error_kind == "execution_error"
    assert result.error == f"RunExistsError: {errors.RunExistsError('r9')}"
