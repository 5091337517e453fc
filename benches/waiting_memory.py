"""Memory per call while many calls wait at once in one turn (tracemalloc), toolsched beside the floors.

    python benches/waiting_memory.py                  # 100,000 calls waiting
    python benches/waiting_memory.py --calls 10000

Each lane is ``benches/compare.py``'s contender of the same name, measured by its memory section
(``compare.memory_in_flight``): every call's tool waits on one event until the last call has started, and
the bytes traced then, less those before the turn, are divided by the calls in flight (``held``; ``peak`` is
the most traced meanwhile).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # the contenders and their memory section

LANES = ("taskgroup", "taskgroup_hooked", "toolsched", "toolsched_full")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000, help="calls waiting at once (default 100,000)")
    arguments = parser.parse_args()
    if arguments.calls < 1:
        parser.error("--calls must be at least 1")
    print("| lane | calls waiting | held bytes per call | peak bytes per call |")
    print("|---|---:|---:|---:|")
    for contender in compare.contenders():
        if contender.key not in LANES or contender.factory is None:
            continue
        row = asyncio.run(compare.memory_in_flight(contender, arguments.calls, patience=300.0))
        print(
            f"| {contender.key} | {row['in_flight']:,} | {row['held_bytes_per_call']:,.0f} "
            f"| {row['peak_bytes_per_call']:,.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
