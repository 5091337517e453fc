"""Side by side, in one process and one run: what one turn of no-op tool calls costs per call.

    python benches/compare.py                  # full run: N = 1 ... 10,000 (a few minutes on 2 cores)
    python benches/compare.py --quick          # fewer rounds, N up to 1,000
    python benches/compare.py --json out.json  # where the JSON report goes

Every contender starts from the same input, what a model's response holds: a call ID, the
tool name and the arguments as JSON text, for N calls of one no-op async tool with a small
schema (``path: str, limit: int = 10``). Every contender ends with N answered calls. What a
turn includes beyond that is each framework's own path and is timed whole, nothing
subtracted:

- ``taskgroup`` (the floor): ``json.loads`` each text, one ``asyncio.TaskGroup`` task per call;
- ``taskgroup_hooked``: the floor with the full pipeline's extra work written by hand, the least a
  loop of one's own does for it: the same pre and post hook awaited with the parsed arguments
  (no event, no copy) and the allow and deny rule as two prefix tests on the normalised path (no
  validation); the full pipeline's ratio to it says what toolsched's own machinery costs;
- ``toolsched*``: build the ``ToolCall``s, ``Executor.run`` (lookup, validation from JSON text,
  scheduling, execution, ordered frozen results), plus hooks, permission rules or
  ``ResourceAware`` when this toolsched has them (the row's label says what it measured);
- ``pydantic_ai``: ``Agent.run`` with a ``FunctionModel`` that answers N tool calls and then
  a final text: two requests to the fake model;
- ``langgraph``: build the ``AIMessage`` holding N tool calls, ``ToolNode.ainvoke``;
- ``openai_agents``: ``Runner.run`` with a scripted ``Model`` that answers N function calls and
  then a final message: two requests to the fake model.

Each harness is checked before it is timed: the tool body really ran N times, N results came
back without error, and hooks ran once per call and stage. Each framework has its own event
loop for the whole run; at each N the contenders take turns round by round, so load from
elsewhere on the machine falls on all of them alike. Rounds are timed in process CPU time
(reported by default: other processes do not inflate it) and in wall-clock time. The
garbage collector stays on; objects that exist before timing starts are frozen
(``gc.freeze``), so a collection costs what the turns themselves allocate.

The other executors come from the ``compare`` extra (``make bench`` installs it); one that
is not installed is reported as such, never a crash. See benches/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import posixpath
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import toolsched as ts
from toolsched import _core

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "compare.json"
FLOOR = "taskgroup"
HOOKED_FLOOR = "taskgroup_hooked"
TOOL_NAME = "noop"


class HarnessError(RuntimeError):
    """A contender did not do the work it is timed for (or could not be built)."""


# -- the workload -----------------------------------------------------------------------------


class Probe:
    """Counts what a turn really did: tool bodies entered and hooks run.

    With a gate, each call waits in its tool body until the gate opens, and ``all_in``
    is set once ``expected`` calls are waiting.
    """

    __slots__ = ("all_in", "calls", "expected", "gate", "hooks")

    def __init__(self) -> None:
        self.calls = 0
        self.hooks = 0
        self.expected = 0
        self.gate: asyncio.Event | None = None
        self.all_in: asyncio.Event | None = None

    def reset(self) -> None:
        self.calls = 0
        self.hooks = 0

    async def hold(self) -> None:
        assert self.gate is not None and self.all_in is not None
        if self.calls >= self.expected:
            self.all_in.set()
        await self.gate.wait()


PROBE = Probe()


async def noop(path: str, limit: int = 10) -> None:
    """Do nothing with a file path (the benchmark's tool)."""
    PROBE.calls += 1
    if PROBE.gate is not None:
        await PROBE.hold()


async def pre_hook(event: Any) -> None:
    PROBE.hooks += 1


async def post_hook(event: Any) -> None:
    PROBE.hooks += 1


def argument_texts(count: int) -> list[str]:
    """The arguments of ``count`` calls as JSON text, all valid for ``noop``."""
    return [json.dumps({"path": f"src/file_{i}.py", "limit": i % 50 + 1}) for i in range(count)]


def call_ids(count: int) -> list[str]:
    return [f"call_{i}" for i in range(count)]


@dataclass(frozen=True, slots=True)
class Turn:
    """One contender's turn over a fixed set of calls: ``run`` does it, ``answered`` counts its good results."""

    run: Callable[[], Awaitable[Any]]
    answered: Callable[[Any], int]


# A factory builds a contender's turn for the given argument texts. ``max_concurrency`` is None
# for each framework's default, or the number of calls that must be able to be in flight at once.
Factory = Callable[[list[str], int | None], Awaitable[Turn]]


# -- the floor ----------------------------------------------------------------------------------


async def taskgroup_floor(texts: list[str], max_concurrency: int | None) -> Turn:
    async def run() -> list[None]:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(noop(**json.loads(text))) for text in texts]
        return [task.result() for task in tasks]

    return Turn(run, len)


def hooked_call(
    tool: Callable[..., Awaitable[Any]], pre: Callable[[Any], Awaitable[Any]], post: Callable[[Any], Awaitable[Any]]
) -> Callable[[str], Awaitable[Any]]:
    """One call of the full pipeline's extra work written by hand: the arguments parsed, the path normalised
    and checked against the allow and deny rules (``src/``, not ``secret/``), ``pre``, ``tool``, ``post``."""
    root = os.getcwd()
    allowed = posixpath.join(root, "src") + "/"
    denied = posixpath.join(root, "secret") + "/"

    async def call(text: str) -> Any:
        args = json.loads(text)
        path = posixpath.normpath(posixpath.join(root, args["path"]))
        if path.startswith(denied) or not path.startswith(allowed):
            raise PermissionError(f"{path} is not allowed")
        await pre(args)
        output = await tool(**args)
        await post(args)
        return output

    return call


async def taskgroup_hooked(
    texts: list[str], max_concurrency: int | None, tool: Callable[..., Awaitable[None]] = noop
) -> Turn:
    """The floor with the pre hook, the post hook and the two rules of the full pipeline, written by hand
    (around ``tool``, compare.py's no-op unless another is given)."""
    one = hooked_call(tool, pre_hook, post_hook)

    async def run() -> list[None]:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(text)) for text in texts]
        return [task.result() for task in tasks]

    return Turn(run, len)


async def direct_call(texts: list[str], max_concurrency: int | None) -> Turn:
    """Calling the tool function directly: the floor of a single-call turn."""
    if len(texts) != 1:
        raise HarnessError("a direct call is one call")
    text = texts[0]

    async def run() -> None:
        await noop(**json.loads(text))

    return Turn(run, lambda _: 1)


# -- toolsched ------------------------------------------------------------------------------------


def optional(name: str) -> Any:
    """A public toolsched name that this version may not have yet (None then)."""
    return getattr(ts, name, None)


def toolsched_features() -> dict[str, bool]:
    """Which parts of the full pipeline this toolsched has (they arrive as separate pieces)."""
    return {
        "hooks": optional("Hooks") is not None,
        "permissions": optional("Permissions") is not None,
        "resource_aware": optional("ResourceAware") is not None,
    }


def pipeline_label(strategy: str) -> str:
    features = toolsched_features()
    parts = ["validation"]
    if features["hooks"]:
        parts.append("pre + post hook")
    if features["permissions"]:
        parts.append("permission rules")
    parts.append(strategy)
    missing = [name for name in ("hooks", "permissions") if not features[name]]
    if missing:
        return f"toolsched ({' + '.join(parts)}; {'/'.join(missing)} not available)"
    return f"toolsched full pipeline ({', '.join(parts)})"


def pipeline_options() -> dict[str, Any]:
    """Executor options for one pre hook, one post hook and permission rules, where they exist."""
    features = toolsched_features()
    options: dict[str, Any] = {}
    if features["hooks"]:
        options["hooks"] = optional("Hooks")().pre_tool_use("*", pre_hook).post_tool_use("*", post_hook)
    if features["permissions"]:
        options["permissions"] = optional("Permissions")(
            allow=[f"{TOOL_NAME}(src/**)"], deny=[f"{TOOL_NAME}(secret/**)"]
        )
    return options


def pipeline_hooks_per_call() -> int:
    return 2 if toolsched_features()["hooks"] else 0


def toolsched_turn(executor: ts.Executor, texts: list[str]) -> Turn:
    ids = call_ids(len(texts))
    tool_call = ts.ToolCall

    async def run() -> ts.Outcome:
        return await executor.run(
            [tool_call(call_id, TOOL_NAME, text) for call_id, text in zip(ids, texts, strict=True)]
        )

    return Turn(run, toolsched_answered)


def toolsched_answered(outcome: ts.Outcome) -> int:
    return sum(not result.is_error for result in outcome.results)


async def require_denial(executor: ts.Executor) -> None:
    """The rules are really consulted: a call outside them is refused and its tool never runs."""
    before = PROBE.calls
    outcome = await executor.run([ts.ToolCall("denied", TOOL_NAME, '{"path": "secret/key.pem"}')])
    kind = outcome.results[0].error_kind
    if kind != "permission_denied" or PROBE.calls != before:
        raise HarnessError(f"the deny rule did not refuse a call under secret/ (error_kind={kind!r})")


async def toolsched_validation(texts: list[str], max_concurrency: int | None) -> Turn:
    """Validation from JSON text and ``Partitioned``, nothing else."""
    tool = ts.tool(concurrency_safe=True)(noop)
    executor = ts.Executor([tool], strategy=ts.Partitioned(max_concurrency=max_concurrency))
    return toolsched_turn(executor, texts)


async def toolsched_full_pipeline(texts: list[str], max_concurrency: int | None) -> Turn:
    """Validation, one pre hook, one post hook, permission rules and ``Partitioned``."""
    tool = ts.tool(concurrency_safe=True, rule_subject="path")(noop)
    options = pipeline_options()
    executor = ts.Executor([tool], strategy=ts.Partitioned(max_concurrency=max_concurrency), **options)
    if "permissions" in options:
        await require_denial(executor)
    return toolsched_turn(executor, texts)


def read_path(args: Any) -> Any:
    return ts.Access(reads=(args["path"],))


async def toolsched_resource_aware(texts: list[str], max_concurrency: int | None) -> Turn:
    """The full pipeline with ``ResourceAware``: each call reads its own path, so none conflict."""
    strategy = optional("ResourceAware")(max_concurrency=max_concurrency)
    tool = ts.tool(rule_subject="path", resources=read_path)(noop)
    options = pipeline_options()
    executor = ts.Executor([tool], strategy=strategy, **options)
    if "permissions" in options:
        await require_denial(executor)
    return toolsched_turn(executor, texts)


# -- other executors, each driven through its own tool-execution path with a fake model ----------


async def pydantic_ai_agent(texts: list[str], max_concurrency: int | None) -> Turn:
    from pydantic_ai import Agent, Tool
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import RequestUsage

    ids = call_ids(len(texts))

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        # A real model reports usage; without it FunctionModel would estimate tokens itself.
        usage = RequestUsage(input_tokens=1, output_tokens=1)
        if any(isinstance(part, ToolReturnPart) for part in messages[-1].parts):
            return ModelResponse(parts=[TextPart("done")], usage=usage)
        parts = [ToolCallPart(TOOL_NAME, text, call_id) for call_id, text in zip(ids, texts, strict=True)]
        return ModelResponse(parts=parts, usage=usage)

    agent = Agent(FunctionModel(respond), tools=[Tool(noop, takes_ctx=False)])

    async def run() -> Any:
        return await agent.run("go")

    def answered(result: Any) -> int:
        if result.output != "done":
            return 0
        return sum(
            isinstance(part, ToolReturnPart) and part.tool_name == TOOL_NAME
            for message in result.all_messages()
            for part in message.parts
        )

    return Turn(run, answered)


async def langgraph_tool_node(texts: list[str], max_concurrency: int | None) -> Turn:
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import tool as langchain_tool
    from langgraph.prebuilt import ToolNode
    from langgraph.runtime import Runtime

    node = ToolNode([langchain_tool(noop)])
    ids = call_ids(len(texts))
    # What a graph hands the node; outside a graph it must be given explicitly.
    runtime = Runtime()

    async def run() -> Any:
        calls = [
            {"name": TOOL_NAME, "args": json.loads(text), "id": call_id, "type": "tool_call"}
            for call_id, text in zip(ids, texts, strict=True)
        ]
        return await node.ainvoke({"messages": [AIMessage(content="", tool_calls=calls)]}, runtime=runtime)

    def answered(output: Any) -> int:
        return sum(isinstance(message, ToolMessage) and message.status == "success" for message in output["messages"])

    return Turn(run, answered)


async def openai_agents_runner(texts: list[str], max_concurrency: int | None) -> Turn:
    from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled

    from toolsched.testing._agents_model import ScriptedAgentModel, calls_then, function_call

    set_tracing_disabled(True)
    ids = call_ids(len(texts))

    calls = [function_call(call_id, TOOL_NAME, text) for call_id, text in zip(ids, texts, strict=True)]
    model = ScriptedAgentModel(calls_then(calls, "done"), record=False)
    agent = Agent(name="bench", model=model, tools=[function_tool(noop)])
    config = RunConfig(tracing_disabled=True)

    async def run() -> Any:
        return await Runner.run(agent, "go", run_config=config)

    def answered(result: Any) -> int:
        if result.final_output != "done":
            return 0
        return sum(item.type == "tool_call_output_item" for item in result.new_items)

    return Turn(run, answered)


# -- contenders -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Contender:
    key: str
    label: str
    factory: Factory | None
    note: str = ""
    hooks_per_call: int = 0
    competitor: bool = False


def missing_modules(*modules: str) -> list[str]:
    """The modules that are not installed (found without importing them: some take seconds to import)."""
    return [module for module in modules if importlib.util.find_spec(module) is None]


def contenders() -> list[Contender]:
    features = toolsched_features()
    hooks = pipeline_hooks_per_call()
    rows = [
        Contender(FLOOR, "bare asyncio.TaskGroup + json.loads (floor)", taskgroup_floor),
        Contender(
            HOOKED_FLOOR,
            "the floor + the same 2 hooks and 2 rules by hand",
            taskgroup_hooked,
            hooks_per_call=2,
        ),
        Contender("toolsched", "toolsched (validation + Partitioned)", toolsched_validation),
        Contender("toolsched_full", pipeline_label("Partitioned"), toolsched_full_pipeline, hooks_per_call=hooks),
    ]
    if features["resource_aware"]:
        rows.append(
            Contender(
                "toolsched_resource_aware",
                pipeline_label("ResourceAware"),
                toolsched_resource_aware,
                hooks_per_call=hooks,
            )
        )
    else:
        rows.append(
            Contender(
                "toolsched_resource_aware",
                "toolsched with ResourceAware",
                None,
                note="ResourceAware is not available in this toolsched",
            )
        )
    for key, label, factory, modules in (
        ("pydantic_ai", "pydantic-ai Agent.run, FunctionModel", pydantic_ai_agent, ("pydantic_ai",)),
        ("langgraph", "LangGraph ToolNode.ainvoke", langgraph_tool_node, ("langgraph", "langchain_core")),
        ("openai_agents", "OpenAI Agents SDK Runner.run, scripted Model", openai_agents_runner, ("agents",)),
    ):
        missing = missing_modules(*modules)
        if missing:
            rows.append(Contender(key, label, None, note=f"not installed: {', '.join(missing)}", competitor=True))
        else:
            rows.append(Contender(key, label, factory, competitor=True))
    return rows


DIRECT = Contender("direct", "the tool function called directly + json.loads", direct_call)


# -- timing ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Settings:
    sizes: tuple[int, ...]
    budget: float  # seconds of timed rounds per contender and size
    min_rounds: int
    max_rounds: int
    round_seconds: float  # repeat turns within a round until it lasts about this long
    warmup_seconds: float
    validation_calls: int
    planning_calls: int
    scale_calls: int  # 0: no scale section
    memory_calls: int
    clock: str = "cpu"  # what min and median are of: "cpu" (process time) or "wall"


FULL = Settings(
    sizes=(1, 10, 100, 1000, 10_000),
    budget=1.5,
    min_rounds=3,
    max_rounds=60,
    round_seconds=0.01,
    warmup_seconds=0.2,
    validation_calls=1000,
    planning_calls=100_000,
    scale_calls=100_000,
    memory_calls=1000,
)
QUICK = Settings(
    sizes=(1, 10, 100, 1000),
    budget=0.3,
    min_rounds=3,
    max_rounds=20,
    round_seconds=0.005,
    warmup_seconds=0.05,
    validation_calls=1000,
    planning_calls=100_000,
    scale_calls=0,
    memory_calls=100,
)


@dataclass
class Lane:
    """One contender with its own event loop for the whole run."""

    contender: Contender
    runner: asyncio.Runner
    cells: dict[int, dict[str, Any]] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)


@dataclass
class Plan:
    lane: Lane
    turn: Turn
    count: int
    reps: int
    rounds: int
    verify_seconds: float
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


async def verified_turn(contender: Contender, texts: list[str], max_concurrency: int | None) -> tuple[Turn, float]:
    """Builds the turn and runs it once, checking it did the work; returns it and that run's duration."""
    assert contender.factory is not None
    turn = await contender.factory(texts, max_concurrency)
    count = len(texts)
    PROBE.reset()
    started = time.perf_counter()
    value = await turn.run()
    elapsed = time.perf_counter() - started
    answered = turn.answered(value)
    expected_hooks = contender.hooks_per_call * count
    if PROBE.calls != count or answered != count or PROBE.hooks != expected_hooks:
        raise HarnessError(
            f"{contender.key}: expected {count} tool runs, {count} good results and {expected_hooks} hook runs; "
            f"got {PROBE.calls} tool runs, {answered} good results and {PROBE.hooks} hook runs"
        )
    return turn, elapsed


async def warm_up(turn: Turn, seconds: float, first: float) -> float:
    """Runs the turn until ``seconds`` have passed (at least once more); returns the fastest turn seen."""
    fastest = first
    deadline = time.perf_counter() + seconds
    while True:
        started = time.perf_counter()
        await turn.run()
        fastest = min(fastest, time.perf_counter() - started)
        if time.perf_counter() >= deadline:
            return fastest


async def timed_round(turn: Turn, reps: int) -> tuple[float, float]:
    """Wall-clock and CPU seconds of ``reps`` turns."""
    run = turn.run
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(reps):
        await run()
    return time.perf_counter() - wall, time.process_time() - cpu


def summary(wall: list[float], cpu: list[float], clock: str) -> dict[str, Any]:
    """min and median in µs by the chosen clock, with both clocks' figures alongside."""
    figures = {
        name: {"min_us": min(samples) * 1e6, "median_us": statistics.median(samples) * 1e6}
        for name, samples in (("wall", wall), ("cpu", cpu))
    }
    return {**figures[clock], "clock": clock, **figures, "rounds": len(wall)}


def plan_cell(lane: Lane, count: int, settings: Settings) -> Plan | None:
    texts = argument_texts(count)
    try:
        turn, first = lane.runner.run(verified_turn(lane.contender, texts, None))
        slow = first * settings.min_rounds > settings.budget
        turn_seconds = first if slow else lane.runner.run(warm_up(turn, settings.warmup_seconds, first))
    except Exception as exc:
        lane.errors[count] = f"{type(exc).__name__}: {exc}"
        return None
    if first > settings.budget:
        # One turn outlasts the whole budget (other executors at large N): two rounds after the checked turn.
        return Plan(lane, turn, count, 1, min(settings.min_rounds, 2), first)
    reps = max(1, math.ceil(settings.round_seconds / max(turn_seconds, 1e-9)))
    rounds = int(settings.budget / max(turn_seconds * reps, 1e-9))
    rounds = min(settings.max_rounds, max(settings.min_rounds, rounds))
    return Plan(lane, turn, count, reps, rounds, first)


def measure_size(lanes: Sequence[Lane], count: int, settings: Settings) -> None:
    """Times every lane at ``count`` calls, the lanes taking turns round by round."""
    plans = [plan for lane in lanes if (plan := plan_cell(lane, count, settings)) is not None]
    gc.collect()
    gc.freeze()
    try:
        for round_number in range(max((plan.rounds for plan in plans), default=0)):
            for plan in plans:
                if round_number < plan.rounds and plan.count not in plan.lane.errors:
                    try:
                        wall, cpu = plan.lane.runner.run(timed_round(plan.turn, plan.reps))
                    except Exception as exc:
                        plan.lane.errors[count] = f"{type(exc).__name__}: {exc}"
                        continue
                    plan.wall.append(wall / (plan.reps * count))
                    plan.cpu.append(cpu / (plan.reps * count))
    finally:
        gc.unfreeze()
    for plan in plans:
        if plan.wall:
            plan.lane.cells[count] = {
                "count": count,
                **summary(plan.wall, plan.cpu, settings.clock),
                "turns_per_round": plan.reps,
                "verified_tool_runs": count,
                "verified_hook_runs": plan.lane.contender.hooks_per_call * count,
                "first_turn_ms": plan.verify_seconds * 1e3,
            }


def add_ratios(lanes: Sequence[Lane], floor: Lane) -> None:
    for lane in lanes:
        for count, cell in lane.cells.items():
            base = floor.cells.get(count)
            if base is not None:
                cell["ratio_min"] = cell["min_us"] / base["min_us"]
                cell["ratio_median"] = cell["median_us"] / base["median_us"]


# -- memory ---------------------------------------------------------------------------------------


async def memory_in_flight(contender: Contender, count: int, patience: float) -> dict[str, Any]:
    """tracemalloc while ``count`` calls are suspended in their tool body at once."""
    texts = argument_texts(count)
    turn, _ = await verified_turn(contender, texts, count)
    gate = asyncio.Event()
    all_in = asyncio.Event()
    PROBE.reset()
    PROBE.expected = count
    PROBE.gate = gate
    PROBE.all_in = all_in
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        task = asyncio.ensure_future(turn.run())
        waiting = asyncio.ensure_future(all_in.wait())
        # A turn that caps calls in flight below ``count`` never fills up: it is measured at what it reached.
        await asyncio.wait([task, waiting], timeout=patience, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        held, peak = tracemalloc.get_traced_memory()
        in_flight = PROBE.calls
        gate.set()
        value = await task
    finally:
        tracemalloc.stop()
        PROBE.gate = None
        PROBE.all_in = None
    answered = turn.answered(value)
    if in_flight == 0 or answered != count or PROBE.hooks != contender.hooks_per_call * count:
        raise HarnessError(
            f"{contender.key}: {in_flight} calls in flight, {answered} good results, {PROBE.hooks} hook runs"
        )
    return {
        "count": count,
        "in_flight": in_flight,
        "peak_bytes_per_call": (peak - base) / in_flight,
        "held_bytes_per_call": (held - base) / in_flight,
    }


# -- validation and planning (no event loop) ------------------------------------------------------


def time_sync(work: Callable[[], Any], per: int, settings: Settings) -> dict[str, Any]:
    """min and median seconds of ``work()`` divided by ``per``, over rounds of repeated calls."""
    started = time.perf_counter()
    work()
    once = time.perf_counter() - started
    reps = max(1, math.ceil(settings.round_seconds / max(once, 1e-9)))
    rounds = min(settings.max_rounds, max(settings.min_rounds, int(settings.budget / max(once * reps, 1e-9))))
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(rounds):
        started, cpu_started = time.perf_counter(), time.process_time()
        for _ in range(reps):
            work()
        wall.append((time.perf_counter() - started) / (reps * per))
        cpu.append((time.process_time() - cpu_started) / (reps * per))
    return summary(wall, cpu, settings.clock)


def typed(value: Any) -> Any:
    """``value`` with every part's type beside it: equal only for equal JSON values of the same types
    (``1`` is not ``1.0``, ``-0.0`` is not ``0.0``), keys in the same order."""
    if isinstance(value, dict):
        return ("dict", [(key, typed(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("list", [typed(item) for item in value])
    return (type(value).__name__, repr(value))


def validation_section(settings: Settings) -> dict[str, Any]:
    """JSON text to a validated dict: toolsched's engine against json.loads + jsonschema-rs / jsonschema."""
    count = settings.validation_calls
    texts = argument_texts(count)
    ids = call_ids(count)
    registry = ts.ToolRegistry([ts.tool(noop)])
    schema = registry.to_openai()[0]["parameters"]
    table = registry._table
    limits = _core.Limits(16 * 1024 * 1024, 64, 10)
    calls = [ts.ToolCall(call_id, TOOL_NAME, text) for call_id, text in zip(ids, texts, strict=True)]
    bad = [ts.ToolCall("bad", TOOL_NAME, '{"path": 3}')]

    def engine() -> Any:
        return table.prepare(calls, [], limits)

    def engine_with_calls() -> Any:
        built = [ts.ToolCall(call_id, TOOL_NAME, text) for call_id, text in zip(ids, texts, strict=True)]
        return table.prepare(built, [], limits)

    def loads_only() -> list[Any]:
        return [json.loads(text) for text in texts]

    rows: list[dict[str, Any]] = []
    _, built, failures, _, _, _ = engine()
    if failures or table.prepare(bad, [], limits)[2][0][1] != "invalid_input":
        raise HarnessError("the engine's validation does not accept the workload or does not reject bad input")
    if [typed(value) for value in built] != [typed(value) for value in loads_only()]:
        raise HarnessError("the engine builds other arguments than json.loads does (the contenders' work differs)")
    rows.append(
        {
            "key": "toolsched",
            "label": "toolsched engine: ToolTable.prepare (lookup, dedup, parse, validate)",
            **time_sync(engine, count, settings),
        }
    )
    rows.append(
        {
            "key": "toolsched_with_calls",
            "label": "toolsched engine, ToolCall construction included",
            **time_sync(engine_with_calls, count, settings),
        }
    )
    rows.append(
        {"key": "json_loads", "label": "json.loads alone (no validation)", **time_sync(loads_only, count, settings)}
    )

    validators: list[tuple[str, str, Any]] = []
    try:
        import jsonschema_rs

        validators.append(("jsonschema_rs", "json.loads + jsonschema-rs validate", jsonschema_rs.validator_for(schema)))
    except ImportError as exc:
        rows.append({"key": "jsonschema_rs", "label": "json.loads + jsonschema-rs validate", "note": str(exc)})
    try:
        import jsonschema  # type: ignore[import-untyped]

        validators.append(
            ("jsonschema", "json.loads + jsonschema (pure Python) validate", jsonschema.Draft202012Validator(schema))
        )
    except ImportError as exc:
        rows.append({"key": "jsonschema", "label": "json.loads + jsonschema (pure Python) validate", "note": str(exc)})
    for key, label, validator in validators:
        if validator.is_valid({"path": 3}):
            raise HarnessError(f"{key} accepts input the schema forbids")

        def loads_and_validate(validator: Any = validator) -> list[Any]:
            values = []
            for text in texts:
                value = json.loads(text)
                validator.validate(value)
                values.append(value)
            return values

        rows.append({"key": key, "label": label, **time_sync(loads_and_validate, count, settings)})
    base = rows[0]
    for row in rows:
        if "median_us" in row:
            row["ratio_to_toolsched_median"] = row["median_us"] / base["median_us"]
            row["ratio_to_toolsched_min"] = row["min_us"] / base["min_us"]
    return {"calls": count, "schema": schema, "rows": rows}


def planning_section(settings: Settings) -> dict[str, Any]:
    """``ToolTable.prepare`` plus ``plan_batches`` for one turn of many calls."""
    count = settings.planning_calls
    texts = argument_texts(count)
    calls = [ts.ToolCall(call_id, TOOL_NAME, text) for call_id, text in zip(call_ids(count), texts, strict=True)]
    table = ts.ToolRegistry([ts.tool(concurrency_safe=True)(noop)])._table
    limits = _core.Limits(16 * 1024 * 1024, 64, 10)
    safe = [True] * count
    tools, _, failures, _, _, _ = table.prepare(calls, [], limits)
    batches = _core.plan_batches("partitioned", safe, max_concurrency=10)
    if len(tools) != count or failures or sum(e - s for s, e, _ in batches) != count:
        raise HarnessError("planning did not cover every call")
    rounds = max(settings.min_rounds, 5)
    prepare_ms: list[float] = []
    plan_ms: list[float] = []
    now = time.process_time if settings.clock == "cpu" else time.perf_counter
    for _ in range(rounds):
        gc.collect()
        started = now()
        table.prepare(calls, [], limits)
        middle = now()
        _core.plan_batches("partitioned", safe, max_concurrency=10)
        ended = now()
        prepare_ms.append((middle - started) * 1e3)
        plan_ms.append((ended - middle) * 1e3)
    total = [a + b for a, b in zip(prepare_ms, plan_ms, strict=True)]
    return {
        "calls": count,
        "rounds": rounds,
        "clock": settings.clock,
        "prepare_ms": {"min": min(prepare_ms), "median": statistics.median(prepare_ms)},
        "plan_batches_ms": {"min": min(plan_ms), "median": statistics.median(plan_ms)},
        "total_ms": {"min": min(total), "median": statistics.median(total)},
        "per_call_us": {"min": min(total) / count * 1e3, "median": statistics.median(total) / count * 1e3},
    }


# -- the report -----------------------------------------------------------------------------------


def version_of(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def toolsched_revision() -> str | None:
    source = Path(ts.__file__).resolve().parent
    try:
        done = subprocess.run(
            ["git", "-C", str(source), "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def metadata(argv: Sequence[str]) -> dict[str, Any]:
    distributions = [
        "anyio",
        "pydantic",
        "pydantic-core",
        "jsonschema-rs",
        "jsonschema",
        "pydantic-ai-slim",
        "langgraph",
        "langgraph-prebuilt",
        "langchain-core",
        "openai-agents",
        "openai",
    ]
    return {
        "command": " ".join(["python", "benches/compare.py", *argv]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_average_at_start": list(os.getloadavg()),
        "toolsched": {
            "version": ts.__version__,
            "revision": toolsched_revision(),
            "path": str(Path(ts.__file__).parent),
            "features": toolsched_features(),
        },
        "versions": {name: version_of(name) for name in distributions},
    }


def fmt_us(value: float) -> str:
    """Three significant digits at least, with thousands separated."""
    if value >= 99.95:
        return f"{value:,.0f}"
    if value >= 9.995:
        return f"{value:.1f}"
    return f"{value:.2f}"


def fmt_ratio(value: float) -> str:
    digits = 0 if value >= 99.5 else 1 if value >= 9.995 else 2
    return f"{value:.{digits}f}\N{MULTIPLICATION SIGN}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return "\n".join(lines)


def render(report: dict[str, Any]) -> str:
    out: list[str] = []
    turns = report["turns"]
    sizes = turns["sizes"]
    header = ["per call, µs", *[f"N = {n:,}" for n in sizes]]
    clock = report["settings"]["clock"]
    clock_name = {"cpu": "CPU time", "wall": "wall-clock time"}
    floor = next((row for row in turns["rows"] if row["key"] == turns["floor"]), None)
    tables = [(clock, "median"), (clock, "min")]
    if clock == "cpu":
        tables.append(("wall", "median"))
    for table_clock, stat in tables:
        rows = []
        for row in turns["rows"]:
            if not row["available"]:
                rows.append([row["label"], *([f"— ({row['note']})"] + [""] * (len(sizes) - 1))])
                continue
            cells = []
            for n in sizes:
                cell = row["cells"].get(str(n))
                if cell is None:
                    cells.append(row["errors"].get(str(n), "—"))
                    continue
                value = cell[table_clock][f"{stat}_us"]
                base = floor["cells"].get(str(n)) if floor is not None else None
                suffix = f" ({fmt_ratio(value / base[table_clock][f'{stat}_us'])})" if base else ""
                cells.append(fmt_us(value) + suffix)
            rows.append([row["label"], *cells])
        out.append(
            f"Turn of N no-op async calls: {stat} {clock_name[table_clock]} per call, µs "
            f"(ratio to the TaskGroup floor's {stat}):\n"
        )
        out.append(markdown_table(header, rows))
        out.append("")
    if report["targets"]["rows"]:
        out.append(f"Competitor ÷ {report['targets']['against_label']} (median per call):\n")
        rows = [
            [row["label"], *[fmt_ratio(row["ratios"][str(n)]) if str(n) in row["ratios"] else "—" for n in sizes]]
            for row in report["targets"]["rows"]
        ]
        out.append(markdown_table(["competitor", *[f"N = {n:,}" for n in sizes]], rows))
        out.append("")
    by_hand = report["targets"].get("by_hand")
    if by_hand:
        out.append("The full pipeline ÷ the floor with the same hooks and rules by hand, per call:\n")
        rows = [
            [stat, *[fmt_ratio(by_hand[str(n)][stat]) if str(n) in by_hand else "—" for n in sizes]]
            for stat in ("min", "median")
        ]
        out.append(markdown_table(["", *[f"N = {n:,}" for n in sizes]], rows))
        out.append("")
    single = report["single_call"]
    if single["rows"]:
        out.append(f"Single-call turn, µs per turn ({clock_name[clock]}):\n")
        rows = [
            [
                row["label"],
                fmt_us(row["median_us"]),
                fmt_us(row["min_us"]),
                f"{row['above_direct_median_us']:+.1f}",
                f"{row['above_direct_min_us']:+.1f}",
            ]
            for row in single["rows"]
        ]
        out.append(markdown_table(["", "median", "min", "above direct (median)", "above direct (min)"], rows))
        out.append("")
    validation = report["validation"]
    if validation:
        out.append(f"Validation of {validation['calls']:,} argument texts, µs per call ({clock_name[clock]}):\n")
        rows = []
        for row in validation["rows"]:
            if "median_us" not in row:
                rows.append([row["label"], "—", "—", row.get("note", "")])
                continue
            rows.append(
                [
                    row["label"],
                    fmt_us(row["median_us"]),
                    fmt_us(row["min_us"]),
                    fmt_ratio(row["ratio_to_toolsched_median"]),
                ]
            )
        out.append(markdown_table(["", "median", "min", "÷ toolsched (median)"], rows))
        out.append("")
    planning = report["planning"]
    if planning:
        out.append(f"Planning {planning['calls']:,} calls (prepare + plan_batches), ms ({clock_name[clock]}):\n")
        rows = [
            [label, f"{planning[key]['median']:.1f}", f"{planning[key]['min']:.1f}"]
            for key, label in (
                ("prepare_ms", "ToolTable.prepare"),
                ("plan_batches_ms", "plan_batches"),
                ("total_ms", "total"),
            )
        ]
        rows.append(
            ["per call (µs)", f"{planning['per_call_us']['median']:.2f}", f"{planning['per_call_us']['min']:.2f}"]
        )
        out.append(markdown_table(["", "median", "min"], rows))
        out.append("")
    scale = report["scale"]
    if scale["rows"]:
        out.append(f"Scale: a turn of {scale['count']:,} calls, µs per call ({clock_name[clock]}):\n")
        rows = [
            [
                row["label"],
                fmt_us(row["median_us"]),
                fmt_us(row["min_us"]),
                fmt_ratio(row["ratio_to_1000_median"]) if row.get("ratio_to_1000_median") else "—",
            ]
            for row in scale["rows"]
        ]
        out.append(markdown_table(["", "median", "min", "÷ N = 1,000 (median)"], rows))
        out.append("")
    memory = report["memory"]
    if memory["rows"]:
        out.append(f"Memory with {memory['count']:,} calls suspended in flight (tracemalloc), bytes per call:\n")
        rows = []
        for row in memory["rows"]:
            if "peak_bytes_per_call" not in row:
                rows.append([row["label"], "—", "—", row.get("note", "")])
                continue
            rows.append(
                [
                    row["label"],
                    f"{row['peak_bytes_per_call']:,.0f}",
                    f"{row['held_bytes_per_call']:,.0f}",
                    f"{row['in_flight']:,}",
                ]
            )
        out.append(markdown_table(["", "peak", "held", "in flight"], rows))
        out.append("")
    return "\n".join(out)


# -- the run --------------------------------------------------------------------------------------


def run_turns(lanes: list[Lane], direct: Lane | None, settings: Settings, log: Callable[[str], None]) -> None:
    for count in settings.sizes:
        log(f"turns of {count:,} calls")
        group = [*lanes, direct] if count == 1 and direct is not None else lanes
        measure_size(group, count, settings)


def turns_report(lanes: list[Lane], settings: Settings) -> dict[str, Any]:
    rows = []
    for lane in lanes:
        contender = lane.contender
        rows.append(
            {
                "key": contender.key,
                "label": contender.label,
                "available": contender.factory is not None,
                "note": contender.note,
                "competitor": contender.competitor,
                "cells": {str(count): cell for count, cell in sorted(lane.cells.items())},
                "errors": {str(count): error for count, error in lane.errors.items()},
            }
        )
    return {"sizes": list(settings.sizes), "floor": FLOOR, "rows": rows}


def targets_report(lanes: list[Lane]) -> dict[str, Any]:
    by_key = {lane.contender.key: lane for lane in lanes}
    against = by_key.get("toolsched_full")
    rows = []
    if against is not None and against.cells:
        for lane in lanes:
            if not lane.contender.competitor or not lane.cells:
                continue
            ratios = {
                str(n): cell["median_us"] / against.cells[n]["median_us"]
                for n, cell in sorted(lane.cells.items())
                if n in against.cells
            }
            rows.append({"key": lane.contender.key, "label": lane.contender.label, "ratios": ratios})
    # The full pipeline against the same hooks and rules written by hand (min and median per call).
    by_hand: dict[str, dict[str, float]] = {}
    hooked = by_key.get(HOOKED_FLOOR)
    if against is not None and hooked is not None:
        for n, cell in sorted(against.cells.items()):
            base = hooked.cells.get(n)
            if base is not None:
                by_hand[str(n)] = {
                    "min": cell["min_us"] / base["min_us"],
                    "median": cell["median_us"] / base["median_us"],
                }
    return {
        "against": "toolsched_full",
        "against_label": against.contender.label if against is not None else "",
        "rows": rows,
        "by_hand": by_hand,
    }


def single_call_report(lanes: list[Lane], direct: Lane | None) -> dict[str, Any]:
    if direct is None or 1 not in direct.cells:
        return {"rows": []}
    base = direct.cells[1]
    rows = []
    for lane in [direct, *lanes]:
        cell = lane.cells.get(1)
        if cell is None or lane.contender.competitor:
            continue
        rows.append(
            {
                "key": lane.contender.key,
                "label": lane.contender.label,
                "median_us": cell["median_us"],
                "min_us": cell["min_us"],
                "above_direct_median_us": cell["median_us"] - base["median_us"],
                "above_direct_min_us": cell["min_us"] - base["min_us"],
            }
        )
    return {"rows": rows}


def scale_report(lanes: list[Lane], settings: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    count = settings.scale_calls
    if not count:
        return {"count": 0, "rows": []}
    log(f"scale: turns of {count:,} calls")
    chosen = [lane for lane in lanes if not lane.contender.competitor and lane.contender.factory is not None]
    scale_lanes = [Lane(lane.contender, lane.runner) for lane in chosen]
    measure_size(scale_lanes, count, settings)
    rows = []
    for lane, original in zip(scale_lanes, chosen, strict=True):
        cell = lane.cells.get(count)
        if cell is None:
            rows.append({"key": lane.contender.key, "label": lane.contender.label, "error": lane.errors.get(count)})
            continue
        reference = original.cells.get(1000)
        rows.append(
            {
                "key": lane.contender.key,
                "label": lane.contender.label,
                "median_us": cell["median_us"],
                "min_us": cell["min_us"],
                "rounds": cell["rounds"],
                "ratio_to_1000_median": cell["median_us"] / reference["median_us"] if reference else None,
            }
        )
    return {"count": count, "rows": rows}


def memory_report(lanes: list[Lane], settings: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    count = settings.memory_calls
    log(f"memory: {count:,} calls in flight")
    rows = []
    for lane in lanes:
        contender = lane.contender
        row: dict[str, Any] = {"key": contender.key, "label": contender.label}
        if contender.factory is None:
            row["note"] = contender.note
        else:
            try:
                row.update(lane.runner.run(memory_in_flight(contender, count, patience=120.0)))
            except Exception as exc:
                row["note"] = f"{type(exc).__name__}: {exc}"
        rows.append(row)
    return {"count": count, "toolsched_max_concurrency": count, "rows": rows}


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer rounds, N up to 1,000, memory at 100 calls")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"report path (default {DEFAULT_JSON})")
    parser.add_argument("--sizes", help="comma-separated N values (default: 1,10,100,1000,10000; quick: up to 1000)")
    parser.add_argument("--only", help="comma-separated contender keys (default: all)")
    parser.add_argument("--rounds", type=int, help="minimum timed rounds per contender and N")
    parser.add_argument("--budget", type=float, help="seconds of timed rounds per contender and N")
    parser.add_argument("--validation-calls", type=int, help="argument texts in the validation section")
    parser.add_argument("--planning-calls", type=int, help="calls in the planning section (default 100,000)")
    parser.add_argument("--scale-calls", type=int, help="calls in the scale section (0: skip)")
    parser.add_argument("--memory-calls", type=int, help="calls in flight in the memory section (0: skip)")
    parser.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        help="report process CPU time (default: robust to other load on the machine) or wall-clock time",
    )
    parser.add_argument("--list", action="store_true", help="list the contenders and exit")
    return parser.parse_args(argv)


def settings_from(arguments: argparse.Namespace) -> Settings:
    base = QUICK if arguments.quick else FULL
    changes: dict[str, Any] = {}
    if arguments.sizes:
        changes["sizes"] = tuple(int(part.replace("_", "")) for part in arguments.sizes.split(","))
    for name in ("budget", "validation_calls", "planning_calls", "scale_calls", "memory_calls", "clock"):
        value = getattr(arguments, name)
        if value is not None:
            changes[name] = value
    if arguments.rounds is not None:
        changes["min_rounds"] = arguments.rounds
        changes["max_rounds"] = max(arguments.rounds, base.max_rounds)
    settings = dataclasses.replace(base, **changes)
    if any(n < 1 for n in settings.sizes) or settings.min_rounds < 1:
        raise SystemExit("--sizes and --rounds take positive integers")
    return settings


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv[1:] if argv is None else argv)
    arguments = parse_arguments(argv)
    settings = settings_from(arguments)
    everyone = contenders()
    if arguments.list:
        for contender in everyone:
            state = "available" if contender.factory is not None else contender.note
            print(f"{contender.key:26} {contender.label}  [{state}]")
        return {}
    if arguments.only:
        keys = [key.strip() for key in arguments.only.split(",")]
        unknown = sorted(set(keys) - {contender.key for contender in everyone})
        if unknown:
            raise SystemExit(f"unknown contender(s): {', '.join(unknown)}; see --list")
        if FLOOR not in keys:
            keys.insert(0, FLOOR)
        everyone = [contender for contender in everyone if contender.key in keys]

    def log(message: str) -> None:
        print(f"[compare] {message}", file=sys.stderr, flush=True)

    report: dict[str, Any] = {"meta": metadata(argv), "settings": dataclasses.asdict(settings)}
    started = time.perf_counter()
    lanes = [Lane(contender, asyncio.Runner()) for contender in everyone]
    measured = [lane for lane in lanes if lane.contender.factory is not None]
    direct = Lane(DIRECT, asyncio.Runner())
    try:
        run_turns(measured, direct, settings, log)
        add_ratios([*lanes, direct], next(lane for lane in lanes if lane.contender.key == FLOOR))
        report["turns"] = turns_report(lanes, settings)
        report["targets"] = targets_report(lanes)
        report["single_call"] = single_call_report(measured, direct)
        log("validation")
        report["validation"] = validation_section(settings) if settings.validation_calls else {}
        log(f"planning {settings.planning_calls:,} calls")
        report["planning"] = planning_section(settings) if settings.planning_calls else {}
        report["scale"] = scale_report(measured, settings, log)
        report["memory"] = memory_report(lanes, settings, log) if settings.memory_calls else {"count": 0, "rows": []}
    finally:
        for lane in [*lanes, direct]:
            lane.runner.close()
    report["meta"]["load_average_at_end"] = list(os.getloadavg())
    report["meta"]["wall_seconds"] = time.perf_counter() - started
    arguments.json.parent.mkdir(parents=True, exist_ok=True)
    arguments.json.write_text(json.dumps(report, indent=2) + "\n")
    meta = report["meta"]
    print(f"# {meta['command']}\n")
    print(
        f"{meta['date']}; Python {meta['python']}; {meta['cpu']} ({meta['cores']} cores); "
        f"load average {meta['load_average_at_start'][0]:.2f} at start, {meta['load_average_at_end'][0]:.2f} at end; "
        f"{meta['wall_seconds']:.0f} s\n"
    )
    print(render(report))
    log(f"report written to {arguments.json}")
    return report


if __name__ == "__main__":
    main()
