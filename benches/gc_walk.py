"""What one full collection of the cyclic collector costs per waiting call, counted by valgrind, per lane.

    python benches/gc_walk.py                    # 1,000 runs x 10 calls waiting, the four lanes
    python benches/gc_walk.py --runs 100 --lane toolsched

For each lane of ``benches/platform_runs.py``: R runs of n calls start, and once every call's tool waits
(on a sleep that outlasts the measurement), the process runs ``gc.collect()`` three times, or none.
Each is run under ``valgrind --tool=cachegrind --cache-sim=yes``; the difference between the two, per
collection and per waiting call, is what a full collection pays for each call in flight: instructions,
and first-level data-cache misses (simulated). These counts do not move with the machine's load, where
the collector's time does (``benches/gc_work.py`` times it; ``python benches/platform_runs.py --sleep 0.001
--no-collector`` shows the whole run without it). The counts include the rest of the heap, the same for
every lane of one process. Needs valgrind (Debian's ``valgrind`` package).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import platform_runs  # the lanes and their workload

COLLECTIONS = 3


async def hold(lane_name: str, runs: int, calls: int, collections: int) -> None:
    """Starts the lane's runs, waits until every tool waits, runs ``collections`` full collections, stops."""
    lanes = {lane.name: lane for lane in platform_runs.lanes()}
    lane = lanes[lane_name]
    turns = platform_runs.workload(runs, calls)
    counts = platform_runs.COUNTS
    counts.sleep = 0.0
    await lane.runs(turns)  # warm: every lane's first round builds its caches
    counts.sleep = 1e6
    counts.calls = 0
    gc.collect()
    gc.disable()
    task = asyncio.ensure_future(lane.runs(turns))
    # platform_runs's tool counts its calls and signals nothing: asked every 50 ms.
    while counts.calls < runs * calls:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    for _ in range(collections):
        gc.collect()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass


def counted(lane: str, runs: int, calls: int, collections: int) -> tuple[int, int]:
    """Instructions and first-level data-cache misses valgrind counts for one ``hold``."""
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run(
            [
                "valgrind",
                "--tool=cachegrind",
                "--cache-sim=yes",
                f"--cachegrind-out-file={os.path.join(scratch, 'out')}",
                sys.executable,
                os.path.abspath(__file__),
                "--inner",
                lane,
                str(runs),
                str(calls),
                str(collections),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    instructions = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    misses = re.search(r"D1\s+misses:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or instructions is None or misses is None:
        raise SystemExit(f"valgrind printed no counts for {lane}:\n{done.stderr[-2000:]}")
    return int(instructions.group(1).replace(",", "")), int(misses.group(1).replace(",", ""))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--inner":
        lane, runs, calls, collections = sys.argv[2], *map(int, sys.argv[3:6])
        asyncio.run(hold(lane, runs, calls, collections))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="concurrent runs (default 1,000)")
    parser.add_argument("--calls", type=int, default=10, help="calls per turn (default 10)")
    names = [lane.name for lane in platform_runs.lanes()]
    parser.add_argument("--lane", choices=names, action="append", help="one lane (repeatable; default all)")
    arguments = parser.parse_args()
    if arguments.runs < 1 or arguments.calls < 1:
        parser.error("--runs and --calls must be at least 1")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    waiting = arguments.runs * arguments.calls
    print(f"{arguments.runs:,} runs x {arguments.calls} calls waiting; per full collection and waiting call:")
    print("| lane | instructions | D1 misses |")
    print("|---|---:|---:|")
    for lane in arguments.lane or names:
        none = counted(lane, arguments.runs, arguments.calls, 0)
        some = counted(lane, arguments.runs, arguments.calls, COLLECTIONS)
        per = COLLECTIONS * waiting
        print(f"| {lane} | {(some[0] - none[0]) / per:,.0f} | {(some[1] - none[1]) / per:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
