"""A provider's example (``main`` and ``main_with_loop``) with the provider's official SDK and recorded answers.

argv[2:]: the examples to run, each as ``EXAMPLE:PROVIDER`` (the provider names the recorded answers).
"""

from __future__ import annotations

import sys

import anyio
from example_scripts import load_example
from recorded import Recorded

RESPONSES = {
    "anthropic": ("tool_use", "end_turn"),
    "openai_responses": ("function_calls", "final"),
    "openai_chat": ("tool_calls", "final"),
    "gemini": ("function_calls", "final"),
}


async def main() -> None:
    for argument in sys.argv[2:]:
        example, provider = argument.split(":")
        module = load_example(example)
        for entry in ("main", "main_with_loop"):
            recorded = Recorded(provider, *RESPONSES[provider])
            client = {"anthropic": recorded.anthropic, "gemini": recorded.gemini}.get(provider, recorded.openai)()
            answer = await getattr(module, entry)(client)
            # The second request carries both results, computed by the example's tool.
            second = str(recorded.requests[1])
            sent = "Paris: 18°C" in second and "London: 59°F" in second
            print(f"{example}.{entry}: {answer} ({len(recorded.requests)} requests, results sent: {sent})")


anyio.run(main)
