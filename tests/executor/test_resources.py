"""Per-run resources: opened once per run on first use, closed by that run however it ends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio


class Connection:
    def __init__(self, number: int) -> None:
        self.number = number
        self.closed = False
        self.queries: list[str] = []


class Query(ts.Tool):
    """A tool that opens a connection per run (open/close form)."""

    name = "query"
    description = "Run a query."
    input_schema = {
        "type": "object",
        "properties": {"sql": {"type": "string"}, "fail": {"type": "boolean"}, "wait": {"type": "boolean"}},
        "required": ["sql"],
    }
    concurrency_safe = True

    def __init__(self) -> None:
        self.opened: list[Connection] = []
        self.log: list[str] = []
        self.errors: list[str | None] = []
        self.started = anyio.Event()

    async def open(self, run: ts.RunScope) -> Connection:
        await anyio.sleep(0.01)  # opening takes a while: concurrent first calls must wait, not open twice
        connection = Connection(len(self.opened) + 1)
        self.opened.append(connection)
        self.log.append(f"open {connection.number}")
        return connection

    async def close(self, run: ts.RunScope) -> None:
        await anyio.sleep(0.01)  # closing awaits too, even while the run is being cancelled
        connection: Connection = run.resource
        connection.closed = True
        self.errors.append(None if run.error is None else type(run.error).__name__)
        self.log.append(f"close {connection.number}")

    async def call(self, args: dict[str, Any], ctx: ts.ToolContext) -> str:
        connection: Connection = ctx.resource
        connection.queries.append(args["sql"])
        if args.get("wait"):
            self.started.set()
            await anyio.sleep_forever()
        if args.get("fail"):
            raise RuntimeError("syntax error")
        return f"{args['sql']} on connection {connection.number}"


def q(call_id: str, sql: str, **extra: Any) -> ts.ToolCall:
    return ts.ToolCall(call_id, "query", {"sql": sql, **extra})


@ts.tool
async def unrelated() -> str:
    return "ok"


async def test_opened_once_on_first_use_shared_by_the_run_and_closed_when_it_ends() -> None:
    query = Query()
    executor = ts.Executor([query, unrelated])
    nothing = await executor.run([ts.ToolCall("u", "unrelated")])
    assert nothing.results[0].output == "ok"
    assert query.opened == []  # a run that never calls the tool never opens its resource
    outcome = await executor.run([q("c1", "a"), q("c2", "b"), q("c3", "c")])
    # Three concurrent first calls, one connection.
    assert [r.output for r in outcome.results] == [f"{s} on connection 1" for s in "abc"]
    assert outcome.results[0].was_concurrent
    assert len(query.opened) == 1 and sorted(query.opened[0].queries) == ["a", "b", "c"]
    # Closed by the run, before run() returned.
    assert query.opened[0].closed and query.log == ["open 1", "close 1"]
    assert query.errors == [None]
    # The next run opens its own.
    again = await executor.run([q("c4", "d")])
    assert again.results[0].output == "d on connection 2"
    assert query.log == ["open 1", "close 1", "open 2", "close 2"]


async def test_closed_after_a_failing_call() -> None:
    query = Query()
    outcome = await ts.Executor([query], strategy=ts.Sequential()).run([q("c1", "a"), q("c2", "b", fail=True)])
    assert outcome.results[0].output == "a on connection 1"
    assert outcome.results[1].error_kind == "execution_error"
    assert query.log == ["open 1", "close 1"]
    assert query.errors == [None]  # a failed call is a result: the run itself ended well


async def test_closed_when_the_run_raises_and_close_sees_the_error() -> None:
    query = Query()
    executor = ts.Executor([query], on_error="raise")
    with pytest.raises(ts.ToolCallFailed) as caught:
        await executor.run([q("c1", "a", fail=True)])
    assert caught.value.result.call_id == "c1"
    assert query.log == ["open 1", "close 1"]
    assert query.errors == ["ToolCallFailed"]


async def test_closed_when_the_run_is_cancelled() -> None:
    query = Query()
    executor = ts.Executor([query])
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(executor.run, [q("c1", "a", wait=True)])
            await query.started.wait()
            scope.cancel()
    assert scope.cancelled_caught
    # The close awaited (it sleeps) although the run was being cancelled, and it completed.
    assert query.log == ["open 1", "close 1"]
    assert query.opened[0].closed
    assert query.errors == [anyio.get_cancelled_exc_class().__name__]


async def test_two_concurrent_runs_get_separate_resources() -> None:
    query = Query()
    executor = ts.Executor([query])
    outputs: dict[str, list[Any]] = {}

    async def one_run(label: str) -> None:
        outcome = await executor.run([q(f"{label}1", f"{label}-x"), q(f"{label}2", f"{label}-y")])
        outputs[label] = [r.output for r in outcome.results]

    async with anyio.create_task_group() as group:
        group.start_soon(one_run, "a")
        group.start_soon(one_run, "b")
    assert len(query.opened) == 2
    for connection in query.opened:
        assert connection.closed
        # Each connection served exactly one run's queries.
        assert len({sql.split("-")[0] for sql in connection.queries}) == 1 and len(connection.queries) == 2
    numbers = {label: {out.rsplit(" ", 1)[1] for out in outs} for label, outs in outputs.items()}
    assert numbers["a"] != numbers["b"] and all(len(n) == 1 for n in numbers.values())


async def test_a_context_manager_factory_is_entered_and_left_in_one_task() -> None:
    log: list[str] = []

    @asynccontextmanager
    async def browser(run: ts.RunScope) -> AsyncIterator[dict[str, Any]]:
        # A task group inside: it must be left by the task that entered it.
        async with anyio.create_task_group() as group:
            session = {"run": run.run_id, "pages": 0}
            log.append("launch")
            yield session
            group.cancel_scope.cancel()
        log.append("quit")

    @ts.tool(run_resource=browser)
    async def visit(url: str, ctx: ts.ToolContext) -> str:
        ctx.resource["pages"] += 1
        return f"{url} ({ctx.resource['pages']})"

    @ts.tool(run_resource=browser)
    def visit_sync(url: str, ctx: ts.ToolContext) -> str:
        ctx.resource["pages"] += 1
        return f"sync {url}"

    executor = ts.Executor([visit, visit_sync], strategy=ts.Sequential())
    outcome = await executor.run(
        [
            ts.ToolCall("v1", "visit", {"url": "a"}),
            ts.ToolCall("v2", "visit", {"url": "b"}),
            ts.ToolCall("v3", "visit_sync", {"url": "c"}),
        ]
    )
    assert [r.output for r in outcome.results] == ["a (1)", "b (2)", "sync c"]
    # Each tool has its own resource in the run.
    assert log == ["launch", "launch", "quit", "quit"]


async def test_an_open_that_fails_fails_the_call_and_the_next_call_tries_again() -> None:
    attempts: list[int] = []

    class Flaky(ts.Tool):
        name = "flaky"
        input_schema = {"type": "object", "properties": {}}

        async def open(self, run: ts.RunScope) -> str:
            attempts.append(1)
            if len(attempts) == 1:
                raise ConnectionError("refused")
            return "connected"

        async def call(self, args: Any, ctx: ts.ToolContext) -> str:
            return str(ctx.resource)

    outcome = await ts.Executor([Flaky()], strategy=ts.Sequential()).run(
        [ts.ToolCall("c1", "flaky"), ts.ToolCall("c2", "flaky")]
    )
    first, second = outcome.results
    assert first.error_kind == "execution_error"
    assert "ResourceError" in (first.error or "") and "ConnectionError: refused" in (first.error or "")
    assert second.output == "connected"
    assert len(attempts) == 2


async def test_resource_declarations_are_checked() -> None:
    @asynccontextmanager
    async def nothing(run: ts.RunScope) -> AsyncIterator[None]:
        yield None

    with pytest.raises(ts.ToolDefinitionError, match="ctx"):

        @ts.tool(run_resource=nothing)
        async def no_ctx(x: int) -> int:
            return x

        ts.ToolRegistry([no_ctx])

    class Both(ts.Tool):
        name = "both"
        input_schema = {"type": "object"}
        run_resource = staticmethod(nothing)

        async def open(self, run: ts.RunScope) -> None:
            return None

        async def call(self, args: Any, ctx: ts.ToolContext) -> None:
            return None

    with pytest.raises(ts.ToolDefinitionError, match="not both"):
        ts.ToolRegistry([Both()])

    @ts.tool(run_resource=nothing, isolation="process")
    async def isolated(x: int, ctx: ts.ToolContext) -> int:
        return x

    with pytest.raises(ts.ToolDefinitionError, match="process-isolated"):
        ts.ToolRegistry([isolated])

    @ts.tool
    async def plain(ctx: ts.ToolContext) -> str:
        return str(ctx.resource)

    outcome = await ts.Executor([plain]).run([ts.ToolCall("c1", "plain")])
    assert outcome.results[0].error_kind == "execution_error"
    assert "ResourceError" in (outcome.results[0].error or "") and "no per-run resource" in (
        outcome.results[0].error or ""
    )


async def test_a_child_run_opens_and_closes_its_own_resources() -> None:
    query = Query()
    child_executor = ts.Executor([query])

    @ts.agent_tool(child_executor)
    async def analyst(child: ts.ChildRun) -> list[Any]:
        first = await child.run([q("c1", "a")])
        second = await child.run([q("c2", "b")])
        return [first.results[0].output, second.results[0].output]

    outcome = await ts.Executor([analyst]).run([ts.ToolCall("p1", "analyst", {})])
    # Each child turn is a run: it opens and closes its own connection.
    assert outcome.results[0].output == ["a on connection 1", "b on connection 2"]
    assert query.log == ["open 1", "close 1", "open 2", "close 2"]


async def test_a_streamed_turn_opens_a_resource_once_and_closes_it_when_the_turn_ends() -> None:
    query = Query()
    executor = ts.Executor([query])

    async def calls() -> Any:
        yield ts.ToolCall("1", "query", {"sql": "select 1"})
        await anyio.sleep(0.02)
        yield ts.ToolCall("2", "query", {"sql": "select 2"})

    outcome = await executor.run(calls())
    assert [result.is_error for result in outcome.results] == [False, False]
    assert query.log == ["open 1", "close 1"]
    assert query.opened[0].queries == ["select 1", "select 2"] and query.opened[0].closed


async def test_a_broken_stream_closes_the_turns_resource_with_the_error() -> None:
    query = Query()
    executor = ts.Executor([query])

    async def calls() -> Any:
        yield ts.ToolCall("1", "query", {"sql": "select 1"})
        await anyio.sleep(0.02)
        raise ConnectionError("stream cut")

    with pytest.raises(ts.StreamFailed) as failed:
        await executor.run(calls())
    assert [result.output for result in failed.value.outcome.results] == ["select 1 on connection 1"]
    assert query.log == ["open 1", "close 1"]
    assert query.errors == ["ConnectionError"]


async def test_a_streamed_turn_whose_call_fails_closes_its_resource_normally() -> None:
    query = Query()
    executor = ts.Executor([query])
    async with executor.turn() as turn:
        turn.submit(q("1", "select 1", fail=True))
        turn.submit(q("2", "select 2"))
    outcome = await turn.outcome()
    assert [result.is_error for result in outcome.results] == [True, False]
    assert query.log == ["open 1", "close 1"] and query.errors == [None]
