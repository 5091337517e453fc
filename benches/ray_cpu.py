"""Where the submitting process spends its CPU per call: raw Ray against ``RayBackend``, thread by thread.

Run with ``.venv/bin/python benches/ray_cpu.py`` (``--help`` for the options).
It starts a local Ray cluster, then runs ``--repeat`` pairs of turns of
``--calls`` calls of a no-op tool: raw Ray as its users use it (submit
``--concurrency`` tasks, ``ray.get`` them all, until ``--calls`` ran), then the
same tool through ``Executor.run`` with ``Parallel(max_concurrency=...)`` on
``RayBackend``. For each turn it prints calls per second and this process's
CPU time per call (Linux: read from ``/proc/self/task``), split by thread:
``main`` (the event loop, and the raw loop), ``python`` (threads Python
started: the backend's waiting thread), and Ray's own threads
(``worker.io`` submits tasks and takes their replies). With ``--profile`` it
also prints a ``cProfile`` of the event loop's thread and of the waiting
thread for the last ``RayBackend`` turn (profiling slows both and attributes
time spent waiting for the GIL to whatever held it: read it for what is
called how often, not for exact times). CPU time per call moves less with
the machine's other work than calls per second do.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import resource
import sys
import time
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import toolsched as ts
from toolsched._backends import ray_waiting

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ray_throughput  # the local cluster both benches start


def thread_cpu() -> dict[tuple[str, str], float]:
    """CPU seconds of each thread of this process so far, keyed by (thread id, name)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[tuple[str, str], float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat", encoding="ascii") as stat:
                text = stat.read()
        except OSError:
            continue
        name = "main" if int(tid) == os.getpid() else text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        out[(tid, name)] = (int(fields[11]) + int(fields[12])) / ticks
    return out


def per_call(before: dict[tuple[str, str], float], after: dict[tuple[str, str], float], calls: int) -> str:
    by_name: dict[str, float] = {}
    for key, seconds in after.items():
        by_name[key[1]] = by_name.get(key[1], 0.0) + seconds - before.get(key, 0.0)
    shown = sorted(((name, seconds) for name, seconds in by_name.items() if seconds > 0), key=lambda x: -x[1])
    return " ".join(f"{name} {seconds / calls * 1e6:.0f}" for name, seconds in shown)


def process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measure(args: argparse.Namespace) -> None:
    import ray

    @ts.tool(concurrency_safe=True, num_cpus=1)
    def noop() -> None:
        return None

    backend = ray_throughput.local_cluster(args.cpus)
    executor = ts.Executor(
        [noop],
        strategy=ts.Parallel(max_concurrency=args.concurrency),
        backends={"ray": backend},
        default_backend="ray",
    )
    batch = [ts.ToolCall(f"c{i}", "noop", {}) for i in range(args.calls)]
    remote = ray.remote(num_cpus=1)(noop.fn)
    # The waiting thread starts with the first call: patched before it, to be profiled.
    waiter_profile = cProfile.Profile()
    profiled = args.profile
    run = ray_waiting.RayWaiter._run

    def profiled_run(self: Any) -> None:
        if profiled:
            waiter_profile.enable()
        try:
            run(self)
        finally:
            waiter_profile.disable()

    ray_waiting.RayWaiter._run = profiled_run  # type: ignore[method-assign]
    try:
        await executor.run(batch[:200])
        ray.get([remote.remote() for _ in range(200)])
        await turns(args, executor, batch, remote)
    finally:
        ray_waiting.RayWaiter._run = run  # type: ignore[method-assign]
        backend.close()
    if profiled:
        print("the waiting thread, every RayBackend turn (and the warm-up):")
        pstats.Stats(waiter_profile, stream=sys.stdout).sort_stats("tottime").print_stats(15)


async def turns(args: argparse.Namespace, executor: ts.Executor, batch: list[ts.ToolCall], remote: Any) -> None:
    import ray

    print(f"{args.calls} calls per turn, {args.concurrency} in flight; CPU of this process in us per call, by thread")
    main_profile = cProfile.Profile()
    for turn in range(args.repeat):
        threads, cpu, started = thread_cpu(), process_cpu(), time.perf_counter()
        left = args.calls
        while left:
            wave = min(left, args.concurrency)
            ray.get([remote.remote() for _ in range(wave)])
            left -= wave
        elapsed = time.perf_counter() - started
        print(
            f"raw get  {args.calls / elapsed:7,.0f} calls/s  cpu {(process_cpu() - cpu) / args.calls * 1e6:4.0f}: "
            + per_call(threads, thread_cpu(), args.calls)
        )
        last = turn == args.repeat - 1
        if args.profile and last:
            main_profile.enable()
        threads, cpu, started = thread_cpu(), process_cpu(), time.perf_counter()
        outcome = await executor.run(batch)
        elapsed = time.perf_counter() - started
        main_profile.disable()
        if any(result.is_error for result in outcome.results):
            raise SystemExit("a call failed")
        print(
            f"backend  {args.calls / elapsed:7,.0f} calls/s  cpu {(process_cpu() - cpu) / args.calls * 1e6:4.0f}: "
            + per_call(threads, thread_cpu(), args.calls)
        )
    if args.profile:
        print("\nthe event loop's thread, last RayBackend turn:")
        pstats.Stats(main_profile, stream=sys.stdout).sort_stats("tottime").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000, help="calls in one turn (default 3000)")
    parser.add_argument("--concurrency", type=int, default=1000, help="calls in flight (default 1000)")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray cluster (default 2)")
    parser.add_argument("--repeat", type=int, default=3, help="pairs of turns (default 3)")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of the last turn")
    args = parser.parse_args()
    asyncio.run(measure(args))


if __name__ == "__main__":
    main()
