"""How many collections of each generation one round of waiting calls costs, and the time in them, per lane.

    python benches/gc_generations.py                 # 1,000 runs x 10 calls of 1 ms tools
    python benches/gc_generations.py --runs 5000 --rounds 2
    python benches/gc_generations.py --sequence     # and each lane's older collections in order

For the bare TaskGroup and toolsched lanes of ``benches/platform_runs.py``: a warm-up round, then each
counted round with ``gc.callbacks`` recording every collection, its generation, the time between its
start and stop callbacks, and how many tracked objects were alive as each full collection began. The
counts follow the interpreter's own thresholds and do not move with the machine's load; the times do. A
full collection (generation 2) walks every object alive, so one more of them near a round's peak costs as
much as the rest together.

With ``--sequence`` each lane's collections of generations 1 and 2 are also listed in order, with the
tracked objects alive as each began (counting them then takes time, so the times are not comparable with a
run without it). The interpreter starts a full collection when generation 1 has been collected eleven
times since the last full one and the objects moved into the oldest generation since then are a quarter
of those that were there: so two rounds that differ by a few thousand objects can differ by a whole full
collection.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import time
from collections import Counter
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import platform_runs  # the lanes and their workload

LANES = ("taskgroup", "toolsched")


class Collections:
    """``gc.callbacks`` entry: the collections of each generation, the seconds spent in them, and the tracked
    objects alive as each full collection began (counting them is not timed)."""

    def __init__(self, sequence: bool = False) -> None:
        self.count: Counter[int] = Counter()
        self.seconds: Counter[int] = Counter()
        self.alive_at_full: list[int] = []
        # With ``sequence``: (generation, tracked objects alive) as each collection of generation 1 or 2 began.
        self.sequence: list[tuple[int, int]] | None = [] if sequence else None
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            if info["generation"] == 2:
                self.alive_at_full.append(len(gc.get_objects()))
            if self.sequence is not None and info["generation"] >= 1:
                alive = self.alive_at_full[-1] if info["generation"] == 2 else len(gc.get_objects())
                self.sequence.append((info["generation"], alive))
            self._started = time.perf_counter()
        else:
            generation = info["generation"]
            self.count[generation] += 1
            self.seconds[generation] += time.perf_counter() - self._started


async def measure(runs: int, calls: int, rounds: int, sequence: bool = False) -> None:
    lanes = {lane.name: lane for lane in platform_runs.lanes()}
    turns = platform_runs.workload(runs, calls)
    platform_runs.COUNTS.sleep = 0.001
    total = runs * calls
    print(f"{runs:,} runs x {calls} calls of 1 ms tools, per round")
    print(
        "| lane | collections (generation 0 / 1 / 2) | CPU us per call | us per call in generation 0 / 1 / 2 "
        "| tracked objects alive at each full collection (thousands; before the round) |"
    )
    print("|---|---|---:|---|---|")
    for _ in range(rounds):
        for name in LANES:
            lane = lanes[name]
            await lane.runs(turns)  # warm-up: caches, and the heap of the round before collected
            gc.collect()
            before = len(gc.get_objects())
            seen = Collections(sequence)
            gc.callbacks.append(seen)
            cpu = time.process_time()
            try:
                await lane.runs(turns)
            finally:
                cpu = time.process_time() - cpu
                gc.callbacks.remove(seen)
            counts = " / ".join(str(seen.count[generation]) for generation in range(3))
            times = " / ".join(f"{seen.seconds[generation] / total * 1e6:.2f}" for generation in range(3))
            alive = ", ".join(f"{count / 1000:.0f}" for count in seen.alive_at_full) or "none"
            print(f"| {name} | {counts} | {cpu / total * 1e6:.1f} | {times} | {alive} ({before / 1000:.0f}) |")
            if seen.sequence is not None:
                steps = ", ".join(f"{'FULL ' if gen == 2 else ''}{count / 1000:.0f}" for gen, count in seen.sequence)
                print(f"|   {name}: generation 1 and FULL collections in order, thousands alive | {steps} |||")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="concurrent runs (default 1,000)")
    parser.add_argument("--calls", type=int, default=10, help="calls per turn (default 10)")
    parser.add_argument("--rounds", type=int, default=1, help="counted rounds per lane (default 1)")
    parser.add_argument(
        "--sequence", action="store_true", help="also list each lane's collections of generations 1 and 2 in order"
    )
    arguments = parser.parse_args()
    asyncio.run(measure(arguments.runs, arguments.calls, arguments.rounds, arguments.sequence))


if __name__ == "__main__":
    main()
