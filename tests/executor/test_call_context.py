"""Each call runs in its own copy of the caller's context, as a task would: what a tool does
to context variables never reaches its siblings, the next turn or the caller."""

from __future__ import annotations

import contextvars

import anyio
import anyio.lowlevel
import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio

marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")

STRATEGIES = [
    ts.Sequential(),
    ts.Parallel(),
    ts.Batched(2),
    ts.Partitioned(),
    ts.ResourceAware(),
]


def tools() -> tuple[ts.Tool, ts.Tool, list[tuple[str, str]]]:
    seen: list[tuple[str, str]] = []

    @ts.tool(concurrency_safe=True, read_only=True, resources=lambda args: ts.Access(reads=("x",)))
    async def setter(value: str) -> str:
        seen.append(("setter saw", marker.get()))
        marker.set(value)
        await anyio.lowlevel.checkpoint()
        return marker.get()

    @ts.tool(concurrency_safe=True, read_only=True, resources=lambda args: ts.Access(reads=("x",)))
    def reader_in_thread() -> str:
        seen.append(("thread saw", marker.get()))
        return marker.get()

    return setter, reader_in_thread, seen


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: type(s).__name__)
async def test_a_context_variable_set_by_a_tool_stays_in_its_call(strategy: ts.Strategy) -> None:
    setter, reader, seen = tools()
    executor = ts.Executor([setter, reader], strategy=strategy)
    marker.set("caller")
    calls = [
        ts.ToolCall("a", "setter", {"value": "from a"}),
        ts.ToolCall("b", "reader_in_thread", {}),
        ts.ToolCall("c", "setter", {"value": "from c"}),
    ]
    outcome = await executor.run(calls)
    assert [result.output for result in outcome.results] == ["from a", "caller", "from c"]
    # Every call started from the caller's value, whatever ran before it.
    assert seen.count(("setter saw", "caller")) == 2
    assert ("thread saw", "caller") in seen
    assert marker.get() == "caller"
    # The next turn starts clean too.
    seen.clear()
    outcome = await executor.run([ts.ToolCall("d", "setter", {"value": "from d"})])
    assert seen == [("setter saw", "caller")]
    assert marker.get() == "caller"


async def test_a_lone_call_does_not_leak_into_the_caller() -> None:
    setter, _, _ = tools()
    marker.set("caller")
    await ts.Executor([setter]).run([ts.ToolCall("a", "setter", {"value": "leaked?"})])
    assert marker.get() == "caller"


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])
@pytest.mark.parametrize(
    "strategy",
    # The strategies that ask steering during this turn (Parallel and Partitioned run it as one batch).
    [ts.Sequential(), ts.Batched(2), ts.ResourceAware(max_concurrency=2)],
    ids=lambda s: type(s).__name__,
)
async def test_steering_sees_the_caller_s_context_and_keeps_what_it_sets_to_itself(
    strategy: ts.Strategy, streamed: bool
) -> None:
    # Under ResourceAware steering is asked on the worker where a call just finished; that worker may have
    # been started by a call that lent its slot (a retry's backoff) after setting a variable.
    asked: list[str] = []
    tries: list[int] = []
    shared = ts.Access(reads=("x",))

    @ts.tool(
        concurrency_safe=True,
        idempotent=True,
        retry=ts.Retry(attempts=2, backoff=0.03, jitter=False),
        resources=lambda args: shared,
    )
    async def retried() -> str:
        marker.set("set by retried")
        tries.append(1)
        await anyio.sleep(0.005)
        if len(tries) == 1:
            raise ts.Transient("once")
        return "ok"

    @ts.tool(concurrency_safe=True, resources=lambda args: shared)
    async def reader(n: int) -> str:
        await anyio.sleep(0.01 * (n + 1))
        return marker.get()

    async def steering() -> None:
        asked.append(marker.get())
        marker.set("set by steering")

    executor = ts.Executor([retried, reader], strategy=strategy)
    marker.set("caller")
    calls = [ts.ToolCall("r", "retried"), *(ts.ToolCall(f"x{n}", "reader", {"n": n}) for n in range(4))]
    with anyio.fail_after(5):
        if streamed:
            async with executor.turn(steering=steering) as turn:
                for call in calls:
                    turn.submit(call)
                turn.close()
                outcome = await turn.outcome()
        else:
            outcome = await executor.run(calls, steering=steering)
    assert [result.output for result in outcome.results] == ["ok"] + ["caller"] * 4
    assert asked and set(asked) == {"caller"}, asked
    assert marker.get() == "caller"


LENDING_STRATEGIES = [
    ts.Parallel(max_concurrency=2),
    ts.Partitioned(max_concurrency=2),
    ts.ResourceAware(max_concurrency=2),
]


async def lending_turn(strategy: ts.Strategy) -> list[object]:
    """A turn whose first call waits between attempts, lending its pool slot: the worker that takes the
    next call is started from inside the waiting call, whose context holds what its tool set."""
    tries: list[str] = []
    shared = ts.Access(reads=("x",))

    @ts.tool(
        concurrency_safe=True, idempotent=True, retry=ts.Retry(attempts=2, backoff=0.05), resources=lambda args: shared
    )
    async def retried() -> str:
        marker.set("set by retried")
        tries.append("try")
        await anyio.sleep(0.01)
        if len(tries) == 1:
            raise ts.Transient("once")
        return marker.get()

    @ts.tool(concurrency_safe=True, resources=lambda args: shared)
    async def reader(n: int) -> str:
        await anyio.sleep(0.05)
        return marker.get()

    executor = ts.Executor([retried, reader], strategy=strategy)
    marker.set("caller")
    calls = [ts.ToolCall("r", "retried"), *(ts.ToolCall(f"x{n}", "reader", {"n": n}) for n in range(3))]
    outcome = await executor.run(calls)
    assert tries == ["try", "try"]
    assert marker.get() == "caller"
    return [result.output for result in outcome.results]


@pytest.mark.parametrize("strategy", LENDING_STRATEGIES, ids=lambda s: type(s).__name__)
async def test_a_call_that_lends_its_slot_does_not_hand_its_context_to_the_calls_after_it(
    strategy: ts.Strategy,
) -> None:
    assert await lending_turn(strategy) == ["set by retried", "caller", "caller", "caller"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("strategy", LENDING_STRATEGIES, ids=lambda s: type(s).__name__)
async def test_with_a_task_factory_a_lending_call_keeps_its_context_to_itself_too(strategy: ts.Strategy) -> None:
    # The workers then run each in a copy of their own (a factory may start tasks eagerly), not in a shared one.
    import asyncio

    loop = asyncio.get_running_loop()
    made: list[asyncio.Task[object]] = []

    def task_factory(loop: asyncio.AbstractEventLoop, coroutine: object, **options: object) -> asyncio.Task[object]:
        task = asyncio.Task(coroutine, loop=loop, **options)  # type: ignore[arg-type]
        made.append(task)
        return task

    loop.set_task_factory(task_factory)  # type: ignore[arg-type]
    try:
        assert await lending_turn(strategy) == ["set by retried", "caller", "caller", "caller"]
    finally:
        loop.set_task_factory(None)
    assert made  # the workers were the factory's tasks


NESTED_LOOP = r"""
import asyncio

import nest_asyncio

import toolsched as ts

nest_asyncio.apply()
shared = ts.Access(reads=("x",))


@ts.tool(concurrency_safe=True, resources=lambda args: shared)
async def work(n: int) -> str:
    await asyncio.sleep(0.01)
    if n == 2:
        # A sync helper that runs async code on the running loop: other workers step inside this one.
        return asyncio.get_event_loop().run_until_complete(asyncio.sleep(0.02, result="nested"))
    await asyncio.sleep(0.01)
    return str(n)


async def main() -> None:
    executor = ts.Executor([work], strategy=STRATEGY)
    outcome = await executor.run([ts.ToolCall(f"c{n}", "work", {"n": n}) for n in range(5)])
    print([result.output for result in outcome.results])


asyncio.run(main())
"""


@pytest.mark.parametrize("strategy", ["ts.Parallel(max_concurrency=3)", "ts.ResourceAware(max_concurrency=3)"])
def test_a_tool_that_re_enters_the_event_loop_does_not_stop_the_other_workers(strategy: str) -> None:
    import subprocess
    import sys

    script = NESTED_LOOP.replace("STRATEGY", strategy)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['0', '1', 'nested', '3', '4']"
    assert "already entered" not in done.stderr
