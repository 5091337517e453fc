"""An exception that stops the process, raised by a tool, leaves every entry path as itself.

KeyboardInterrupt, SystemExit, GeneratorExit and any other ``BaseException`` that is not an
``Exception`` (nor a cancellation) stop the run with that very exception, never wrapped in an
exception group: from a list or a stream of calls, with or without a journal (SQLite and the
PostgreSQL server `make test` starts), with per-run resources, on resume and on recover, on
asyncio and trio. A journaled run it stopped is released, and recovers as a crashed run does.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from journal_child import Store, store_in

import toolsched as ts

DSN_VARIABLE = "TOOLSCHED_TEST_POSTGRES_DSN"


class Halt(BaseException):
    """A BaseException of the tool's own: not an Exception, so it stops the process like KeyboardInterrupt."""


class Interrupted(KeyboardInterrupt):
    """A subclass of KeyboardInterrupt."""


STOPPING = [KeyboardInterrupt, SystemExit, GeneratorExit, Halt, Interrupted]
BACKENDS = ["asyncio", "trio"]
PATHS = ["list", "stream", "iterable", "turn", "resources", "resume", "recover"]


STORES = ["none", "sqlite", "postgres"]


@pytest.fixture
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store | None]:
    if request.param == "none":
        yield None
    else:
        yield from store_in(request.param, tmp_path, "stopping_test")


def tools(path: str, stopping: type[BaseException], closed: list[BaseException | None]) -> list[ts.FunctionTool]:
    """The tools of the turn ``path`` runs: a tool with a per-run resource makes every run of its executor
    keep per-run resources, so only the ``resources`` path has one."""

    @asynccontextmanager
    async def connection(run: ts.RunScope) -> AsyncIterator[str]:
        try:
            yield "connection"
        finally:
            closed.append(run.error)

    @ts.tool(concurrency_safe=True)
    async def stops() -> None:
        await anyio.sleep(0.01)
        raise stopping("stop")

    @ts.tool(concurrency_safe=True, run_resource=connection)
    async def stops_with_resource(ctx: ts.ToolContext) -> None:
        await anyio.sleep(0.01)
        raise stopping("stop")

    @ts.tool(concurrency_safe=True, needs_approval=True)
    async def stops_once_approved() -> None:
        await anyio.sleep(0.01)
        raise stopping("stop")

    @ts.tool(concurrency_safe=True)
    async def other(n: int) -> int:
        await anyio.sleep(0.005)
        return n

    stopper = {"resources": stops_with_resource, "resume": stops_once_approved}.get(path, stops)
    return [stopper, other]


def turn_of(name: str) -> list[ts.ToolCall]:
    return [ts.ToolCall("o1", "other", {"n": 1}), ts.ToolCall("s", name), ts.ToolCall("o2", "other", {"n": 2})]


async def calls_of(calls: list[ts.ToolCall]) -> AsyncIterator[ts.ToolCall]:
    for call in calls:
        await anyio.lowlevel.checkpoint()
        yield call


def entry(path: str, executor: ts.Executor, journal: ts.Journal | None) -> Callable[[], Awaitable[Any]]:
    """The entry path ``path`` of ``executor``: a coroutine function that runs a turn whose call `s` stops."""
    run_id = "stopped"

    async def run_list() -> Any:
        name = "stops_with_resource" if path == "resources" else "stops"
        assert executor.registry.get(name) is not None
        return await executor.run(turn_of(name), run_id=run_id)

    async def stream() -> Any:
        return [event async for event in executor.stream(turn_of("stops"), run_id=run_id)]

    async def iterable() -> Any:
        return await executor.run(calls_of(turn_of("stops")), run_id=run_id)

    async def turn() -> Any:
        async with executor.turn(run_id=run_id) as streamed:
            for call in turn_of("stops"):
                streamed.submit(call)
            streamed.close()
            return await streamed.outcome()

    async def resume() -> Any:
        outcome = await executor.run(turn_of("stops_once_approved"), run_id=run_id)
        assert [request.call_id for request in outcome.pending] == ["s"]
        state = outcome.state
        assert state is not None
        state.approve("s")
        return await executor.resume(state)

    async def recover() -> Any:
        assert journal is not None
        async with type(journal)(**_journal_options(journal), owner="crashed") as crashed:
            await crashed.begin_run(run_id, turn_of("stops"))
        return await executor.recover(run_id, force=True)

    return {
        "list": run_list,
        "resources": run_list,
        "stream": stream,
        "iterable": iterable,
        "turn": turn,
        "resume": resume,
        "recover": recover,
    }[path]


def _journal_options(journal: ts.Journal) -> dict[str, Any]:
    if isinstance(journal, ts.SqliteJournal):
        return {"path": journal.path}
    assert isinstance(journal, ts.PostgresJournal)
    return {"dsn": journal.dsn, "schema": journal.schema}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("stopping", STOPPING, ids=lambda kind: kind.__name__)
@pytest.mark.parametrize(
    ("path", "store"),
    # Every entry path with no journal, SQLite and PostgreSQL, but recover, which needs a journal.
    [(path, kind) for path in PATHS for kind in STORES if not (path == "recover" and kind == "none")],
    indirect=["store"],
)
def test_a_stopping_exception_leaves_every_entry_path_as_itself(
    store: Store | None, path: str, stopping: type[BaseException], backend: str
) -> None:
    closed: list[BaseException | None] = []
    seen: list[ts.ToolResult] = []

    async def main() -> None:
        journal = store.open() if store is not None else None
        try:
            executor = ts.Executor(tools(path, stopping, closed), journal=journal)
            await entry(path, executor, journal)()
        finally:
            if journal is not None:
                await journal.close()

    async def recover_after() -> None:
        assert store is not None
        # The stopped run was released: another owner recovers it without force, as a crashed run.
        async with store.open(owner="after") as journal:
            outcome = await ts.Executor(tools(path, stopping, []), journal=journal).recover("stopped")
            seen.extend(outcome.results)

    with pytest.raises(stopping) as caught:
        anyio.run(main, backend=backend)
    assert type(caught.value) is stopping
    assert str(caught.value) == "stop"
    if path == "resources":
        # The run's resource was closed, told what stopped the run.
        assert closed == [caught.value]
    if store is not None:
        anyio.run(recover_after, backend=backend)
        by_id = {result.call_id: result for result in seen}
        # The call that raised had started and is not idempotent: its outcome is unknown.
        assert by_id["s"].error_kind == "interrupted"
        assert by_id["s"].attempts == 1
        assert sorted(by_id) == ["o1", "o2", "s"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("stopping", STOPPING, ids=lambda kind: kind.__name__)
def test_a_stopping_exception_opening_a_run_resource_stops_the_run_from_the_call(
    stopping: type[BaseException], backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Raised where the resource is opened (a task of the run, not the call's): the call that asked for it
    raises it, so it leaves the run as itself and no task is left holding it (on asyncio a task ended by a
    KeyboardInterrupt or SystemExit stops the event loop from inside that task)."""
    raised: list[BaseException] = []

    @asynccontextmanager
    async def refuses(run: ts.RunScope) -> AsyncIterator[str]:
        error = stopping("stop")
        raised.append(error)
        raise error
        yield "never"

    @ts.tool(concurrency_safe=True, run_resource=refuses)
    async def uses(ctx: ts.ToolContext) -> None:
        return None

    @ts.tool(concurrency_safe=True)
    async def other(n: int) -> int:
        await anyio.sleep(0.005)
        return n

    async def main() -> None:
        executor = ts.Executor([uses, other])
        await executor.run([ts.ToolCall("o1", "other", {"n": 1}), ts.ToolCall("u", "uses", {})])

    with pytest.raises(stopping) as caught:
        anyio.run(main, backend=backend)
    assert caught.value is raised[0]
    # Whatever still holds the run's tasks goes now: a task left holding the exception logs it as it goes.
    del caught
    raised.clear()
    gc.collect()
    assert not [record for record in caplog.records if "never retrieved" in record.getMessage()]


STRATEGIES = [ts.Sequential(), ts.Parallel(), ts.Batched(2), ts.Partitioned(), ts.ResourceAware()]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("streamed", [False, True], ids=["list", "iterable"])
@pytest.mark.parametrize("journaled", [False, True], ids=["plain", "journaled"])
@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda strategy: type(strategy).__name__)
@pytest.mark.parametrize("kind", ["group", "halt"])
def test_what_the_tool_raised_leaves_the_run_as_that_very_object_under_every_strategy(
    kind: str, strategy: ts.Strategy, journaled: bool, streamed: bool, backend: str, tmp_path: Path
) -> None:
    """A BaseExceptionGroup a tool raised (its own task group's, say) is what the tool raised: it leaves the
    run as that group, not as the KeyboardInterrupt inside it (a concurrent batch took it out of the group,
    a sequential one did not)."""
    raised: list[BaseException] = []

    @ts.tool(concurrency_safe=True, resources=lambda args: ts.Access(reads=("a",)))
    async def stops() -> None:
        await anyio.sleep(0.01)
        error = BaseExceptionGroup("mine", [KeyboardInterrupt("inside")]) if kind == "group" else Halt("stop")
        raised.append(error)
        raise error

    @ts.tool(concurrency_safe=True, resources=lambda args: ts.Access(reads=("a",)))
    async def other(n: int) -> int:
        await anyio.sleep(0.005)
        return n

    async def main() -> None:
        journal = ts.SqliteJournal(tmp_path / "journal.db") if journaled else None
        try:
            executor = ts.Executor([stops, other], strategy=strategy, journal=journal)
            calls = turn_of("stops")
            await executor.run(calls_of(calls) if streamed else calls)
        finally:
            if journal is not None:
                await journal.close()

    with pytest.raises(BaseException) as caught:
        anyio.run(main, backend=backend)
    if kind == "halt":
        assert caught.value is raised[0]
    else:
        # Trio's cancel scopes take a group apart and make it anew as it passes (``split``): the same group,
        # holding the very exception the tool put in it.
        assert type(caught.value) is BaseExceptionGroup and caught.value.message == "mine"
        assert len(caught.value.exceptions) == 1
        assert caught.value.exceptions[0] is raised[0].exceptions[0]  # type: ignore[attr-defined]
