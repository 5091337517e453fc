"""Fleet-wide limits against per-process limits, one downstream, several worker processes.

    python benches/fleet.py --redis redis://127.0.0.1:6379/0 [--workers 4] [--runs 250]

A fake downstream on 127.0.0.1 takes ``--capacity`` requests a second (a token bucket holding a
tenth of a second's worth) and answers ``429`` with a Retry-After beyond it. Each worker process
runs ``--runs`` concurrent runs of 1-5 calls of one tool declaring ``RateLimit(capacity, per=1)``
with a burst of a hundredth of a second's worth (what a worker would declare for the downstream),
retries on 429 and ``max_concurrency=64``:
first with ``RedisCoordination`` (fleet-wide limits), then without (per-process limits), in the
same run. Reported: share of calls succeeding, downstream requests per success, the peak of
requests in any 100 ms against the capacity; then the cost of coordination per call at 1,000
calls a second (Redis round trips and CPU µs per call, against the same tool without it); then
how long a SIGKILLed worker's slots take to come back (lease 2 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import time
import uuid
from typing import Any

import anyio

import toolsched as ts

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "support", "fleet_child.py")


def tool_for(port: int, capacity: int) -> Any:
    @ts.tool(
        name="downstream",
        idempotent=True,
        rate_limit=ts.RateLimit(capacity, per=1, burst=max(1, capacity // 100)),
        retry=ts.Retry(attempts=5, backoff=0.05, max_backoff=1.0),
        max_concurrency=64,
        timeout=60,
    )
    async def downstream() -> str:
        stream = await anyio.connect_tcp("127.0.0.1", port)
        try:
            await stream.send(b"call\n")
            reply = await stream.receive()
        finally:
            await stream.aclose()
        if reply.startswith(b"429"):
            raise ts.Transient("429 Too Many Requests", retry_after=float(reply.split()[1]))
        return "ok"

    return downstream


async def worker(args: argparse.Namespace) -> None:
    coordination = None
    if args.mode == "fleet":
        coordination = ts.RedisCoordination(args.redis, namespace=args.namespace)
    executor = ts.Executor([tool_for(args.port, args.capacity)], strategy=ts.Parallel(), coordination=coordination)
    rng = random.Random(os.getpid())
    cpu = time.process_time()
    results: list[ts.ToolResult] = []

    async def one_run(index: int) -> None:
        calls = [ts.ToolCall(id=f"r{index}c{i}", name="downstream", args={}) for i in range(rng.randint(1, 5))]
        results.extend((await executor.run(calls)).results)

    async with anyio.create_task_group() as group:
        for index in range(args.runs):
            group.start_soon(one_run, index)
    ok = sum(1 for result in results if not result.is_error)
    trips = 0 if coordination is None else coordination.round_trips
    print(json.dumps({"calls": len(results), "ok": ok, "trips": trips, "cpu": time.process_time() - cpu}), flush=True)


async def cost(args: argparse.Namespace) -> None:
    """CPU µs and Redis round trips per call at 1,000 calls/s, with and without coordination."""

    @ts.tool(name="paced", rate_limit=ts.RateLimit(1000, per=1, burst=10), max_concurrency=100)
    async def paced() -> None:
        return None

    figures = {}
    for label in ("per-process", "fleet"):
        coordination = ts.RedisCoordination(args.redis, namespace=args.namespace) if label == "fleet" else None
        executor = ts.Executor([paced], strategy=ts.Parallel(), coordination=coordination)
        calls = 2000
        cpu, wall = time.process_time(), time.perf_counter()
        async with anyio.create_task_group() as group:
            for index in range(calls // 10):
                batch = [ts.ToolCall(id=f"{index}-{i}", name="paced", args={}) for i in range(10)]
                group.start_soon(executor.run, batch)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        trips = coordination.round_trips / calls if coordination is not None else 0.0
        figures[label] = (cpu / calls * 1e6, trips, calls / wall)
    for label, (micros, trips, rate) in figures.items():
        print(f"  {label:12} {micros:7.1f} µs CPU/call  {trips:4.2f} Redis round trips/call  {rate:6.0f} calls/s")
    print(f"  coordination cost: {figures['fleet'][0] - figures['per-process'][0]:.1f} µs CPU per call")


class Downstream:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.size = max(1.0, capacity / 10)
        self.tokens = self.size
        self.updated = time.monotonic()
        self.accepted: list[float] = []
        self.offered: list[float] = []
        self.refused = 0

    def reset(self) -> None:
        self.tokens, self.updated, self.accepted, self.offered, self.refused = self.size, time.monotonic(), [], [], 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        now = time.monotonic()
        self.offered.append(now)
        self.tokens = min(self.size, self.tokens + (now - self.updated) * self.capacity)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            self.accepted.append(now)
            writer.write(b"200\n")
        else:
            self.refused += 1
            writer.write(b"429 %.3f\n" % ((1 - self.tokens) / self.capacity))
        await writer.drain()
        writer.close()

    def peak_100ms(self) -> int:
        """The most requests that reached the downstream (answered or refused) in any 100 ms."""
        times, peak, start = self.offered, 0, 0
        for end in range(len(times)):
            while times[end] - times[start] > 0.1:
                start += 1
            peak = max(peak, end - start + 1)
        return peak


async def phase(args: argparse.Namespace, downstream: Downstream, port: int, mode: str) -> None:
    downstream.reset()
    space = f"bench-{uuid.uuid4().hex}"
    started = time.perf_counter()
    workers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--worker",
            mode,
            "--port",
            str(port),
            "--redis",
            args.redis,
            "--namespace",
            space,
            "--runs",
            str(args.runs),
            "--capacity",
            str(args.capacity),
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(args.workers)
    ]
    outputs = [json.loads((await process.communicate())[0]) for process in workers]
    elapsed = time.perf_counter() - started
    calls, ok = sum(o["calls"] for o in outputs), sum(o["ok"] for o in outputs)
    trips, cpu = sum(o["trips"] for o in outputs), sum(o["cpu"] for o in outputs)
    requests = len(downstream.accepted) + downstream.refused
    peak = downstream.peak_100ms()
    print(
        f"  {mode:12} {ok / calls:7.1%} of {calls} calls succeed  {requests / max(ok, 1):5.2f} requests/success  "
        f"{downstream.refused} answered 429  peak {peak} in 100 ms = {peak / (args.capacity / 10):.2f}x capacity  "
        f"{elapsed:5.1f} s  {trips / calls:4.2f} Redis round trips/call  {cpu / calls * 1e6:5.0f} µs CPU/call (workers)"
    )


async def killed_slots(args: argparse.Namespace) -> None:
    space = f"bench-{uuid.uuid4().hex}"
    child = CHILD
    holder = await asyncio.create_subprocess_exec(
        sys.executable, child, "asyncio", args.redis, space, "hold", "1", stdout=asyncio.subprocess.PIPE
    )
    assert holder.stdout is not None
    while (await holder.stdout.readline()).strip() != b"ready":
        pass

    @ts.tool(name="fleet_tool", max_concurrency=1)
    async def fleet_tool() -> str:
        return "ok"

    executor = ts.Executor([fleet_tool], coordination=ts.RedisCoordination(args.redis, namespace=space, lease=1.0))
    holder.send_signal(signal.SIGKILL)
    killed = time.perf_counter()
    await holder.wait()
    outcome = await executor.run([ts.ToolCall(id="after", name="fleet_tool", args={})])
    assert outcome.results[0].output == "ok"
    print(f"  a SIGKILLed worker's slot (lease 1.0 s) came back after {time.perf_counter() - killed:.2f} s")


async def main(args: argparse.Namespace) -> None:
    downstream = Downstream(args.capacity)
    server = await asyncio.start_server(downstream.serve, "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    print(f"{args.workers} workers x {args.runs} concurrent runs of 1-5 calls; downstream {args.capacity} requests/s")
    for mode in ("fleet", "per-process"):
        await phase(args, downstream, port, mode)
    server.close()
    print("coordination cost at 1,000 calls/s (one process, 10 calls a run):")
    args.namespace = f"bench-{uuid.uuid4().hex}"
    await cost(args)
    await killed_slots(args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default=os.environ.get("TOOLSCHED_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--runs", type=int, default=250)
    parser.add_argument("--capacity", type=int, default=300)
    parser.add_argument("--worker", choices=["fleet", "per-process"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--namespace", default="bench")
    arguments = parser.parse_args()
    if arguments.worker:
        arguments.mode = arguments.worker
        anyio.run(worker, arguments)
    else:
        asyncio.run(main(arguments))
