"""Attacks on retries and attempts under ``ts.RedisCoordination``'s circuit (docs/concepts/resilience.md,
docs/fleet.md): a call refused by the fleet (its open circuit, Redis unreachable) ran nothing, and a retrying call
whose failures opened the circuit ends with its last failure, as it does with the process's own circuit.

The real server comes from tests/redis_server.sh (``TOOLSCHED_TEST_REDIS_URL``).
"""

from __future__ import annotations

import contextlib
import socket
import warnings

import anyio
import pytest
from fleet_redis import namespace, redis_url

import toolsched as ts

pytestmark = pytest.mark.anyio


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("fleet", [False, True])
async def test_a_retrying_call_that_opens_the_circuit_ends_with_its_last_failure(
    anyio_backend: str, fleet: bool
) -> None:
    """Promise (docs/concepts/resilience.md): after ``failures`` transient failures in a row the tool's calls are
    answered ``unavailable`` (``attempts=0``, the tool not run), and a running call's retries stop there too (it
    ends with its last failure). With the fleet's circuit as with the process's own: the first call fails twice
    and opens the circuit, answered with its ``TimeoutError`` after 2 attempts; the next is ``unavailable`` with
    0 attempts. Before, under the fleet, the first was answered ``unavailable`` with 3 attempts (its refused
    retry counted) and the next with 1."""
    runs: list[int] = []

    @ts.tool(
        name="flaky",
        circuit=ts.CircuitBreaker(failures=2, cooldown=30),
        retry=ts.Retry(attempts=4, backoff=0.01),
        idempotent=True,
    )
    async def flaky(n: int) -> int:
        runs.append(n)
        raise TimeoutError("the service did not answer")

    coordination = ts.RedisCoordination(redis_url(), namespace=namespace()) if fleet else None
    executor = ts.Executor([flaky], coordination=coordination)
    with anyio.fail_after(20):
        first = (await executor.run([ts.ToolCall("c1", "flaky", {"n": 1})])).results[0]
        second = (await executor.run([ts.ToolCall("c2", "flaky", {"n": 2})])).results[0]
    assert (first.error_kind, first.attempts) == ("execution_error", 2)
    assert "the service did not answer" in (first.error or "")
    assert (second.error_kind, second.attempts) == ("unavailable", 0)
    assert runs == [1, 1]


async def test_a_call_refused_for_want_of_redis_ran_no_attempt(anyio_backend: str) -> None:
    """Promise (docs/fleet.md): with Redis unreachable, ``on_unavailable="refuse"`` answers the calls
    ``unavailable``; such a call ran nothing, and its result says so (``attempts=0``), whichever limits its tool
    has. Before, a tool with ``max_concurrency`` alone was answered with 1 attempt."""
    port = free_port()
    runs: list[str] = []

    @ts.tool(name="capped", max_concurrency=2)
    async def capped(n: int) -> int:
        runs.append("capped")
        return n

    @ts.tool(name="paced", rate_limit=ts.RateLimit(5, per=1))
    async def paced(n: int) -> int:
        runs.append("paced")
        return n

    coordination = ts.RedisCoordination(f"redis://127.0.0.1:{port}", namespace=namespace(), on_unavailable="refuse")
    executor = ts.Executor([capped, paced], coordination=coordination)
    with warnings.catch_warnings(), anyio.fail_after(20):
        warnings.simplefilter("ignore")
        outcome = await executor.run([ts.ToolCall("a", "capped", {"n": 1}), ts.ToolCall("b", "paced", {"n": 1})])
    assert [(result.error_kind, result.attempts) for result in outcome.results] == [("unavailable", 0)] * 2
    assert runs == []


@pytest.mark.parametrize("limits", ["process", "fleet", "fallback"])
async def test_no_retry_is_announced_once_the_calls_own_failure_opened_the_circuit(
    anyio_backend: str, limits: str
) -> None:
    """Promise (docs/concepts/resilience.md): each retry is a ``ToolRetrying`` event, and a running call's retries
    stop once the circuit opens. The call's second failure opens it (``failures=2``): one ``ToolRetrying`` (after
    the first), none after the second, with the fleet's circuit (or its local fallback, Redis unreachable) as with
    the process's own. Before, under the fleet, a retry was announced after the second failure and then refused."""
    events: list[object] = []

    @ts.tool(
        name="flaky",
        circuit=ts.CircuitBreaker(failures=2, cooldown=30),
        retry=ts.Retry(attempts=4, backoff=0.01),
        idempotent=True,
    )
    async def flaky(n: int) -> int:
        raise TimeoutError("the service did not answer")

    url = redis_url() if limits == "fleet" else f"redis://127.0.0.1:{free_port()}"
    coordination = ts.RedisCoordination(url, namespace=namespace()) if limits != "process" else None
    executor = ts.Executor([flaky], coordination=coordination, on_event=events.append)
    with warnings.catch_warnings(), anyio.fail_after(20):
        warnings.simplefilter("ignore")
        (result,) = (await executor.run([ts.ToolCall("c1", "flaky", {"n": 1})])).results
    assert (result.error_kind, result.attempts) == ("execution_error", 2)
    assert [event.attempt for event in events if isinstance(event, ts.ToolRetrying)] == [1]


@pytest.mark.parametrize("limits", ["process", "fleet"])
@pytest.mark.parametrize("stop", ["caller's deadline", "closed stream"])
async def test_a_run_cancelled_from_outside_is_no_failure_for_the_circuit(
    anyio_backend: str, limits: str, stop: str
) -> None:
    """Promise (docs/concepts/resilience.md): the circuit opens after ``failures`` transient failures in a row
    (the call's own timeouts included). A run cancelled from outside as its call runs (a deadline of the caller
    around ``run``, a ``stream`` closed early) is no failure of the tool: with ``failures=1``, the next call runs.
    Before, under the fleet, the caller's deadline counted as the call's own timeout and opened the circuit: the
    next call was answered ``unavailable``."""
    ran: list[int] = []
    running = anyio.Event()

    @ts.tool(name="slow", circuit=ts.CircuitBreaker(failures=1, cooldown=30))
    async def slow(n: int) -> int:
        ran.append(n)
        if n == 1:
            running.set()
            await anyio.sleep(30)
        return n

    coordination = ts.RedisCoordination(redis_url(), namespace=namespace()) if limits == "fleet" else None
    executor = ts.Executor([slow], coordination=coordination)
    with anyio.fail_after(20):
        if stop == "closed stream":
            async with contextlib.aclosing(executor.stream([ts.ToolCall("c1", "slow", {"n": 1})])) as events:
                async for event in events:
                    if isinstance(event, ts.ToolStarted):
                        await running.wait()
                        break
        else:
            async with anyio.create_task_group() as group:
                group.start_soon(executor.run, [ts.ToolCall("c1", "slow", {"n": 1})])
                await running.wait()
                group.cancel_scope.deadline = anyio.current_time()
        (result,) = (await executor.run([ts.ToolCall("c2", "slow", {"n": 2})])).results
    assert (result.error_kind, result.output) == (None, 2)
    assert ran == [1, 2]


@pytest.mark.parametrize("limits", ["process", "fleet", "fallback"])
async def test_the_calls_own_timeouts_open_the_circuit(anyio_backend: str, limits: str) -> None:
    """The other side of the cancellation above: a call stopped by its own ``timeout`` is a transient failure for
    the circuit (two open it), with the fleet's circuit (or its local fallback, Redis unreachable) as with the
    process's own."""
    ran: list[int] = []

    @ts.tool(name="slow", timeout=0.05, circuit=ts.CircuitBreaker(failures=2, cooldown=30))
    async def slow(n: int) -> int:
        ran.append(n)
        await anyio.sleep(30)
        return n

    url = redis_url() if limits == "fleet" else f"redis://127.0.0.1:{free_port()}"
    coordination = ts.RedisCoordination(url, namespace=namespace()) if limits != "process" else None
    executor = ts.Executor([slow], coordination=coordination)
    with warnings.catch_warnings(), anyio.fail_after(20):
        warnings.simplefilter("ignore")
        kinds = [(await executor.run([ts.ToolCall(f"c{n}", "slow", {"n": n})])).results[0].error_kind for n in range(3)]
    assert kinds == ["timeout", "timeout", "unavailable"]
    assert ran == [0, 1]
