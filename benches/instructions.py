"""Instructions per call of ``Executor.run``, counted by valgrind: a figure the machine's load does not move.

    python benches/instructions.py 1 2000            # N = 1, 2,000 turns
    python benches/instructions.py 100 40 --full     # N = 100, the full pipeline (two hooks, rules)
    python benches/instructions.py 100 40 --parts pre # N = 100, one part of it alone (pre, post, rules)
    python benches/instructions.py 100 40 --floor    # N = 100, bare asyncio.TaskGroup + json.loads
    python benches/instructions.py 100 40 --floor --full  # the floor with the same hooks and rules by hand
    python benches/instructions.py 3 10 --runs 100 --wait  # a platform's shape: 100 runs at once, tools that wait
    python benches/instructions.py 3 10 --runs 100 --wait --no-collector  # the same, cyclic collector off
    python benches/instructions.py 3 10 --runs 100 --wait --by-function  # where: by C function, beside the floor
    PYTHONPATH=<checkout>/python python benches/instructions.py 1 2000   # another checkout

Timing on a shared 2-core machine moves by 10-30 % with the load; an instruction count moves by
about 1 %. Each measurement runs the turns under ``valgrind --tool=cachegrind`` twice, with and
without the measured turns, and divides the difference: start-up and warm-up cancel out. Needs
valgrind (Debian's ``valgrind`` package). The workload is compare.py's: calls of a no-op async tool
``(path: str, limit: int)`` given as JSON text, validated, scheduled by ``Partitioned``; with
``--floor``, compare.py's floors (``taskgroup``, and ``taskgroup_hooked`` with any parts). With
``--runs R``, each measured turn is R turns at once, each in a task of its own (platform_runs.py's
shape); with ``--wait``, the tool awaits ``asyncio.sleep(0)`` once, so every call waits (the floors
are then the same TaskGroup, and with ``--full`` the same hooks and rules by hand, around the waiting
tool). With ``--no-collector`` the cyclic collector is off while the measured turns run: the
difference to the count with it is what its passes cost. With
``--by-function [K]`` the measured turns' instructions are split by the C function that ran them, beside
the floor's for the same shape, in groups (the cyclic collector, the interpreter loop, memory, the engine)
and the K functions that differ most: where a gap to the floor is, before anything is changed for it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from typing import NamedTuple

BENCHES = os.path.dirname(os.path.abspath(__file__))


Turn = Callable[[], Awaitable[object]]

# Whether the cyclic collector runs during the measured turns (``--no-collector`` turns it off).
COLLECTOR = True
# What watches the cyclic collector's passes during the measured turns (``--walks``): ``gc.callbacks``.
WATCHERS: list[Callable[[str, dict[str, int]], None]] = []


async def measured(turn: Turn, count: int, runs: int) -> None:
    """Warms up, freezes what exists, then runs ``count`` measured rounds of ``runs`` turns at once."""
    if runs > 1:
        one = turn

        async def spread() -> None:
            async with asyncio.TaskGroup() as group:
                for _ in range(runs):
                    group.create_task(one())

        turn = spread
    for _ in range(30):
        await turn()
    gc.freeze()
    if not COLLECTOR:
        gc.disable()
    gc.callbacks.extend(WATCHERS)
    try:
        for _ in range(count):
            await turn()
    finally:
        for watcher in WATCHERS:
            gc.callbacks.remove(watcher)


async def waiting_noop(path: str, limit: int = 10) -> None:
    await asyncio.sleep(0)


async def floor_turns(calls: int, count: int, parts: frozenset[str], runs: int, wait: bool) -> None:
    """compare.py's floor (with parts, its floor with the same hooks and rules by hand)."""
    sys.path.insert(0, BENCHES)
    import compare

    texts = compare.argument_texts(calls)
    if parts and parts != PARTS:
        raise SystemExit("the floor has the whole pipeline by hand or nothing of it: --floor with --full or alone")
    if wait and parts:
        hooked = await compare.taskgroup_hooked(texts, None, waiting_noop)
        await measured(hooked.run, count, runs)
        return
    if wait:

        async def waiting_floor() -> None:
            async with asyncio.TaskGroup() as group:
                for text in texts:
                    group.create_task(waiting_noop(**json.loads(text)))

        await measured(waiting_floor, count, runs)
        return
    turn = await (compare.taskgroup_hooked if parts else compare.taskgroup_floor)(texts, None)
    await measured(turn.run, count, runs)


async def turns(calls: int, count: int, parts: frozenset[str], runs: int, wait: bool) -> None:
    import toolsched as ts

    @ts.tool(read_only=True, concurrency_safe=True, rule_subject="path")
    async def noop(path: str, limit: int = 10) -> None:
        if wait:
            await asyncio.sleep(0)

    async def pre(event: ts.HookEvent) -> None:
        return None

    async def post(event: ts.HookEvent) -> None:
        return None

    options: dict[str, object] = {}
    hooks = ts.Hooks()
    if "pre" in parts:
        hooks.pre_tool_use("*", pre)
    if "post" in parts:
        hooks.post_tool_use("*", post)
    if len(hooks):
        options["hooks"] = hooks
    if "rules" in parts:
        options["permissions"] = ts.Permissions(allow=["noop(src/**)"], deny=["noop(secret/**)"])
    executor = ts.Executor([noop], strategy=ts.Partitioned(), **options)  # type: ignore[arg-type]
    texts = [(f"c{i}", json.dumps({"path": f"src/file_{i}.py", "limit": i % 50 + 1})) for i in range(calls)]

    async def turn() -> None:
        await executor.run([ts.ToolCall(call_id, "noop", text) for call_id, text in texts])

    await measured(turn, count, runs)


# The parts of the full pipeline: a pre hook, a post hook, an allow and a deny rule.
PARTS = frozenset({"pre", "post", "rules"})


def cachegrind(out_file: str) -> list[str]:
    """The command that runs this Python under cachegrind, counting instructions only, its output to ``out_file``."""
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    return ["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out_file}", sys.executable]


def valgrind_count(arguments: list[str]) -> int:
    """The instructions valgrind counts for the whole of ``python ARGUMENTS``."""
    done = subprocess.run(
        [*cachegrind("/dev/null"), *arguments], capture_output=True, text=True, check=True, env=os.environ
    )
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if found is None:
        raise SystemExit(f"valgrind printed no instruction count:\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def valgrind_functions(arguments: list[str]) -> dict[tuple[str, str], int]:
    """The instructions valgrind counts for ``python ARGUMENTS``, by (file, function) of the code that ran them."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "cachegrind.out")
        subprocess.run([*cachegrind(out), *arguments], capture_output=True, text=True, check=True, env=os.environ)
        costs: dict[tuple[str, str], int] = {}
        file = function = "?"
        with open(out) as lines:
            for line in lines:
                if line.startswith("fl="):
                    file = line[3:].strip()
                elif line.startswith("fn="):
                    function = line[3:].strip()
                elif line[:1].isdigit():
                    fields = line.split()
                    if len(fields) >= 2:
                        key = (file, function)
                        costs[key] = costs.get(key, 0) + int(fields[1])
    return costs


# C functions only the cyclic collector calls (the traversals are its too: each object's ``tp_traverse``).
COLLECTOR_FUNCTIONS = frozenset({"visit_decref", "visit_reachable", "gc_collect_main", "update_refs", "subtract_refs"})


def group_of(file: str, function: str) -> str:
    """The part of the interpreter (or of toolsched) a C function belongs to (an inlined part counts as where it
    was inlined into: ``_PyEval_EvalFrameDefault`` is the interpreter loop whichever header its code came from)."""
    if os.path.basename(file) == "gcmodule.c" or function in COLLECTOR_FUNCTIONS or function.endswith("raverse"):
        return "cyclic collector"
    if function == "_PyEval_EvalFrameDefault":
        return "interpreter loop"
    if os.path.basename(file) == "obmalloc.c" or function in {"malloc", "free", "_int_malloc", "_int_free", "realloc"}:
        return "memory"
    if "_core::" in function or "/rust/" in file:
        return "toolsched engine (Rust)"
    return "the rest"


def by_function(calls: int, count: int, parts: frozenset[str], runs: int, wait: bool, top: int) -> None:
    """Prints the measured turns' instructions per call by group and by C function, toolsched beside its floor."""
    columns: list[dict[tuple[str, str], float]] = []
    for floor in (False, True):
        base = valgrind_functions(inner_arguments(calls, 0, parts, floor, runs, wait, True))
        total = valgrind_functions(inner_arguments(calls, count, parts, floor, runs, wait, True))
        measured_calls = count * calls * runs
        columns.append({key: (total.get(key, 0) - base.get(key, 0)) / measured_calls for key in set(base) | set(total)})
    ours, floor_costs = columns
    floor_label = "floor + hooks and rules by hand" if parts else "TaskGroup floor"
    groups: dict[str, list[float]] = {}
    for column, costs in enumerate(columns):
        for (file, function), cost in costs.items():
            groups.setdefault(group_of(file, function), [0.0, 0.0])[column] += cost
    print(f"instructions per call | toolsched | {floor_label} | difference")
    print("---|---:|---:|---:")
    for name, (mine, theirs) in sorted(groups.items(), key=lambda item: -abs(item[1][0] - item[1][1])):
        print(f"{name} | {mine:,.0f} | {theirs:,.0f} | {mine - theirs:+,.0f}")
    print(
        f"all | {sum(ours.values()):,.0f} | {sum(floor_costs.values()):,.0f} | "
        f"{sum(ours.values()) - sum(floor_costs.values()):+,.0f}"
    )
    print()
    # By function, its inlined parts (counted under the headers they came from) added in.
    functions: dict[str, list[float]] = {}
    for column, costs in enumerate(columns):
        for (_, function), cost in costs.items():
            functions.setdefault(function, [0.0, 0.0])[column] += cost
    print(f"C function | toolsched | {floor_label} | difference")
    print("---|---:|---:|---:")
    for function, (mine, theirs) in sorted(functions.items(), key=lambda item: -abs(item[1][0] - item[1][1]))[:top]:
        print(f"{function} | {mine:,.0f} | {theirs:,.0f} | {mine - theirs:+,.0f}")


class Walks:
    """What the cyclic collector walks in each pass (a ``gc.callbacks`` entry): by kind of object, how many
    objects and how many of their references (the collector follows each reference twice a pass)."""

    def __init__(self) -> None:
        sys.path.insert(0, BENCHES)
        from live_objects import kind

        self.kind = kind
        self.objects: dict[str, int] = {}
        self.references: dict[str, int] = {}
        self.passes = 0
        self.busy = False

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase != "start" or self.busy:
            return
        self.busy = True
        self.passes += 1
        # A pass of generation g walks the younger generations with it.
        for generation in range(info["generation"] + 1):
            for thing in gc.get_objects(generation=generation):
                kind = self.kind(thing)
                self.objects[kind] = self.objects.get(kind, 0) + 1
                self.references[kind] = self.references.get(kind, 0) + len(gc.get_referents(thing))
        self.busy = False


def walks(calls: int, count: int, parts: frozenset[str], runs: int, wait: bool, top: int) -> None:
    """Prints what the cyclic collector walks per call by kind of object, toolsched beside its floor."""
    columns: list[Walked] = []
    for floor in (False, True):
        arguments = [sys.executable, *inner_arguments(calls, count, parts, floor, runs, wait, True), "--walks"]
        done = subprocess.run(arguments, capture_output=True, text=True, check=True, env=os.environ)
        columns.append(Walked(**json.loads(done.stdout)))
    per_call = 1 / (count * calls * runs)
    floor_label = "floor + hooks and rules by hand" if parts else "TaskGroup floor"
    ours, theirs = columns
    print(f"per call | toolsched | {floor_label} | difference")
    print("---|---:|---:|---:")
    for label, mine_total, floor_total in (
        ("collector passes (x 1,000)", ours.passes * 1000, theirs.passes * 1000),
        ("objects walked", sum(ours.objects.values()), sum(theirs.objects.values())),
        ("references followed", sum(ours.references.values()), sum(theirs.references.values())),
    ):
        mine, floor_value = mine_total * per_call, floor_total * per_call
        print(f"{label} | {mine:,.1f} | {floor_value:,.1f} | {mine - floor_value:+,.1f}")
    print()
    print(f"kind of object | objects walked | references | {floor_label}: objects | references")
    print("---|---:|---:|---:|---:")
    kinds = set(ours.objects) | set(theirs.objects)
    for kind in sorted(kinds, key=lambda kind: -abs(ours.cost(kind) - theirs.cost(kind)))[:top]:
        row = [value * per_call for column in columns for value in column.of(kind)]
        print(f"{kind} | " + " | ".join(f"{value:,.2f}" for value in row))


class Walked(NamedTuple):
    """What one process's measured turns had the collector walk (``Walks``, as its ``--inner`` run prints it)."""

    passes: int
    objects: dict[str, int]
    references: dict[str, int]

    def of(self, kind: str) -> tuple[int, int]:
        return self.objects.get(kind, 0), self.references.get(kind, 0)

    def cost(self, kind: str) -> int:
        return sum(self.of(kind))


def inner_arguments(
    calls: int, count: int, parts: frozenset[str], floor: bool, runs: int, wait: bool, collector: bool
) -> list[str]:
    """This script's arguments for a process that runs ``count`` measured turns of the shape."""
    arguments = [__file__, "--inner", str(calls), str(count), "--runs", str(runs)]
    if parts:
        arguments += ["--parts", ",".join(sorted(parts))]
    if floor:
        arguments.append("--floor")
    if wait:
        arguments.append("--wait")
    if not collector:
        arguments.append("--no-collector")
    return arguments


def counted(calls: int, count: int, parts: frozenset[str], floor: bool, runs: int, wait: bool, collector: bool) -> int:
    """The instructions valgrind counts for the whole process with ``count`` measured turns."""
    return valgrind_count(inner_arguments(calls, count, parts, floor, runs, wait, collector))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("calls", type=int, help="calls per turn")
    parser.add_argument("turns", type=int, help="measured turns")
    parser.add_argument("--full", action="store_true", help="a pre hook, a post hook and permission rules")
    parser.add_argument("--parts", default="", help="some of the full pipeline: pre, post, rules (comma-separated)")
    parser.add_argument("--floor", action="store_true", help="compare.py's TaskGroup floor instead of toolsched")
    parser.add_argument("--runs", type=int, default=1, help="turns at once, each in its own task (default 1)")
    parser.add_argument("--wait", action="store_true", help="the tool awaits asyncio.sleep(0): every call waits")
    parser.add_argument("--no-collector", action="store_true", help="the cyclic collector off while turns are measured")
    parser.add_argument(
        "--by-function",
        type=int,
        nargs="?",
        const=25,
        default=None,
        metavar="K",
        help="by C function, beside the floor: the groups and the K functions that differ most (default 25)",
    )
    parser.add_argument(
        "--walks",
        type=int,
        nargs="?",
        const=25,
        default=None,
        metavar="K",
        help="what the cyclic collector walks per call, beside the floor: the K kinds of object that differ most",
    )
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    parts = frozenset(PARTS) if args.full else frozenset(part for part in args.parts.split(",") if part)
    if not parts <= PARTS:
        raise SystemExit(f"unknown parts: {', '.join(sorted(parts - PARTS))} (known: {', '.join(sorted(PARTS))})")
    if args.inner:
        global COLLECTOR
        COLLECTOR = not args.no_collector
        watched = Walks() if args.walks is not None else None
        if watched is not None:
            WATCHERS.append(watched)
        asyncio.run((floor_turns if args.floor else turns)(args.calls, args.turns, parts, args.runs, args.wait))
        if watched is not None:
            print(json.dumps({"passes": watched.passes, "objects": watched.objects, "references": watched.references}))
        return
    if args.runs < 1:
        raise SystemExit("--runs must be at least 1")
    if args.walks is not None:
        if args.floor or args.no_collector or args.by_function is not None:
            raise SystemExit(
                "--walks measures toolsched beside its floor, with the collector: "
                "no --floor, --no-collector or --by-function"
            )
        if args.walks < 1:
            raise SystemExit("--walks K must be at least 1")
        walks(args.calls, args.turns, parts, args.runs, args.wait, args.walks)
        return
    if args.by_function is not None:
        if args.floor or args.no_collector:
            raise SystemExit(
                "--by-function measures toolsched beside its floor, with the collector: no --floor, no --no-collector"
            )
        if args.by_function < 1:
            raise SystemExit("--by-function K must be at least 1")
        by_function(args.calls, args.turns, parts, args.runs, args.wait, args.by_function)
        return
    collector = not args.no_collector
    base = counted(args.calls, 0, parts, args.floor, args.runs, args.wait, collector)
    total = counted(args.calls, args.turns, parts, args.floor, args.runs, args.wait, collector)
    per_call = (total - base) / (args.turns * args.calls * args.runs)
    if args.floor:
        label = "floor + the same hooks and rules by hand" if parts else "TaskGroup floor"
    elif parts == PARTS:
        label = "full pipeline"
    elif parts:
        label = "validation + Partitioned + " + " + ".join(sorted(parts))
    else:
        label = "validation + Partitioned"
    shape = f"{args.runs} runs x N={args.calls}" if args.runs > 1 else f"N={args.calls}"
    if args.wait:
        label += ", every call waits"
    if args.no_collector:
        label += ", no cyclic collector"
    print(f"{shape} ({label}): {per_call:,.0f} instructions per call")


if __name__ == "__main__":
    main()
