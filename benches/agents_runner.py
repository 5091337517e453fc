"""What ``scheduled(agent)`` costs a ``Runner.run`` turn of the OpenAI Agents SDK.

One run is a whole ``Runner.run``: a scripted ``Model`` answers N function calls of a no-op tool,
then, once their outputs are in, a final message. The same agent runs three ways, in paired
rounds (each round runs every way once, in an order that rotates from round to round, so load
that drifts falls on all of them):

- ``stock``: the ``Agent`` as built;
- ``scheduled``: ``scheduled(agent)``, the drop-in as it comes (the tool declares nothing, so its
  calls start together, as the SDK starts them);
- ``scheduled, safe``: ``scheduled(agent, tools=[from_function_tool(noop, concurrency_safe=True)])``.

It prints, per N, the median time of a run each way (wall and this process's CPU time, which a
shared machine's load disturbs less) and the median of the per-round ratios to stock (below 1:
faster than stock). Every run is checked: N outputs and the final message.

    python benches/agents_runner.py                       # N = 10 and 100, 40 rounds
    python benches/agents_runner.py --sizes 100 --rounds 20
    python benches/agents_runner.py --count               # instructions per run, counted by valgrind
    python benches/agents_runner.py --parts               # one call's layers, each timed alone
    python benches/agents_runner.py --profile scheduled --sizes 100   # cProfile of that way's runs

With ``--count`` each way's runs are counted under ``valgrind --tool=cachegrind`` instead of timed
(``instructions.py``'s method: a process with the measured runs less one without them, so start-up
and warm-up cancel out): a figure a shared machine's load does not move.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import json
import os
import pstats
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled

from toolsched.integrations.agents import from_function_tool, scheduled
from toolsched.testing._agents_model import ScriptedAgentModel, calls_then, function_call

WAYS = ("stock", "scheduled", "scheduled, safe")

TOOL_NAME = "noop"


@function_tool
async def noop(index: int) -> str:
    """Does nothing and says so."""
    return "ok"


def scripted_model(calls: int) -> ScriptedAgentModel:
    """Answers N calls of ``noop``; once their outputs are in, a final message."""
    asked = [function_call(f"call_{index}", TOOL_NAME, {"index": index}) for index in range(calls)]
    return ScriptedAgentModel(calls_then(asked, "done"), record=False)


def ways(calls: int) -> dict[str, Agent[Any]]:
    agent = Agent(name="bench", model=scripted_model(calls), tools=[noop])
    return {
        "stock": agent,
        "scheduled": scheduled(agent),
        "scheduled, safe": scheduled(agent, tools=[from_function_tool(noop, concurrency_safe=True)]),
    }


def runner(agent: Agent[Any], calls: int) -> Callable[[], Awaitable[None]]:
    config = RunConfig(tracing_disabled=True)

    async def run() -> None:
        result = await Runner.run(agent, "go", run_config=config)
        outputs = [item for item in result.new_items if item.type == "tool_call_output_item"]
        if result.final_output != "done" or len(outputs) != calls or any(item.output != "ok" for item in outputs):
            raise AssertionError(f"{agent.name}: the run did not answer its {calls} calls")

    return run


Times = dict[str, list[tuple[float, float]]]


def measure(loop: asyncio.Runner, calls: int, rounds: int, warmup: int) -> Times:
    """Per way, one (wall, CPU) time of a run per round."""
    runs = {name: runner(agent, calls) for name, agent in ways(calls).items()}
    names = list(runs)
    times: Times = {name: [] for name in names}
    for round_index in range(warmup + rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            gc.collect()
            wall, cpu = time.perf_counter(), time.process_time()
            loop.run(runs[name]())
            elapsed = (time.perf_counter() - wall, time.process_time() - cpu)
            if round_index >= warmup:
                times[name].append(elapsed)
    return times


def quartiles(values: list[float]) -> str:
    """The middle half of ``values`` (first to third quartile), as ``low to high``."""
    low, _, high = statistics.quantiles(values, n=4) if len(values) > 1 else (values[0],) * 3
    return f"{low:.3f} to {high:.3f}"


def report(calls: int, times: Times) -> None:
    stock = times["stock"]
    print(f"\nN = {calls} calls per run, {len(stock)} paired rounds (wall: elapsed; CPU: this process's)")
    print(
        "| way | wall median ms | wall min ms | CPU median ms | ratio to stock, wall | ratio to stock, CPU "
        "| CPU ratio, middle half |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, values in times.items():
        wall = [value[0] for value in values]
        cpu = [value[1] for value in values]
        wall_ratio = statistics.median(value[0] / base[0] for value, base in zip(values, stock, strict=True))
        cpu_ratios = [value[1] / base[1] for value, base in zip(values, stock, strict=True)]
        print(
            f"| {name} | {statistics.median(wall) * 1e3:.2f} | {min(wall) * 1e3:.2f} | "
            f"{statistics.median(cpu) * 1e3:.2f} | {wall_ratio:.3f} | {statistics.median(cpu_ratios):.3f} "
            f"| {quartiles(cpu_ratios)} |"
        )


def profile(loop: asyncio.Runner, way: str, calls: int, rounds: int) -> None:
    run = runner(ways(calls)[way], calls)
    loop.run(run())
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(rounds):
        loop.run(run())
    profiler.disable()
    for key in ("tottime", "cumulative"):
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats(key).print_stats(30)
        print(f"\n{way}, N = {calls}, {rounds} runs, by {key}:\n{text.getvalue()}")


def inner(sizes: list[int], way: str, calls: int, count: int) -> None:
    """The process ``--count`` runs under valgrind: every way of every size run twice to warm up (the
    same in every process), then ``count`` measured runs of ``way`` with ``calls`` calls."""
    with asyncio.Runner() as loop:
        runs = {(name, size): runner(agent, size) for size in sizes for name, agent in ways(size).items()}
        for run in runs.values():
            loop.run(run())
            loop.run(run())
        for _ in range(count):
            loop.run(runs[way, calls]())


def count(sizes: list[int], runs: int | None) -> None:
    from instructions import valgrind_count

    os.environ.setdefault("PYTHONHASHSEED", "0")  # the same dict and set layouts in every process
    prefix = [__file__, "--inner", ",".join(map(str, sizes))]
    base = valgrind_count([*prefix, "stock", str(sizes[0]), "0"])
    for calls in sizes:
        measured = runs or max(4, 200 // calls)
        print(f"\nN = {calls} calls per run, instructions per run (valgrind, {measured} runs less none)")
        print("| way | instructions per run | per call | ratio to stock |")
        print("|---|---|---|---|")
        stock = 0.0
        for way in WAYS:
            per_run = (valgrind_count([*prefix, way, str(calls), str(measured)]) - base) / measured
            stock = stock or per_run
            print(f"| {way} | {per_run / 1e6:.2f} M | {per_run / calls / 1e3:.1f} k | {per_run / stock:.3f} |")


def parts(repeat: int = 3000) -> None:
    """One call's layers, each timed alone in a loop (best of 7 loops, µs per call)."""
    from agents.tool import _get_function_tool_invoke_context, invoke_function_tool
    from agents.tool_context import ToolContext

    from toolsched import ToolCall

    agent = Agent(name="bench", tools=[noop])
    plain = scheduled(agent)
    safe = scheduled(agent, tools=[from_function_tool(noop, concurrency_safe=True)])
    arguments = json.dumps({"index": 1})

    def context(index: int) -> ToolContext[Any]:
        return ToolContext(context=None, tool_name=TOOL_NAME, tool_call_id=f"c{index}", tool_arguments=arguments)

    def invoked(tool: Any) -> Callable[[ToolContext[Any]], Awaitable[Any]]:
        return lambda ctx: invoke_function_tool(function_tool=tool, context=ctx, arguments=arguments)

    async def direct(ctx: ToolContext[Any]) -> Any:
        return await noop.on_invoke_tool(ctx, arguments)

    async def executor_run(ctx: ToolContext[Any]) -> Any:
        call = ToolCall(ctx.tool_call_id, TOOL_NAME, arguments)
        return await plain.toolsched_executor.run([call], context=ctx)  # type: ignore[attr-defined]

    def choice(tool: Any) -> Callable[[ToolContext[Any]], Awaitable[Any]]:
        async def choose(ctx: ToolContext[Any]) -> Any:
            return _get_function_tool_invoke_context(tool, ctx)

        return choose

    layers: list[tuple[str, Callable[[ToolContext[Any]], Awaitable[Any]]]] = [
        ("SDK invoke_function_tool, stock tool", invoked(noop)),
        ("SDK invoke_function_tool, scheduled(agent)'s tool", invoked(plain.tools[0])),
        ("SDK invoke_function_tool, scheduled, concurrency-safe", invoked(safe.tools[0])),
        ("the stock tool's on_invoke_tool alone", direct),
        ("Executor.run of one call (no gate)", executor_run),
        ("SDK's context choice, stock tool", choice(noop)),
        ("SDK's context choice, scheduled tool", choice(plain.tools[0])),
    ]

    async def timed() -> None:
        contexts = [context(index) for index in range(repeat)]
        print("| layer | µs per call |\n|---|---|")
        for label, layer in layers:
            for ctx in contexts[:200]:
                await layer(ctx)
            loops = []
            for _ in range(7):
                started = time.perf_counter()
                for ctx in contexts:
                    await layer(ctx)
                loops.append((time.perf_counter() - started) / repeat * 1e6)
            print(f"| {label} | {min(loops):.1f} |")

    asyncio.run(timed())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100", help="calls per run, comma-separated")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--profile", choices=WAYS, help="profile this way")
    parser.add_argument("--count", action="store_true", help="count instructions under valgrind instead of timing")
    parser.add_argument("--runs", type=int, help="with --count: measured runs per way (default 200 / N, at least 4)")
    parser.add_argument("--parts", action="store_true", help="time one call's layers, each alone")
    parser.add_argument("--inner", nargs=4, metavar=("SIZES", "WAY", "N", "RUNS"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    set_tracing_disabled(True)
    sizes = [int(size) for size in options.sizes.split(",")]
    if options.inner:
        inner([int(size) for size in options.inner[0].split(",")], options.inner[1], *map(int, options.inner[2:]))
        return
    if options.count:
        count(sizes, options.runs)
        return
    if options.parts:
        parts()
        return
    with asyncio.Runner() as loop:
        for calls in sizes:
            if options.profile:
                profile(loop, options.profile, calls, options.rounds)
            else:
                report(calls, measure(loop, calls, options.rounds, options.warmup))


if __name__ == "__main__":
    main()
