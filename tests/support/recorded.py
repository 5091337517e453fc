"""Recorded wire-format responses, served to the real SDK clients through an in-memory HTTP transport.

The SDKs parse the recorded JSON exactly as they parse a live answer; the
requests they send are kept for the tests to inspect. Nothing leaves the process.
Each SDK is imported when its client is made, so one provider's SDK alone is enough
(tests/packaging runs this module in a virtualenv with a single extra).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic
    from google import genai
    from openai import AsyncOpenAI

FIXTURES = Path(__file__).with_name("fixtures")


def load(provider: str, name: str) -> dict[str, Any]:
    """The recorded response ``tests/fixtures/{provider}/{name}.json``."""
    loaded: dict[str, Any] = json.loads((FIXTURES / provider / f"{name}.json").read_text(encoding="utf-8"))
    return loaded


class Recorded:
    """Serves recorded responses in order, one per request, and keeps each request's JSON body."""

    def __init__(self, provider: str, *names: str) -> None:
        self.provider = provider
        self.pending = [load(provider, name) for name in names]
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []

    def _answer(self, request: httpx2.Request) -> httpx2.Response:
        self.paths.append(request.url.path)
        self.requests.append(json.loads(request.content))
        if not self.pending:
            return httpx2.Response(400, json={"error": {"message": "no recorded response left", "type": "test"}})
        return httpx2.Response(200, json=self.pending.pop(0))

    def http_client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self._answer))

    def anthropic(self) -> AsyncAnthropic:
        from anthropic import AsyncAnthropic

        return AsyncAnthropic(api_key="test-key", http_client=self.http_client(), max_retries=0)

    def openai(self) -> AsyncOpenAI:
        from openai import AsyncOpenAI

        return AsyncOpenAI(api_key="test-key", http_client=self.http_client(), max_retries=0)

    def gemini(self) -> genai.Client:
        from google import genai
        from google.genai import types as genai_types

        options = genai_types.HttpOptions(httpx_async_client=self.http_client())
        return genai.Client(api_key="test-key", http_options=options)


async def sdk_response(provider: str, name: str) -> Any:
    """A recorded response as the provider's SDK object, parsed by the SDK's own client."""
    recorded = Recorded(provider, name)
    if provider == "anthropic":
        return await recorded.anthropic().messages.create(
            model="claude-sonnet-4-6", max_tokens=1024, messages=[{"role": "user", "content": "hi"}]
        )
    if provider == "openai_responses":
        return await recorded.openai().responses.create(model="gpt-5", input="hi")
    if provider == "openai_chat":
        return await recorded.openai().chat.completions.create(
            model="gpt-4.1", messages=[{"role": "user", "content": "hi"}]
        )
    if provider == "gemini":
        return await recorded.gemini().aio.models.generate_content(model="gemini-2.5-flash", contents="hi")
    raise ValueError(f"no SDK for {provider}")
