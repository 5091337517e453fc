"""``toolsched bench``: runs one workload under several scheduling strategies and compares them.

Tool latencies are simulated with sleeps, so the comparison measures scheduling,
not the tools. Each simulated call reads and writes an in-memory workspace as it
declares (it reads when it starts and writes when it finishes; a write appends
the call's ID to the keys it covers), so the report can also say whether a
strategy produced the same reads and the same final workspace as running the
calls one by one. The workspace lives in the executor's process, so the tool
bodies (the sleeps) can run on another backend (``run_bench(backend=...)``).

Workloads are synthetic (``synthetic_workload``) or recorded: a JSONL file with
one turn per line::

    {"turn": "t1", "calls": [
      {"id": "c1", "name": "read_file", "args": {"path": "src/app.py"}, "latency_ms": 30, "reads": ["src/app.py"]},
      {"id": "c2", "name": "edit_file", "latency_ms": 45, "writes": ["src/app.py"]},
      {"id": "c3", "name": "shell", "args": {"command": "pytest -q"}, "latency_ms": 900}
    ]}

(each turn on a single line in the file). A turn has ``calls`` (a non-empty list)
and optionally ``turn`` (a label). A call has ``id`` and ``name`` (strings; names
of letters, digits, ``_``, ``-`` and ``.``, at most 64), ``latency_ms`` (a number,
0 or more) and optionally ``args`` (an object, recorded for reference),
``reads`` and ``writes`` (lists of resource keys; a call with neither has
unknown resources and conflicts with every call) and ``concurrency_safe``
(a bool, used by ``Partitioned``; by default a call that declares resources
and writes nothing is safe). Blank lines are skipped. A file holds at most 256 MiB
(``MAX_WORKLOAD_BYTES``) and a million calls (``MAX_SYNTHETIC_CALLS``).
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from toolsched import _core
from toolsched._backends.backends import Backend
from toolsched._executor.executor import Executor
from toolsched._executor.strategies import Batched, Parallel, Partitioned, ResourceAware, Sequential, Strategy
from toolsched._tools.tools import Access, Tool
from toolsched._values.calls import ToolCall
from toolsched._values.events import Event, ToolFinished, ToolStarted
from toolsched._values.outcome import Outcome
from toolsched.errors import OptionError, WorkloadError

__all__ = [
    "DEFAULT_LATENCY_MS",
    "DEFAULT_MIX",
    "KINDS",
    "STRATEGY_NAMES",
    "BenchReport",
    "SimulatedCall",
    "StrategyReport",
    "TurnTimer",
    "TurnTiming",
    "Workload",
    "describe_workload",
    "format_table",
    "load_workload",
    "make_strategy",
    "parse_latency",
    "parse_mix",
    "parse_mix_weights",
    "parse_strategies",
    "plot_report",
    "run_bench",
    "summarize",
    "synthetic_workload",
]

#: What synthetic calls do: read a file, search a directory, edit a file, run a shell command (unknown resources).
KINDS = ("reads", "search", "writes", "shell")
DEFAULT_MIX: Mapping[str, float] = {"reads": 0.7, "writes": 0.2, "shell": 0.1}
# The longest simulated call: a benchmark of calls longer than a minute measures nothing of the executor.
MAX_LATENCY_MS = 60_000.0
# The most calls a workload holds (``--turns`` x ``--calls``, or a recorded workload's turns together).
MAX_SYNTHETIC_CALLS = 1_000_000
# The largest workload file read (a million calls of a hundred-odd bytes each fit): a file past it (or one
# without end, such as /dev/zero) is refused, never read whole into memory.
MAX_WORKLOAD_BYTES = 256 << 20
# How much of a refused value a workload's error message shows.
_SHOWN_CHARS = 80
DEFAULT_LATENCY_MS: Mapping[str, float] = {"reads": 10.0, "search": 20.0, "writes": 15.0, "shell": 40.0}
STRATEGY_NAMES = ("sequential", "parallel", "batched", "partitioned", "resource_aware")

_TOOL_OF_KIND = {"reads": "read_file", "search": "grep", "writes": "edit_file", "shell": "shell"}
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_CALL_FIELDS = frozenset({"id", "name", "args", "latency_ms", "reads", "writes", "concurrency_safe"})
_TURN_FIELDS = frozenset({"turn", "calls"})
# The arguments through which a simulated tool finds its call's specification and its latency.
_SPEC_KEY = "_bench_call"
_LATENCY_KEY = "_bench_latency_ms"


@dataclass(frozen=True, slots=True)
class SimulatedCall:
    """One call of a workload: what the model sent, how long the tool takes, what it touches."""

    id: str
    name: str
    args: Mapping[str, Any]
    latency_ms: float
    access: Access | None
    concurrency_safe: bool


@dataclass(frozen=True, slots=True)
class Workload:
    """Turns of simulated calls, and how they were made (for the report)."""

    turns: tuple[tuple[SimulatedCall, ...], ...]
    description: Mapping[str, Any]

    @property
    def call_count(self) -> int:
        return sum(len(turn) for turn in self.turns)


# -- workloads --------------------------------------------------------------------------------------------------


def _spec_pairs(text: str, option: str) -> dict[str, float]:
    pairs: dict[str, float] = {}
    for part in text.split(","):
        name, sep, raw = part.partition("=")
        name = name.strip()
        if not sep or not name:
            raise OptionError(f"{option} takes KIND=NUMBER pairs separated by commas, got {part.strip()!r}")
        if name not in KINDS:
            raise OptionError(f"{option}: unknown kind {name!r}; kinds are {', '.join(KINDS)}")
        if name in pairs:
            raise OptionError(f"{option}: {name!r} is given twice")
        try:
            value = float(raw)
        except ValueError:
            raise OptionError(f"{option}: {name}={raw.strip()!r} is not a number") from None
        if not math.isfinite(value) or value < 0:
            raise OptionError(f"{option}: {name} must be a finite number, 0 or more; got {raw.strip()}")
        if option == "--latency" and value > MAX_LATENCY_MS:
            raise OptionError(f"{option}: {name} must be at most {MAX_LATENCY_MS:,.0f} ms; got {raw.strip()}")
        pairs[name] = value
    return pairs


def parse_mix_weights(text: str) -> dict[str, float]:
    """``--mix`` as given, before its shares are scaled to sum to 1."""
    return _spec_pairs(text, "--mix")


def parse_mix(text: str) -> dict[str, float]:
    """``reads=0.7,writes=0.2,shell=0.1`` -> the share of each kind of call (normalised to sum to 1)."""
    weights = _spec_pairs(text, "--mix")
    total = sum(weights.values())
    if total <= 0:
        raise OptionError("--mix: the shares must not all be zero")
    if not math.isfinite(total):
        raise OptionError(
            "--mix: the shares add up to more than a number can hold; give relative shares such as reads=0.7,writes=0.3"
        )
    return {kind: weights[kind] / total for kind in KINDS if weights.get(kind, 0) > 0}


def parse_latency(text: str) -> dict[str, float]:
    """``25`` (every kind) or ``reads=5,shell=80`` (those kinds; the others keep their defaults), in ms."""
    if "=" not in text:
        try:
            value = float(text)
        except ValueError:
            raise OptionError(f"--latency takes milliseconds or KIND=MS pairs, got {text!r}") from None
        if not math.isfinite(value) or value < 0:
            raise OptionError(f"--latency must be a finite number of milliseconds, 0 or more; got {text}")
        if value > MAX_LATENCY_MS:
            raise OptionError(f"--latency must be at most {MAX_LATENCY_MS:,.0f} ms (a simulated call); got {text}")
        return dict.fromkeys(KINDS, value)
    return {**DEFAULT_LATENCY_MS, **_spec_pairs(text, "--latency")}


def synthetic_workload(
    *,
    mix: Mapping[str, float] = DEFAULT_MIX,
    latency_ms: Mapping[str, float] = DEFAULT_LATENCY_MS,
    conflict_rate: float = 0.2,
    turns: int = 5,
    calls: int = 20,
    seed: int = 0,
) -> Workload:
    """A coding agent's turns: reads, searches, edits and shell commands over a workspace.

    ``conflict_rate`` is the chance that a call touches a path an earlier call of
    the turn touched (else it picks a path no other call uses); latencies vary
    by ±50 % around ``latency_ms`` of each kind.
    """
    for label, value in (("turns", turns), ("calls", calls)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise OptionError(f"--{label} must be a positive integer, got {value!r}")
    if turns * calls > MAX_SYNTHETIC_CALLS:
        # Every call is made before the first turn runs, and each strategy runs them all.
        raise OptionError(
            f"--turns x --calls must be at most {MAX_SYNTHETIC_CALLS:,} calls in all; got {turns:,} x {calls:,}"
        )
    if not 0 <= conflict_rate <= 1:
        raise OptionError(f"--conflict-rate must be between 0 and 1, got {conflict_rate}")
    kinds = [kind for kind in KINDS if mix.get(kind, 0) > 0]
    if not kinds:
        raise OptionError("--mix: the shares must not all be zero")
    weights = [mix[kind] for kind in kinds]
    rng = random.Random(seed)
    workload = []
    for turn in range(turns):
        used_files: list[str] = []
        used_dirs: list[str] = []
        fresh = 0
        specs = []
        for index in range(calls):
            kind = rng.choices(kinds, weights)[0]
            reuse = rng.random() < conflict_rate
            latency = latency_ms.get(kind, DEFAULT_LATENCY_MS[kind]) * rng.uniform(0.5, 1.5)
            access: Access | None
            if kind == "shell":
                access, args = None, {"command": rng.choice(["pytest -q", "make", "git status", "ruff check ."])}
            elif kind == "search":
                if reuse and used_dirs:
                    directory = rng.choice(used_dirs)
                else:
                    fresh += 1
                    directory = f"lib/pkg{fresh}"
                used_dirs.append(directory)
                access, args = Access(reads=[directory]), {"pattern": "deprecated", "path": directory}
            else:
                if reuse and used_files:
                    path = rng.choice(used_files)
                else:
                    fresh += 1
                    path = f"src/pkg{fresh % 4}/mod{fresh}.py"
                used_files.append(path)
                used_dirs.append(path.rsplit("/", 1)[0])
                access = Access(reads=[path]) if kind == "reads" else Access(writes=[path])
                args = {"path": path}
            specs.append(
                SimulatedCall(
                    id=f"t{turn}c{index}",
                    name=_TOOL_OF_KIND[kind],
                    args=args,
                    latency_ms=latency,
                    access=access,
                    concurrency_safe=kind in ("reads", "search"),
                )
            )
        workload.append(tuple(specs))
    description = {
        "source": "synthetic",
        "turns": turns,
        "calls_per_turn": calls,
        "mix": dict(mix),
        "latency_ms": {kind: latency_ms.get(kind, DEFAULT_LATENCY_MS[kind]) for kind in kinds},
        "conflict_rate": conflict_rate,
        "seed": seed,
    }
    return Workload(tuple(workload), description)


def _shown(value: Any) -> str:
    """A refused value as JSON, cut short: a message quotes what was wrong, not a whole line of the file."""
    text = json.dumps(value)
    return text if len(text) <= _SHOWN_CHARS else f"{text[:_SHOWN_CHARS]}... ({len(text):,} characters)"


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _keys(where: str, value: Any, label: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(k, str) and k for k in value):
        raise WorkloadError(f"{where}: {label} must be a list of non-empty strings, got {_shown(value)}")
    return list(value)


def _parse_call(where: str, raw: Any) -> SimulatedCall:
    if not isinstance(raw, dict):
        raise WorkloadError(f"{where} must be an object, got {_shown(raw)}")
    unknown = sorted(set(raw) - _CALL_FIELDS)
    if unknown:
        known = ", ".join(sorted(_CALL_FIELDS))
        raise WorkloadError(f"{where} has unknown field(s) {', '.join(unknown)}; fields are {known}")
    for name in ("id", "name", "latency_ms"):
        if name not in raw:
            raise WorkloadError(f"{where}: field {name} is missing")
    call_id, name, latency = raw["id"], raw["name"], raw["latency_ms"]
    if not isinstance(call_id, str) or not call_id:
        raise WorkloadError(f"{where}: id must be a non-empty string, got {_shown(call_id)}")
    if not _is_unicode(call_id):
        raise WorkloadError(f"{where}: id {_shown(call_id)} holds a lone surrogate, which is not valid Unicode")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise WorkloadError(f"{where}: name must be 1 to 64 letters, digits, '_', '-' or '.', got {_shown(name)}")
    if isinstance(latency, bool) or not isinstance(latency, int | float) or not math.isfinite(latency) or latency < 0:
        raise WorkloadError(f"{where}: latency_ms must be a number, 0 or more; got {_shown(latency)}")
    if latency > MAX_LATENCY_MS:
        raise WorkloadError(f"{where}: latency_ms must be at most {MAX_LATENCY_MS:,.0f}; got {_shown(latency)}")
    args = raw.get("args", {})
    if not isinstance(args, dict):
        raise WorkloadError(f"{where}: args must be an object, got {_shown(args)}")
    declared = "reads" in raw or "writes" in raw
    access = (
        Access(reads=_keys(where, raw.get("reads", []), "reads"), writes=_keys(where, raw.get("writes", []), "writes"))
        if declared
        else None
    )
    safe = raw.get("concurrency_safe", access is not None and not access.writes)
    if not isinstance(safe, bool):
        raise WorkloadError(f"{where}: concurrency_safe must be true or false, got {_shown(safe)}")
    return SimulatedCall(call_id, name, args, float(latency), access, safe)


def load_workload(path: str | Path, *, turns: int | None = None) -> Workload:
    """Reads a recorded workload (JSONL, one turn per line; see the module's doc). ``turns`` keeps the first N."""
    source = Path(path)
    try:
        with source.open("rb") as file:
            data = file.read(MAX_WORKLOAD_BYTES + 1)
    except OSError as exc:
        raise WorkloadError(f"cannot read workload {str(source)!r}: {exc.strerror or exc}") from None
    if len(data) > MAX_WORKLOAD_BYTES:
        raise WorkloadError(
            f"{source}: a workload file holds at most {MAX_WORKLOAD_BYTES >> 20} MiB; this one holds more"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{source}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    del data
    parsed: list[tuple[SimulatedCall, ...]] = []
    total = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source} line {number}"
        try:
            turn = json.loads(line)
        except RecursionError:
            raise WorkloadError(f"{where}: the line nests too deep to be a workload") from None
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        except ValueError as exc:
            # What the JSON reader refuses beyond the grammar: an integer of more digits than Python converts.
            raise WorkloadError(f"{where}: not a workload's JSON ({exc})") from None
        if not isinstance(turn, dict):
            raise WorkloadError(f"{where}: a turn must be a JSON object with a calls list")
        unknown = sorted(set(turn) - _TURN_FIELDS)
        if unknown:
            raise WorkloadError(f"{where}: unknown field(s) {', '.join(unknown)}; a turn has calls and turn")
        if "turn" in turn and not isinstance(turn["turn"], str):
            raise WorkloadError(f"{where}: turn must be a string label, got {_shown(turn['turn'])}")
        calls = turn.get("calls")
        if not isinstance(calls, list) or not calls:
            raise WorkloadError(f"{where}: calls must be a non-empty list, got {_shown(calls)}")
        total += len(calls)
        if total > MAX_SYNTHETIC_CALLS:
            # Every call is made before the first turn runs, and each strategy runs them all.
            raise WorkloadError(
                f"{where}: a workload holds at most {MAX_SYNTHETIC_CALLS:,} calls in all (--turns N reads fewer turns)"
            )
        parsed.append(tuple(_parse_call(f"{where}: calls[{i}]", call) for i, call in enumerate(calls)))
        if turns is not None and len(parsed) == turns:
            break
    if not parsed:
        raise WorkloadError(f"{source}: the workload has no turns")
    description = {"source": str(source), "turns": len(parsed), "calls": sum(len(t) for t in parsed)}
    return Workload(tuple(parsed), description)


def parse_strategies(text: str, *, max_concurrency: int, batch_size: int) -> list[tuple[str, Strategy]]:
    """``sequential,resource-aware`` -> ``[(name, strategy), ...]``, refusing unknown names and repeats."""
    chosen: list[tuple[str, Strategy]] = []
    for raw in text.split(","):
        if not raw.strip():
            raise OptionError(f"--strategies takes names separated by commas, got {text!r}")
        strategy = make_strategy(raw, max_concurrency=max_concurrency, batch_size=batch_size)
        name = STRATEGY_NAMES[[Sequential, Parallel, Batched, Partitioned, ResourceAware].index(type(strategy))]
        if any(name == seen for seen, _ in chosen):
            raise OptionError(f"--strategies: {raw.strip()!r} is listed twice")
        chosen.append((name, strategy))
    return chosen


def make_strategy(name: str, *, max_concurrency: int, batch_size: int) -> Strategy:
    """The strategy called ``name`` (one of ``STRATEGY_NAMES``; ``-`` and ``_`` alike) with the given sizes."""
    key = name.strip().lower().replace("-", "_")
    if key == "sequential":
        return Sequential()
    if key == "parallel":
        return Parallel(max_concurrency=max_concurrency)
    if key == "batched":
        return Batched(batch_size, max_concurrency=max_concurrency)
    if key == "partitioned":
        return Partitioned(max_concurrency=max_concurrency)
    if key in ("resource_aware", "resourceaware"):
        return ResourceAware(max_concurrency=max_concurrency)
    raise OptionError(f"--strategies: unknown strategy {name.strip()!r}; strategies are {', '.join(STRATEGY_NAMES)}")


# -- running ----------------------------------------------------------------------------------------------------


def _covers(outer: str, inner: str) -> bool:
    if outer == inner:
        return True
    if outer == ".":
        return not inner.startswith("/")
    return inner.startswith(outer if outer == "/" else outer + "/")


# Digests of the workspace are 64-bit: what a run read or left is told apart by them, not kept whole.
_MASK = (1 << 64) - 1


class _Workspace:
    """The state simulated calls read and write: key -> a digest of the IDs of the calls that wrote it, in order.

    Kept so that each read and write costs about what it touches, not the whole workspace: a turn of many calls
    (one key or more each) would otherwise cost the square of its calls in time, and in memory for what each
    call read. A read is a digest of the items it covers; one of unknown resources reads everything, whose
    digest is kept up to date as keys are written."""

    __slots__ = ("_whole", "data", "keys")

    def __init__(self) -> None:
        self.data: dict[str, int] = {}
        # Every key written, sorted: the keys under a directory are a range of it.
        self.keys: list[str] = []
        # The digest of every item (order-free: the sum of the items' hashes).
        self._whole = 0

    def keys_of(self, access: Access | None) -> list[str] | None:
        return None if access is None else [_core.normalize_key(k) for k in (*access.reads, *access.writes)]

    def covered(self, outer: str) -> list[str]:
        """The keys written that ``outer`` covers (``_covers``), in order."""
        if outer == ".":
            return [k for k in self.keys if _covers(".", k)]
        found = [outer] if outer in self.data else []
        # The keys under ``outer/`` sort between ``outer/`` and ``outer0`` ('0' follows '/').
        prefix = "/" if outer == "/" else outer + "/"
        first = bisect.bisect_left(self.keys, prefix)
        last = bisect.bisect_left(self.keys, prefix[:-1] + "0")
        found.extend(k for k in self.keys[first:last] if k != outer)
        return found

    def read(self, keys: list[str] | None) -> int:
        if keys is None:
            return self._whole
        items = {k: self.data[k] for key in keys for k in self.covered(key)}
        return hash(tuple(sorted(items.items())))

    def _write_one(self, key: str, call_id: str) -> None:
        old = self.data.get(key)
        if old is None:
            bisect.insort(self.keys, key)
        else:
            self._whole = (self._whole - hash((key, old))) & _MASK
        value = hash((old, call_id))
        self.data[key] = value
        self._whole = (self._whole + hash((key, value))) & _MASK

    def write(self, access: Access | None, call_id: str) -> None:
        if access is None:
            self._write_one("(unknown)", call_id)
            return
        for raw in access.writes:
            key = _core.normalize_key(raw)
            for target in self.covered(key) or [key]:
                self._write_one(target, call_id)


class _Simulation:
    """The turn being run: its calls' specifications, its workspace, and what each call read.

    An ``on_event`` callback: a call reads the workspace when it starts and
    writes it when it finishes, here in the executor's process wherever its body runs.
    """

    __slots__ = ("by_id", "reads", "specs", "workspace")

    def __init__(self) -> None:
        self.specs: Sequence[SimulatedCall] = ()
        self.by_id: dict[str, SimulatedCall] = {}
        self.workspace = _Workspace()
        self.reads: dict[str, Any] = {}

    def begin(self, specs: Sequence[SimulatedCall]) -> None:
        self.specs = specs
        self.by_id = {}
        for spec in specs:
            # A repeated call ID runs once: its first occurrence.
            self.by_id.setdefault(spec.id, spec)
        self.workspace = _Workspace()
        self.reads = {}

    def spec(self, args: Mapping[str, Any]) -> SimulatedCall:
        return self.specs[int(args[_SPEC_KEY])]

    def __call__(self, event: Event) -> None:
        if isinstance(event, ToolStarted) and event.ran and event.call_id in self.by_id:
            spec = self.by_id[event.call_id]
            self.reads[spec.id] = self.workspace.read(self.workspace.keys_of(spec.access))
        elif isinstance(event, ToolFinished) and event.result.call_id in self.reads:
            self.workspace.write(self.by_id[event.result.call_id].access, event.result.call_id)

    def calls(self) -> list[ToolCall]:
        return [
            ToolCall(spec.id, spec.name, {**spec.args, _SPEC_KEY: i, _LATENCY_KEY: spec.latency_ms})
            for i, spec in enumerate(self.specs)
        ]


class _SimulatedTool(Tool):
    """A tool whose every call behaves as its workload says (latency, resources, safety)."""

    input_schema = {"type": "object"}

    def __init__(self, name: str, simulation: _Simulation, num_cpus: float | None = None) -> None:
        self.name = name
        self.description = f"simulated {name}"
        self._simulation = simulation
        self.num_cpus = num_cpus

    def resources(self, args: Mapping[str, Any]) -> Access | None:
        return self._simulation.spec(args).access

    def is_concurrency_safe(self, args: Mapping[str, Any]) -> bool:
        return self._simulation.spec(args).concurrency_safe

    async def call(self, args: Mapping[str, Any], ctx: Any) -> None:
        # Only the latency: the body may run in another process (see _Simulation).
        await anyio.sleep(float(args[_LATENCY_KEY]) / 1000)


class TurnTimer:
    """An ``on_event`` callback recording when each call of a turn started and finished."""

    __slots__ = ("origin", "spans")

    def __init__(self) -> None:
        self.origin = time.perf_counter()
        self.spans: dict[str, list[float]] = {}

    def begin(self) -> None:
        self.spans = {}
        self.origin = time.perf_counter()

    def __call__(self, event: Event) -> None:
        if isinstance(event, ToolStarted) and event.ran:
            now = time.perf_counter() - self.origin
            self.spans[event.call_id] = [now, now]
        elif isinstance(event, ToolFinished) and event.result.call_id in self.spans:
            self.spans[event.result.call_id][1] = time.perf_counter() - self.origin


@dataclass(frozen=True, slots=True)
class TurnTiming:
    """One turn under one strategy: how long it took, when each call ran (seconds from the start), the outcome."""

    makespan_s: float
    spans: Mapping[str, tuple[float, float]]
    outcome: Outcome
    final_state: Mapping[str, Any] = field(default_factory=dict)
    reads: Mapping[str, Any] = field(default_factory=dict)


async def time_turn(executor: Executor, timer: TurnTimer, calls: Sequence[ToolCall]) -> TurnTiming:
    """Runs one turn, timing it and each of its calls (``timer`` must be the executor's ``on_event``)."""
    timer.begin()
    outcome = await executor.run(calls)
    makespan = time.perf_counter() - timer.origin
    return TurnTiming(makespan, {k: (v[0], v[1]) for k, v in timer.spans.items()}, outcome)


async def _run_strategy(
    workload: Workload,
    strategy: Strategy,
    step: Callable[[], None] | None,
    backend: Backend | None = None,
    num_cpus: float | None = None,
) -> list[TurnTiming]:
    simulation = _Simulation()
    names = sorted({call.name for turn in workload.turns for call in turn})
    timer = TurnTimer()

    def observe(event: Event) -> None:
        simulation(event)
        timer(event)

    tools = [_SimulatedTool(name, simulation, num_cpus) for name in names]
    if backend is None:
        executor = Executor(tools, strategy=strategy, on_event=observe)
    else:
        executor = Executor(
            tools, strategy=strategy, on_event=observe, backends={"bench": backend}, default_backend="bench"
        )
    # One unmeasured pass over the first turn with no latency: first runs pay one-time costs.
    simulation.begin([dataclasses.replace(spec, latency_ms=0.0) for spec in workload.turns[0]])
    await executor.run(simulation.calls())
    timings = []
    for turn in workload.turns:
        simulation.begin(turn)
        timing = await time_turn(executor, timer, simulation.calls())
        timings.append(
            TurnTiming(
                timing.makespan_s, timing.spans, timing.outcome, dict(simulation.workspace.data), simulation.reads
            )
        )
        if step is not None:
            step()
    return timings


def _percentile(sorted_values: Sequence[float], percent: float) -> float:
    """Nearest-rank percentile of values sorted ascending."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(percent / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def _answers(timing: TurnTiming) -> list[tuple[str, Any, Any, str | None]]:
    return [(r.call_id, r.output, timing.reads.get(r.call_id), r.error_kind) for r in timing.outcome.results]


@dataclass(frozen=True, slots=True)
class StrategyReport:
    """How one strategy did on the workload.

    ``latency`` of a call is the time from the start of its turn until its
    result was ready (what a model waiting on that call waits).
    """

    name: str
    strategy: str
    makespan_s: float
    throughput_calls_per_s: float
    latency_p50_ms: float
    latency_p99_ms: float
    speedup: float
    same_results_as_sequential: bool
    timings: tuple[TurnTiming, ...] = field(repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "strategy": self.strategy,
            "makespan_s": round(self.makespan_s, 6),
            "throughput_calls_per_s": round(self.throughput_calls_per_s, 3),
            "latency_p50_ms": round(self.latency_p50_ms, 3),
            "latency_p99_ms": round(self.latency_p99_ms, 3),
            "speedup": round(self.speedup, 3),
            "same_results_as_sequential": self.same_results_as_sequential,
        }


def summarize(
    name: str, strategy: Strategy, timings: Sequence[TurnTiming], sequential: Sequence[TurnTiming]
) -> StrategyReport:
    """Turns the timings of one strategy into its report, against Sequential's timings of the same turns."""
    makespan = sum(t.makespan_s for t in timings)
    baseline = sum(t.makespan_s for t in sequential)
    calls = sum(len(t.outcome.results) for t in timings)
    latencies = sorted(end * 1000 for t in timings for _, end in t.spans.values())
    same = all(
        _answers(mine) == _answers(theirs) and mine.final_state == theirs.final_state
        for mine, theirs in zip(timings, sequential, strict=True)
    )
    return StrategyReport(
        name=name,
        strategy=repr(strategy),
        makespan_s=makespan,
        throughput_calls_per_s=calls / makespan if makespan > 0 else 0.0,
        latency_p50_ms=_percentile(latencies, 50),
        latency_p99_ms=_percentile(latencies, 99),
        speedup=baseline / makespan if makespan > 0 else 0.0,
        same_results_as_sequential=same,
        timings=tuple(timings),
    )


@dataclass(frozen=True, slots=True)
class BenchReport:
    """The comparison: the workload, the cap, and one report per strategy (Sequential first)."""

    workload: Mapping[str, Any]
    max_concurrency: int
    strategies: tuple[StrategyReport, ...]
    backend: str = "local"

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": dict(self.workload),
            "max_concurrency": self.max_concurrency,
            "backend": self.backend,
            "strategies": [report.to_json() for report in self.strategies],
        }


async def run_bench(
    workload: Workload,
    strategies: Sequence[tuple[str, Strategy]],
    *,
    max_concurrency: int,
    progress: Callable[[int, int, str], None] | None = None,
    backend: Backend | None = None,
    num_cpus: float | None = None,
) -> BenchReport:
    """Runs ``workload`` under each strategy, Sequential first (it is the baseline), and compares them.

    ``progress(done, total, name)`` is called after every turn. With ``backend``
    (say a ``RayBackend``) the simulated tool bodies run there, each asking for
    ``num_cpus``; scheduling, the workspace and the timing stay in this process.
    """
    chosen = list(strategies)
    if not any(name == "sequential" for name, _ in chosen):
        chosen.insert(0, ("sequential", Sequential()))
    chosen.sort(key=lambda pair: pair[0] != "sequential")
    total = len(chosen) * len(workload.turns)
    done = 0
    timings: dict[str, list[TurnTiming]] = {}
    for name, strategy in chosen:

        def step(name: str = name) -> None:
            nonlocal done
            done += 1
            if progress is not None:
                progress(done, total, name)

        timings[name] = await _run_strategy(workload, strategy, step, backend, num_cpus)
    reports = tuple(summarize(name, strategy, timings[name], timings["sequential"]) for name, strategy in chosen)
    return BenchReport(workload.description, max_concurrency, reports, "local" if backend is None else repr(backend))


# -- reporting --------------------------------------------------------------------------------------------------


def describe_workload(description: Mapping[str, Any]) -> str:
    """One line saying what the workload was."""
    parts = []
    for key, value in description.items():
        if isinstance(value, Mapping):
            value = ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in value.items())
        parts.append(f"{key.replace('_', ' ')} {value}")
    return "; ".join(parts)


def _duration(seconds: float) -> str:
    if seconds < 0.01:
        return f"{seconds * 1000:.2f} ms"
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.2f} s"


def format_table(report: BenchReport) -> str:
    """The report as a table for the terminal."""
    header = ("strategy", "makespan", "calls/s", "p50 latency", "p99 latency", "speed-up", "same results")
    rows = [
        (
            r.strategy,
            _duration(r.makespan_s),
            f"{r.throughput_calls_per_s:.0f}",
            f"{r.latency_p50_ms:.1f} ms",
            f"{r.latency_p99_ms:.1f} ms",
            f"{r.speedup:.2f}x",
            "yes" if r.same_results_as_sequential else "NO",
        )
        for r in report.strategies
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = []
    for row in (header, *rows):
        cells = [row[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _timeline_strategy(report: BenchReport) -> StrategyReport:
    for candidate in report.strategies:
        if candidate.name == "resource_aware":
            return candidate
    others = [r for r in report.strategies if r.name != "sequential"] or list(report.strategies)
    return min(others, key=lambda r: r.makespan_s)


def plot_report(report: BenchReport, path: str | Path) -> None:
    """Writes a PNG: makespan per strategy, and a timeline of the first turn showing which calls overlapped.

    Needs matplotlib (``pip install 'toolsched[plot]'``).
    """
    try:
        import matplotlib
    except ImportError:
        raise OptionError("--plot needs matplotlib: pip install 'toolsched[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (bars, timeline) = plt.subplots(1, 2, figsize=(13, 5.5), gridspec_kw={"width_ratios": [1, 1.5]})
    labels = [r.strategy for r in report.strategies]
    makespans = [r.makespan_s for r in report.strategies]
    positions = range(len(labels))
    # A strategy whose results differ from Sequential's is drawn in red and says so: its speed is not a win.
    shades = [
        "#9e9e9e" if r.name == "sequential" else "#3b7dd8" if r.same_results_as_sequential else "#d62728"
        for r in report.strategies
    ]
    bars.barh(positions, makespans, color=shades)
    labels = [
        label if r.same_results_as_sequential else f"{label} (results differ!)"
        for label, r in zip(labels, report.strategies, strict=True)
    ]
    bars.set_yticks(list(positions), labels, fontsize=8)
    bars.invert_yaxis()
    bars.set_xlabel("makespan (s), all turns")
    bars.set_title("Makespan per strategy")
    for position, r in zip(positions, report.strategies, strict=True):
        bars.text(r.makespan_s, position, f" {r.speedup:.2f}x", va="center", fontsize=8)
    bars.set_xlim(0, max(makespans) * 1.2 if makespans and max(makespans) > 0 else 1)

    shown = _timeline_strategy(report)
    first = shown.timings[0]
    colors: dict[str, Any] = {}
    palette = plt.get_cmap("tab10")
    for row, result in enumerate(first.outcome.results):
        span = first.spans.get(result.call_id)
        if span is None:
            continue
        color = colors.setdefault(result.tool_name, palette(len(colors) % 10))
        start, end = span
        timeline.barh(row, max((end - start) * 1000, 0.5), left=start * 1000, color=color, label=result.tool_name)
    timeline.set_yticks(range(len(first.outcome.results)), [r.call_id for r in first.outcome.results], fontsize=7)
    timeline.invert_yaxis()
    timeline.set_xlabel("time from the start of the turn (ms)")
    timeline.set_title(f"First turn under {shown.strategy}: bars that overlap ran together", fontsize=10)
    handles, names = timeline.get_legend_handles_labels()
    unique = dict(zip(names, handles, strict=True))
    timeline.set_xlim(left=0)
    timeline.legend(
        unique.values(), unique.keys(), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=len(unique)
    )
    figure.tight_layout()
    figure.savefig(str(path), dpi=110)
    plt.close(figure)
