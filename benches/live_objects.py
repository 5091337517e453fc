"""The objects the cyclic collector tracks while one turn's calls wait, beside a bare TaskGroup's.

    python benches/live_objects.py          # a turn of 3 calls
    python benches/live_objects.py 10       # a turn of 10 calls
    python benches/live_objects.py 3 --full # the full pipeline (two hooks, rules)

A pass of the collector starts after every 700 tracked objects made and not yet freed, and walks every
young object still alive; while many runs wait at once, each holds what its turn keeps alive, so the
count per waiting turn drives how often the collector runs and how much it walks
(``instructions.py --no-collector`` gives its cost). Every call's tool waits on one event until the
last call has started; then the objects made since the turn began and still tracked are counted by
type (the harness's own few are among them on both sides: its turn coroutine, the waiting tools'
coroutines and the event's waiters).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json

import toolsched as ts


def kind(thing: object) -> str:
    """A short name for a tracked object: its type, and what it runs or holds where that tells more."""
    name = type(thing).__name__
    if name in ("coroutine", "function"):
        return f"{name} {getattr(thing, '__qualname__', '?')}"
    if name == "method":
        return f"method {getattr(thing, '__qualname__', '?')}"
    if name == "cell":
        try:
            return f"cell of {type(thing.cell_contents).__name__}"  # type: ignore[attr-defined]
        except ValueError:
            return "cell, empty"
    return name


async def count_live(calls: int, full: bool, floor: bool) -> collections.Counter[str]:
    gate = asyncio.Event()
    arrived = 0
    snapshot: collections.Counter[str] = collections.Counter()
    before: set[int] = set()
    # What existed before the counted turn, held alive while it runs: an object that died meanwhile
    # would free its id for a new one, which would then be left out of the count.
    held: list[object] = []

    async def body() -> None:
        nonlocal arrived
        arrived += 1
        if arrived == calls:
            if before:
                snapshot.update(kind(thing) for thing in gc.get_objects() if id(thing) not in before)
            gate.set()
        await gate.wait()

    @ts.tool(read_only=True, concurrency_safe=True, rule_subject="path")
    async def noop(path: str, limit: int = 10) -> None:
        await body()

    async def bare(path: str, limit: int = 10) -> None:
        await body()

    options: dict[str, object] = {}
    if full:

        async def observe(event: ts.HookEvent) -> None:
            return None

        hooks = ts.Hooks()
        hooks.pre_tool_use("*", observe)
        hooks.post_tool_use("*", observe)
        options["hooks"] = hooks
        options["permissions"] = ts.Permissions(allow=["noop(src/**)"], deny=["noop(secret/**)"])
    executor = ts.Executor([noop], strategy=ts.Partitioned(), **options)  # type: ignore[arg-type]
    texts = [(f"c{i}", json.dumps({"path": f"src/file_{i}.py", "limit": i % 50 + 1})) for i in range(calls)]

    async def turn() -> None:
        if floor:
            async with asyncio.TaskGroup() as group:
                for _, text in texts:
                    group.create_task(bare(**json.loads(text)))
        else:
            await executor.run([ts.ToolCall(call_id, "noop", text) for call_id, text in texts])

    async def once(counted: bool) -> None:
        nonlocal gate, arrived
        gate = asyncio.Event()
        arrived = 0
        if counted:
            gc.collect()
            held.extend(gc.get_objects())
            before.update(id(thing) for thing in held)
            before.add(id(before))
            before.add(id(held))
        await asyncio.create_task(turn())

    for _ in range(3):
        await once(False)
    await once(True)
    return snapshot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("calls", type=int, nargs="?", default=3, help="calls per turn (default 3)")
    parser.add_argument("--full", action="store_true", help="a pre hook, a post hook and permission rules")
    args = parser.parse_args()
    if args.calls < 1:
        raise SystemExit("calls must be at least 1")
    for label, floor in (("bare TaskGroup", True), ("toolsched" + (", full pipeline" if args.full else ""), False)):
        counts = asyncio.run(count_live(args.calls, args.full, floor))
        print(f"{label}: {sum(counts.values())} tracked objects alive while {args.calls} calls wait")
        for name, number in counts.most_common():
            print(f"  {number:4}  {name}")


if __name__ == "__main__":
    main()
