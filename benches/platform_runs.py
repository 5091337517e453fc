"""A platform's shape: R concurrent runs on one shared executor, each one turn of n calls.

(Not ``platform.py``: run as a script, that name would shadow the standard library's ``platform``.)

    python benches/platform_runs.py                         # R = 1, 100, 1,000, n = 1, 3, 10
    python benches/platform_runs.py --runs 1000 --calls 3   # one shape
    python benches/platform_runs.py --sleep 0.001           # tools await a 1 ms sleep
    python benches/platform_runs.py --no-collector          # the cyclic collector off while rounds are timed
    python benches/platform_runs.py --profile --runs 1000 --calls 3 --lane toolsched_full

Each shape is timed on four lanes in turns, in one process, on one asyncio loop:

- ``taskgroup``: the floor. Each run ``json.loads`` its calls' arguments and runs the tool
  coroutines in an ``asyncio.TaskGroup``; the R runs are tasks of one outer TaskGroup.
- ``taskgroup_hooked``: the floor with the full pipeline's extra work written by hand in each
  call's task: the two rules checked on the normalised path, the pre hook awaited, the tool, the
  post hook awaited (the least a hand-written loop does for the same pipeline).
- ``toolsched``: each run is ``executor.run(calls)`` on one executor shared by all runs
  (validation from JSON text, ``Partitioned``).
- ``toolsched_full``: the same with one async pre hook, one async post hook, an allow and a
  deny rule (the full pipeline of ``benches/compare.py``).

Every round checks that each lane did its work (every tool body entered, every hook run, every
result good). Printed per lane: CPU µs per call (best and median of the rounds), the ratios to
the floor's best and to the hooked floor's best, the median of each round's ratio to the floor's round
taken just before it (paired: drift of the machine between rounds cancels out), and calls per second of
wall time. With ``--sleep`` the tools overlap for real: wall time of a shape is about one sleep when
nothing is serialised.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import pstats
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import toolsched as ts

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # the hooked floor's call, shared with compare.py

TOOL_NAME = "read"


class Counts:
    """What the rounds really did: tool bodies entered and hooks run."""

    __slots__ = ("calls", "hooks", "sleep")

    def __init__(self) -> None:
        self.calls = 0
        self.hooks = 0
        self.sleep = 0.0


COUNTS = Counts()


async def read(path: str, limit: int = 10) -> str:
    """Read a file (the benchmark's tool: returns its path, after ``--sleep`` seconds)."""
    COUNTS.calls += 1
    if COUNTS.sleep:
        await asyncio.sleep(COUNTS.sleep)
    return path


async def pre_hook(event: Any) -> None:
    COUNTS.hooks += 1


async def post_hook(event: Any) -> None:
    COUNTS.hooks += 1


@dataclass(slots=True)
class Lane:
    name: str
    hooks_per_call: int
    # Runs R turns of the given (call ID, argument text) lists at once; returns the good results.
    runs: Callable[[list[list[tuple[str, str]]]], Awaitable[int]]
    executor: ts.Executor | None = None
    cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)


def every_run(
    one: Callable[[list[tuple[str, str]]], Awaitable[int]],
) -> Callable[[list[list[tuple[str, str]]]], Awaitable[int]]:
    """A lane's rounds: each run's turn (``one``) a task of one outer TaskGroup; the good results of all."""

    async def runs(turns: list[list[tuple[str, str]]]) -> int:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(calls)) for calls in turns]
        return sum(task.result() for task in tasks)

    return runs


def taskgroup_lane(name: str, hooks_per_call: int, call: Callable[[str], Awaitable[Any]]) -> Lane:
    """A floor lane: each run's calls as tasks of one ``asyncio.TaskGroup``, ``call(text)`` each."""

    async def one(calls: list[tuple[str, str]]) -> int:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(call(text)) for _, text in calls]
        return sum(task.result() is not None for task in tasks)

    return Lane(name, hooks_per_call, every_run(one))


def floor_lane() -> Lane:
    return taskgroup_lane("taskgroup", 0, lambda text: read(**json.loads(text)))


def hooked_floor_lane() -> Lane:
    return taskgroup_lane("taskgroup_hooked", 2, compare.hooked_call(read, pre_hook, post_hook))


def executor_lane(name: str, executor: ts.Executor, hooks_per_call: int) -> Lane:
    tool_call = ts.ToolCall

    async def one(calls: list[tuple[str, str]]) -> int:
        outcome = await executor.run([tool_call(call_id, TOOL_NAME, text) for call_id, text in calls])
        return sum(not result.is_error for result in outcome.results)

    return Lane(name, hooks_per_call, every_run(one), executor)


def lanes() -> list[Lane]:
    plain = ts.tool(concurrency_safe=True)(read)
    full = ts.tool(concurrency_safe=True, rule_subject="path")(read)
    hooks = ts.Hooks().pre_tool_use("*", pre_hook).post_tool_use("*", post_hook)
    rules = ts.Permissions(allow=[f"{TOOL_NAME}(src/**)"], deny=[f"{TOOL_NAME}(secret/**)"])
    return [
        floor_lane(),
        hooked_floor_lane(),
        executor_lane("toolsched", ts.Executor([plain], strategy=ts.Partitioned()), 0),
        executor_lane(
            "toolsched_full", ts.Executor([full], strategy=ts.Partitioned(), hooks=hooks, permissions=rules), 2
        ),
    ]


def workload(runs: int, calls: int) -> list[list[tuple[str, str]]]:
    return [
        [(f"call_{i}", json.dumps({"path": f"src/run_{r}/file_{i}.py", "limit": i % 50 + 1})) for i in range(calls)]
        for r in range(runs)
    ]


async def require_denial(lane: Lane) -> None:
    """The rules are really consulted: a call outside them is refused and its tool never runs."""
    if lane.executor is None or lane.hooks_per_call == 0:
        return
    before = COUNTS.calls
    outcome = await lane.executor.run([ts.ToolCall("denied", TOOL_NAME, '{"path": "secret/key.pem"}')])
    if outcome.results[0].error_kind != "permission_denied" or COUNTS.calls != before:
        raise RuntimeError(f"{lane.name}: the deny rule did not refuse a call under secret/")


async def timed(lane: Lane, turns: list[list[tuple[str, str]]], reps: int) -> tuple[float, float]:
    """CPU and wall seconds per call over ``reps`` rounds of the shape, after checking the work."""
    total = sum(len(calls) for calls in turns)
    COUNTS.calls = COUNTS.hooks = 0
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(reps):
        good = await lane.runs(turns)
        if good != total:
            raise RuntimeError(f"{lane.name}: {good} of {total} results were good")
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if COUNTS.calls != total * reps or COUNTS.hooks != total * reps * lane.hooks_per_call:
        raise RuntimeError(f"{lane.name}: {COUNTS.calls} tool bodies and {COUNTS.hooks} hooks for {total * reps} calls")
    return cpu / (total * reps), wall / (total * reps)


async def measure(
    all_lanes: list[Lane], runs: int, calls: int, rounds: int, budget: float, collector: bool = True
) -> None:
    turns = workload(runs, calls)
    total = runs * calls
    # Each round of a lane lasts about ``budget`` seconds (at least one repetition of the shape).
    for lane in all_lanes:
        lane.cpu.clear()
        lane.wall.clear()
        await timed(lane, turns, 1)
    _, wall = await timed(all_lanes[0], turns, 1)
    reps = max(1, int(budget / max(wall * total, 1e-6)))
    for _ in range(rounds):
        for lane in all_lanes:  # in turns, so that drift of the machine falls on every lane alike
            gc.collect()
            if not collector:
                gc.disable()
            try:
                cpu, wall = await timed(lane, turns, reps)
            finally:
                gc.enable()
            lane.cpu.append(cpu)
            lane.wall.append(wall)


def report(all_lanes: list[Lane], runs: int, calls: int, sleep: float) -> list[str]:
    floor = min(all_lanes[0].cpu)
    hooked = min(all_lanes[1].cpu)
    rows = []
    for lane in all_lanes:
        best, median = min(lane.cpu), statistics.median(lane.cpu)
        per_second = 1 / statistics.median(lane.wall)
        # Each round's time against the floor's in the same round (taken just before it): the machine's drift
        # between rounds cancels out, where a ratio of bests can pair one lane's lucky round with another's.
        paired = statistics.median(mine / base for mine, base in zip(lane.cpu, all_lanes[0].cpu, strict=True))
        rows.append(
            f"| {runs:,} | {calls} | {sleep * 1000:g} | {lane.name} | {best * 1e6:.2f} | {median * 1e6:.2f} "
            f"| {best / floor:.2f}x | {paired:.2f}x | {best / hooked:.2f}x | {per_second:,.0f} |"
        )
    return rows


async def main_async(arguments: argparse.Namespace) -> None:
    COUNTS.sleep = arguments.sleep
    all_lanes = lanes()
    if arguments.lane:
        all_lanes = [*all_lanes[:2], *[lane for lane in all_lanes[2:] if lane.name == arguments.lane]]
    for lane in all_lanes:
        await require_denial(lane)
    if arguments.profile:
        lane = all_lanes[-1]
        turns = workload(arguments.runs[0], arguments.calls[0])
        await timed(lane, turns, 3)
        profiler = cProfile.Profile()
        profiler.enable()
        await timed(lane, turns, 20)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return
    print(f"python {sys.version.split()[0]}, toolsched {ts.__version__}, {arguments.rounds} rounds per shape")
    print(
        "| runs | calls per turn | sleep ms | lane | CPU µs per call, best | median | ratio to floor "
        "| paired ratio to floor, median of rounds | to hooked floor | calls/s (wall) |"
    )
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for runs in arguments.runs:
        for calls in arguments.calls:
            await measure(all_lanes, runs, calls, arguments.rounds, arguments.budget, not arguments.no_collector)
            for row in report(all_lanes, runs, calls, arguments.sleep):
                print(row, flush=True)


def sizes(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None
    if not values or any(value < 1 or value > 100_000 for value in values):
        raise argparse.ArgumentTypeError(f"each size must be between 1 and 100,000, got {text!r}")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=sizes, default=[1, 100, 1000], help="concurrent runs (default 1,100,1000)")
    parser.add_argument("--calls", type=sizes, default=[1, 3, 10], help="calls per turn (default 1,3,10)")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds each tool awaits (default 0)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per lane and shape (default 5)")
    parser.add_argument("--budget", type=float, default=0.3, help="seconds of floor time per round (default 0.3)")
    parser.add_argument(
        "--lane", choices=["toolsched", "toolsched_full"], help="time only this lane beside the two floors"
    )
    parser.add_argument(
        "--no-collector", action="store_true", help="the cyclic collector off while rounds are timed (every lane)"
    )
    parser.add_argument("--profile", action="store_true", help="profile the last lane on the first shape instead")
    arguments = parser.parse_args()
    if not 0 <= arguments.sleep <= 1:
        parser.error("--sleep must be between 0 and 1 second")
    if arguments.rounds < 1:
        parser.error("--rounds must be at least 1")
    asyncio.run(main_async(arguments))


if __name__ == "__main__":
    main()
