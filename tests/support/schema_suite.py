"""The official JSON-Schema-Test-Suite's cases, run through the engine, from a checkout outside this repo.

    python tests/support/schema_suite.py PATH/TO/JSON-Schema-Test-Suite

Each instance of ``tests/draft2020-12/*.json`` (and of the optional number files, ``bignum.json`` and
``float-overflow.json``) is sent as a call's arguments: under the case's schema when the instance is an
object (the schema as a tool's whole input schema), and always as the property ``v`` of an object
(``{"type": "object", "properties": {"v": SCHEMA}, "required": ["v"]}``).

- The direct path: for every case whose schema it takes (``rust/direct.rs``), the instance as text must
  get the suite's answer (valid or not) and the full path's (``{"allOf": [SCHEMA]}``, which the direct
  path does not take: the same verdict and message).
- Every form: for every case whose schema registers (no remote reference, no custom metaschema), the
  instance as text through the full path and as a mapping must get the suite's answer, and an accepted
  text must reach the tool as ``json.loads`` builds it (an int as an int). An instance holding an integer
  past 64 bits is refused on purpose (``rust/validate.rs``, ``parse_arguments``), and counted apart.

Prints a line per keyword file and exits 1 on any disagreement. The suite's data stays outside this repo.
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
EMPTY = _core.ToolTable([("t", [], {})])


def table(schema: Any) -> _core.ToolTable | None:
    try:
        return _core.ToolTable([("t", [], schema)])
    except Exception:  # a schema this project refuses to register (a remote reference, …)
        return None


def answer(tools: _core.ToolTable, instance: Any, text: bool = True) -> tuple[Any, list[tuple[int, str, str]]]:
    """The arguments the tool would get and the refusals, for ``instance`` sent as text or as a mapping."""
    call = SimpleNamespace(id="1", name="t", args=json.dumps(instance) if text else instance)
    _, args, failures, _, _, _ = tools.prepare([call], [], LIMITS)
    return args[0], failures


def same(a: Any, b: Any) -> bool:
    """Equal in value and in type, all the way down (an int is not a float)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def past_64_bits(value: Any) -> bool:
    """Whether ``value`` holds an integer the engine refuses on purpose."""
    if isinstance(value, dict):
        return any(map(past_64_bits, value.values()))
    if isinstance(value, list):
        return any(map(past_64_bits, value))
    return type(value) is int and not -(2**63) <= value < 2**64


def forms(schema: Any, data: Any) -> list[tuple[Any, Any]]:
    """The (schema, instance) pairs a case is run as: at the root when the instance is an object, and as a property."""
    inner = {key: value for key, value in schema.items() if key != "$schema"} if isinstance(schema, dict) else schema
    pairs = [({"type": "object", "properties": {"v": inner}, "required": ["v"]}, {"v": data})]
    if isinstance(data, dict):
        pairs.append((schema, data))
    return pairs


def embedded(schema: Any, data: Any) -> list[tuple[Any, Any]]:
    """The pairs a case is run as through the full path: as ``forms`` does, the schema as a property being a
    resource of its own (an ``$id``), so that its references to ``#`` and its ``$schema`` keep their meaning."""
    inner = {"$id": "urn:toolsched:case", **schema} if isinstance(schema, dict) else schema
    pairs = [({"type": "object", "properties": {"v": inner}, "required": ["v"]}, {"v": data})]
    if isinstance(data, dict):
        pairs.append((schema, data))
    return pairs


def direct_wrong(schema: Any, instance: Any, valid: bool) -> str | None:
    """What is wrong with the direct path's answer, if anything (None too when it does not take ``schema``)."""
    direct = table(schema)
    if direct is None or not direct.has_direct_path(0):
        return None
    full = table({"allOf": [schema]})
    assert full is not None and not full.has_direct_path(0)
    _, failures = answer(direct, instance)
    if (not failures) != valid or failures != answer(full, instance)[1]:
        return f"direct path: {failures}"
    return None


def full_wrong(schema: Any, instance: Any, valid: bool) -> str | None:
    """What is wrong with the full path's answer to the text and the mapping, if anything (None too when
    the schema does not register)."""
    full = table({"allOf": [schema]})
    if full is None:
        return None
    text = json.dumps(instance)
    for form, (args, failures) in (("text", answer(full, instance)), ("mapping", answer(full, instance, False))):
        if (not failures) != valid:
            return f"{form}: {failures or 'accepted'}"
        if not failures and not same(args, json.loads(text)):
            return f"{form}: built {args!r}"
    return None


def run(suite: Path) -> int:
    root = suite / "tests" / "draft2020-12"
    files = sorted(root.glob("*.json")) + [root / "optional" / name for name in ("bignum.json", "float-overflow.json")]
    if not files[0].name.endswith(".json") or not all(path.exists() for path in files):
        print(f"no draft 2020-12 cases under {suite}", file=sys.stderr)
        return 2
    disagreements = 0
    direct_runs = full_runs = refused_on_purpose = 0
    print(
        f"{'keyword file':32} {'direct: cases':>13} {'of':>4} {'instances':>9} {'wrong':>6}"
        f" {'every form: instances':>21} {'wrong':>6} {'64-bit':>6}"
    )
    for path in files:
        groups = json.loads(path.read_text())
        taken = runs = wrong = every = every_wrong = refused = 0
        for group in groups:
            group_taken = False
            for test in group["tests"]:
                where = f"{path.name}: {group['description']} / {test['description']}"
                if past_64_bits(test["data"]):
                    refused += 1
                    for form in (True, False):
                        _, failures = answer(EMPTY, {"v": test["data"]}, form)
                        if not failures or "outside the 64-bit range" not in failures[0][2]:
                            every_wrong += 1
                            print(f"  WRONG {where}: an integer past 64 bits not refused: {failures}")
                    continue
                for schema, instance in forms(group["schema"], test["data"]):
                    direct = table(schema)
                    if direct is not None and direct.has_direct_path(0):
                        group_taken = True
                        runs += 1
                        problem = direct_wrong(schema, instance, test["valid"])
                        if problem is not None:
                            wrong += 1
                            print(f"  WRONG {where}: {problem}")
                for schema, instance in embedded(group["schema"], test["data"]):
                    # A custom metaschema (its vocabularies) is never retrieved: such a case cannot be run.
                    custom = isinstance(group["schema"], dict) and group["schema"].get("$schema", DRAFT) != DRAFT
                    if not custom and table({"allOf": [schema]}) is not None:
                        every += 1
                        problem = full_wrong(schema, instance, test["valid"])
                        if problem is not None:
                            every_wrong += 1
                            print(f"  WRONG {where}: {problem}")
            taken += group_taken
        print(
            f"{path.name:32} {taken:>13} {len(groups):>4} {runs:>9} {wrong:>6}"
            f" {every:>21} {every_wrong:>6} {refused:>6}"
        )
        disagreements += wrong + every_wrong
        direct_runs += runs
        full_runs += every
        refused_on_purpose += refused
    print(
        f"{direct_runs} instances through the direct path, {full_runs} as text and as a mapping through the full"
        f" path, {refused_on_purpose} refused on purpose (integers past 64 bits); {disagreements} wrong"
    )
    return 1 if disagreements else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(run(Path(sys.argv[1])))
