"""Attacks on the execution backends and the public errors: what docs/concepts/failures.md, DESIGN.md's
isolation and scale-out sections and docs/reference/errors.md promise when a tool body misbehaves in its
worker process (writes to the process's own standard streams, raises or returns what cannot travel back),
and that every public error pickles and copies as it is (an error raised in a worker process travels back)."""

from __future__ import annotations

import copy
import logging
import os
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import anyio
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
        # Pickled without its executor (``test_a_loop_failed_error_pickles_without_its_executor``).
        "LoopFailed": lambda: errors.LoopFailed(
            [{"role": "user", "content": "hi\n"}], ts.Outcome(results=[_FAILED]), 2, None, ConnectionError("down")
        ),
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


def test_a_loop_failed_error_pickles_without_its_executor() -> None:
    """``LoopFailed`` carries the executor the loop used, which cannot be pickled: the error pickles with
    ``executor`` None and everything else as it was (it raised ``UnpicklableError``); a copy keeps it."""
    executor = ts.Executor([])
    error = errors.LoopFailed([{"role": "user", "content": "hi"}], None, 1, executor, ConnectionError("down"))
    back = pickle.loads(pickle.dumps(error))
    assert (type(back), str(back), back.args, back.history, back.turns) == (
        errors.LoopFailed,
        str(error),
        error.args,
        error.history,
        1,
    )
    assert back.executor is None and back.outcome is None
    assert copy.copy(error).executor is executor


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


@ts.tool(isolation="process", timeout=10)
def run_programs() -> str:
    """Starts programs the way tool bodies do, with the standard streams they inherit."""
    subprocess.run(["echo", "a line on standard output"], check=True)
    read = subprocess.run(["cat"], stdout=subprocess.PIPE, check=True)  # standard input: nothing to read
    return f"read {read.stdout!r}"


@ts.tool(isolation="process")
def write_raw(data: str) -> str:
    """Writes the bytes ``data`` (in hexadecimal) to file descriptor 1 itself, bypassing ``sys.stdout``."""
    os.write(1, bytes.fromhex(data))
    return "written"


@ts.tool(isolation="process")
def number(i: int) -> int:
    """Returns its argument."""
    return i


async def test_a_program_a_process_tool_starts_cannot_break_its_worker(anyio_backend: str) -> None:
    """Promise: a worker that dies fails only the call it was running; a tool that does not die returns its
    output. A program the body started inherited the worker's file descriptors 0 and 1, the pipes its parent
    talks to it through: its output on standard output broke the answer (``WorkerLostError`` for a tool that
    worked), and one reading standard input waited for the next request (the call hung to its timeout)."""
    outcome = await ts.Executor([run_programs]).run([ts.ToolCall(id="c1", name="run_programs", args={})])
    (result,) = outcome.results
    assert result.error is None
    assert result.output == "read b''"


async def test_a_write_to_the_raw_standard_output_cannot_answer_another_call(anyio_backend: str) -> None:
    """Promise (docs/concepts/failures.md): every call gets exactly one result, its own. Bytes written to file
    descriptor 1 were read by the parent as the answer: with the shape of one, they were taken as the call's
    answer and its real answer, left in the pipe of the reused worker, as the next call's; other bytes failed
    the call (``UnpicklingError``)."""
    forged = b"RETURN %d\n" % len(pickle.dumps("forged")) + pickle.dumps("forged")
    outcome = await ts.Executor([write_raw, number]).run(
        [
            ts.ToolCall(id="c1", name="write_raw", args={"data": forged.hex()}),
            ts.ToolCall(id="c2", name="number", args={"i": 7}),
            ts.ToolCall(id="c3", name="write_raw", args={"data": b"plain text\n".hex()}),
            ts.ToolCall(id="c4", name="number", args={"i": 8}),
        ]
    )
    assert [(result.output, result.error) for result in outcome.results] == [
        ("written", None),
        (7, None),
        ("written", None),
        (8, None),
    ]


class NeedsTwo(Exception):
    """An exception whose ``__init__`` takes other arguments than its message: it pickles, and fails to
    unpickle."""

    def __init__(self, table: str, row: int) -> None:
        super().__init__(f"row {row} of {table} is locked")


class Unrebuildable:
    """A value that pickles in the worker and fails to unpickle in the caller's process."""

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild_in_worker_only, ()


def _rebuild_in_worker_only() -> Unrebuildable:
    if not sys.argv[0].endswith(os.path.join("anyio", "to_process.py")):
        raise RuntimeError("only a worker process can rebuild this")
    return Unrebuildable()


@ts.tool(isolation="process")
def misbehave(how: str) -> Any:
    """Returns or raises what cannot travel back from its worker process."""
    if how == "lock":
        return threading.Lock()
    if how == "local":
        return lambda: None
    if how == "needs-two":
        raise NeedsTwo("accounts", 3)
    if how == "holds-a-lock":
        error = ValueError("the cache is stale")
        error.lock = threading.Lock()  # type: ignore[attr-defined]
        raise error
    return Unrebuildable()


async def test_what_cannot_travel_back_from_a_worker_is_a_backend_error_naming_the_tool(anyio_backend: str) -> None:
    """Promise: bad input gets a typed readable error; the tool raised -> ``execution_error`` with its
    message. A result or exception that pickle cannot carry back came back as pickle's own ``TypeError`` or
    ``AttributeError``, naming neither the tool nor, for an exception, what the tool raised."""
    hows = ["lock", "local", "needs-two", "holds-a-lock", "unrebuildable"]
    outcome = await ts.Executor([misbehave]).run(
        [ts.ToolCall(id=how, name="misbehave", args={"how": how}) for how in hows]
    )
    errors_by_how = {result.call_id: result.error or "" for result in outcome.results}
    assert {result.error_kind for result in outcome.results} == {"execution_error"}
    for error in errors_by_how.values():
        assert error.startswith("BackendError: "), error
        assert "`misbehave`" in error, error
    assert "the result of `misbehave` (lock) cannot be sent back" in errors_by_how["lock"]
    assert "the result of `misbehave` (function) cannot be sent back" in errors_by_how["local"]
    assert errors_by_how["needs-two"].endswith("NeedsTwo: row 3 of accounts is locked")
    assert errors_by_how["holds-a-lock"].endswith("ValueError: the cache is stale")
    assert (
        "cannot be rebuilt here: RuntimeError: only a worker process can rebuild this" in errors_by_how["unrebuildable"]
    )


class Inventory(ts.Tool):
    """A class-form process tool whose attributes travel with every call."""

    name = "inventory"
    description = "Counts the items on a shelf."
    input_schema: ClassVar[dict[str, Any]] = {"type": "object", "properties": {"shelf": {"type": "string"}}}
    isolation = "process"

    def __init__(self, client: Any = None) -> None:
        self.client = client

    def call(self, args: Any, ctx: Any) -> str:
        return f"{args['shelf']}: 3 items"


def test_a_class_form_process_tool_whose_attributes_cannot_pickle_is_refused_when_the_executor_is_built() -> None:
    """Promise: a tool declared wrongly is a ``ToolDefinitionError`` naming it when the executor is built (as
    for Ray, docs/integrations/ray.md). A process tool holding a lock was accepted, and every call of it
    failed with pickle's ``TypeError``."""
    with pytest.raises(ts.ToolDefinitionError, match=r"tool `inventory`: isolation='process' .* cannot be pickled"):
        ts.Executor([Inventory(client=threading.Lock())])


async def test_a_call_that_cannot_be_sent_to_its_worker_is_a_backend_error_naming_the_tool(anyio_backend: str) -> None:
    """Promise: bad input gets a typed readable error. Attributes that stop pickling after the executor was
    built failed the call with pickle's bare ``TypeError``."""
    tool = Inventory()
    executor = ts.Executor([tool])
    tool.client = threading.Lock()
    outcome = await executor.run([ts.ToolCall(id="c1", name="inventory", args={"shelf": "a"})])
    (result,) = outcome.results
    assert result.error_kind == "execution_error"
    assert (result.error or "").startswith("BackendError: the call of `inventory` cannot be sent to its worker process")
    assert "cannot pickle '_thread.lock' object" in (result.error or "")
    tool.client = None
    outcome = await executor.run([ts.ToolCall(id="c2", name="inventory", args={"shelf": "a"})])
    assert outcome.results[0].output == "a: 3 items"


class Unprintable(Exception):
    """An exception whose message cannot be read."""

    def __str__(self) -> str:
        raise RuntimeError("no message")


@ts.tool(concurrency_safe=True)
async def answered(n: int) -> int:
    """Returns its argument."""
    return n


async def test_a_stream_broken_by_an_exception_without_a_readable_message_still_raises_stream_failed(
    anyio_backend: str,
) -> None:
    """Promise (``StreamFailed``): ``outcome`` holds a result for every call submitted before the stream broke,
    the stream's error is the ``__cause__``. An error whose ``str`` raises made winding the turn down and
    building ``StreamFailed`` fail: the run raised that ``RuntimeError`` instead, and the results were lost."""

    async def calls() -> Any:
        yield ts.ToolCall(id="c1", name="answered", args={"n": 1})
        raise Unprintable

    with pytest.raises(ts.StreamFailed) as caught:
        await ts.Executor([answered]).run(calls())
    assert isinstance(caught.value.__cause__, Unprintable)
    (result,) = caught.value.outcome.results  # submitted, not started when the stream broke
    assert (result.call_id, result.error_kind) == ("c1", "skipped")
    assert result.error == "not run: the stream of calls broke (Unprintable)"
    assert str(caught.value) == "the stream of calls broke after 1 calls were answered (Unprintable)"


async def test_a_guardrail_raising_an_exception_without_a_readable_message_refuses_its_call(
    anyio_backend: str,
) -> None:
    """Promise: a guardrail that fails refuses its call, saying so. One whose exception's ``str`` raises
    turned into that ``RuntimeError`` from toolsched's own message, the call an ``execution_error``."""

    def guard(event: Any) -> None:
        raise Unprintable

    executor = ts.Executor([answered], input_guardrails=[guard])
    outcome = await executor.run([ts.ToolCall(id="c1", name="answered", args={"n": 1})])
    (result,) = outcome.results
    assert result.error_kind == "guardrail_rejected"
    assert "failed (Unprintable); the call was refused" in (result.error or "")


class UnreadableArgs(Mapping[str, Any]):
    """Arguments whose reading raises an exception without a readable message."""

    def __getitem__(self, key: str) -> Any:
        raise Unprintable

    def __iter__(self) -> Iterator[str]:
        raise Unprintable

    def __len__(self) -> int:
        return 1


def test_call_arguments_that_raise_without_a_readable_message_are_a_malformed_call_error() -> None:
    """Promise (``MalformedCallError``): arguments whose fields cannot be read are refused with it, naming the
    field. Reading ones whose exception's ``str`` raises gave that ``RuntimeError`` instead."""
    with pytest.raises(ts.MalformedCallError, match=r"reading the UnreadableArgs raised Unprintable"):
        ts.ToolCall(id="c1", name="answered", args=UnreadableArgs())


# -- backend selection ---------------------------------------------------------------------------------------


class MeteredBackend(ts.LocalBackend):
    """Runs bodies here as the built-in backend does, counting the calls it binds and runs."""

    def __init__(self) -> None:
        self.bound: list[str] = []
        self.ran: list[str] = []

    def bind(self, tools: Any) -> None:
        super().bind(tools)
        self.bound.extend(member.name for member in tools)

    async def invoke(self, tool: Any, args: Any, ctx: Any) -> Any:
        self.ran.append(tool.name)
        return await super().invoke(tool, args, ctx)


@ts.tool(concurrency_safe=True)
def doubled(n: int) -> int:
    """A sync body (a worker thread)."""
    return 2 * n


@pytest.mark.parametrize("name", ["metered", "local"])
async def test_a_backend_subclassing_local_backend_is_the_one_that_runs_the_calls(
    anyio_backend: str, name: str
) -> None:
    """Promise (``ts.Backend``): the backend a tool names (or ``default_backend``) runs its bodies; ``bind``
    checks its tools when the executor is built. A subclass of ``ts.LocalBackend`` that wraps ``invoke`` (to
    log or meter the calls) was taken for the built-in one: neither its ``bind`` nor its ``invoke`` was ever
    called, under any name."""
    backend = MeteredBackend()
    default = None if name == "local" else name
    executor = ts.Executor([answered, doubled], backends={name: backend}, default_backend=default)
    assert set(backend.bound) == {"answered", "doubled"}
    outcome = await executor.run(
        [ts.ToolCall(id="c1", name="answered", args={"n": 4}), ts.ToolCall(id="c2", name="doubled", args={"n": 4})]
    )
    assert [(result.output, result.error) for result in outcome.results] == [(4, None), (8, None)]
    assert sorted(backend.ran) == ["answered", "doubled"]


# -- Ray: an actor whose call was cancelled is busy until that call ends there --------------------------------


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A two-CPU Ray cluster on this machine (loopback only: see conftest.py), shut down after the module."""
    ray = pytest.importorskip("ray")
    cloudpickle = pytest.importorskip("ray.cloudpickle")

    # Ray workers cannot import this module: its tools travel to them by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(
        address="local",
        num_cpus=2,
        object_store_memory=96 * 1024 * 1024,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
        namespace="toolsched-attacks",
    )
    yield ray
    ray.shutdown()


@ts.tool(concurrency_safe=True, timeout=5)
def occupy(hold: float, started: str = "") -> int:
    """Holds its actor for ``hold`` seconds whatever happens to its call (a sync body cannot be stopped there);
    writes its process ID to ``started`` first. Returns its process ID."""
    if started:
        with open(started, "w") as file:
            file.write(str(os.getpid()))
    time.sleep(hold)
    return os.getpid()


# One event loop is enough: the routing is the backend's own, and the cluster is costly.
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_timed_out_call_keeps_its_actor_busy_so_the_next_call_goes_to_another(
    ray_cluster: Any, anyio_backend: str, tmp_path: Path
) -> None:
    """Promise (``RayBackend(actor_pool=...)``): each actor runs one call at a time, a call goes to the least
    busy actor, and a timed-out call of a sync body finishes on its actor (its result dropped). The actor was
    counted free as soon as the call was answered ``timeout``: the next call went to it, and waited behind the
    body still running there (here it timed out too) while another actor stood idle."""
    backend = ts.RayBackend(actor_pool={"occupy": 2})
    executor = ts.Executor([occupy], backends={"ray": backend}, default_backend="ray")
    try:
        with anyio.fail_after(120):
            backend.connect()
            # Both actors up (straight to the backend: no timeout while they start).
            async with anyio.create_task_group() as group:
                for _ in range(2):
                    group.start_soon(backend.invoke, occupy, {"hold": 0.5}, None)
            started = tmp_path / "started"
            stuck = await executor.run([ts.ToolCall(id="a", name="occupy", args={"hold": 60, "started": str(started)})])
            after = await executor.run([ts.ToolCall(id="b", name="occupy", args={"hold": 0})])
    finally:
        backend.close()
    assert stuck.results[0].error_kind == "timeout"
    (result,) = after.results
    assert result.error is None, result.error
    assert result.output != int(started.read_text())


# -- a sync body waited for after its call was cancelled ------------------------------------------------------


async def test_cancelling_the_run_while_a_cancelled_call_waits_for_its_sync_body_propagates_at_once(
    anyio_backend: str,
) -> None:
    """Promise (docs/concepts/failures.md): a sync body that already runs when its call is cancelled (a failed
    sibling) is waited for and the call reports what it did; cancelling the run propagates at once and never
    becomes a result. The wait was shielded from every cancellation, the run's too: a caller's deadline
    passing during it waited for the body to return (asyncio), or was lost and the run returned its results
    (trio)."""
    release = threading.Event()
    started = threading.Event()
    returned = threading.Event()

    @ts.tool(concurrency_safe=True)
    def stuck() -> str:
        started.set()
        release.wait(3)
        returned.set()
        return "returned after all"

    @ts.tool(concurrency_safe=True, abort_siblings_on_error=True)
    async def breaks() -> None:
        await anyio.to_thread.run_sync(started.wait)
        raise RuntimeError("broken")

    broke = anyio.Event()

    def on_event(event: Any) -> None:
        if isinstance(event, ts.ToolFinished) and event.result.call_id == "b":
            broke.set()

    executor = ts.Executor([stuck, breaks], strategy=ts.Parallel(), on_event=on_event)
    calls = [ts.ToolCall(id="s", name="stuck", args={}), ts.ToolCall(id="b", name="breaks", args={})]
    finished: list[ts.Outcome] = []
    try:
        with anyio.CancelScope() as caller:
            async with anyio.create_task_group() as group:

                async def run() -> None:
                    finished.append(await executor.run(calls))

                group.start_soon(run)
                await broke.wait()  # the sibling failed: the stuck call is cancelled and waits for its body
                await anyio.sleep(0.05)
                caller.cancel()
        assert caller.cancelled_caught
        assert finished == []
        assert not returned.is_set()  # the run ended while the body still ran: it did not wait for it
    finally:
        release.set()


async def test_a_cancelled_call_waiting_for_its_sync_body_still_keeps_the_body_s_outcome(anyio_backend: str) -> None:
    """The other half of the promise, kept: with nothing else cancelled, the call waits for the body and reports
    its output, not ``cancelled``."""
    started = threading.Event()

    @ts.tool(concurrency_safe=True)
    def slow() -> str:
        started.set()
        time.sleep(0.2)
        return "really done"

    @ts.tool(concurrency_safe=True, abort_siblings_on_error=True)
    async def breaks() -> None:
        await anyio.to_thread.run_sync(started.wait)
        raise RuntimeError("broken")

    outcome = await ts.Executor([slow, breaks], strategy=ts.Parallel()).run(
        [ts.ToolCall(id="s", name="slow", args={}), ts.ToolCall(id="b", name="breaks", args={})]
    )
    assert [(result.output, result.error_kind) for result in outcome.results] == [
        ("really done", None),
        (None, "execution_error"),
    ]


async def test_a_module_that_starts_a_program_as_it_is_imported_cannot_break_its_worker(anyio_backend: str) -> None:
    """Promise: a tool that does not die returns its output. The worker imported the tool's module before the
    standard streams were set aside for the body: a program the module starts at import (its output on the
    worker's file descriptor 1, the pipe of its answer) broke every call (``WorkerLostError``)."""
    from noisy_import import ping

    executor = ts.Executor([ping])
    for call_id in ("c1", "c2"):
        outcome = await executor.run([ts.ToolCall(call_id, "ping", {})])
        assert [(result.output, result.error) for result in outcome.results] == [("pong", None)]


@ts.tool
def slow_inner() -> str:
    """A sync body that takes a while."""
    time.sleep(1.0)
    return "inner done"


INNER = ts.Executor([slow_inner])


@ts.tool(timeout=100)
async def runs_inner() -> str:
    """Runs ``slow_inner`` in a run of its own, then works on (an async body: a cancellation stops it at once)."""
    await INNER.run([ts.ToolCall("inner", "slow_inner", {})])
    await anyio.sleep(5)
    return "outer done"


async def test_a_call_whose_nested_run_waits_for_a_sync_body_is_cancelled_at_once(anyio_backend: str) -> None:
    """Promise (docs/concepts/failures.md): a cancelled call is answered ``cancelled``, and never reported as work
    that happened. A nested run's calls run in copies of the enclosing call's context, and a sync body of theirs
    took the enclosing call for its own: cancelling the enclosing call waited for that body, then reported the
    call as a success with no output."""
    executor = ts.Executor([runs_inner])
    box: dict[str, ts.Outcome] = {}

    async def run() -> None:
        box["outcome"] = await executor.run([ts.ToolCall("outer", "runs_inner", {})])

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await anyio.sleep(0.3)
        assert executor.cancel("outer", "stop it")
    (result,) = box["outcome"].results
    assert (result.error_kind, result.output) == ("cancelled", None)
