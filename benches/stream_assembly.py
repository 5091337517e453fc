"""Time to assemble one long streamed text (Anthropic thinking, chat tool arguments, Gemini text) from N deltas
of four characters, at N and at 4N: the time per delta stays flat when assembly is linear.

    python benches/stream_assembly.py            # N = 50,000
    python benches/stream_assembly.py --deltas 20000
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from toolsched.providers import anthropic, gemini, openai_chat


def _anthropic(deltas: int) -> Callable[[], Any]:
    start = {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}
    piece = {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "abcd"}}

    def run() -> Any:
        assembler = anthropic.MessageAssembler()
        assembler.feed(start)
        for _ in range(deltas):
            assembler.feed(piece)
        assembler.feed({"type": "content_block_stop", "index": 0})
        return assembler.assembled()

    return run


def _chat(deltas: int) -> Callable[[], Any]:
    text = json.dumps({"content": "x" * (4 * deltas)})

    def chunk(part: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
        delta = {} if part is None else {"tool_calls": [part]}
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    first = chunk({"index": 0, "id": "c", "type": "function", "function": {"name": "write", "arguments": ""}})
    pieces = [chunk({"index": 0, "function": {"arguments": text[at : at + 4]}}) for at in range(0, len(text), 4)]

    def run() -> Any:
        assembler = openai_chat.CompletionAssembler()
        assembler.feed(first)
        for piece in pieces:
            assembler.feed(piece)
        assembler.feed(chunk(None, "tool_calls"))
        return assembler.assembled()

    return run


def _gemini(deltas: int) -> Callable[[], Any]:
    piece = {"candidates": [{"content": {"role": "model", "parts": [{"text": "abcd"}]}}]}
    last = {"candidates": [{"content": {"role": "model", "parts": [{"text": "."}]}, "finishReason": "STOP"}]}

    def run() -> Any:
        assembler = gemini.ContentAssembler()
        for _ in range(deltas):
            assembler.feed(piece)
        assembler.feed(last)
        return assembler.assembled()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", type=int, default=50_000)
    options = parser.parse_args()
    for name, build in (("anthropic", _anthropic), ("openai chat", _chat), ("gemini", _gemini)):
        for deltas in (options.deltas, 4 * options.deltas):
            run = build(deltas)
            began = time.perf_counter()
            run()
            spent = time.perf_counter() - began
            print(f"{name:12} {deltas:>9,} deltas  {spent:7.3f} s  {spent / deltas * 1e6:6.2f} µs per delta")


if __name__ == "__main__":
    main()
