"""What the event loop's work between turns costs a turn: the same turn timed three ways, beside the floor.

    python benches/warmth.py                 # turns of 1 call, toolsched (full pipeline) and the floor
    python benches/warmth.py --calls 3       # turns of 3 calls
    python benches/warmth.py --rounds 40     # more rounds (each lane's best is taken)
    python benches/warmth.py --count         # instructions per turn instead, under valgrind (a few minutes)

compare.py's turns (the TaskGroup floor, ``toolsched`` with validation + Partitioned, ``toolsched_full``
with the full pipeline) are each timed, in process CPU time, three ways:

- ``back to back``: turn after turn in the calling task (compare.py's way). A toolsched turn of no-op
  calls never waits, so no event loop work runs between two of them; each of the floor's turns runs its
  tasks through the event loop.
- ``one loop pass``: each turn followed by ``await asyncio.sleep(0)``: one pass of the event loop (and
  its ``epoll_wait`` system call) between turns.
- ``three loop passes``: the same with three passes.
- ``own task``: each turn in a task of its own, in a TaskGroup (platform_runs.py's way: every run of a
  platform is a task).

Each lane's rounds take turns with the others', and a lane's figure is its best round. Printed per
lane and way: µs per call, and the *excess*: what the way costs that lane beyond what it costs an empty
turn (``async def turn(): pass``) the same way. Instruction counts do not see the difference: a
toolsched turn counts the same, back to back or in a task of its own, plus what the task costs the
floor's turn (count it with ``valgrind --tool=cachegrind``); the excess is time the same instructions
take when the event loop's work ran just before them. ``--count`` prints those counts: each lane back to
back and in a task of its own, ``--turns`` measured turns less none under valgrind (instructions.py's way).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import time
from collections.abc import Awaitable, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare
from instructions import valgrind_count

Run = Callable[[], Awaitable[object]]


def one_loop_pass(run: Run) -> Run:
    async def turn() -> None:
        await run()
        await asyncio.sleep(0)

    return turn


def three_loop_passes(run: Run) -> Run:
    async def turn() -> None:
        await run()
        for _ in range(3):
            await asyncio.sleep(0)

    return turn


def own_task(run: Run) -> Run:
    async def turn() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(run())  # type: ignore[arg-type]

    return turn


WAYS: dict[str, Callable[[Run], Run]] = {
    "back to back": lambda run: run,
    "one loop pass": one_loop_pass,
    "three loop passes": three_loop_passes,
    "own task": own_task,
}


async def empty() -> None:
    pass


async def lanes(calls: int) -> dict[str, Run]:
    texts = compare.argument_texts(calls)
    floor = await compare.taskgroup_floor(texts, None)
    plain = await compare.toolsched_validation(texts, None)
    full = await compare.toolsched_full_pipeline(texts, None)
    return {"empty turn": empty, "taskgroup": floor.run, "toolsched": plain.run, "toolsched_full": full.run}


async def best_times(calls: int, rounds: int, turns: int) -> dict[tuple[str, str], float]:
    """Each (lane, way)'s best round, in µs per turn."""
    timed: dict[tuple[str, str], Run] = {
        (lane, way): wrap(run) for lane, run in (await lanes(calls)).items() for way, wrap in WAYS.items()
    }
    for run in timed.values():
        for _ in range(turns):
            await run()
    compare.PROBE.reset()
    gc.freeze()
    best = {key: float("inf") for key in timed}
    for _ in range(rounds):
        for key, run in timed.items():  # in turns, so that drift of the machine falls on every lane alike
            started = time.process_time()
            for _ in range(turns):
                await run()
            best[key] = min(best[key], (time.process_time() - started) / turns * 1e6)
    # Every call of the three lanes ran its body, and each call of the full pipeline its two hooks.
    made = rounds * turns * calls * len(WAYS)
    if compare.PROBE.calls != 3 * made or compare.PROBE.hooks != 2 * made:
        raise RuntimeError(f"{compare.PROBE.calls} tool bodies and {compare.PROBE.hooks} hooks for {3 * made} calls")
    return best


async def counted_turns(calls: int, lane: str, way: str, turns: int) -> None:
    """What ``--count`` measures in one process: warm-up, then ``turns`` turns of one lane taken one way."""
    run = WAYS[way]((await lanes(calls))[lane])
    for _ in range(2000):
        await run()
    gc.freeze()
    for _ in range(turns):
        await run()


def print_counts(calls: int, turns: int) -> None:
    """Instructions per turn of each lane, back to back and in a task of its own."""
    print(f"python {sys.version.split()[0]}, turns of {calls} call(s), {turns:,} measured turns less none")
    print("| lane | back to back | own task | what its own task adds |")
    print("|---|---:|---:|---:|")
    for lane in ("taskgroup", "toolsched", "toolsched_full"):
        per_turn = []
        for way in ("back to back", "own task"):
            arguments = [__file__, "--inner", lane, way, "--calls", str(calls)]
            total = valgrind_count([*arguments, "--turns", str(turns)])
            base = valgrind_count([*arguments, "--turns", "0"])
            per_turn.append((total - base) / turns)
        print(f"| {lane} | {per_turn[0]:,.0f} | {per_turn[1]:,.0f} | {per_turn[1] - per_turn[0]:+,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1, help="calls per turn (default 1)")
    parser.add_argument("--rounds", type=int, default=25, help="timed rounds per lane and way (default 25)")
    parser.add_argument("--turns", type=int, default=2000, help="turns per round, or counted (default 2,000)")
    parser.add_argument("--count", action="store_true", help="instructions per turn under valgrind instead")
    parser.add_argument("--inner", nargs=2, metavar=("LANE", "WAY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        asyncio.run(counted_turns(args.calls, args.inner[0], args.inner[1], args.turns))
        return
    if args.calls < 1 or args.rounds < 1 or args.turns < 1:
        raise SystemExit("--calls, --rounds and --turns must be at least 1")
    if args.count:
        print_counts(args.calls, args.turns)
        return
    best = asyncio.run(best_times(args.calls, args.rounds, args.turns))
    print(f"python {sys.version.split()[0]}, turns of {args.calls} call(s), best of {args.rounds} rounds")
    print("| lane | way | CPU µs per call | excess µs per turn | ratio to taskgroup the same way |")
    print("|---|---|---:|---:|---:|")
    for lane in ("taskgroup", "toolsched", "toolsched_full"):
        for way in WAYS:
            per_turn = best[(lane, way)]
            excess = (per_turn - best[(lane, "back to back")]) - (
                best[("empty turn", way)] - best[("empty turn", "back to back")]
            )
            ratio = per_turn / best[("taskgroup", way)]
            print(f"| {lane} | {way} | {per_turn / args.calls:.2f} | {excess:+.2f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
