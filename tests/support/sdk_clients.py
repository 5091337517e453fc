"""The official async SDK clients pointed at a scripted provider on 127.0.0.1 (``toolsched.testing``)."""

from __future__ import annotations

from typing import Any

from anthropic import AsyncAnthropic
from google import genai
from google.genai import types as genai_types
from openai import AsyncOpenAI

from toolsched.providers import anthropic as ts_anthropic
from toolsched.providers import gemini as ts_gemini
from toolsched.providers import openai_chat as ts_chat
from toolsched.providers import openai_responses as ts_responses

PROVIDERS = ["anthropic", "openai_responses", "openai_chat", "gemini"]
"""The four APIs, by the names ``toolsched.testing`` and the adapters use."""
MODULES: dict[str, Any] = {
    "anthropic": ts_anthropic,
    "openai_responses": ts_responses,
    "openai_chat": ts_chat,
    "gemini": ts_gemini,
}
"""Each API's ``toolsched.providers`` adapter."""


def reply_of(provider: str, execution: Any) -> Any:
    """What an execution sends back to the model, in the provider's own shape: Anthropic's user message,
    the Responses API's input items, chat completions' tool messages, Gemini's content."""
    if provider == "anthropic":
        return execution.message
    if provider == "openai_responses":
        return execution.items
    if provider == "openai_chat":
        return execution.messages
    return execution.content


class Client:
    """The provider's official async client against the scripted server; closed when the block ends."""

    def __init__(self, provider: str, url: str) -> None:
        self.provider = provider
        self.url = url
        self.sdk: Any = None

    async def __aenter__(self) -> Client:
        if self.provider == "anthropic":
            self.sdk = AsyncAnthropic(api_key="test-key", base_url=self.url, max_retries=0)
        elif self.provider == "gemini":
            options = genai_types.HttpOptions(base_url=self.url)
            self.sdk = genai.Client(api_key="test-key", http_options=options)
        else:
            self.sdk = AsyncOpenAI(api_key="test-key", base_url=f"{self.url}/v1", max_retries=0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.provider == "gemini":
            await self.sdk.aio.aclose()
        else:
            await self.sdk.close()

    async def stream(self) -> Any:
        """A streamed answer to "hi": the next scripted answer, as the SDK's stream object."""
        sdk = self.sdk
        if self.provider == "anthropic":
            return await sdk.messages.create(
                model="claude-sonnet-4-6", max_tokens=1024, messages=[{"role": "user", "content": "hi"}], stream=True
            )
        if self.provider == "openai_responses":
            return await sdk.responses.create(model="gpt-5", input="hi", stream=True)
        if self.provider == "openai_chat":
            return await sdk.chat.completions.create(
                model="gpt-4.1", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        return await sdk.aio.models.generate_content_stream(model="gemini-2.5-flash", contents="hi")

    async def loop(self, executor: Any, question: str, *, stream: bool = True) -> Any:
        """The provider's tool loop (``toolsched.loops``), streaming unless told, from one user question to the
        model's stop."""
        from toolsched.loops import anthropic_loop, gemini_loop, openai_chat_loop, openai_responses_loop

        sdk = self.sdk
        if self.provider == "anthropic":
            messages = [{"role": "user", "content": question}]
            return await anthropic_loop(sdk, executor, messages=messages, model="m", max_tokens=99, stream=stream)
        if self.provider == "openai_responses":
            return await openai_responses_loop(sdk, executor, input=question, model="m", stream=stream)
        if self.provider == "openai_chat":
            messages = [{"role": "user", "content": question}]
            return await openai_chat_loop(sdk, executor, messages=messages, model="m", stream=stream)
        return await gemini_loop(sdk, executor, model="m", contents=question, stream=stream)

    async def resume(self, paused: Any, *, stream: bool = True) -> Any:
        """The same loop, resumed from ``paused`` (an interrupted ``LoopResult`` decided on its ``state``)."""
        from toolsched.loops import anthropic_loop, gemini_loop, openai_chat_loop, openai_responses_loop

        sdk, executor, history = self.sdk, paused.executor, paused.history
        if self.provider == "anthropic":
            return await anthropic_loop(
                sdk, executor, messages=history, resume=paused, model="m", max_tokens=99, stream=stream
            )
        if self.provider == "openai_responses":
            return await openai_responses_loop(sdk, executor, input=history, resume=paused, model="m", stream=stream)
        if self.provider == "openai_chat":
            return await openai_chat_loop(sdk, executor, messages=history, resume=paused, model="m", stream=stream)
        return await gemini_loop(sdk, executor, model="m", contents=history, resume=paused, stream=stream)
