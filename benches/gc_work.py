"""What the cyclic collector walks while runs of waiting calls are in flight, per lane of platform_runs.py.

    python benches/gc_work.py                       # 1,000 runs x 10 calls of 1 ms tools
    python benches/gc_work.py --runs 100 --kinds    # and, per type, what full collections found alive

For each lane of ``benches/platform_runs.py`` (three rounds of the shape, collector on), per generation:
the collections run, the tracked objects and references each walked (summed, per call of the rounds), and
the CPU µs per call they took. The objects and references are counts (the same on a busy machine); the time
is not. A full collection walks every tracked object alive, so what a waiting call keeps alive, and what a
run keeps alive around its calls, is walked by every one that happens while they wait. ``--kinds`` lists,
per type, the objects (beyond the heap before the rounds) and references the full collections found.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import platform_runs  # the lanes and their workload


class Walks:
    """Per generation: collections, objects and references walked, CPU seconds; per type at full collections."""

    def __init__(self, kinds: bool) -> None:
        self.kinds = kinds
        self.per_generation: dict[int, list[float]] = collections.defaultdict(lambda: [0, 0, 0, 0.0])
        self.objects: collections.Counter[str] = collections.Counter()
        self.references: collections.Counter[str] = collections.Counter()
        self.started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        generation = info["generation"]
        if phase == "start":
            walked: list[Any] = []
            for younger in range(generation + 1):
                walked += gc.get_objects(generation=younger)
            row = self.per_generation[generation]
            row[0] += 1
            row[1] += len(walked)
            row[2] += sum(len(gc.get_referents(thing)) for thing in walked)
            if self.kinds and generation == 2:
                for thing in walked:
                    name = type(thing).__qualname__
                    if name == "coroutine":
                        name += " " + thing.cr_code.co_qualname
                    self.objects[name] += 1
                    self.references[name] += len(gc.get_referents(thing))
            del walked
            self.started = time.process_time()
        else:
            self.per_generation[generation][3] += time.process_time() - self.started


async def main_async(runs: int, calls: int, sleep: float, kinds: bool) -> None:
    platform_runs.COUNTS.sleep = sleep
    lanes = platform_runs.lanes()
    turns = platform_runs.workload(runs, calls)
    for lane in lanes:
        await lane.runs(turns)
    gc.collect()
    before = collections.Counter(type(thing).__qualname__ for thing in gc.get_objects())
    total = 3 * runs * calls
    print(f"{runs:,} runs x {calls} calls, {sleep * 1000:g} ms tools, three rounds per lane; per call of the rounds:")
    for lane in lanes:
        walks = Walks(kinds)
        gc.collect()
        gc.callbacks.append(walks)
        try:
            for _ in range(3):
                await lane.runs(turns)
        finally:
            gc.callbacks.remove(walks)
        cells = [
            f"gen{generation} {int(count)} x, {walked / total:.1f} objects, {refs / total:.1f} refs, "
            f"{cpu / total * 1e6:.1f} µs"
            for generation, (count, walked, refs, cpu) in sorted(walks.per_generation.items())
        ]
        print(f"{lane.name:17s} " + " | ".join(cells))
        if kinds:
            full = walks.per_generation[2][0] if 2 in walks.per_generation else 0
            for name, refs in walks.references.most_common(25):
                beyond = (walks.objects[name] - full * before.get(name.split(" ")[0], 0)) / total
                print(f"    {name:45s} objects {beyond:6.2f} refs {refs / total:6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="concurrent runs (default 1,000)")
    parser.add_argument("--calls", type=int, default=10, help="calls per turn (default 10)")
    parser.add_argument("--sleep", type=float, default=0.001, help="seconds each tool awaits (default 0.001)")
    parser.add_argument("--kinds", action="store_true", help="per type, what the full collections found alive")
    arguments = parser.parse_args()
    if arguments.runs < 1 or arguments.calls < 1 or not 0 <= arguments.sleep <= 1:
        parser.error("--runs and --calls must be at least 1, --sleep between 0 and 1")
    asyncio.run(main_async(arguments.runs, arguments.calls, arguments.sleep, arguments.kinds))


if __name__ == "__main__":
    main()
