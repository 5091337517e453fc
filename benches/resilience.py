"""A shared downstream under load: toolsched's retries and rate limit against no retry and naive retry.

    python benches/resilience.py                      # 1,000 runs of 1-5 calls, capacity 300 requests/s
    python benches/resilience.py --runs 500 --capacity 500

A fake downstream on 127.0.0.1 (plain HTTP/1.1 on asyncio) serves at most ``--capacity``
requests a second (a token bucket with a tenth of a second of burst); a request over it is
answered 429 with a ``Retry-After`` (seconds, fractional) saying when the next one would be
served. Each lane runs ``--runs`` concurrent runs of 1-5 calls (the same mix for every lane) of
a tool that fetches from it with ``httpx``, on one shared executor:

- ``no retry``: a 429 is the call's failure;
- ``naive retry``: the tool itself tries again at once, up to ``--attempts`` times;
- ``toolsched``: the tool raises ``ts.Transient(retry_after=...)`` on a 429 and declares
  ``retry=ts.Retry(attempts=...)`` and ``rate_limit=ts.RateLimit(capacity)``.

Printed per lane: the share of calls that succeeded, downstream requests per successful call,
p50 and p99 turn time, goodput (successful calls per second over the lane), and the most the
downstream was offered in any 100 ms window, as a multiple of its capacity.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

import toolsched as ts

WINDOW = 0.1
CONNECTIONS = 100


class Client:
    """``httpx.AsyncClient.get`` behind a first-come queue for its connections."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.slots = asyncio.Semaphore(CONNECTIONS)

    async def get(self, url: str, **options: Any) -> httpx.Response:
        async with self.slots:
            return await self.client.get(url, **options)


class Downstream:
    """The fake API: a token bucket of ``capacity`` requests a second; the rest get 429 + Retry-After."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.tokens = capacity * WINDOW
        self.updated = time.monotonic()
        self.offered: Counter[int] = Counter()
        self.served = 0
        self.refused = 0

    def take(self) -> float | None:
        """None when the request is served, else seconds until it would be."""
        now = time.monotonic()
        self.offered[int(now / WINDOW)] += 1
        self.tokens = min(self.capacity * WINDOW, self.tokens + (now - self.updated) * self.capacity)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            self.served += 1
            return None
        self.refused += 1
        return (1 - self.tokens) / self.capacity

    def reset(self) -> None:
        self.tokens = self.capacity * WINDOW
        self.updated = time.monotonic()
        self.offered.clear()
        self.served = self.refused = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if not head:
                    return
                wait = self.take()
                if wait is None:
                    body = b'{"ok": true}'
                    status = b"200 OK"
                    extra = b""
                else:
                    body = b'{"error": "too many requests"}'
                    status = b"429 Too Many Requests"
                    extra = f"Retry-After: {wait:.3f}\r\n".encode()
                writer.write(
                    b"HTTP/1.1 "
                    + status
                    + b"\r\nContent-Type: application/json\r\nContent-Length: "
                    + str(len(body)).encode()
                    + b"\r\n"
                    + extra
                    + b"\r\n"
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def peak_load(self) -> float:
        """The most requests offered in one window, as a multiple of what the window serves."""
        if not self.offered:
            return 0.0
        return max(self.offered.values()) / (self.capacity * WINDOW)


@dataclass
class Lane:
    name: str
    make: Callable[[Client, str], ts.Executor]


def no_retry(client: Client, url: str) -> ts.Executor:
    @ts.tool(name="fetch", concurrency_safe=True)
    async def fetch(key: str) -> str:
        response = await client.get(url, params={"key": key})
        response.raise_for_status()
        return response.text

    return ts.Executor([fetch], strategy=ts.Parallel(max_concurrency=10))


def naive_retry(attempts: int) -> Callable[[Client, str], ts.Executor]:
    def make(client: Client, url: str) -> ts.Executor:
        @ts.tool(name="fetch", concurrency_safe=True)
        async def fetch(key: str) -> str:
            for _ in range(attempts - 1):
                response = await client.get(url, params={"key": key})
                if response.status_code != 429:
                    break
            else:
                response = await client.get(url, params={"key": key})
            response.raise_for_status()
            return response.text

        return ts.Executor([fetch], strategy=ts.Parallel(max_concurrency=10))

    return make


def with_toolsched(attempts: int, capacity: int) -> Callable[[Client, str], ts.Executor]:
    def make(client: Client, url: str) -> ts.Executor:
        @ts.tool(
            name="fetch",
            concurrency_safe=True,
            idempotent=True,
            retry=ts.Retry(attempts=attempts, backoff=0.05, max_backoff=2.0),
            rate_limit=ts.RateLimit(capacity, per=1.0, burst=max(1, capacity // 50)),
        )
        async def fetch(key: str) -> str:
            response = await client.get(url, params={"key": key})
            if response.status_code == 429:
                raise ts.Transient("429 too many requests", retry_after=float(response.headers["retry-after"]))
            response.raise_for_status()
            return response.text

        return ts.Executor([fetch], strategy=ts.Parallel(max_concurrency=10))

    return make


async def run_lane(lane: Lane, downstream: Downstream, url: str, turns: list[int]) -> dict[str, Any]:
    # A client of 100 kept-alive connections; calls wait for one in first-come order (httpx's own
    # pool grows slow with thousands of waiters, which would measure the client, not the downstream).
    limits = httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
    async with httpx.AsyncClient(limits=limits, timeout=30.0) as raw:
        client = Client(raw)
        executor = lane.make(client, url)
        await executor.run([ts.ToolCall("warm", "fetch", {"key": "warm"})])
        await asyncio.sleep(0.3)  # the bucket refills after the warm-up
        downstream.reset()
        durations: list[float] = []
        good = 0

        async def one(run: int, size: int) -> None:
            nonlocal good
            started = time.perf_counter()
            outcome = await executor.run(
                [ts.ToolCall(f"r{run}c{i}", "fetch", {"key": f"{run}-{i}"}) for i in range(size)]
            )
            durations.append(time.perf_counter() - started)
            good += sum(not result.is_error for result in outcome.results)

        started = time.perf_counter()
        async with asyncio.TaskGroup() as group:
            for run, size in enumerate(turns):
                group.create_task(one(run, size))
        elapsed = time.perf_counter() - started
    calls = sum(turns)
    requests = downstream.served + downstream.refused
    durations.sort()
    return {
        "lane": lane.name,
        "success": good / calls,
        "requests_per_success": requests / good if good else float("inf"),
        "p50": statistics.median(durations),
        "p99": durations[min(len(durations) - 1, int(len(durations) * 0.99))],
        "goodput": good / elapsed,
        "peak": downstream.peak_load(),
    }


async def main_async(arguments: argparse.Namespace) -> None:
    downstream = Downstream(arguments.capacity)
    server = await asyncio.start_server(downstream.serve, "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/search"
    chooser = random.Random(arguments.seed)
    turns = [chooser.randint(1, 5) for _ in range(arguments.runs)]
    lanes = [
        Lane("no retry", no_retry),
        Lane(f"naive retry ({arguments.attempts} attempts at once)", naive_retry(arguments.attempts)),
        Lane(
            f"toolsched (Retry({arguments.attempts}) + RateLimit)",
            with_toolsched(arguments.attempts, arguments.capacity),
        ),
    ]
    print(
        f"{arguments.runs:,} concurrent runs of 1-5 calls ({sum(turns):,} calls), downstream capacity "
        f"{arguments.capacity:,} requests/s on 127.0.0.1"
    )
    print("| lane | calls that succeeded | downstream requests per success | p50 turn | p99 turn | goodput |", end="")
    print(" peak offered load |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    async with server:
        for lane in lanes:
            row = await run_lane(lane, downstream, url, turns)
            print(
                f"| {row['lane']} | {row['success']:.1%} | {row['requests_per_success']:.2f} | {row['p50']:.2f} s "
                f"| {row['p99']:.2f} s | {row['goodput']:,.0f} calls/s | {row['peak']:.2f}x capacity |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="concurrent runs (default 1000)")
    parser.add_argument("--capacity", type=int, default=300, help="downstream requests per second (default 300)")
    parser.add_argument("--attempts", type=int, default=5, help="attempts per call for the retrying lanes (default 5)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the turn sizes (default 7)")
    arguments = parser.parse_args()
    if (
        not 1 <= arguments.runs <= 100_000
        or not 1 <= arguments.capacity <= 1_000_000
        or not 1 <= arguments.attempts <= 20
    ):
        parser.error("--runs must be 1-100,000, --capacity 1-1,000,000 and --attempts 1-20")
    asyncio.run(main_async(arguments))


if __name__ == "__main__":
    main()
