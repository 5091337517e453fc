"""CPU time per call of ``Executor.run`` for turns of N no-op calls, nothing else around it.

    python benches/run_cost.py 1 20000      # N = 1, 20,000 turns per round (best of 5 rounds)
    python benches/run_cost.py 1000 20      # N = 1,000
    python benches/run_cost.py 10 3000 --profile   # plus the 14 costliest functions (cProfile)

The quickest check of what a change to the executor's hot path costs: run it against two
checkouts in turns (``PYTHONPATH=<checkout>/python``) and compare.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import pstats
import time

import toolsched as ts


@ts.tool(read_only=True, concurrency_safe=True)
async def read(path: str, limit: int = 10) -> str:
    return path


async def measure(calls: int, turns: int, profile: bool) -> None:
    executor = ts.Executor([read])
    texts = [(f"c{i}", json.dumps({"path": f"a{i}"})) for i in range(calls)]

    async def turn() -> None:
        await executor.run([ts.ToolCall(call_id, "read", text) for call_id, text in texts])

    for _ in range(200):
        await turn()
    gc.freeze()
    best = float("inf")
    for _ in range(5):
        started = time.process_time()
        for _ in range(turns):
            await turn()
        best = min(best, (time.process_time() - started) / turns / calls * 1e6)
    print(f"N={calls}: {best:.3f} µs per call (CPU time, best of 5 rounds of {turns} turns)")
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(turns):
            await turn()
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(14)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("calls", type=int, help="calls per turn")
    parser.add_argument("turns", type=int, help="turns per round")
    parser.add_argument("--profile", action="store_true", help="also profile one round")
    args = parser.parse_args()
    asyncio.run(measure(args.calls, args.turns, args.profile))


if __name__ == "__main__":
    main()
