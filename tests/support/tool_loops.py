"""Each API's tool loop (``toolsched.loops``) called one way, for tests that run the same case on every provider:
``run`` with the conversation under the keyword its API takes, ``user`` a user message in its API's shape."""

from __future__ import annotations

from typing import Any

import toolsched as ts
from toolsched.loops import LoopResult, anthropic_loop, gemini_loop, openai_chat_loop, openai_responses_loop

KEYWORD = {"anthropic": "messages", "openai_responses": "input", "openai_chat": "messages", "gemini": "contents"}
"""The keyword each API's loop takes the conversation under."""


def user(provider: str, text: str) -> dict[str, Any]:
    """A user message saying ``text``, as ``provider``'s API takes it."""
    if provider == "gemini":
        return {"role": "user", "parts": [{"text": text}]}
    return {"role": "user", "content": text}


async def run(provider: str, sdk: Any, executor: ts.Executor, history: Any, **options: Any) -> LoopResult:
    """``provider``'s loop on ``history`` with the SDK client ``sdk`` (model ``m``; Anthropic's ``max_tokens`` 99)."""
    if provider == "anthropic":
        return await anthropic_loop(sdk, executor, messages=history, model="m", max_tokens=99, **options)
    if provider == "openai_responses":
        return await openai_responses_loop(sdk, executor, input=history, model="m", **options)
    if provider == "openai_chat":
        return await openai_chat_loop(sdk, executor, messages=history, model="m", **options)
    return await gemini_loop(sdk, executor, model="m", contents=history, **options)
