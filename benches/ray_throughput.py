"""Calls per second through the Ray backend, next to the local backend, on this machine.

Run with ``.venv/bin/python benches/ray_throughput.py`` (``--help`` for the
options). It starts a local Ray cluster with ``--cpus`` CPUs (loopback only,
no usage reporting), then runs turns of ``--calls`` calls of a no-op tool and
of a 10 ms tool through ``Executor.run`` with ``Parallel(max_concurrency=...)``,
once with the bodies in this process and once on Ray, and beside them the same
bodies as raw Ray tasks (``ray.remote`` with the same ``num_cpus``, at most
``--concurrency`` in flight, each awaited on the event loop), and raw Ray as
its users use it: submit ``--concurrency`` tasks, then ``ray.get`` them all,
until ``--calls`` have run (``raw get``): the baseline the Ray backend is
measured against. It prints one row per combination: the best of
``--repeat`` turns, as calls per second and as microseconds per call, and for
the Ray backend its ratio to raw Ray. The first Ray turn of each tool is a
warm-up (worker start, function export) and is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

# Read by Ray when it is imported: a cluster on the loopback interface only, no usage reporting.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import anyio

import toolsched as ts


def make_tools(num_cpus: float) -> dict[str, ts.Tool]:
    @ts.tool(concurrency_safe=True, num_cpus=num_cpus)
    def noop() -> None:
        return None

    @ts.tool(concurrency_safe=True, num_cpus=num_cpus)
    async def noop_async() -> None:
        return None

    @ts.tool(concurrency_safe=True, num_cpus=num_cpus)
    def echo(path: str, limit: int = 10) -> str:
        return path

    @ts.tool(concurrency_safe=True, num_cpus=num_cpus)
    def wait_10ms() -> None:
        time.sleep(0.01)

    @ts.tool(concurrency_safe=True, num_cpus=num_cpus)
    async def wait_10ms_async() -> None:
        await anyio.sleep(0.01)

    return {member.name: member for member in (noop, noop_async, echo, wait_10ms, wait_10ms_async)}


# The arguments of each call of a tool that takes some (the same for raw Ray tasks).
ARGUMENTS = {"echo": {"path": "src/tools/read_file.py", "limit": 20}}


async def best_turn(executor: ts.Executor, name: str, calls: int, repeat: int, warm_up: bool) -> float:
    batch = [ts.ToolCall(f"c{i}", name, ARGUMENTS.get(name, {})) for i in range(calls)]
    if warm_up:
        await executor.run(batch[: min(calls, 50)])
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        outcome = await executor.run(batch)
        elapsed = time.perf_counter() - started
        failed = [r for r in outcome.results if r.is_error]
        if failed:
            raise SystemExit(f"{name}: {len(failed)} calls failed, first: {failed[0].error}")
        best = min(best, elapsed)
    return best


async def best_raw_turn(
    name: str, body: Callable[..., Any], calls: int, concurrency: int, cpus: float, repeat: int
) -> float:
    """Raw Ray: the tool's body as a remote function, ``concurrency`` tasks in flight, each awaited."""
    import ray

    if inspect.iscoroutinefunction(body):
        coroutine_function = body

        def body() -> Any:  # Ray tasks cannot be async: each runs on an event loop of its own, as Ray advises
            return asyncio.run(coroutine_function())

    remote = ray.remote(num_cpus=cpus)(body)
    arguments = ARGUMENTS.get(name, {})
    await asyncio.gather(*(remote.remote(**arguments) for _ in range(min(calls, 50))))
    best = float("inf")
    for _ in range(repeat):
        slots = asyncio.Semaphore(concurrency)

        async def one(slots: asyncio.Semaphore = slots) -> None:
            async with slots:
                await remote.remote(**arguments)

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(calls)))
        best = min(best, time.perf_counter() - started)
    return best


def best_raw_get_turn(
    name: str, body: Callable[..., Any], calls: int, concurrency: int, cpus: float, repeat: int
) -> float:
    """Raw Ray as its users use it: submit ``concurrency`` tasks, ``ray.get`` them all, until ``calls`` ran."""
    import ray

    if inspect.iscoroutinefunction(body):
        coroutine_function = body

        def body() -> Any:
            return asyncio.run(coroutine_function())

    remote = ray.remote(num_cpus=cpus)(body)
    arguments = ARGUMENTS.get(name, {})
    ray.get([remote.remote(**arguments) for _ in range(min(calls, 50))])
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        left = calls
        while left:
            wave = min(left, concurrency)
            ray.get([remote.remote(**arguments) for _ in range(wave)])
            left -= wave
        best = min(best, time.perf_counter() - started)
    return best


def local_cluster(cpus: int) -> ts.RayBackend:
    """A ``RayBackend`` connected to a local cluster of ``cpus`` CPUs started for the bench, quiet."""
    backend = ts.RayBackend(
        init_options={
            "num_cpus": cpus,
            "include_dashboard": False,
            "log_to_driver": False,
            "logging_level": logging.WARNING,
        }
    )
    backend.connect()
    return backend


async def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    tools = make_tools(args.task_cpus)
    ray_backend = local_cluster(args.cpus)
    strategy = ts.Parallel(max_concurrency=args.concurrency)
    executors: dict[str, Callable[[], ts.Executor]] = {
        "local": lambda: ts.Executor(list(tools.values()), strategy=strategy),
        "ray": lambda: ts.Executor(
            list(tools.values()), strategy=strategy, backends={"ray": ray_backend}, default_backend="ray"
        ),
    }
    rows = []
    for name, member in tools.items():
        if args.tools and name not in args.tools:
            continue
        floor = await best_raw_turn(name, member.fn, args.calls, args.concurrency, args.task_cpus, args.repeat)
        get_floor = best_raw_get_turn(name, member.fn, args.calls, args.concurrency, args.task_cpus, args.repeat)
        rows.append(
            {
                "tool": name,
                "backend": "raw get",
                "calls": args.calls,
                "concurrency": args.concurrency,
                "calls_per_second": args.calls / get_floor,
                "us_per_call": get_floor / args.calls * 1e6,
            }
        )
        rows.append(
            {
                "tool": name,
                "backend": "raw ray",
                "calls": args.calls,
                "concurrency": args.concurrency,
                "calls_per_second": args.calls / floor,
                "us_per_call": floor / args.calls * 1e6,
            }
        )
        for backend, build in executors.items():
            seconds = await best_turn(build(), name, args.calls, args.repeat, warm_up=backend == "ray")
            rows.append(
                {
                    "tool": name,
                    "backend": backend,
                    "calls": args.calls,
                    "concurrency": args.concurrency,
                    "calls_per_second": args.calls / seconds,
                    "us_per_call": seconds / args.calls * 1e6,
                    "to_raw_ray": seconds / floor if backend == "ray" else None,
                    "to_raw_get": seconds / get_floor if backend == "ray" else None,
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="calls in one turn (default 1000)")
    parser.add_argument("--concurrency", type=int, default=10, help="Parallel(max_concurrency=...) (default 10)")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray cluster (default 2)")
    parser.add_argument("--task-cpus", type=float, default=1.0, help="num_cpus of each tool's Ray task (default 1)")
    parser.add_argument("--repeat", type=int, default=3, help="turns per row; the best counts (default 3)")
    parser.add_argument("--tools", nargs="+", help="only these tools (default: every one)")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    rows = asyncio.run(measure(args))
    print(
        f"{args.calls} calls per turn, Parallel(max_concurrency={args.concurrency}), "
        f"Ray cluster of {args.cpus} CPUs, num_cpus={args.task_cpus:g} per task"
    )
    print(f"{'tool':<18}{'backend':<9}{'calls/s':>10}{'us/call':>10}{'to raw ray':>12}{'to raw get':>12}")
    for row in rows:
        ratio = "" if row.get("to_raw_ray") is None else f"{row['to_raw_ray']:.2f}x"
        get_ratio = "" if row.get("to_raw_get") is None else f"{row['to_raw_get']:.2f}x"
        print(
            f"{row['tool']:<18}{row['backend']:<9}{row['calls_per_second']:>10,.0f}{row['us_per_call']:>10,.0f}"
            f"{ratio:>12}{get_ratio:>12}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(rows, out, indent=2)


if __name__ == "__main__":
    main()
