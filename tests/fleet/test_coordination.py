"""Fleet-wide limits on a real Redis server (tests/redis_server.sh gives its address in TOOLSCHED_TEST_REDIS_URL).

Without the server these tests fail rather than skip, so that a CI run never passes without them.
Processes are real child processes (tests/support/fleet_child.py) where the limit must hold across them.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import anyio
import pytest
from fleet_redis import CHILD, delegating, namespace, redis_url
from swallowing import swallowing_tool

import toolsched as ts
from toolsched._policy.coordination import _FRESH_US, returned

pytestmark = pytest.mark.anyio


def child(backend: str, url: str, space: str, mode: str, calls: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen(
        [sys.executable, str(CHILD), backend, url, space, mode, str(calls)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def lines_of(process: subprocess.Popen[str]) -> list[str]:
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0, out
    return out.splitlines()


def times(lines: list[str], word: str) -> list[float]:
    return [float(line.split()[1]) for line in lines if line.startswith(word + " ")]


# -- options ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"url": "http://x"}, "redis://"),
        ({"url": 5}, "redis:// URL"),
        ({"url": "redis://h:99999"}, "bad port"),
        ({"url": "redis://h/zero"}, "database"),
        ({"url": "redis://h", "namespace": ""}, "namespace"),
        ({"url": "redis://h", "on_unavailable": "ignore"}, "on_unavailable"),
        ({"url": "redis://h", "lease": 0}, "lease"),
        ({"url": "redis://h", "lease": float("nan")}, "lease"),
        ({"url": "redis://h", "lease": 1e-6}, r"lease=\.\.\.\) must be a finite number of at least 0\.1 seconds"),
        ({"url": "redis://h", "lease": 0.099}, r"lease=\.\.\.\) must be .* at least 0\.1"),
        ({"url": "redis://h", "lease": -1}, "lease"),
        ({"url": "redis://h", "lease": float("inf")}, "lease"),
        ({"url": "redis://h", "lease": True}, "lease"),
        ({"url": "redis://h", "lease": "10"}, "lease"),
        ({"url": "redis://h", "connect_timeout": 0}, "connect_timeout"),
        ({"url": "redis://h", "connect_timeout": float("nan")}, "connect_timeout"),
    ],
)
def test_bad_options_are_refused_readably(kwargs: dict[str, Any], message: str) -> None:
    url = kwargs.pop("url")
    with pytest.raises(ts.OptionError, match=message):
        ts.RedisCoordination(url, **kwargs)


def test_the_shortest_lease_is_taken() -> None:
    """0.1 s is the floor itself: taken (its renewal wakes every third of it)."""
    assert ts.RedisCoordination("redis://h", lease=0.1).lease == 0.1


def test_coordination_must_be_a_redis_coordination() -> None:
    with pytest.raises(ts.OptionError, match="RedisCoordination"):
        ts.Executor([], coordination="redis://localhost")  # type: ignore[arg-type]


# -- across processes ------------------------------------------------------------------


def test_rate_limit_is_shared_by_two_processes(anyio_backend: str) -> None:
    """RateLimit(20, per=1, burst=1) for the fleet: 20 starts from two processes span at least 19 intervals
    (each process alone would start its 10 in half that)."""
    url, space = redis_url(), namespace()
    workers = [child(anyio_backend, url, space, "rate", 10) for _ in range(2)]
    starts = sorted(t for worker in workers for t in times(lines_of(worker), "start"))
    assert len(starts) == 20
    assert starts[-1] - starts[0] >= 19 * 0.05 * 0.9


def test_a_stalled_worker_does_not_release_its_due_calls_at_once(anyio_backend: str) -> None:
    """RateLimit(10, per=1, burst=1) for the fleet, each process stalling its event loop for 1 s while its
    reservations fall due: the calls' starts, stamped with the Redis server's clock, number at most
    floor((W + freshness + tolerance) / interval) + 1 in any window of W (the GCRA's bound, widened by how
    late after its reserved start a call may still be admitted), stall or not."""
    url, space = redis_url(), namespace()
    workers = [child(anyio_backend, url, space, "stall", 8) for _ in range(2)]
    lines = [line for worker in workers for line in lines_of(worker)]
    starts = sorted(int(line.split()[1]) for line in lines if line.startswith("redis "))
    assert len(starts) == 16
    interval, tolerance, window = 100_000, 0, 500_000
    bound = (window + _FRESH_US + tolerance) // interval + 1
    busiest = max(sum(1 for t in starts if first <= t < first + window) for first in starts)
    assert busiest <= bound, (busiest, bound, [t - starts[0] for t in starts])


async def test_a_call_waiting_for_its_rate_reservation_holds_no_slot(anyio_backend: str) -> None:
    """max_concurrency=1 and RateLimit(1, per=30): a second call waits ~30 s for its reservation; meanwhile
    the fleet's one slot is free, so another process's call of the same tool runs at once."""
    url, space = redis_url(), namespace()
    ran: list[str] = []

    @ts.tool(name="capped", rate_limit=ts.RateLimit(1, per=30, burst=1), max_concurrency=1)
    async def capped(tag: str) -> str:
        ran.append(tag)
        return tag

    @ts.tool(name="capped", max_concurrency=1)
    async def elsewhere(tag: str) -> str:
        ran.append(tag)
        return tag

    coordination = ts.RedisCoordination(url, namespace=space)
    paced = ts.Executor([capped], coordination=coordination)
    other = ts.Executor([elsewhere], coordination=ts.RedisCoordination(url, namespace=space))
    first = (await paced.run([ts.ToolCall(id="a", name="capped", args={"tag": "a"})])).results[0]
    assert first.output == "a"
    rate_key = f"{space}:{{capped}}:rate"
    tat = int(await coordination._call("GET", rate_key))
    async with anyio.create_task_group() as group:
        group.start_soon(paced.run, [ts.ToolCall(id="b", name="capped", args={"tag": "b"})])
        with anyio.fail_after(10):
            # The second call has its reservation (the theoretical arrival time moved on): it now waits.
            while int(await coordination._call("GET", rate_key)) == tat:  # noqa: ASYNC110 (state in Redis)
                await anyio.sleep(0.01)
            result = (await other.run([ts.ToolCall(id="c", name="capped", args={"tag": "c"})])).results[0]
        assert result.output == "c"
        assert ran == ["a", "c"]
        group.cancel_scope.cancel()


async def test_leases_are_renewed_together_off_the_event_loop(anyio_backend: str) -> None:
    """Five calls hold slots past their 0.3 s lease: the process renews all of them in one round trip each
    interval (from its renewal thread), so the leases stay ahead of the server's clock and the event loop
    makes no round trip while the calls run."""
    url, space = redis_url(), namespace()
    holding, release = [0], anyio.Event()
    all_in = anyio.Event()

    @ts.tool(name="held", max_concurrency=5)
    async def held(n: int) -> int:
        holding[0] += 1
        if holding[0] == 5:
            all_in.set()
        await release.wait()
        return n

    coordination = ts.RedisCoordination(url, namespace=space, lease=0.3)
    executor = ts.Executor([held], strategy=ts.Parallel(), coordination=coordination)
    renewer = coordination._renewer
    async with anyio.create_task_group() as group:
        group.start_soon(executor.run, [ts.ToolCall(id=f"h{i}", name="held", args={"n": i}) for i in range(5)])
        with anyio.fail_after(10):
            await all_in.wait()
            trips, renewals = coordination.round_trips, renewer.round_trips
            while renewer.round_trips < renewals + 4:  # noqa: ASYNC110 (counted by the renewal thread)
                await anyio.sleep(0.02)
        assert coordination.round_trips == trips
        seconds, micros = await coordination._call("TIME")
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        leases = await coordination._call("ZRANGE", f"{space}:{{held}}:slots", 0, -1, "WITHSCORES")
        expiries = [float(score) for score in leases[1::2]]
        assert len(expiries) == 5 and all(expiry > now_ms for expiry in expiries)
        release.set()


async def test_calls_waiting_for_a_slot_poll_redis_one_at_a_time(anyio_backend: str) -> None:
    """The fleet's one slot held elsewhere, 20 calls of this process waiting: each asks once, then only the one
    at the head of the process's queue asks Redis again (the others wait behind it), and every call runs once
    the slot is free."""
    url, space = redis_url(), namespace()
    holding, release = anyio.Event(), anyio.Event()

    def make(held: bool, coordination: ts.RedisCoordination) -> ts.Executor:
        @ts.tool(name="single", max_concurrency=1)
        async def single(n: int) -> int:
            if held:
                holding.set()
                await release.wait()
            return n

        return ts.Executor([single], strategy=ts.Parallel(max_concurrency=32), coordination=coordination)

    coordination = ts.RedisCoordination(url, namespace=space)
    holder, waiter = make(True, ts.RedisCoordination(url, namespace=space)), make(False, coordination)
    asked: list[str] = []
    admit = coordination._admit

    async def recorded(tool: Any, lease_id: str, reserved: Any, *rest: Any) -> Any:
        asked.append(lease_id)
        return await admit(tool, lease_id, reserved, *rest)

    coordination._admit = recorded  # type: ignore[method-assign]
    results: list[ts.ToolResult] = []

    async def wait_all() -> None:
        calls = [ts.ToolCall(id=f"w{i}", name="single", args={"n": i}) for i in range(20)]
        results.extend((await waiter.run(calls)).results)

    async with anyio.create_task_group() as group:
        group.start_soon(holder.run, [ts.ToolCall(id="h", name="single", args={"n": -1})])
        await holding.wait()
        group.start_soon(wait_all)
        with anyio.fail_after(10):
            while len(asked) < 32:  # noqa: ASYNC110 (counted in the wrapper)
                await anyio.sleep(0.01)
        # Every call asked; only one of them asked again (the one at the head of the queue).
        assert len(set(asked)) == 20
        assert [lease for lease in set(asked) if asked.count(lease) > 1] == [asked[-1]]
        release.set()
    assert sorted(result.output for result in results) == list(range(20))


async def test_a_capped_calls_timeout_starts_when_it_has_a_fleet_slot(anyio_backend: str) -> None:
    """timeout=0.5 and the fleet's one slot held elsewhere for longer than that: the waiting call is not timed
    out while it waits, and runs once the slot is free (as with a process's own cap)."""
    url, space = redis_url(), namespace()
    holding, release = anyio.Event(), anyio.Event()

    def make(held: bool) -> ts.Executor:
        # The holder's own tool has no timeout: it keeps the slot until released.
        @ts.tool(name="slow_cap", max_concurrency=1, timeout=None if held else 0.5)
        async def slow_cap(n: int) -> int:
            if held:
                holding.set()
                await release.wait()
            return n

        return ts.Executor([slow_cap], coordination=ts.RedisCoordination(url, namespace=space))

    holder, waiter = make(True), make(False)
    answers: list[ts.ToolResult] = []

    async def wait_for_slot() -> None:
        answers.extend((await waiter.run([ts.ToolCall(id="w", name="slow_cap", args={"n": 7})])).results)

    async with anyio.create_task_group() as group:
        group.start_soon(holder.run, [ts.ToolCall(id="h", name="slow_cap", args={"n": 0})])
        await holding.wait()
        group.start_soon(wait_for_slot)
        await anyio.sleep(0.8)  # longer than the timeout: the waiting call has no slot yet
        assert answers == []
        release.set()
    assert answers[0].output == 7


@pytest.mark.parametrize("cap", [1, 2])
async def test_a_call_nested_inside_a_call_of_its_own_tool_runs_on_that_calls_fleet_slot(
    anyio_backend: str, cap: int
) -> None:
    """An agent tool with ``max_concurrency`` under fleet-wide limits whose child turn calls it again, two
    levels deep. Each nested call runs on its ancestor's fleet slot, as it does on a process's own cap: before,
    it asked Redis for a slot of its own while its ancestors held every one it could get, and waited for a
    slot only its own ancestor could free."""
    url, space = redis_url(), namespace()
    box: dict[str, ts.Executor] = {}

    delegate = delegating(box, cap)

    box["child"] = ts.Executor([delegate], coordination=ts.RedisCoordination(url, namespace=space))
    executor = ts.Executor([delegate], coordination=ts.RedisCoordination(url, namespace=space))
    with anyio.fail_after(10):
        outcome = await executor.run([ts.ToolCall("c1", "delegate", {"depth": 2})])
    assert [(result.error_kind, result.output) for result in outcome.results] == [(None, "2/1/leaf")]


async def test_a_nested_call_takes_no_fleet_slot_from_a_call_of_another_run(anyio_backend: str) -> None:
    """max_concurrency=1 for the fleet: while a call holds the slot and runs its nested call on it, a call of
    the same tool from another executor still waits for the slot (the nested call freed none, took none)."""
    url, space = redis_url(), namespace()
    box: dict[str, ts.Executor] = {}
    nested_running, release = anyio.Event(), anyio.Event()
    ran: list[str] = []

    @ts.agent_tool(lambda: box["child"], name="delegate", max_concurrency=1)
    async def delegate(tag: str, child: ts.ChildRun) -> str:
        """Delegates once, then waits inside the nested call."""
        ran.append(tag)
        if tag == "outer":
            outcome = await child.run([ts.ToolCall("n", "delegate", {"tag": "nested"})])
            return f"outer/{outcome.results[0].output}"
        if tag == "nested":
            nested_running.set()
            await release.wait()
        return tag

    def make() -> ts.Executor:
        return ts.Executor([delegate], coordination=ts.RedisCoordination(url, namespace=space))

    box["child"] = make()
    holder, other = make(), make()
    answers: list[ts.ToolResult] = []

    async def run_other() -> None:
        answers.extend((await other.run([ts.ToolCall("o", "delegate", {"tag": "other"})])).results)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(holder.run, [ts.ToolCall("h", "delegate", {"tag": "outer"})])
            await nested_running.wait()
            group.start_soon(run_other)
            await anyio.sleep(0.3)
            assert ran == ["outer", "nested"]
            release.set()
    assert ran == ["outer", "nested", "other"]
    assert answers[0].output == "other"


def test_concurrency_slots_are_shared_by_two_processes(anyio_backend: str) -> None:
    """max_concurrency=2 for the fleet: never more than 2 calls in flight across both processes."""
    url, space = redis_url(), namespace()
    workers = [child(anyio_backend, url, space, "slots", 4) for _ in range(2)]
    edges: list[tuple[float, int]] = []
    for worker in workers:
        lines = lines_of(worker)
        edges += [(t, 1) for t in times(lines, "start")] + [(t, -1) for t in times(lines, "end")]
    assert len(edges) == 16
    in_flight = peak = 0
    for _, step in sorted(edges, key=lambda edge: (edge[0], edge[1])):
        in_flight += step
        peak = max(peak, in_flight)
    assert peak == 2


async def test_a_killed_workers_slot_comes_back_within_its_lease(anyio_backend: str) -> None:
    url, space = redis_url(), namespace()
    holder = child(anyio_backend, url, space, "hold", 1)
    try:
        await killed_while_holding(holder, url, space)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()


async def killed_while_holding(holder: subprocess.Popen[str], url: str, space: str) -> None:
    assert holder.stdout is not None
    line = await anyio.to_thread.run_sync(holder.stdout.readline)
    while line and line.strip() != "ready":
        line = await anyio.to_thread.run_sync(holder.stdout.readline)
    assert line.strip() == "ready"
    ran: list[str] = []

    @ts.tool(name="fleet_tool", max_concurrency=1)
    async def fleet_tool() -> str:
        ran.append("ran")
        return "ok"

    executor = ts.Executor([fleet_tool], coordination=ts.RedisCoordination(url, namespace=space, lease=1.0))
    # While the holder lives, its slot is held: a call waits.
    with anyio.move_on_after(0.3) as waiting:
        await executor.run([ts.ToolCall(id="early", name="fleet_tool", args={})])
    assert waiting.cancelled_caught and ran == []
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with anyio.fail_after(10):
        outcome = await executor.run([ts.ToolCall(id="after", name="fleet_tool", args={})])
    assert outcome.results[0].output == "ok" and ran == ["ran"]


# -- the circuit -----------------------------------------------------------------------


async def test_circuit_and_its_single_probe_are_shared(anyio_backend: str) -> None:
    """Two executors with their own coordination objects (as two processes): one opens the circuit, the
    other's calls are refused; after the cooldown exactly one call in the fleet probes; its success closes it."""
    url, space = redis_url(), namespace()
    ran: list[str] = []
    release = anyio.Event()
    mode = {"fail": True}

    def make() -> ts.Executor:
        @ts.tool(name="flaky", circuit=ts.CircuitBreaker(failures=2, cooldown=0.3))
        async def flaky(tag: str) -> str:
            ran.append(tag)
            if mode["fail"]:
                raise ts.Transient("downstream busy")
            await release.wait()
            return tag

        return ts.Executor([flaky], coordination=ts.RedisCoordination(url, namespace=space))

    first, second = make(), make()
    for i in range(2):
        result = (await first.run([ts.ToolCall(id=f"f{i}", name="flaky", args={"tag": f"f{i}"})])).results[0]
        assert result.error_kind == "execution_error"
    refused = (await second.run([ts.ToolCall(id="s", name="flaky", args={"tag": "s"})])).results[0]
    assert refused.error_kind == "unavailable"
    assert ran == ["f0", "f1"]
    await anyio.sleep(0.35)
    mode["fail"] = False
    answers: dict[str, ts.ToolResult] = {}

    async def call(executor: ts.Executor, tag: str) -> None:
        answers[tag] = (await executor.run([ts.ToolCall(id=tag, name="flaky", args={"tag": tag})])).results[0]

    async with anyio.create_task_group() as group:
        group.start_soon(call, first, "p1")
        await anyio.sleep(0.1)
        group.start_soon(call, second, "p2")
        await anyio.sleep(0.1)
        release.set()
    assert ran == ["f0", "f1", "p1"]
    assert answers["p1"].output == "p1"
    assert answers["p2"].error_kind == "unavailable"
    closed = (await second.run([ts.ToolCall(id="c", name="flaky", args={"tag": "c"})])).results[0]
    assert closed.output == "c"


async def test_a_timeout_the_tool_swallowed_counts_for_the_fleets_circuit(anyio_backend: str) -> None:
    """A call whose tool caught its timeout and returned is answered ``timeout``: for the fleet's circuit, as for
    a process's, it is a transient failure (two open it), not a success that keeps it closed."""
    ran: list[int] = []
    slow = swallowing_tool(ran, timeout=0.05, circuit=ts.CircuitBreaker(failures=2, cooldown=30))
    executor = ts.Executor([slow], coordination=ts.RedisCoordination(redis_url(), namespace=namespace()))
    kinds = []
    for n in range(3):
        kinds.append((await executor.run([ts.ToolCall(f"c{n}", "slow", {"n": n})])).results[0].error_kind)
    assert kinds == ["timeout", "timeout", "unavailable"]
    assert ran == [0, 1]


def test_a_body_that_returned_is_recorded_as_what_stopped_its_call() -> None:
    """The fleet's (and its fallback's) outcome of a body that returned: a success unless its call was stopped
    as it ran; a timeout it caught is a transient failure, a cancellation it caught settles nothing."""
    assert returned(None) == "success"
    assert returned(lambda: None) == "success"
    assert returned(lambda: "timeout") == "transient"
    assert returned(lambda: "cancelled") == "none"


# -- Redis unreachable -----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def start_server(port: int, workdir: Path) -> subprocess.Popen[bytes]:
    binary = os.environ.get("TOOLSCHED_TEST_REDIS_SERVER", "redis-server")
    command = [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--dir", str(workdir)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL)  # noqa: ASYNC220 (returns at once)
    with anyio.fail_after(10):
        while True:
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)
                continue
            await stream.aclose()
            return server


@pytest.mark.parametrize("on_unavailable", ["local", "refuse"])
async def test_server_stopped_mid_run(anyio_backend: str, on_unavailable: str, tmp_path: Path) -> None:
    redis_url()
    port = free_port()
    server = await start_server(port, tmp_path)
    events: list[object] = []
    try:

        @ts.tool(name="paced", rate_limit=ts.RateLimit(100, per=1), max_concurrency=4)
        async def paced(n: int) -> int:
            return n

        coordination = ts.RedisCoordination(
            f"redis://127.0.0.1:{port}",
            namespace=namespace(),
            on_unavailable=on_unavailable,  # type: ignore[arg-type]
            connect_timeout=0.5,
        )
        executor = ts.Executor([paced], coordination=coordination, on_event=events.append)
        before = (await executor.run([ts.ToolCall(id="a", name="paced", args={"n": 1})])).results[0]
        assert before.output == 1
        trips = coordination.round_trips
        assert trips >= 2
    finally:
        server.terminate()
        server.wait()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with anyio.fail_after(10):
            outcome = await executor.run([ts.ToolCall(id=f"b{i}", name="paced", args={"n": i}) for i in range(3)])
    outages = [event for event in events if isinstance(event, ts.CoordinationUnavailable)]
    assert len(outages) == 1 and outages[0].fallback == on_unavailable
    assert any("fleet-wide limits unavailable" in str(w.message) for w in caught)
    if on_unavailable == "local":
        assert [result.output for result in outcome.results] == [0, 1, 2]
    else:
        assert {result.error_kind for result in outcome.results} == {"unavailable"}


async def test_a_nested_call_runs_on_its_ancestors_slot_in_the_local_fallback(anyio_backend: str) -> None:
    """Redis unreachable, ``on_unavailable="local"``: each attempt takes the per-process cap instead of a fleet
    slot, and a call nested inside a call of its own tool runs on its ancestor's slot there too (before, it asked
    the process's limiter for a second token while its ancestor held the only one)."""
    redis_url()
    box: dict[str, ts.Executor] = {}

    delegate = delegating(box)

    url, space = f"redis://127.0.0.1:{free_port()}", namespace()

    def make() -> ts.Executor:
        coordination = ts.RedisCoordination(url, namespace=space, connect_timeout=0.5)
        return ts.Executor([delegate], coordination=coordination)

    box["child"] = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with anyio.fail_after(20):
            outcome = await make().run([ts.ToolCall("c1", "delegate", {"depth": 2})])
    assert [(result.error_kind, result.output) for result in outcome.results] == [(None, "2/1/leaf")]


# -- namespaces ------------------------------------------------------------------------


async def test_namespaces_do_not_share_limits(anyio_backend: str) -> None:
    url = redis_url()
    gate = anyio.Event()
    holding = anyio.Event()
    ran: list[str] = []

    def make(space: str) -> ts.Executor:
        # A tool object of its own for each executor, as in separate processes (no local limiter shared).
        @ts.tool(name="single", max_concurrency=1)
        async def single(tag: str) -> str:
            ran.append(tag)
            if tag == "held":
                holding.set()
                await gate.wait()
            return tag

        return ts.Executor([single], coordination=ts.RedisCoordination(url, namespace=space))

    space = namespace()
    holder, same, other = make(space), make(space), make(namespace())
    async with anyio.create_task_group() as group:
        group.start_soon(holder.run, [ts.ToolCall(id="h", name="single", args={"tag": "held"})])
        await holding.wait()
        with anyio.move_on_after(0.3) as waited:
            await same.run([ts.ToolCall(id="s", name="single", args={"tag": "same"})])
        assert waited.cancelled_caught
        with anyio.fail_after(10):
            result = (await other.run([ts.ToolCall(id="o", name="single", args={"tag": "other"})])).results[0]
        assert result.output == "other"
        gate.set()
    assert ran == ["held", "other"]


async def test_workers_that_disagree_on_a_cap_each_apply_their_own(anyio_backend: str) -> None:
    """docs/fleet.md: workers of one namespace whose tool has another ``max_concurrency`` (a rolling deploy that
    changes it) each apply their own at each admission. Two calls run: a worker with a cap of 2 waits, one with
    a cap of 3 starts a third beside them; nothing is refused."""
    url, space = redis_url(), namespace()
    running: list[str] = []
    two, three, release = anyio.Event(), anyio.Event(), anyio.Event()

    def make(cap: int) -> ts.Executor:
        # A tool object of its own for each executor, as in separate processes (no local limiter shared).
        @ts.tool(name="shared", max_concurrency=cap)
        async def shared(tag: str) -> str:
            running.append(tag)
            if len(running) == 2:
                two.set()
            if len(running) == 3:
                three.set()
            await release.wait()
            return tag

        return ts.Executor([shared], coordination=ts.RedisCoordination(url, namespace=space))

    wide, narrow = make(3), make(2)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            for tag in ("w1", "w2"):
                group.start_soon(wide.run, [ts.ToolCall(tag, "shared", {"tag": tag})])
            await two.wait()
            with anyio.move_on_after(0.3) as waited:
                await narrow.run([ts.ToolCall("n", "shared", {"tag": "narrow"})])
            assert waited.cancelled_caught
            group.start_soon(wide.run, [ts.ToolCall("w3", "shared", {"tag": "w3"})])
            await three.wait()
            release.set()
    assert sorted(running) == ["w1", "w2", "w3"]
