"""The official JSON-Schema-Test-Suite's cases, run through the direct path, from a checkout outside this repo.

    python tests/support/schema_suite.py PATH/TO/JSON-Schema-Test-Suite

For every case of ``tests/draft2020-12/*.json`` whose schema the direct path takes (``rust/direct.rs``),
each instance is sent as a call's argument text, twice: under the case's schema when the instance is an
object (the schema as a tool's whole input schema), and always as the property ``v`` of an object
(``{"type": "object", "properties": {"v": SCHEMA}, "required": ["v"]}``). Each answer must be the
suite's (valid or not) and the full path's (``{"allOf": [SCHEMA]}``, which the direct
path does not take: the same verdict and message). Prints a line per keyword file and exits 1 on
any disagreement. The suite's data stays outside this repo.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from toolsched import _core

LIMITS = _core.Limits(16 * 1024 * 1024, 64, 10)
DRAFT = "https://json-schema.org/draft/2020-12/schema"


def table(schema: Any) -> _core.ToolTable | None:
    try:
        return _core.ToolTable([("t", [], schema)])
    except Exception:  # a schema this project refuses to register (a remote reference, …)
        return None


def answer(tools: _core.ToolTable, instance: Any) -> list[tuple[int, str, str]]:
    call = SimpleNamespace(id="1", name="t", args=json.dumps(instance))
    return tools.prepare([call], [], LIMITS)[2]


def forms(schema: Any, data: Any) -> list[tuple[Any, Any]]:
    """The (schema, instance) pairs a case is run as: at the root when the instance is an object, and as a property."""
    inner = {key: value for key, value in schema.items() if key != "$schema"} if isinstance(schema, dict) else schema
    pairs = [({"type": "object", "properties": {"v": inner}, "required": ["v"]}, {"v": data})]
    if isinstance(data, dict):
        pairs.append((schema, data))
    return pairs


def run(suite: Path) -> int:
    files = sorted((suite / "tests" / "draft2020-12").glob("*.json"))
    if not files:
        print(f"no draft 2020-12 cases under {suite}", file=sys.stderr)
        return 2
    disagreements = 0
    total_runs = 0
    print(f"{'keyword file':32} {'cases taken':>11} {'of':>4} {'instances run':>13} {'wrong':>6}")
    for path in files:
        groups = json.loads(path.read_text())
        taken = runs = wrong = 0
        for group in groups:
            group_taken = False
            for test in group["tests"]:
                for schema, instance in forms(group["schema"], test["data"]):
                    direct = table(schema)
                    if direct is None or not direct.has_direct_path(0):
                        continue
                    full = table({"allOf": [schema]})
                    assert full is not None and not full.has_direct_path(0)
                    group_taken = True
                    runs += 1
                    failures = answer(direct, instance)
                    if (not failures) != test["valid"] or failures != answer(full, instance):
                        wrong += 1
                        print(f"  WRONG {path.name}: {group['description']} / {test['description']}: {failures}")
            taken += group_taken
        if taken:
            print(f"{path.name:32} {taken:>11} {len(groups):>4} {runs:>13} {wrong:>6}")
        disagreements += wrong
        total_runs += runs
    print(f"{total_runs} instances through the direct path, {disagreements} wrong")
    return 1 if disagreements else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(run(Path(sys.argv[1])))
