"""Attacks on the public objects used the ways hosts use them beyond one event loop: one executor shared by
threads that each run an event loop (asyncio or trio) at once, a tool's context handed to a thread the tool
started, a journal carried into a process forked from its holder, and copies and pickles of tools, limits,
executors, registries and journals (each works, or is refused with ``ts.UnpicklableError`` naming it)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import gc
import multiprocessing
import os
import pickle
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest
import reuse_tools
from journal_child import Store, store_in

import toolsched as ts

BACKENDS = ["asyncio", "trio"]


def on_a_thread(backend: str, body: Callable[[], object]) -> threading.Thread:
    """Runs ``anyio.run(body)`` on a thread of its own (another event loop)."""
    thread = threading.Thread(target=anyio.run, args=(body,), kwargs={"backend": backend}, daemon=True)
    thread.start()
    return thread


def waiting_tool(started: threading.Event, finished: list[str]) -> ts.Tool:
    @ts.tool(name="wait", interrupt_behavior="cancel")
    async def wait(tag: str) -> str:
        """Waits far longer than the test: only a delivered stop ends it."""
        started.set()
        await anyio.sleep(60)
        finished.append(tag)
        return tag

    return wait


@pytest.mark.parametrize("here", BACKENDS)
@pytest.mark.parametrize("there", BACKENDS)
@pytest.mark.parametrize("entry", ["interrupt", "interrupt(run_id)", "cancel", "cancel(run_id)"])
def test_a_stop_from_one_loop_reaches_a_run_on_another_loops_thread(here: str, there: str, entry: str) -> None:
    """``interrupt()`` / ``cancel(call_id)`` "stop every run in progress on this executor": with the executor
    shared by two threads, each running its own event loop, a stop asked on one loop's thread reached the other
    loop's run from the wrong thread. Across asyncio and trio it raised asyncio's or trio's own RuntimeError
    ("no running event loop", "must be called from async context"); between two asyncio loops the other loop
    was never woken, so its call went on until its own sleep ended. The stop is now handed to the run's loop:
    the call ends ``cancelled`` at once and its body never finishes."""
    started = threading.Event()
    finished: list[str] = []
    executor = ts.Executor([waiting_tool(started, finished)])
    outcomes: list[ts.Outcome] = []

    async def there_run() -> None:
        outcomes.append(await executor.run([ts.ToolCall("w1", "wait", {"tag": "w1"})], run_id="r-there"))

    other = on_a_thread(there, there_run)
    assert started.wait(30)

    async def stop_here() -> object:
        if entry == "interrupt":
            return executor.interrupt("stop")
        if entry == "interrupt(run_id)":
            return executor.interrupt("stop", run_id="r-there")
        if entry == "cancel":
            return executor.cancel("w1", "stop")
        return executor.cancel("w1", "stop", run_id="r-there")

    answer = anyio.run(stop_here, backend=here)
    other.join(20)
    assert not other.is_alive(), "the run on the other loop was not stopped"
    assert answer in (1, True)
    (result,) = outcomes[0].results
    assert result.error_kind == "cancelled"
    assert finished == []


def test_a_stop_from_a_plain_thread_reaches_every_loops_run() -> None:
    """The same from a thread that runs no event loop (a UI or signal thread): each run is stopped on its own
    loop, whichever library runs it."""
    started = [threading.Event(), threading.Event()]
    finished: list[str] = []
    outcomes: list[ts.Outcome] = []

    @ts.tool(name="wait", interrupt_behavior="cancel")
    async def wait(tag: str) -> str:
        """Waits far longer than the test."""
        started[int(tag)].set()
        await anyio.sleep(60)
        finished.append(tag)
        return tag

    executor = ts.Executor([wait])

    def run_on(tag: str) -> Callable[[], Any]:
        async def body() -> None:
            outcomes.append(await executor.run([ts.ToolCall(f"w{tag}", "wait", {"tag": tag})]))

        return body

    threads = [on_a_thread(backend, run_on(str(n))) for n, backend in enumerate(BACKENDS)]
    assert all(event.wait(30) for event in started)
    assert executor.interrupt("stop") == 2
    for thread in threads:
        thread.join(20)
    assert not any(thread.is_alive() for thread in threads)
    assert sorted(outcome.results[0].error_kind or "" for outcome in outcomes) == ["cancelled", "cancelled"]
    assert finished == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tools_own_thread_can_cancel_its_call_and_report_progress(backend: str) -> None:
    """``ctx.cancel`` is "callable from the tool, its thread, or any code the tool hands the context to", and
    ``ctx.report_progress`` streams progress: from a thread the tool started itself (not one of anyio's
    worker threads) both were dropped without a word, the call answered with what the tool returned as if
    nobody had cancelled it, and no progress event sent."""
    events: list[ts.Event] = []

    @ts.tool(name="hands_off")
    async def hands_off(ctx: ts.ToolContext) -> str:
        """Hands its context to a thread of its own, which reports and cancels."""

        def elsewhere() -> None:
            ctx.report_progress(0.5, "half way")
            ctx.cancel("the user closed the tab")

        helper = threading.Thread(target=elsewhere)
        helper.start()
        await anyio.to_thread.run_sync(helper.join)
        return "finished"

    executor = ts.Executor([hands_off], on_event=events.append)

    async def main() -> ts.Outcome:
        return await executor.run([ts.ToolCall("h1", "hands_off", {})])

    (result,) = anyio.run(main, backend=backend).results
    assert result.error_kind == "cancelled"
    assert result.error is not None and "the user closed the tab" in result.error
    assert [(event.fraction, event.message) for event in events if isinstance(event, ts.ToolProgress)] == [
        (0.5, "half way")
    ]


def test_a_tools_thread_reporting_while_the_runs_loop_is_stopped_does_not_wait_for_it() -> None:
    """A run on an asyncio loop that ``run_until_complete`` left stopped, not closed (it returned, or was
    interrupted, with the run's task still pending): a thread the tool handed its context to, reporting progress
    or cancelling the call meanwhile, waited until the loop took it, which it could not while stopped, for good
    if it never runs again (and a process whose thread is not a daemon never exits). The report is now handed
    over without waiting; the loop takes it, in order, when it runs again."""
    events: list[ts.Event] = []
    handed = threading.Event()
    loop_stopped = threading.Event()
    reported = threading.Event()

    @ts.tool(name="hands_off")
    async def hands_off(ctx: ts.ToolContext) -> str:
        """Hands its context to a thread of its own, which reports and cancels once the loop has stopped."""

        def elsewhere() -> None:
            loop_stopped.wait(30)
            ctx.report_progress(0.5, "half way")
            ctx.cancel("the user closed the tab")
            reported.set()

        helper = threading.Thread(target=elsewhere, daemon=True)
        helper.start()
        handed.set()
        await anyio.to_thread.run_sync(helper.join)
        return "finished"

    executor = ts.Executor([hands_off], on_event=events.append)
    loop = asyncio.new_event_loop()
    task = loop.create_task(executor.run([ts.ToolCall("h1", "hands_off", {})]))
    try:
        assert loop.run_until_complete(asyncio.to_thread(handed.wait, 30))
        assert not loop.is_running() and not task.done()
        loop_stopped.set()
        assert reported.wait(30), "the tool's thread still waits for the stopped loop"
        (result,) = loop.run_until_complete(task).results
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(task)
        loop.close()
    assert result.error_kind == "cancelled"
    assert result.error is not None and "the user closed the tab" in result.error
    assert [(event.fraction, event.message) for event in events if isinstance(event, ts.ToolProgress)] == [
        (0.5, "half way")
    ]


def test_two_loops_reporting_on_each_others_calls_both_finish() -> None:
    """A tool's context used from a thread that runs an event loop of its own (another run's tool, on another
    loop's thread) waited there until the run's loop took the report: the caller's whole loop stopped, and two
    loops each reporting progress on the other's call waited for each other for good. From such a thread the
    report is handed over without waiting."""
    contexts: dict[str, ts.ToolContext] = {}
    both_started = threading.Barrier(2)

    @ts.tool(name="work")
    async def work(me: str, other: str, ctx: ts.ToolContext) -> str:
        """Reports progress on its peer's call, which runs on the other thread's loop."""
        contexts[me] = ctx
        await anyio.to_thread.run_sync(both_started.wait)
        for _ in range(2000):
            contexts[other].report_progress(0.5, f"from {me}")
            await anyio.lowlevel.checkpoint()
        return "done"

    executor = ts.Executor([work], on_event=lambda event: None)
    results: dict[str, Any] = {}

    def run(me: str, other: str) -> None:
        async def main() -> None:
            outcome = await executor.run([ts.ToolCall(me, "work", {"me": me, "other": other})])
            results[me] = outcome.results[0].output

        anyio.run(main)

    threads = [threading.Thread(target=run, args=pair, daemon=True) for pair in (("a", "b"), ("b", "a"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert results == {"a": "done", "b": "done"}


def _forked_child(journal: ts.Journal, executor: ts.Executor, backend: str, report: Any) -> None:
    """In a child forked from a process whose journal keeps leases: runs a journaled call that outlasts the
    lease, and reports its result (or error) and the journal's owner."""
    try:

        async def main() -> str:
            outcome = await executor.run([ts.ToolCall("c1", "slow", {"seconds": 1.5})])
            return str(outcome.results[0].output)

        answer = anyio.run(main, backend=backend)
    except Exception as exc:
        answer = f"{type(exc).__name__}: {exc}"
    report.send((answer, journal.owner))
    report.close()


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_in(request.param, tmp_path, "reuse")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_child_forked_from_a_journals_holder_keeps_its_own_leases(backend: str, store: Store) -> None:
    """A journal keeps its runs' leases from a thread of its own ("a long call is never taken over"). A
    process forked from one whose journal had kept leases (a preloading server's workers, a ``fork``
    multiprocessing pool) inherited that thread as started but not the thread itself: the child's runs were
    never renewed and stopped with ``LeaseLostError`` after three quarters of the lease. It also claimed its
    runs under the parent's name (its pid and random part), so parent and child were one owner to the
    journal, and wrote on the parent's own database connection. The child now opens its own connections and
    keeps its own leases under a name of its own, and the parent goes on working on its connection."""

    @ts.tool(name="slow")
    async def slow(seconds: float) -> str:
        await anyio.sleep(seconds)
        return "done"

    journal = store.open(lease=0.6)
    executor = ts.Executor([slow], journal=journal)

    async def parent_run() -> str:
        return str((await executor.run([ts.ToolCall("p1", "slow", {"seconds": 0.01})])).results[0].output)

    assert anyio.run(parent_run, backend=backend) == "done"  # the parent's keeper thread has started
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_forked_child, args=(journal, executor, backend, send))
    process.start()
    send.close()
    answer, child_owner = receive.recv() if receive.poll(30) else ("no answer", None)
    process.join(30)
    assert answer == "done"
    assert child_owner != journal.owner
    assert str(os.getpid()) in journal.owner.split(":")
    assert str(process.pid) in str(child_owner).split(":")
    assert anyio.run(parent_run, backend=backend) == "done"
    anyio.run(journal.close, backend=backend)


COPIES: dict[str, Callable[[Any], Any]] = {
    "copy.copy": copy.copy,
    "copy.deepcopy": copy.deepcopy,
    "pickle": lambda value: pickle.loads(pickle.dumps(value)),
}


@pytest.mark.parametrize("how", COPIES)
@pytest.mark.parametrize("form", ["function", "class"])
def test_a_tool_that_ran_copies_and_pickles_into_a_tool_of_its_own(how: str, form: str) -> None:
    """A tool with a concurrency cap that had run (its per-loop limiter made) failed to deep-copy with anyio's
    own ``TypeError`` ("CapacityLimiter.__new__() missing 1 required positional argument"), and to pickle with
    "cannot pickle 'weakref.ReferenceType' object"; a ``@tool`` function at module level never pickled ("it's
    not the same object as ..."). A copy or pickle of a tool now carries its attributes, not what this process
    cached about it: registered, it runs as a tool of its own; a module-level ``@tool`` pickles by reference."""
    original: ts.Tool = reuse_tools.capped_sum if form == "function" else reuse_tools.CappedEcho()
    args = {"a": 1, "b": 2} if form == "function" else {"text": "hi"}
    expected = 3 if form == "function" else "hi"

    async def one(tool: ts.Tool) -> Any:
        outcome = await ts.Executor([tool]).run([ts.ToolCall("c1", tool.name, args)])
        return outcome.results[0].output

    assert anyio.run(one, original) == expected  # its cap's limiter is made now
    twin = COPIES[how](original)
    assert anyio.run(one, twin) == expected
    if form == "function" and how == "pickle":
        assert twin is original
    else:
        assert twin is not original
        assert twin.facts is not original.facts


def test_a_tool_pickle_cannot_find_by_name_is_refused_naming_it() -> None:
    """A ``@tool`` made inside a function cannot be found again by its module and name: pickling it raised
    pickle's own "Can't pickle <function ...>: it's not the same object as ..." about the function it wraps;
    now ``ts.UnpicklableError`` (a ``TypeError``) names the tool and says why."""

    @ts.tool(name="local_tool")
    def local_tool(a: int) -> int:
        return a

    with pytest.raises(ts.UnpicklableError, match=r"tool `local_tool` cannot be pickled.*module level"):
        pickle.dumps(local_tool)
    assert isinstance(ts.UnpicklableError("x"), TypeError)


@pytest.mark.parametrize("how", COPIES)
def test_limits_copy_and_pickle_with_their_caps_and_counts(how: str) -> None:
    """``copy.copy(limits)`` is documented ("the same caps and the counts so far, counted apart from then on");
    pickling a ``Limits`` (an agent run's state put away between turns) raised "cannot pickle '_thread.lock'
    object". It now pickles as it copies."""

    @ts.tool(name="ping")
    async def ping() -> str:
        return "pong"

    executor = ts.Executor([ping])
    limits = ts.Limits(max_calls=2)

    async def turn(run_limits: ts.Limits, call_id: str) -> str | None:
        outcome = await executor.run([ts.ToolCall(call_id, "ping", {})], limits=run_limits)
        return outcome.results[0].error_kind

    assert anyio.run(turn, limits, "c1") is None
    twin = COPIES[how](limits)
    assert (twin.max_calls, twin.calls) == (2, 1)
    assert anyio.run(turn, twin, "c2") is None
    assert anyio.run(turn, twin, "c3") == "limit_exceeded"
    assert limits.calls == 1


SCRIPT_TOOLS = """
import base64, subprocess, sys
from ray import cloudpickle
import toolsched as ts


@ts.tool
def normalize(text: str) -> str:
    \"\"\"Normalize.\"\"\"
    return text.strip().lower()


@ts.tool
def search(query: str) -> str:
    \"\"\"Search, with another tool's function.\"\"\"
    return "result for " + normalize(query)


# What Ray sends a worker: the body, by cloudpickle; loaded where this script is no module at all.
blob = base64.b64encode(cloudpickle.dumps(search.fn)).decode()
load = (
    "import sys, base64; from ray import cloudpickle; "
    "print(cloudpickle.loads(base64.b64decode(sys.argv[1]))(' Hi '))"
)
done = subprocess.run([sys.executable, "-c", load, blob], capture_output=True, text=True)
print(done.stdout.strip() or done.stderr.strip().splitlines()[-1])
"""


def test_a_scripts_tool_travels_by_value_to_a_ray_worker(tmp_path: Path) -> None:
    """A ``@ts.tool`` pickled by reference was named ``__main__.normalize`` where a Ray worker loaded it, a name
    nothing there holds (``AttributeError``): a body of a script or a notebook that used another of its tools
    could not run on Ray. A tool of ``__main__`` travels by value, as its function does."""
    script = tmp_path / "agent.py"
    script.write_text(SCRIPT_TOOLS)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.strip() == "result for hi", done.stderr


def test_objects_holding_live_state_refuse_pickle_by_name_and_copy_as_before(tmp_path: Path) -> None:
    """An executor, a registry and a journal hold what cannot travel (compiled schemas, runs in progress,
    connections): pickling one raised pickle's ``TypeError`` about an internal (``cannot pickle
    'toolsched._core.ToolTable' object``, ``cannot pickle '_thread.lock' object``), and so did
    ``copy.deepcopy`` of a registry or a journal. Pickling now raises ``ts.UnpicklableError`` naming the
    object; a deep copy shares it, as a deep copy of the executor does; ``copy.copy`` is a shallow copy, but of a
    journal (a second object under the same owner could recover a run in progress on the first), which is itself."""
    registry = ts.ToolRegistry([reuse_tools.capped_sum])
    journal = ts.SqliteJournal(tmp_path / "runs.db")
    executor = ts.Executor(registry, journal=journal)
    for value, name in ((executor, "an Executor"), (registry, "a ToolRegistry"), (journal, "a SqliteJournal")):
        with pytest.raises(ts.UnpicklableError, match=f"^{name} cannot be pickled"):
            pickle.dumps(value)
        assert copy.deepcopy(value) is value
        shallow = copy.copy(value)
        if value is journal:
            assert shallow is journal
        else:
            assert shallow is not value and type(shallow) is type(value)


def test_a_streamed_turn_made_where_no_event_loop_runs_is_refused_by_name() -> None:
    """``executor.turn()`` is a plain method: called from sync code (at import, before ``anyio.run``) it raised
    anyio's own ``NoEventLoopError`` and left the turn's memory streams unclosed (two ``ResourceWarning``s when
    they were collected). It now raises ``ts.TurnStateError`` saying where a turn is made, before making
    anything of it."""

    @ts.tool(name="ping")
    async def ping() -> str:
        return "pong"

    executor = ts.Executor([ping])
    gc.collect()  # what earlier code left for the collector is not this test's to answer for
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        with pytest.raises(ts.TurnStateError, match="no event loop runs"):
            executor.turn()
        gc.collect()

    async def inside() -> list[Any]:
        async with executor.turn() as turn:
            turn.submit(ts.ToolCall("c1", "ping", {}))
            turn.close()
        return [result.output for result in (await turn.outcome()).results]

    assert anyio.run(inside) == ["pong"]
