"""Coordination's commands in one event loop share round trips: those issued while one is in flight go
together in the next (a real Redis server, as in test_coordination.py)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import toolsched as ts
from tests.fleet.test_coordination import namespace, redis_url

pytestmark = pytest.mark.anyio


def open_batch(coordination: ts.RedisCoordination) -> list[Any]:
    """The commands waiting for the round trip in flight (empty when none wait)."""
    (link,) = coordination._links.values()
    return link.open or []


async def until(condition: Any) -> None:
    with anyio.fail_after(10):
        while not condition():  # noqa: ASYNC110 (state of the coordination's batches)
            await anyio.sleep(0.005)


async def test_concurrent_admissions_share_round_trips(anyio_backend: str) -> None:
    """20 runs of one call each, started together and admitted at once: their 20 admissions go to Redis
    together, in one round trip (not one each)."""
    url, space = redis_url(), namespace()

    @ts.tool(name="quick", rate_limit=ts.RateLimit(100_000, per=1, burst=100))
    async def quick(n: int) -> int:
        return n

    coordination = ts.RedisCoordination(url, namespace=space)
    executor = ts.Executor([quick], strategy=ts.Parallel(), coordination=coordination)
    # The first call loads the script into the server.
    assert (await executor.run([ts.ToolCall(id="w", name="quick", args={"n": -1})])).results[0].output == -1
    trips = coordination.round_trips
    outputs: list[Any] = []

    async def run(n: int) -> None:
        outputs.extend(result.output for result in (await executor.run([quick_call(n)])).results)

    async with anyio.create_task_group() as group:
        for n in range(20):
            group.start_soon(run, n)
    assert sorted(outputs) == list(range(20))
    # A tool with only a rate limit gives nothing back: its calls' round trips are their admissions.
    assert coordination.round_trips - trips == 1


def quick_call(n: int) -> ts.ToolCall:
    return ts.ToolCall(id=f"c{n}", name="quick", args={"n": n})


async def test_concurrent_releases_share_round_trips(anyio_backend: str) -> None:
    """20 calls holding fleet slots finish together: their slots go back in at most two round trips, and
    every slot is free afterwards."""
    url, space = redis_url(), namespace()
    release, inside = anyio.Event(), [0]

    @ts.tool(name="held", max_concurrency=50)
    async def held(n: int) -> int:
        inside[0] += 1
        await release.wait()
        return n

    coordination = ts.RedisCoordination(url, namespace=space)
    executor = ts.Executor([held], strategy=ts.Parallel(max_concurrency=50), coordination=coordination)
    outcome: list[ts.ToolResult] = []

    async def run() -> None:
        calls = [ts.ToolCall(id=f"c{i}", name="held", args={"n": i}) for i in range(20)]
        outcome.extend((await executor.run(calls)).results)

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await until(lambda: inside[0] == 20)
        trips = coordination.round_trips
        release.set()
    assert [result.output for result in outcome] == list(range(20))
    assert coordination.round_trips - trips <= 2
    assert await coordination._call("ZCARD", f"{space}:{{held}}:slots") == 0


async def test_a_call_cancelled_with_its_admission_written_gives_its_slot_back(anyio_backend: str) -> None:
    """A call cancelled after its admission was written but before its reply came: the slot the server
    gave it goes back as the reply is read; the body never runs, and the fleet's one slot is free."""
    url, space = redis_url(), namespace()
    other = ts.RedisCoordination(url, namespace=space)
    first, second = f"{space}:first", f"{space}:second"
    ran: list[str] = []

    @ts.tool(name="single", max_concurrency=1)
    async def single() -> str:
        ran.append("ran")
        return "ok"

    coordination = ts.RedisCoordination(url, namespace=space)
    executor = ts.Executor([single], coordination=coordination)
    # Load the scripts into the server, so the admission below is one command.
    assert (await executor.run([ts.ToolCall(id="w", name="single", args={})])).results[0].output == "ok"
    ran.clear()
    trips = coordination.round_trips
    async with anyio.create_task_group() as group:
        # A round trip in flight (the server holds it), then a batch behind it: a blocking command (so the
        # server holds that batch too) and the call's admission.
        group.start_soon(coordination._call, "BLPOP", first, 10)
        await until(lambda: coordination.round_trips == trips + 1)
        group.start_soon(coordination._call, "BLPOP", second, 10)
        await until(lambda: len(open_batch(coordination)) == 1)
        scope = anyio.CancelScope()
        group.start_soon(scope_run, scope, executor)
        await until(lambda: len(open_batch(coordination)) == 2)
        await other._call("LPUSH", first, "go")
        # The second batch is written: the server holds it on its blocking command.
        await until(lambda: coordination.round_trips == trips + 2)
        scope.cancel()
        await other._call("LPUSH", second, "go")
    assert ran == []
    assert await other._call("ZCARD", f"{space}:{{single}}:slots") == 0
    assert (await executor.run([ts.ToolCall(id="after", name="single", args={})])).results[0].output == "ok"


async def scope_run(scope: anyio.CancelScope, executor: ts.Executor) -> None:
    with scope:
        await executor.run([ts.ToolCall(id="c", name="single", args={})])


async def test_a_cancelled_batch_leader_does_not_strand_the_others(anyio_backend: str) -> None:
    """The caller whose command opened a batch is cancelled while the batch waits for the round trip in
    flight: the batch is still written and the other callers get their replies."""
    url, space = redis_url(), namespace()
    other = ts.RedisCoordination(url, namespace=space)
    blocker = f"{space}:blocker"
    coordination = ts.RedisCoordination(url, namespace=space)
    await coordination._call("SET", f"{space}:a", "1")
    replies: list[Any] = []

    async def follower() -> None:
        replies.append(await coordination._call("GET", f"{space}:a"))

    trips = coordination.round_trips
    async with anyio.create_task_group() as group:
        group.start_soon(coordination._call, "BLPOP", blocker, 10)
        await until(lambda: coordination.round_trips == trips + 1)
        leader = anyio.CancelScope()
        group.start_soon(cancellable_get, leader, coordination, f"{space}:a")
        await until(lambda: len(open_batch(coordination)) == 1)
        group.start_soon(follower)
        await until(lambda: len(open_batch(coordination)) == 2)
        leader.cancel()
        await other._call("LPUSH", blocker, "go")
    assert replies == [b"1"]


async def cancellable_get(scope: anyio.CancelScope, coordination: ts.RedisCoordination, key: str) -> None:
    with scope:
        await coordination._call("GET", key)


async def test_an_admission_sent_again_takes_no_second_slot(anyio_backend: str) -> None:
    """A batch re-sent on a new connection (its kept one closed before any reply byte, though Redis may have run
    it) asks again with the same lease id: the attempt is admitted on the slot it holds, not given a second one
    nor refused by its own."""

    @ts.tool(name="once", max_concurrency=1)
    async def once() -> None:
        return None

    space = namespace()
    coordination = ts.RedisCoordination(redis_url(), namespace=space)
    first = await coordination._admit(once, "lease-a", None)
    again = await coordination._admit(once, "lease-a", None)
    assert (first[0], again[0]) == (0, 0)
    assert await coordination._call("ZCARD", f"{space}:{{once}}:slots") == 1
    # The fleet's one slot is taken: another attempt waits for it.
    assert (await coordination._admit(once, "lease-b", None))[0] == -2


@pytest.mark.parametrize("cap", [1, None])
async def test_an_admission_sent_again_keeps_the_circuits_probe_it_holds(anyio_backend: str, cap: int | None) -> None:
    """A half-open circuit's one probe taken by an admission whose batch is re-sent (its kept connection closed
    before any reply byte): the same attempt asking again with its lease id is admitted as the probe on what it
    holds (its slot too, under a cap), not refused by its own probe until the lease runs out; any other attempt
    is still refused while the probe runs."""

    @ts.tool(name="probed", max_concurrency=cap, circuit=ts.CircuitBreaker(failures=1, cooldown=30))
    async def probed() -> None:
        return None

    space = namespace()
    coordination = ts.RedisCoordination(redis_url(), namespace=space)
    # The circuit opened by one failure, its cooldown over: the next attempt is its one probe.
    await coordination._call("HSET", f"{space}:{{probed}}:circuit", "failures", 1, "open_until", 0)
    first = await coordination._admit(probed, "lease-a", None)
    again = await coordination._admit(probed, "lease-a", None)
    assert (first[0], again[0]) == (1, 1)
    if cap is not None:
        assert await coordination._call("ZCARD", f"{space}:{{probed}}:slots") == 1
    # The probe is held: another attempt is refused while it runs.
    assert (await coordination._admit(probed, "lease-b", None))[0] == -1


async def test_a_reservations_wait_counts_from_when_its_admission_was_written(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RateLimit(10, per=1, burst=1): the second attempt gets a reservation about 100 ms ahead, and its loop reads
    that reply 40 ms after it came (busy meanwhile). The wait it is given counts from when the admission was
    written, so the 40 ms are off it and it asks again on time; counted from the late read, it waited the whole
    reservation again, asked 40 ms late (past the server's 10 ms) and took a second reservation."""
    from toolsched._policy.coordination import _ADMIT, _sha1
    from toolsched._policy.redis_wire import Connection

    @ts.tool(name="paced", rate_limit=ts.RateLimit(10, per=1, burst=1))
    async def paced() -> None:
        return None

    coordination = ts.RedisCoordination(redis_url(), namespace=namespace(), on_unavailable="refuse")
    original = Connection.exchange
    told: list[list[int]] = []

    async def read_late(self: Connection, data: bytes, count: int, per_reply: float = float("inf")) -> Any:
        replies = await original(self, data, count, per_reply)
        if (_sha1(_ADMIT).encode() in data or _ADMIT.encode() in data) and isinstance(replies[0], list):
            told.append(replies[0])
            if len(told) == 2:
                await anyio.sleep(0.04)  # the reservation's reply read late
        return replies

    monkeypatch.setattr(Connection, "exchange", read_late)
    assert (await coordination._admit(paced, "-", None))[0] == 0
    code, wait_us, _, _ = await coordination._admit(paced, "-", None)
    assert code == told[1][0] == 2
    # The server's wait, less the 40 ms the reply lay unread (rounded up to the next 4 ms at most).
    assert wait_us <= told[1][1] - 40_000 + 4_000, (wait_us, told[1][1])
