"""Attacks on ``ts.RedisCoordination`` (docs/fleet.md): a server that goes away, restarts, never answers or is not
Redis; a wrong password or database; values the options take at their edges; one coordination shared by event
loops that come and go, by threads and by a forked child; a worker killed while it holds the circuit's probe.

The real server comes from tests/redis_server.sh (``TOOLSCHED_TEST_REDIS_URL``); tests that stop or configure a
server start their own with the same binary.
"""

from __future__ import annotations

import gc
import math
import multiprocessing
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from fleet_redis import CHILD, namespace, redis_url

import toolsched as ts
from toolsched._policy.coordination import _ADMIT, _SETTLE, _sha1
from toolsched._policy.redis_wire import Connection

pytestmark = pytest.mark.anyio


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(port: int, workdir: Path, *extra: str) -> subprocess.Popen[bytes]:
    """A Redis server of this test's own on ``port`` (ready when this returns)."""
    binary = os.environ.get("TOOLSCHED_TEST_REDIS_SERVER", "redis-server")
    command = [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--dir", str(workdir), *extra]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.1).close()
            return server
        except OSError:
            if server.poll() is not None:
                raise RuntimeError(f"redis-server exited with {server.returncode}") from None
            threading.Event().wait(0.05)
    server.kill()
    raise RuntimeError("redis-server did not start")


def stop_server(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    server.wait(30)


def command(port: int, *parts: str, password: str | None = None) -> bytes:
    """One command on a fresh blocking connection; the raw reply (for reading the server's own counters)."""
    with socket.create_connection(("127.0.0.1", port), 5) as sock:
        if password is not None:
            sock.sendall(b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" % (len(password), password.encode()))
            sock.recv(100)
        out = b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p.encode()) for p in parts)
        sock.sendall(out)
        reply = b""
        while not reply.endswith(b"\r\n"):
            reply += sock.recv(65536)
        if reply.startswith(b"$"):
            size = int(reply[1 : reply.index(b"\r\n")])
            while len(reply) < reply.index(b"\r\n") + 2 + size + 2:
                reply += sock.recv(65536)
        return reply


def connected_clients(port: int) -> int:
    info = command(port, "INFO", "clients").decode()
    return int(info.split("connected_clients:")[1].split("\r\n")[0])


@contextmanager
def fake_server(answer: Callable[[socket.socket], None]) -> Iterator[int]:
    """A TCP server on a free port that hands each connection to ``answer`` (on a thread of its own)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            accepted.append(client)
            threading.Thread(target=answer, args=(client,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        listener.close()
        for client in accepted:
            client.close()


def silent(client: socket.socket) -> None:
    """Accepts and never answers (a hung server, a firewall's tarpit)."""
    try:
        while client.recv(65536):
            pass
    except OSError:
        return


def replying(data: bytes) -> Callable[[socket.socket], None]:
    """Answers every request with ``data`` (then keeps the connection open)."""

    def answer(client: socket.socket) -> None:
        try:
            while client.recv(65536):
                client.sendall(data)
        except OSError:
            return

    return answer


def closing(client: socket.socket) -> None:
    """Accepts, reads the request and closes the connection without a word (a proxy with no backend)."""
    try:
        client.recv(65536)
    finally:
        client.close()


def streaming(client: socket.socket) -> None:
    """Answers with a line that never ends."""
    try:
        client.recv(65536)
        while True:
            client.sendall(b"x" * 65536)
    except OSError:
        return


def capped_tool(name: str = "capped", cap: int = 2) -> ts.Tool:
    @ts.tool(name=name, max_concurrency=cap)
    async def capped(n: int) -> int:
        return n

    return capped


async def one(executor: ts.Executor, n: int = 1, name: str = "capped") -> ts.ToolResult:
    return (await executor.run([ts.ToolCall(id=f"c{n}", name=name, args={"n": n})])).results[0]


# -- the server goes away, or never was Redis ----------------------------------------------------------


@pytest.mark.parametrize("on_unavailable", ["local", "refuse"])
async def test_a_redis_that_accepts_and_never_answers_is_unavailable_not_a_hang(
    anyio_backend: str, on_unavailable: str
) -> None:
    """Promise: "When Redis cannot be reached, on_unavailable decides". A server that accepts connections and
    never answers is not reached: a capped call (whose own timeout starts only once it has its slot) is
    answered per on_unavailable within connect_timeout, not left waiting for ever."""
    events: list[object] = []
    with fake_server(silent) as port:
        coordination = ts.RedisCoordination(
            f"redis://127.0.0.1:{port}",
            namespace=namespace(),
            on_unavailable=on_unavailable,  # type: ignore[arg-type]
            connect_timeout=0.3,
        )
        executor = ts.Executor([capped_tool()], coordination=coordination, on_event=events.append)
        with warnings.catch_warnings(record=True) as caught, anyio.fail_after(20):
            warnings.simplefilter("always")
            result = await one(executor)
            again = await one(executor, 2)
    if on_unavailable == "local":
        assert (result.output, again.output) == (1, 2)
    else:
        assert result.error_kind == again.error_kind == "unavailable"
        assert "did not answer" in (result.error or "")
    assert len([event for event in events if isinstance(event, ts.CoordinationUnavailable)]) == 1
    assert any("fleet-wide limits unavailable" in str(w.message) for w in caught)


@pytest.mark.parametrize("drop", ["restart", "client-kill"])
async def test_a_redis_that_dropped_the_idle_connection_is_used_again_at_once(
    anyio_backend: str, drop: str, tmp_path: Path
) -> None:
    """Promise: `"refuse"` answers calls unavailable only while Redis cannot be reached. Redis restarted between
    two calls, or dropping the process's idle connection (its `timeout` setting, a proxy, `CLIENT KILL`), is
    reachable: the next call is admitted through it, with no outage reported."""
    port = free_port()
    server = start_server(port, tmp_path)
    events: list[object] = []
    try:
        coordination = ts.RedisCoordination(f"redis://127.0.0.1:{port}", namespace=namespace(), on_unavailable="refuse")
        executor = ts.Executor([capped_tool()], coordination=coordination, on_event=events.append)
        assert (await one(executor)).output == 1
        if drop == "restart":
            stop_server(server)
            server = start_server(port, tmp_path)
        else:
            # Every other client: the coordination's idle connection (this command's own is spared).
            assert command(port, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes") == b":1\r\n"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            result = await one(executor, 2)
        assert result.output == 2, result.error
        assert not [event for event in events if isinstance(event, ts.CoordinationUnavailable)]
        # Admitted by the server: its admission script is loaded there.
        assert command(port, "SCRIPT", "EXISTS", _sha1(_ADMIT)) == b"*1\r\n:1\r\n"
    finally:
        stop_server(server)


@pytest.mark.parametrize(
    "answer",
    [
        replying(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"),
        replying(b":twelve\r\n"),
        replying(b"*x\r\n"),
        replying(b"$99999999999999999999999\r\n"),
        replying(b"+OK\r\n"),
        streaming,
        closing,
    ],
    ids=["http", "bad-integer", "bad-array", "huge-bulk", "wrong-shape", "endless-line", "closes"],
)
@pytest.mark.parametrize("on_unavailable", ["local", "refuse"])
async def test_a_server_that_is_not_redis_is_unavailable(
    anyio_backend: str, on_unavailable: str, answer: Callable[[socket.socket], None]
) -> None:
    """Promise: a call is answered, never a crash or a hang; a server on the port that is not Redis is Redis not
    reached: on_unavailable decides."""
    with fake_server(answer) as port:
        coordination = ts.RedisCoordination(
            f"redis://127.0.0.1:{port}",
            namespace=namespace(),
            on_unavailable=on_unavailable,  # type: ignore[arg-type]
            connect_timeout=0.5,
        )
        executor = ts.Executor([capped_tool()], coordination=coordination)
        with warnings.catch_warnings(), anyio.fail_after(20):
            warnings.simplefilter("ignore")
            result = await one(executor)
    if on_unavailable == "local":
        assert result.output == 1, result.error
    else:
        assert result.error_kind == "unavailable", result


@pytest.mark.parametrize("on_unavailable", ["local", "refuse"])
async def test_a_wrong_password_or_database_is_unavailable_and_the_right_ones_work(
    anyio_backend: str, on_unavailable: str, tmp_path: Path
) -> None:
    """Promise: ``redis://[:password@]host[:port][/db]``; a server that refuses the password or the database is
    not reached (on_unavailable decides, with its warning), and leaves no connection open per call."""
    port = free_port()
    server = start_server(port, tmp_path, "--requirepass", "s3cr@t", "--databases", "4")
    try:
        for url in (f"redis://:wrong@127.0.0.1:{port}/0", f"redis://:s3cr%40t@127.0.0.1:{port}/9"):
            coordination = ts.RedisCoordination(url, namespace=namespace(), on_unavailable=on_unavailable)  # type: ignore[arg-type]
            executor = ts.Executor([capped_tool()], coordination=coordination)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = await one(executor)
            assert any("fleet-wide limits unavailable" in str(w.message) for w in caught)
            if on_unavailable == "local":
                assert result.output == 1
            else:
                assert result.error_kind == "unavailable"
        assert connected_clients_with(port, "s3cr@t") == 1
        space = namespace()
        right = ts.RedisCoordination(f"redis://:s3cr%40t@127.0.0.1:{port}/3", namespace=space)
        executor = ts.Executor([capped_tool()], coordination=right)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert (await one(executor)).output == 1
        reply = command(port, "SELECT", "3", password="s3cr@t")
        assert reply == b"+OK\r\n"
    finally:
        stop_server(server)


def connected_clients_with(port: int, password: str) -> int:
    info = command(port, "INFO", "clients", password=password).decode()
    return int(info.split("connected_clients:")[1].split("\r\n")[0])


# -- values at the edges ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lease": True}, "lease"),
        ({"lease": 1e300}, "lease"),
        ({"lease": float("inf")}, "lease"),
        ({"lease": -1}, "lease"),
        ({"connect_timeout": 1e300}, "connect_timeout"),
        ({"connect_timeout": False}, "connect_timeout"),
        ({"namespace": "two words"}, "namespace"),
        ({"namespace": "prod{}"}, "namespace"),
        ({"namespace": "{prod"}, "namespace"),
        ({"namespace": "prod\x00"}, "namespace"),
        ({"on_unavailable": True}, "on_unavailable"),
    ],
)
def test_option_values_the_fleet_cannot_hold_are_refused_readably(kwargs: dict[str, Any], message: str) -> None:
    """Promise: "Bad options raise OptionError". A lease of 1e300 s was taken, then every call went to the
    fallback (Redis refused the script's numbers) and the renewal thread died on its timer. A namespace with
    braces was taken: `prod{}` made the keys' hash tag empty, so one tool's keys no longer shared a hash slot
    (docs/fleet.md: "keys of one tool share a hash tag")."""
    with pytest.raises(ts.OptionError, match=message):
        ts.RedisCoordination("redis://127.0.0.1:6379", **kwargs)


async def test_the_longest_lease_taken_works(anyio_backend: str) -> None:
    """A year's lease, the longest taken, admits and renews through the server like the default."""
    coordination = ts.RedisCoordination(redis_url(), namespace=namespace(), lease=365 * 86_400, on_unavailable="refuse")
    executor = ts.Executor([capped_tool()], coordination=coordination)
    assert (await one(executor)).output == 1


async def test_a_rate_of_one_call_per_eon_is_one_call_in_the_fleet(anyio_backend: str) -> None:
    """Promise: a tool's rate limit is one limit for the fleet, whatever it is. RateLimit(1, per=1e300) is
    valid for a tool: the first call is admitted and the next waits its (endless) turn, rather than every call
    being refused because the server could not store the interval."""

    @ts.tool(name="rare", rate_limit=ts.RateLimit(1, per=1e300, burst=1))
    async def rare(n: int) -> int:
        return n

    coordination = ts.RedisCoordination(redis_url(), namespace=namespace(), on_unavailable="refuse")
    executor = ts.Executor([rare], coordination=coordination)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert (await one(executor, 1, "rare")).output == 1
        with anyio.move_on_after(0.5) as waiting:
            await one(executor, 2, "rare")
    assert waiting.cancelled_caught


# -- one coordination, many event loops, threads, processes -------------------------------------------


def test_event_loops_that_ended_keep_no_connection_open(anyio_backend: str, tmp_path: Path) -> None:
    """A process that runs one event loop per task (``anyio.run`` per request) with one coordination: the
    connections of the loops that ended are closed, not kept open (one more per loop, without end)."""
    port = free_port()
    server = start_server(port, tmp_path)
    try:
        coordination = ts.RedisCoordination(f"redis://127.0.0.1:{port}", namespace=namespace(), on_unavailable="refuse")
        executor = ts.Executor([capped_tool()], coordination=coordination)

        async def request(n: int) -> Any:
            return (await one(executor, n)).output

        outputs = [anyio.run(request, n, backend=anyio_backend) for n in range(12)]
        assert outputs == list(range(12))
        # The last loop's connection and the one counting.
        assert connected_clients(port) <= 2
    finally:
        stop_server(server)


def test_one_coordination_shared_by_loops_on_two_threads_keeps_the_fleet_cap(anyio_backend: str) -> None:
    """Promise: max_concurrency is one cap for every caller of the same server and namespace. One coordination
    and one executor used from two threads, each with its own event loop (one asyncio, one trio): never more
    than the cap in flight, and every call answered."""
    coordination = ts.RedisCoordination(redis_url(), namespace=namespace(), on_unavailable="refuse")
    lock = threading.Lock()
    now, peak, outputs = [0], [0], []

    @ts.tool(name="shared", max_concurrency=2)
    async def shared(n: int) -> int:
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        await anyio.sleep(0.02)
        with lock:
            now[0] -= 1
        return n

    executor = ts.Executor([shared], strategy=ts.Parallel(), coordination=coordination)
    start = threading.Barrier(2)

    def agent(base: int, backend: str) -> None:
        async def calls() -> None:
            calls = [ts.ToolCall(id=f"s{base + i}", name="shared", args={"n": base + i}) for i in range(6)]
            outcome = await executor.run(calls)
            with lock:
                outputs.extend(result.output for result in outcome.results)

        start.wait(30)
        anyio.run(calls, backend=backend)

    # One thread on this backend, the other on the other one: asyncio and trio loops side by side.
    other = "trio" if anyio_backend == "asyncio" else "asyncio"
    threads = [threading.Thread(target=agent, args=args) for args in ((0, anyio_backend), (100, other))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(outputs) == [*range(6), *range(100, 106)]
    assert peak[0] == 2


def _forked_child(url: str, space: str, backend: str, report: Any) -> None:
    """In a child forked while its parent renews a lease: holds a slot past its 0.3 s lease, then reports
    whether the server still counts that slot."""

    async def main() -> None:
        coordination = _inherited[0]

        @ts.tool(name="forked", max_concurrency=2)
        async def forked() -> str:
            await anyio.sleep(1.2)
            seconds, micros = await coordination._call("TIME")
            now_ms = int(seconds) * 1000 + int(micros) // 1000
            live = await coordination._call("ZCOUNT", f"{space}:{{forked}}:slots", now_ms, "+inf")
            return f"live {live}"

        executor = ts.Executor([forked], coordination=coordination)
        result = (await executor.run([ts.ToolCall(id="f", name="forked", args={})])).results[0]
        report.send(result.output or result.error)

    anyio.run(main, backend=backend)


_inherited: list[ts.RedisCoordination] = []


async def test_a_child_forked_while_its_parent_renews_leases_renews_its_own(anyio_backend: str) -> None:
    """Promise: "each process renews all the slots it holds". A worker forked (gunicorn's preload, a
    multiprocessing pool) while its parent held a slot inherited the parent's renewal thread as started, but
    not the thread: the child's leases were never renewed and expired under its running calls."""
    url, space = redis_url(), namespace()
    coordination = ts.RedisCoordination(url, namespace=space, lease=0.3, on_unavailable="refuse")
    _inherited[:] = [coordination]
    answers: list[str] = []

    @ts.tool(name="forked", max_concurrency=2)
    async def parent_call() -> str:
        context = multiprocessing.get_context("fork")
        receive, send = context.Pipe(duplex=False)
        process = context.Process(target=_forked_child, args=(url, space, anyio_backend, send))
        # Forked from a thread of no event loop's (the child's only thread), while this call holds its slot.
        await anyio.to_thread.run_sync(process.start)
        send.close()
        answers.append(await anyio.to_thread.run_sync(lambda: receive.recv() if receive.poll(30) else "no answer"))
        await anyio.to_thread.run_sync(process.join, 30)
        return "parent"

    executor = ts.Executor([parent_call], coordination=coordination)
    result = (await executor.run([ts.ToolCall(id="p", name="forked", args={})])).results[0]
    assert result.output == "parent"
    # The child's slot and the parent's, both renewed.
    assert answers == ["live 2"]


def _child_of_a_running_loop(url: str, space: str, backend: str, inherited: list[int], report: Any) -> None:
    """In a child forked from its parent's event loop: reports which of the parent's connections it still holds,
    the warnings its collector raised, and a round trip of its own."""
    coordination = _inherited[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
        held = [descriptor for descriptor in inherited if _is_socket(descriptor)]
        answers: list[Any] = []

        async def main() -> None:
            answers.append(await coordination._call("PING"))

        # A thread of its own: the one forked is inside its parent's event loop, as far as the loop knows.
        thread = threading.Thread(target=lambda: anyio.run(main, backend=backend))
        thread.start()
        thread.join(30)
        gc.collect()
    report.send((held, [f"{warning.category.__name__}: {warning.message}" for warning in caught], answers))


def _is_socket(descriptor: int) -> bool:
    try:
        return stat.S_ISSOCK(os.fstat(descriptor).st_mode)
    except OSError:
        return False


async def test_a_child_forked_while_an_event_loop_runs_lets_go_of_the_parents_connections(
    anyio_backend: str,
) -> None:
    """Promise: "a child process forked from a worker opens its own" connections. A child forked while its parent's
    event loop ran (``os.fork``, a ``fork`` multiprocessing start from the loop) dropped the parent's connections
    (its loop's, and the lease renewal thread's) without closing them: it held the parent's sockets open for its
    whole life (Redis never saw them closed when the parent closed them). The child now lets go of them, sends
    nothing on them, warns of nothing, and the parent's connections go on working."""
    url, space = redis_url(), namespace()
    coordination = ts.RedisCoordination(url, namespace=space, lease=0.3)
    _inherited[:] = [coordination]
    await coordination._call("PING")  # an idle connection of this loop
    coordination._renewer.hold(f"{space}:{{held}}:slots", "lease")  # and the renewal thread's
    with anyio.fail_after(10):
        while coordination._renewer.connection is None:  # noqa: ASYNC110 (a thread's state)
            await anyio.sleep(0.01)
    (link,) = coordination._links.values()
    (kept,) = link.idle
    renewal = coordination._renewer.connection
    descriptors = [kept.stream.extra(anyio.abc.SocketAttribute.raw_socket).fileno(), renewal.fileno()]
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_child_of_a_running_loop, args=(url, space, anyio_backend, descriptors, send))
    try:
        process.start()  # from the event loop's own thread, while it runs
        send.close()
        answer = await anyio.to_thread.run_sync(lambda: receive.recv() if receive.poll(30) else "no answer")
        await anyio.to_thread.run_sync(process.join, 30)
    finally:
        coordination._renewer.release(f"{space}:{{held}}:slots", "lease")
    assert answer == ([], [], ["PONG"])
    # The parent's connection works on, the same one (not replaced).
    assert await coordination._call("PING") == "PONG"
    assert link.idle == [kept]


# -- a worker killed while it probes -------------------------------------------------------------------


async def test_a_worker_killed_while_probing_does_not_hold_the_circuit_shut(anyio_backend: str) -> None:
    """Promise: "a probe it held is released after the circuit's cooldown (or the lease)". A worker opens the
    circuit, probes after the cooldown, and is killed (SIGKILL) mid-probe: another worker's calls are refused
    while the probe's lease runs, then one probes and its success closes the circuit for the fleet."""
    url, space = redis_url(), namespace()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = await anyio.open_process(
        [sys.executable, str(CHILD), anyio_backend, url, space, "probe", "1"], env=env, stderr=None
    )
    try:
        assert process.stdout is not None
        seen = b""
        with anyio.fail_after(30):
            while b"ready\n" not in seen:
                chunk = await process.stdout.receive()
                seen += chunk
        process.send_signal(signal.SIGKILL)
        await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()
        await process.aclose()

    @ts.tool(name="fleet_tool", circuit=ts.CircuitBreaker(failures=1, cooldown=0.5))
    async def fleet_tool() -> str:
        return "ok"

    executor = ts.Executor([fleet_tool], coordination=ts.RedisCoordination(url, namespace=space, lease=1.0))
    refused = (await executor.run([ts.ToolCall(id="r", name="fleet_tool", args={})])).results[0]
    assert refused.error_kind == "unavailable"
    with anyio.fail_after(10):
        while True:
            result = (await executor.run([ts.ToolCall(id="p", name="fleet_tool", args={})])).results[0]
            if result.error_kind != "unavailable":
                break
            await anyio.sleep(0.1)
    assert result.output == "ok"
    closed = (await executor.run([ts.ToolCall(id="c", name="fleet_tool", args={})])).results[0]
    assert closed.output == "ok"


# -- cancelled or cut off mid-step ---------------------------------------------------------------------


async def test_an_attempt_cancelled_while_redis_admits_it_gives_its_slot_back(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Promise: a fleet slot is held by a call in flight (or, for a dead worker, until its lease runs out). A
    run cancelled after the server ran the admission script and before its reply was handed out (the user's
    cancel, a sibling's failure) held a slot nobody used or renewed: the fleet's one slot stayed taken for the
    whole 10 s lease. The reply read, then the round trip cut off by its reply timeout: the reply is the call's
    answer (no fallback, no outage reported), and the cancelled call gives its slot back."""
    url, space = redis_url(), namespace()
    original = Connection.exchange
    stalled = anyio.Event()

    async def reply_lost(self: Connection, data: bytes, count: int, per_reply: float = math.inf) -> Any:
        replies = await original(self, data, count, per_reply)
        if (_sha1(_ADMIT).encode() in data or _ADMIT.encode() in data) and not stalled.is_set():
            stalled.set()
            await anyio.sleep_forever()  # the script ran, its reply read; the round trip never ends
        return replies

    monkeypatch.setattr(Connection, "exchange", reply_lost)
    cancelled = ts.Executor([capped_tool(cap=1)], coordination=ts.RedisCoordination(url, namespace=space))
    # The batch writer is shielded (the others of its batch get their replies); its reply timeout ends it.
    with warnings.catch_warnings(record=True) as caught, anyio.move_on_after(0.3):
        warnings.simplefilter("always")
        await one(cancelled)
    assert stalled.is_set()
    assert [str(warning.message) for warning in caught] == []
    other = ts.Executor([capped_tool(cap=1)], coordination=ts.RedisCoordination(url, namespace=space))
    with anyio.fail_after(5):
        assert (await one(other, 2)).output == 2


async def test_a_release_cut_off_by_its_bound_closes_its_connection(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Promise: a connection the coordination opened is closed by it, on every path. An admission whose reply
    never came gives its slot back on a new connection, within ``connect_timeout``: that release cut off by its
    bound mid-round-trip left its connection open (neither kept nor closed), for the collector to find."""
    url, space = redis_url(), namespace()
    original = Connection.exchange
    opened: list[Connection] = []

    async def admission_lost(self: Connection, data: bytes, count: int, per_reply: float = math.inf) -> Any:
        opened.append(self)
        if _sha1(_ADMIT).encode() in data or _ADMIT.encode() in data:
            raise TimeoutError  # the admission's reply never came
        if _sha1(_SETTLE).encode() in data or _SETTLE.encode() in data:
            await anyio.sleep_forever()  # the release's reply never comes: its bound ends it
        return await original(self, data, count, per_reply)

    monkeypatch.setattr(Connection, "exchange", admission_lost)
    coordination = ts.RedisCoordination(url, namespace=space, connect_timeout=0.3)
    executor = ts.Executor([capped_tool(cap=1)], coordination=coordination)
    with warnings.catch_warnings(), anyio.fail_after(20):
        warnings.simplefilter("ignore", RuntimeWarning)  # the outage's own warning
        assert (await one(executor)).output == 1  # per-process limits meanwhile (on_unavailable="local")
        await anyio.sleep(0.01)  # asyncio closes an aborted transport's socket on the loop's next turn
    # The admission's connection and the release's, both closed (neither kept for the next round trip).
    assert len(opened) == 2
    assert [connection.stream.extra(anyio.abc.SocketAttribute.raw_socket).fileno() for connection in opened] == [-1, -1]


@pytest.mark.parametrize("on_unavailable", ["local", "refuse"])
async def test_redis_stopped_while_a_call_holds_its_slot_loses_no_result(
    anyio_backend: str, on_unavailable: str, tmp_path: Path
) -> None:
    """Promise: a call is never lost. Redis stopped while a call runs under its fleet slot: the call's result is
    its own (the slot's release cannot reach Redis and is given up), whichever on_unavailable."""
    port = free_port()
    server = start_server(port, tmp_path)
    inside, release = anyio.Event(), anyio.Event()

    @ts.tool(name="held", max_concurrency=1, circuit=ts.CircuitBreaker(failures=3, cooldown=1))
    async def held(n: int) -> int:
        inside.set()
        await release.wait()
        return n

    coordination = ts.RedisCoordination(
        f"redis://127.0.0.1:{port}",
        namespace=namespace(),
        on_unavailable=on_unavailable,  # type: ignore[arg-type]
        connect_timeout=0.3,
        lease=0.6,
    )
    executor = ts.Executor([held], coordination=coordination)
    results: list[ts.ToolResult] = []

    async def call() -> None:
        results.extend((await executor.run([ts.ToolCall("h", "held", {"n": 5})])).results)

    try:
        with warnings.catch_warnings(), anyio.fail_after(20):
            warnings.simplefilter("ignore")
            async with anyio.create_task_group() as group:
                group.start_soon(call)
                await inside.wait()
                stop_server(server)
                await anyio.sleep(0.5)  # the renewal thread meets the stopped server meanwhile
                release.set()
    finally:
        if server.poll() is None:
            stop_server(server)
    assert [(result.output, result.error_kind) for result in results] == [(5, None)]
