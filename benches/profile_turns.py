"""The profiles behind the performance work: where a turn's time goes, per row of compare.py.

    python benches/profile_turns.py turn full 1000            # per-call CPU time of every row, then cProfile of "full"
    python benches/profile_turns.py turn validation 1 --sort cumtime
    python benches/profile_turns.py prepare 100000            # ToolTable.prepare in a loop, for `perf record -g`
    python benches/profile_turns.py values                    # what the per-call pieces cost, one by one

``turn`` times each contender of compare.py in one event loop (turns awaited back to
back, CPU time, best of five rounds), then profiles the chosen one with cProfile.
Rows: ``direct`` (N = 1 only), ``floor``, ``validation``, ``full``, ``resource_aware``.
``prepare`` calls the engine's ``ToolTable.prepare`` on N JSON-text calls over and over
(``--seconds``) and prints the time per call; run it under ``perf record -g`` to see
the engine and the allocator. ``values`` times the pieces the executor makes or
reads per call or per turn, each against the way it was made before.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import os
import pstats
import sys
import time
import timeit
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare

import toolsched as ts
from toolsched import _core
from toolsched._executor.strategies import resolve_cap
from toolsched._values.results import new_result

ROWS = {
    "direct": compare.direct_call,
    "floor": compare.taskgroup_floor,
    "validation": compare.toolsched_validation,
    "full": compare.toolsched_full_pipeline,
    "resource_aware": compare.toolsched_resource_aware,
}


async def profile_turns(row: str, count: int, turns: int, sort: str) -> None:
    texts = compare.argument_texts(count)
    chosen = {name: factory for name, factory in ROWS.items() if name != "direct" or count == 1}
    runs = {name: await factory(texts, None) for name, factory in chosen.items()}
    for turn in runs.values():
        for _ in range(20):
            await turn.run()
    gc.collect()
    gc.freeze()
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(5):
        for name, turn in runs.items():
            started = time.process_time()
            for _ in range(turns):
                await turn.run()
            best[name] = min(best[name], (time.process_time() - started) / turns / count * 1e6)
    for name, per_call in best.items():
        print(f"{name:15s} {per_call:8.2f} µs per call")
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(turns):
        await runs[row].run()
    profiler.disable()
    pstats.Stats(profiler).sort_stats(sort).print_stats(30)


def loop_prepare(count: int, seconds: float) -> None:
    tool = ts.tool(concurrency_safe=True)(compare.noop)
    table = ts.ToolRegistry([tool])._table
    calls = [ts.ToolCall(f"call_{i}", compare.TOOL_NAME, text) for i, text in enumerate(compare.argument_texts(count))]
    limits = _core.Limits(16 * 1024 * 1024, 64, 10)
    gc.collect()
    gc.freeze()
    rounds = 0
    started = time.process_time()
    while time.process_time() - started < seconds:
        table.prepare(calls, [], limits)
        rounds += 1
    per_call = (time.process_time() - started) / rounds / count * 1e6
    print(f"ToolTable.prepare, {count} calls: {rounds} rounds, {per_call:.3f} µs per call")


def time_values() -> None:
    fields = ("c1", "noop", None, None, None, False, 0.0, False, 0, False, None)
    strategy = ts.Partitioned()
    pieces: list[tuple[str, Any]] = [
        ("ToolResult(...), the dataclass __init__", lambda: ts.ToolResult(*fields)),
        ("new_result(...), the slot builder", lambda: new_result(*fields)),
        ("ToolCall(id, name, text)", lambda: ts.ToolCall("call_0", "noop", '{"path": "a"}')),
        ("os.environ.get(...)", lambda: os.environ.get("TOOLSCHED_MAX_CONCURRENCY")),
        ("resolve_cap(Partitioned())", lambda: resolve_cap(strategy)),
    ]
    for label, make in pieces:
        best = min(timeit.repeat(make, number=100_000, repeat=5)) / 100_000 * 1e6
        print(f"{label:45s} {best:6.2f} µs")

    async def groups() -> None:
        async def empty_anyio() -> None:
            async with anyio.create_task_group():
                pass

        async def empty_asyncio() -> None:
            async with asyncio.TaskGroup():
                pass

        for label, enter in (("an empty anyio task group", empty_anyio), ("an empty asyncio.TaskGroup", empty_asyncio)):
            best = float("inf")
            for _ in range(5):
                started = time.process_time()
                for _ in range(20_000):
                    await enter()
                best = min(best, (time.process_time() - started) / 20_000 * 1e6)
            print(f"{label:45s} {best:6.2f} µs")

    asyncio.run(groups())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    modes = parser.add_subparsers(dest="mode", required=True)
    turn = modes.add_parser("turn", help="time every row, then cProfile one")
    turn.add_argument("row", choices=sorted(ROWS))
    turn.add_argument("calls", type=int)
    turn.add_argument("--turns", type=int, help="turns per round (default: about 20,000 calls)")
    turn.add_argument("--sort", default="tottime", help="pstats sort key (tottime, cumtime, ...)")
    prepare = modes.add_parser("prepare", help="ToolTable.prepare in a loop")
    prepare.add_argument("calls", type=int)
    prepare.add_argument("--seconds", type=float, default=5.0)
    modes.add_parser("values", help="what the per-call pieces cost")
    args = parser.parse_args()
    if args.mode == "turn":
        if args.calls < 1 or (args.row == "direct" and args.calls != 1):
            parser.error("calls must be at least 1, and exactly 1 for the direct row")
        turns = args.turns or max(1, 20_000 // args.calls)
        asyncio.run(profile_turns(args.row, args.calls, turns, args.sort))
    elif args.mode == "prepare":
        if args.calls < 1:
            parser.error("calls must be at least 1")
        loop_prepare(args.calls, args.seconds)
    else:
        time_values()


if __name__ == "__main__":
    main()
