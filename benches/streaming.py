"""Turn time with and without streaming execution, against the lower bound.

A scripted provider on 127.0.0.1 streams Anthropic Messages answers over real SSE at a model's pace
(tool arguments of 20-200 tokens at 50-100 tokens/s); the official ``anthropic`` client reads them. Each
mix is run both ways, in turns, on fresh executors:

- without streaming: read the whole answer, then ``execute`` its calls;
- with streaming: ``execute_stream``, each call submitted the moment its ``tool_use`` block is complete.

Turn time is from sending the request to the last result being ready. The lower bound is the same
answer with a free executor: every call starts as soon as it has arrived (measured: when the client
saw its block end) and the strategy lets it, and runs exactly its latency; the bound is the later of
the stream's end and the last such finish. "Hidden" is the part of the tool time (what the tools
added after the stream ended, without streaming) that streaming took off the turn.

    python benches/streaming.py            # every mix, 3 runs each way, the median
    python benches/streaming.py --runs 1 --only default
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from anthropic import AsyncAnthropic

import toolsched as ts
from toolsched.providers import anthropic as ts_anthropic
from toolsched.testing import Reply, ScriptedProvider, ToolUse


@dataclass
class Mix:
    name: str
    # (tokens of arguments, latency in seconds, safe) per call
    calls: list[tuple[int, float, bool]]
    tokens_per_second: float
    strategy: str = "partitioned"


DRAWS = 6


def mixes() -> list[Mix]:
    """The default mix is ``DRAWS`` random turns of 5 reads (arguments 20-200 tokens, 50-100 tokens/s,
    latencies 50 ms-2 s): one draw says little, since a long last call leaves nothing to hide."""
    rng = random.Random(7)
    drawn = [
        Mix(
            f"default #{draw + 1}: 5 reads",
            [(rng.randint(20, 200), rng.uniform(0.05, 2.0), True) for _ in range(5)],
            rng.uniform(50, 100),
        )
        for draw in range(DRAWS)
    ]
    many = [(rng.randint(20, 80), rng.uniform(0.05, 0.5), True) for _ in range(10)]
    edits = [(rng.randint(40, 200), rng.uniform(0.2, 1.0), False) for _ in range(4)]
    mixed = [(rng.randint(20, 200), rng.uniform(0.05, 2.0), position % 3 != 2) for position in range(6)]
    return [
        *drawn,
        Mix("one call, 100 tokens, 1 s", [(100, 1.0, True)], 75),
        Mix("10 reads, 20-80 tokens, 50-500 ms", many, 100),
        Mix("4 edits (unsafe), 40-200 tokens, 0.2-1 s", edits, 50),
        Mix("6 mixed (every third unsafe)", mixed, 75),
    ]


def _args(tokens: int, position: int) -> dict[str, Any]:
    # About four characters a token: the padding makes the arguments as long as the model's.
    filler = "x" * max(0, tokens * 4 - 40)
    return {"n": position, "note": filler}


def tools() -> list[ts.Tool]:
    @ts.tool(read_only=True, concurrency_safe=True)
    async def read(n: int, note: str, latency: float = 0.0) -> int:
        await anyio.sleep(latency)
        return n

    @ts.tool
    async def edit(n: int, note: str, latency: float = 0.0) -> int:
        await anyio.sleep(latency)
        return n

    return [read, edit]


def script(mix: Mix) -> Reply:
    calls = []
    for position, (tokens, latency, safe) in enumerate(mix.calls):
        args = _args(tokens, position)
        args["latency"] = round(latency, 3)
        calls.append(ToolUse("read" if safe else "edit", args, id=f"toolu_{position}"))
    return Reply(text="Working on it.", tool_uses=calls, tokens_per_second=mix.tokens_per_second, token_chars=4)


def lower_bound(mix: Mix, arrivals: list[float], stream_end: float) -> float:
    """The turn time of a free executor: each call starts once it arrived and Partitioned lets it
    (a run of safe calls is one batch; a batch starts when every earlier call has finished)."""
    all_done = 0.0
    barrier = 0.0
    previous_safe = False
    for (_, latency, safe), arrived in zip(mix.calls, arrivals, strict=True):
        if not (safe and previous_safe):
            barrier = all_done
        end = max(arrived, barrier) + latency
        all_done = max(all_done, end)
        previous_safe = safe
    return max(stream_end, all_done)


class Timed:
    """Wraps the SDK stream to note when each tool_use block ended and when the stream did."""

    def __init__(self, stream: Any, origin: float) -> None:
        self.stream = stream
        self.origin = origin
        self.arrivals: list[float] = []
        self.end = 0.0
        self._tool_blocks: set[int] = set()

    async def __aiter__(self) -> Any:
        async for event in self.stream:
            if event.type == "content_block_start" and event.content_block.type == "tool_use":
                self._tool_blocks.add(event.index)
            yield event
            if event.type == "content_block_stop" and event.index in self._tool_blocks:
                self.arrivals.append(time.perf_counter() - self.origin)
        self.end = time.perf_counter() - self.origin


async def one_turn(client: AsyncAnthropic, mix: Mix, streaming: bool) -> tuple[float, float, list[float]]:
    executor = ts.Executor(tools())
    origin = time.perf_counter()
    stream = await client.messages.create(
        model="scripted", max_tokens=4096, messages=[{"role": "user", "content": "go"}], stream=True
    )
    timed = Timed(stream, origin)
    if streaming:
        execution = await ts_anthropic.execute_stream(executor, timed)
    else:
        assembler = ts_anthropic.MessageAssembler()
        calls = []
        async for event in timed:
            calls += assembler.feed(event)
        execution = await ts_anthropic.execute(executor, assembler.assembled())
        assert [call.id for call in execution.calls] == [call.id for call in calls]
    done = time.perf_counter() - origin
    assert all(not result.is_error for result in execution.results), execution.results
    return done, timed.end, timed.arrivals


async def measure(selected: list[Mix], runs: int) -> list[dict[str, Any]]:
    rows = []
    for mix in selected:
        answers = [script(mix) for _ in range(2 * runs + 1)]
        streamed: list[float] = []
        whole: list[float] = []
        bounds: list[float] = []
        tool_time: list[float] = []
        with ScriptedProvider(answers) as provider:
            async with AsyncAnthropic(api_key="bench", base_url=provider.url, max_retries=0) as client:
                await one_turn(client, mix, True)  # warms the SDK's parsers and the connection path
                for _ in range(runs):
                    done, end, arrivals = await one_turn(client, mix, False)
                    whole.append(done)
                    tool_time.append(done - end)
                    done, end, arrivals = await one_turn(client, mix, True)
                    streamed.append(done)
                    bounds.append(lower_bound(mix, arrivals, end))
        row = {
            "mix": mix.name,
            "without": statistics.median(whole),
            "with": statistics.median(streamed),
            "bound": statistics.median(bounds),
            "tool_time": statistics.median(tool_time),
        }
        row["hidden"] = (row["without"] - row["with"]) / row["tool_time"] if row["tool_time"] > 0 else 0.0
        row["over_bound"] = row["with"] / row["bound"] - 1
        rows.append(row)
        print(
            f"{row['mix']:<42} without {row['without']:6.2f} s  with {row['with']:6.2f} s  "
            f"bound {row['bound']:6.2f} s  (+{row['over_bound'] * 100:4.1f}%)  hidden {row['hidden'] * 100:5.1f}%",
            flush=True,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs of each mix each way (the median is shown)")
    parser.add_argument("--only", default=None, help="only the mixes whose name starts with this")
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    options = parser.parse_args()
    if options.runs < 1:
        parser.error("--runs must be at least 1")
    selected = [mix for mix in mixes() if options.only is None or mix.name.startswith(options.only)]
    if not selected:
        parser.error(f"no mix starts with {options.only!r}")
    rows = anyio.run(measure, selected, options.runs)
    drawn = [row for row in rows if row["mix"].startswith("default")]
    if drawn:
        without = sum(row["without"] for row in drawn)
        streamed = sum(row["with"] for row in drawn)
        bound = sum(row["bound"] for row in drawn)
        tool_time = sum(row["tool_time"] for row in drawn)
        print(
            f"{'default, all draws (sums)':<42} without {without:6.2f} s  with {streamed:6.2f} s  "
            f"bound {bound:6.2f} s  (+{(streamed / bound - 1) * 100:4.1f}%)  "
            f"hidden {(without - streamed) / tool_time * 100:5.1f}%"
        )
    if options.json:
        Path(options.json).write_text(json.dumps(rows, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
