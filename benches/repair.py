"""Argument repair: the share of malformed argument texts repaired to the intended arguments, the time per
repair, and the cost of planning valid texts with repair on and off.

    PYTHONPATH=python python benches/repair.py
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

from toolsched import _core

SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "lines": {"type": "integer"},
        "exact": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "text": {"type": "string"},
    },
    "required": ["path"],
}
PLAIN = _core.Limits(16 * 1024 * 1024, 64, 10)
REPAIRING = _core.Limits(16 * 1024 * 1024, 64, 10, repair=True)


class Call:
    __slots__ = ("args", "id", "name")

    def __init__(self, call_id: str, args: Any) -> None:
        self.id, self.name, self.args = call_id, "read", args


def intended(rng: random.Random) -> dict[str, Any]:
    return {
        "path": f"src/{rng.choice(['a', 'b', 'c'])}{rng.randrange(100)}.py",
        "lines": rng.randrange(1, 500),
        "exact": rng.random() < 0.5,
        "tags": [f"t{rng.randrange(9)}" for _ in range(rng.randrange(1, 3))],
        "text": "first line\nsecond line",
    }


# Each kind of malformation, made from the intended arguments.
KINDS = {
    "code_fence": lambda a: f"```json\n{json.dumps(a)}\n```",
    "surrounding_prose": lambda a: f"Here are the arguments: {json.dumps(a)} Let me know.",
    "trailing_comma": lambda a: json.dumps(a)[:-1] + ",}",
    "single_quotes": lambda a: json.dumps(a).replace('"', "'"),
    "unquoted_key": lambda a: json.dumps(a).replace('"path":', "path:"),
    "python_literal": lambda a: json.dumps(a).replace("true", "True").replace("false", "False"),
    "comment": lambda a: json.dumps(a).replace("{", "{ // the file\n", 1),
    "control_character": lambda a: json.dumps(a).replace("\\n", "\n"),
    "encoded_string": lambda a: json.dumps(json.dumps(a)),
    "number_as_string": lambda a: json.dumps({**a, "lines": str(a["lines"])}),
    "boolean_as_string": lambda a: json.dumps({**a, "exact": str(a["exact"]).lower()}),
    "single_value_for_array": lambda a: json.dumps({**a, "tags": a["tags"][0]}),
}


def main() -> None:
    rng = random.Random(7)
    table = _core.ToolTable([("read", [], SCHEMA)])
    corpus: list[tuple[str, str, dict[str, Any]]] = []
    for kind, make in KINDS.items():
        for _ in range(20):
            args = intended(rng)
            if kind == "single_value_for_array":
                args["tags"] = args["tags"][:1]
            corpus.append((kind, make(args), args))
    correct: dict[str, int] = dict.fromkeys(KINDS, 0)
    repairs: list[tuple[int, tuple[str, ...]]] = []
    calls = [Call(str(i), text) for i, (_, text, _) in enumerate(corpus)]
    _, args, _, _, _, _ = table.prepare(calls, [], REPAIRING, None, None, repairs)
    for (kind, _, want), got in zip(corpus, args, strict=True):
        correct[kind] += got == want
    total = sum(correct.values())
    print(f"corpus: {len(corpus)} malformed texts, repaired correctly: {total} ({100 * total / len(corpus):.1f}%)")
    for kind, count in correct.items():
        print(f"  {kind:24} {count}/20")
    rounds = 200
    start = time.perf_counter()
    for _ in range(rounds):
        table.prepare(calls, [], REPAIRING, None, None, [])
    per = (time.perf_counter() - start) / rounds / len(calls) * 1e6
    print(f"planning a malformed call with repair: {per:.2f} µs per call")
    valid = [Call(str(i), json.dumps(want)) for i, (_, _, want) in enumerate(corpus)]
    for label, limits in (("off", PLAIN), ("on", REPAIRING), ("off", PLAIN), ("on", REPAIRING)):
        start = time.perf_counter()
        for _ in range(rounds):
            table.prepare(valid, [], limits)
        per = (time.perf_counter() - start) / rounds / len(valid) * 1e6
        print(f"planning a valid call, repair {label}: {per:.2f} µs per call")


if __name__ == "__main__":
    main()
