"""A worker process of the fleet tests: runs calls of one tool under fleet-wide limits.

    python fleet_child.py BACKEND URL NAMESPACE MODE CALLS

MODE ``rate``: RateLimit(20, per=1, burst=1); ``slots``: max_concurrency=2, each call 0.2 s;
``hold``: max_concurrency=1 with a 1 s lease, one call that never ends; ``stall``: RateLimit(10, per=1,
burst=1), the first call blocking the process's event loop for 1 s (a stalled worker:
the other calls' reservations fall due meanwhile). Prints ``start T`` and ``end T`` (wall-clock seconds) for
each call, ``redis T`` (the Redis server's clock, µs, as a call starts: ``stall`` only), then ``done``;
``ready`` once a ``hold`` call runs. ``probe``: CircuitBreaker(failures=1, cooldown=0.5) with a 1 s lease: one call
fails (opening the circuit), then after the cooldown one call probes, prints ``ready`` and never ends.
``burst``: RateLimit(20, per=1, burst=4), all calls at once; prints ``admitted T`` (the Redis server's clock, µs, when
the admission script admitted the call) for each call.
"""

from __future__ import annotations

import sys
import time

import anyio

import toolsched as ts


def main() -> None:
    backend, url, namespace, mode, count = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])

    def say(line: str) -> None:
        print(line, flush=True)

    stalled: list[bool] = []

    async def redis_time() -> int:
        host, port = url.split("//")[1].split("/")[0].split(":")
        async with await anyio.connect_tcp(host, int(port)) as stream:
            await stream.send(b"*1\r\n$4\r\nTIME\r\n")
            reply = b""
            while reply.count(b"\r\n") < 5:
                reply += await stream.receive()
        lines = reply.split(b"\r\n")
        return int(lines[2]) * 1_000_000 + int(lines[4])

    async def body() -> str:
        say(f"start {time.time()}")
        if mode == "stall":
            say(f"redis {await redis_time()}")
            if not stalled:
                stalled.append(True)
                await anyio.sleep(0.05)  # the other calls have their reservations by now, none falls due yet
                time.sleep(1.0)  # noqa: ASYNC251 (the stall is the point)
        if mode == "hold":
            say("ready")
            await anyio.sleep_forever()
        if mode == "slots":
            await anyio.sleep(0.2)
        say(f"end {time.time()}")
        return "ok"

    if mode == "probe":
        failed: list[bool] = []

        async def probing() -> str:
            if not failed:
                failed.append(True)
                raise ts.Transient("downstream busy")
            say("ready")
            await anyio.sleep_forever()
            return "never"

        probe_tool = ts.tool(name="fleet_tool", circuit=ts.CircuitBreaker(failures=1, cooldown=0.5))(probing)
        prober = ts.Executor([probe_tool], coordination=ts.RedisCoordination(url, namespace=namespace, lease=1.0))

        async def probe() -> None:
            first = await prober.run([ts.ToolCall(id="fail", name="fleet_tool", args={})])
            assert first.results[0].error_kind == "execution_error", first.results
            await anyio.sleep(0.6)
            await prober.run([ts.ToolCall(id="probe", name="fleet_tool", args={})])

        anyio.run(probe, backend=backend)
        return
    if mode == "rate":
        tool = ts.tool(name="fleet_tool", rate_limit=ts.RateLimit(20, per=1, burst=1))(body)
    elif mode == "stall":
        tool = ts.tool(name="fleet_tool", rate_limit=ts.RateLimit(10, per=1, burst=1))(body)
    elif mode == "burst":
        tool = ts.tool(name="fleet_tool", rate_limit=ts.RateLimit(20, per=1, burst=4))(body)
        admit = ts.RedisCoordination._admit

        async def stamped(self: ts.RedisCoordination, *args: object) -> tuple[int, int, int, int]:
            reply = await admit(self, *args)  # type: ignore[arg-type]
            if reply[0] in (0, 1):
                say(f"admitted {reply[3]}")
            return reply

        ts.RedisCoordination._admit = stamped  # type: ignore[method-assign,assignment]
    else:
        tool = ts.tool(name="fleet_tool", max_concurrency=2 if mode == "slots" else 1)(body)
    lease = 1.0 if mode == "hold" else 10.0
    coordination = ts.RedisCoordination(url, namespace=namespace, lease=lease, on_unavailable="refuse")
    executor = ts.Executor([tool], strategy=ts.Parallel(), coordination=coordination)

    async def run() -> None:
        outcome = await executor.run([ts.ToolCall(id=f"c{i}", name="fleet_tool", args={}) for i in range(count)])
        assert all(not result.is_error for result in outcome.results), outcome.results
        say("done")

    anyio.run(run, backend=backend)


if __name__ == "__main__":
    main()
