"""Instructions per evaluation of the pieces a call makes or reads, counted by valgrind, each beside its plain form.

    python benches/pieces.py                 # every piece, 100,000 evaluations each
    python benches/pieces.py --count 20000   # fewer
    python benches/pieces.py --only digest   # the pieces whose name holds "digest"

The figures behind ``toolsched/_values/fastpath.py`` and the per-call short ways of ``permissions.py`` and
``results.py``: each piece runs ``--count`` times in a loop, under valgrind, with and without the loop
(``instructions.py``'s method), so start-up cancels out. A piece's "plain" row is the way it would be
made or answered without the short way.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import sys
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from instructions import valgrind_count

from toolsched._backends.workers import WorkerGroup

_SCALARS = frozenset({str, int, float, bool, type(None)})


def python_detached(args: Any) -> Any:
    """``args_copy`` written in Python: each value's type checked, then a shallow copy (else a deep one)."""
    if type(args) is dict:
        for value in args.values():
            if type(value) not in _SCALARS:
                return copy.deepcopy(args)
        return args.copy()
    return copy.deepcopy(args)


def plain_value_digest(args: Any) -> str:
    """``value_digest`` of a dict without its short ways: every value rebuilt by value, then ``json.dumps``
    with the canonical options (which makes an encoder on every call)."""
    import hashlib
    import json

    from toolsched._values.codec import jsonable

    def by_value(value: Any) -> Any:
        if isinstance(value, float):
            return int(value) if value.is_integer() else value
        if isinstance(value, dict):
            return {key: by_value(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [by_value(item) for item in value]
        return value

    text = json.dumps(by_value(args), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=jsonable)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def pieces() -> dict[str, Callable[[], Any]]:
    """Each piece as a function of no arguments, its inputs made once."""
    import toolsched as ts
    from toolsched import _core
    from toolsched._policy.hooks import HookEvent, new_hook_event
    from toolsched._policy.tool_rules import UNDECIDED
    from toolsched._values.calls import args_copy
    from toolsched._values.digest import value_digest
    from toolsched._values.results import new_result

    result_fields = ("c1", "noop", None, None, None, False, 0.1, True, 0, False, None, 1)
    args = {"path": "src/file_1.py", "limit": 3}
    text = '{"path": "src/file_1.py", "limit": 3}'

    @ts.tool(rule_subject="path")
    async def noop(path: str, limit: int = 10) -> None:
        return None

    rules = ts.Permissions(allow=["noop(src/**)"], deny=["noop(secret/**)"]).for_tool(noop)
    assert rules is not None
    table = _core.RuleTable(UNDECIDED, [rules.engine])
    return {
        "ToolResult: the builder": lambda: new_result(*result_fields),
        "ToolResult: plain (the dataclass __init__)": lambda: ts.ToolResult(*result_fields),
        "HookEvent: the builder": lambda: new_hook_event("c1", "noop", args, None, None, None),
        "HookEvent: plain (the dataclass __init__)": lambda: HookEvent("c1", "noop", args, None, None, None),
        "the arguments' copy a hook gets (args_copy)": lambda: args_copy(args),
        "the arguments' copy: plain (a loop over the values in Python)": lambda: python_detached(args),
        "ToolCall(id, name, text)": lambda: ts.ToolCall("call_0", "noop", text),
        "the repeat guard's key (value_digest)": lambda: value_digest(args),
        "the repeat guard's key: plain (values rebuilt, json.dumps)": lambda: plain_value_digest(args),
        "rules: set and prefix tests (evaluate)": lambda: rules.evaluate(args),
        "rules: plain (every pattern in turn)": lambda: rules._evaluate_values(args),
        "rules: the engine's verdict (RuleTable.judge, one crossing each)": lambda: table.judge(0, args),
        "a pool's worker group made, entered and left (no worker)": group_entered_and_left,
    }


def group_entered_and_left() -> None:
    """What a concurrent batch whose calls never wait pays for its worker group (in a running event loop)."""
    group = WorkerGroup()
    if not (group.enter() and group.leave()):
        raise SystemExit("the worker group needs a wait here: no count")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000, help="evaluations of each piece")
    parser.add_argument("--only", default="", help="count only the pieces whose name holds this text")
    parser.add_argument("--inner", nargs=2, metavar=("PIECE", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner is not None:
        piece = pieces()[args.inner[0]]

        async def evaluations(count: int) -> None:
            # Inside a running event loop, as on the hot path (the worker group needs one).
            for _ in range(count):
                piece()

        asyncio.run(evaluations(int(args.inner[1])))
        return
    if args.count < 1:
        raise SystemExit("--count must be at least 1")
    for name in pieces():
        if args.only not in name:
            continue
        base = valgrind_count([__file__, "--inner", name, "0"])
        total = valgrind_count([__file__, "--inner", name, str(args.count)])
        print(f"{name:62s} {(total - base) / args.count:8,.0f} instructions")


if __name__ == "__main__":
    main()
