"""What one full collection of the cyclic collector costs per waiting call, counted by valgrind, per lane.

    python benches/gc_walk.py                    # 1,000 runs x 10 calls waiting, the four lanes
    python benches/gc_walk.py --runs 100 --lane toolsched
    python benches/gc_walk.py --what-if          # and toolsched as if the collector never walked some of a call
    python benches/gc_walk.py --rounds 2 --what-if   # the collector's instructions per call over whole rounds

For each lane of ``benches/platform_runs.py``: R runs of n calls start, and once every call's tool waits
(on a sleep that outlasts the measurement), the process runs ``gc.collect()`` three times, or none.
Each is run under ``valgrind --tool=cachegrind --cache-sim=yes``; the difference between the two, per
collection and per waiting call, is what a full collection pays for each call in flight: instructions,
and first-level data-cache misses (simulated). These counts do not move with the machine's load, where
the collector's time does (``benches/gc_work.py`` times it; ``python benches/platform_runs.py --sleep 0.001
--no-collector`` shows the whole run without it). The counts include the rest of the heap, the same for
every lane of one process. Needs valgrind (Debian's ``valgrind`` package).

``--what-if`` adds two lanes that are toolsched with part of each call's in-flight state kept out of the
collector's walk (``PyObject_GC_UnTrack`` through ctypes, tracked again before it could be freed): the
suspended ``execute`` coroutine (``toolsched_no_frame``: what a call stepped by an untracked engine object
would leave), and that coroutine and the call's ``Job`` (``toolsched_no_frame_job``). They bound what such a
design can save; they are measurements, not a way to run.

``--rounds N`` counts instead, for each lane, the instructions spent in the collector (its module and the
types' traverse functions, by function, ``cg_annotate``) over N rounds of the shape with tools that await
1 ms, every generation included, per call: the difference between one warm-up round then N, and the
warm-up round alone.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import platform_runs  # the lanes and their workload

from toolsched._executor import call, schedule

COLLECTIONS = 3

# What each what-if lane keeps out of the collector's walk: the call's ``execute`` coroutine, and its ``Job``.
WHAT_IF = {"toolsched_no_frame": (True, False), "toolsched_no_frame_job": (True, True)}
# The collector's own functions and the types' traverse functions, as cg_annotate names them.
COLLECTOR = re.compile(r"gcmodule\.c:|_traverse\b|_PyFrame_Traverse|pycore_object\.h:visit_|traverse_slots")


class Untracked:
    """Makes ``execute`` return coroutines (and leave jobs) the collector does not walk, for one what-if lane.

    A coroutine is freed assuming it is tracked, so each one is held and tracked again (``retrack``) before
    it could be freed; a ``Job`` is freed either way."""

    def __init__(self, frame: bool, job: bool) -> None:
        self.untrack = ctypes.pythonapi.PyObject_GC_UnTrack
        self.track = ctypes.pythonapi.PyObject_GC_Track
        for function in (self.untrack, self.track):
            function.argtypes = [ctypes.py_object]
            function.restype = None
        self.frame = frame
        self.job = job
        self.held: list[Any] = []
        execute = call.execute

        def untracked(job: Any, batch: int, concurrent: bool, turn: Any) -> Any:
            coroutine = execute(job, batch, concurrent, turn)
            if self.frame:
                self.untrack(coroutine)
                self.held.append(coroutine)
            if self.job:
                self.untrack(job)
            return coroutine

        schedule.execute = untracked  # type: ignore[assignment]

    def retrack(self) -> None:
        for coroutine in self.held:
            self.track(coroutine)
        self.held.clear()


def lane_named(name: str) -> tuple[platform_runs.Lane, Untracked | None]:
    """The lane of that name: one of platform_runs's, or a what-if lane (toolsched, part of it untracked)."""
    lanes = {lane.name: lane for lane in platform_runs.lanes()}
    if name in WHAT_IF:
        return lanes["toolsched"], Untracked(*WHAT_IF[name])
    return lanes[name], None


async def hold(lane_name: str, runs: int, calls: int, collections: int) -> None:
    """Starts the lane's runs, waits until every tool waits, runs ``collections`` full collections, stops."""
    lane, untracked = lane_named(lane_name)
    turns = platform_runs.workload(runs, calls)
    counts = platform_runs.COUNTS
    counts.sleep = 0.0
    await lane.runs(turns)  # warm: every lane's first round builds its caches
    if untracked is not None:
        untracked.retrack()
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
    if untracked is not None:
        untracked.retrack()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass


async def rounds(lane_name: str, runs: int, calls: int, count: int) -> None:
    """A warm-up round of the lane with 1 ms tools, then ``count`` more, the collector on."""
    lane, untracked = lane_named(lane_name)
    turns = platform_runs.workload(runs, calls)
    platform_runs.COUNTS.sleep = 0.001
    for _ in range(1 + count):
        await lane.runs(turns)
        if untracked is not None:
            untracked.retrack()


def collector_instructions(lane: str, runs: int, calls: int, count: int) -> int:
    """Instructions valgrind counts in the collector's functions for ``rounds``."""
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "out")
        command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out}"]
        command += [
            sys.executable,
            os.path.abspath(__file__),
            "--inner-rounds",
            lane,
            str(runs),
            str(calls),
            str(count),
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"valgrind failed for {lane}:\n{done.stderr[-2000:]}")
        table = subprocess.run(["cg_annotate", "--threshold=0", out], capture_output=True, text=True, check=True)
    total = 0
    for line in table.stdout.splitlines():
        fields = line.split()
        if fields and COLLECTOR.search(fields[-1]) and fields[0].replace(",", "").isdigit():
            total += int(fields[0].replace(",", ""))
    return total


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
    if len(sys.argv) > 1 and sys.argv[1] == "--inner-rounds":
        lane, runs, calls, count = sys.argv[2], *map(int, sys.argv[3:6])
        asyncio.run(rounds(lane, runs, calls, count))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="concurrent runs (default 1,000)")
    parser.add_argument("--calls", type=int, default=10, help="calls per turn (default 10)")
    names = [lane.name for lane in platform_runs.lanes()]
    parser.add_argument("--lane", choices=names + list(WHAT_IF), action="append", help="one lane (repeatable)")
    parser.add_argument("--what-if", action="store_true", help="add toolsched_no_frame, toolsched_no_frame_job")
    parser.add_argument("--rounds", type=int, default=0, help="count the collector over this many rounds instead")
    arguments = parser.parse_args()
    if arguments.runs < 1 or arguments.calls < 1:
        parser.error("--runs and --calls must be at least 1")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    chosen = (arguments.lane or names) + (list(WHAT_IF) if arguments.what_if else [])
    waiting = arguments.runs * arguments.calls
    if arguments.rounds > 0:
        print(
            f"{arguments.rounds} rounds of {arguments.runs:,} runs x {arguments.calls} calls of 1 ms tools; per call:"
        )
        print("| lane | instructions in the collector |")
        print("|---|---:|")
        for lane in chosen:
            one = collector_instructions(lane, arguments.runs, arguments.calls, 0)
            more = collector_instructions(lane, arguments.runs, arguments.calls, arguments.rounds)
            print(f"| {lane} | {(more - one) / (arguments.rounds * waiting):,.0f} |", flush=True)
        return
    print(f"{arguments.runs:,} runs x {arguments.calls} calls waiting; per full collection and waiting call:")
    print("| lane | instructions | D1 misses |")
    print("|---|---:|---:|")
    for lane in chosen:
        none = counted(lane, arguments.runs, arguments.calls, 0)
        some = counted(lane, arguments.runs, arguments.calls, COLLECTIONS)
        per = COLLECTIONS * waiting
        print(f"| {lane} | {(some[0] - none[0]) / per:,.0f} | {(some[1] - none[1]) / per:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
