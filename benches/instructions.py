"""Instructions per call of ``Executor.run``, counted by valgrind: a figure the machine's load does not move.

    python benches/instructions.py 1 2000            # N = 1, 2,000 turns
    python benches/instructions.py 100 40 --full     # N = 100, the full pipeline (two hooks, rules)
    PYTHONPATH=<checkout>/python python benches/instructions.py 1 2000   # another checkout

Timing on a shared 2-core machine moves by 10-30 % with the load; an instruction count moves by
about 1 %. Each measurement runs the turns under ``valgrind --tool=cachegrind`` twice, with and
without the measured turns, and divides the difference: start-up and warm-up cancel out. Needs
valgrind (Debian's ``valgrind`` package). The workload is compare.py's: calls of a no-op async tool
``(path: str, limit: int)`` given as JSON text, validated, scheduled by ``Partitioned``.
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


async def turns(calls: int, count: int, full: bool) -> None:
    import toolsched as ts

    @ts.tool(read_only=True, concurrency_safe=True, rule_subject="path")
    async def noop(path: str, limit: int = 10) -> None:
        return None

    async def pre(event: ts.HookEvent) -> None:
        return None

    async def post(event: ts.HookEvent) -> None:
        return None

    options: dict[str, object] = {}
    if full:
        options["hooks"] = ts.Hooks().pre_tool_use("*", pre).post_tool_use("*", post)
        options["permissions"] = ts.Permissions(allow=["noop(src/**)"], deny=["noop(secret/**)"])
    executor = ts.Executor([noop], strategy=ts.Partitioned(), **options)  # type: ignore[arg-type]
    texts = [(f"c{i}", json.dumps({"path": f"src/file_{i}.py", "limit": i % 50 + 1})) for i in range(calls)]

    async def turn() -> None:
        await executor.run([ts.ToolCall(call_id, "noop", text) for call_id, text in texts])

    for _ in range(30):
        await turn()
    gc.freeze()
    for _ in range(count):
        await turn()


def counted(calls: int, count: int, full: bool) -> int:
    """The instructions valgrind counts for the whole process with ``count`` measured turns."""
    command = [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        "--cachegrind-out-file=/dev/null",
        sys.executable,
        __file__,
        "--inner",
        str(calls),
        str(count),
    ]
    if full:
        command.append("--full")
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=os.environ)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if found is None:
        raise SystemExit(f"valgrind printed no instruction count:\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("calls", type=int, help="calls per turn")
    parser.add_argument("turns", type=int, help="measured turns")
    parser.add_argument("--full", action="store_true", help="a pre hook, a post hook and permission rules")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        asyncio.run(turns(args.calls, args.turns, args.full))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    base = counted(args.calls, 0, args.full)
    total = counted(args.calls, args.turns, args.full)
    per_call = (total - base) / (args.turns * args.calls)
    label = "full pipeline" if args.full else "validation + Partitioned"
    print(f"N={args.calls} ({label}): {per_call:,.0f} instructions per call")


if __name__ == "__main__":
    main()
