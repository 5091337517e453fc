"""``toolsched.testing``: a scripted model that each official SDK client talks to over HTTP, streamed or not."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from typing import Any

import pytest
from sdk_clients import MODULES, PROVIDERS, Client

import toolsched as ts
from toolsched.testing import Reply, Request, ScriptedProvider, ToolUse, api_of, response_body, stream_events

CALLS = Reply(
    text="Checking both.",
    tool_uses=[ToolUse("get_weather", {"city": "Paris"}), ToolUse("get_weather", {"city": "London"}, id="ldn")],
)


def weather_executor(seen: list[str]) -> ts.Executor:
    @ts.tool(read_only=True, concurrency_safe=True)
    async def get_weather(city: str) -> str:
        """Current weather for a city."""
        seen.append(city)
        return f"{city}: 18°C"

    return ts.Executor([get_weather])


def summary(request: Request) -> Reply:
    return Reply(text=" / ".join(request.tool_outputs()))


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_each_sdk_runs_a_tool_loop_against_the_script(provider: str, stream: bool) -> None:
    seen: list[str] = []
    from toolsched.loops import anthropic_loop, gemini_loop, openai_chat_loop, openai_responses_loop

    with ScriptedProvider([CALLS, summary]) as model:
        async with Client(provider, model.url) as client:
            sdk, executor = client.sdk, weather_executor(seen)
            if provider == "anthropic":
                messages = [{"role": "user", "content": "weather?"}]
                result = await anthropic_loop(sdk, executor, messages=messages, model="m", max_tokens=99, stream=stream)
            elif provider == "openai_responses":
                result = await openai_responses_loop(sdk, executor, input="weather?", model="m", stream=stream)
            elif provider == "openai_chat":
                messages = [{"role": "user", "content": "weather?"}]
                result = await openai_chat_loop(sdk, executor, messages=messages, model="m", stream=stream)
            else:
                result = await gemini_loop(sdk, executor, model="m", contents="weather?", stream=stream)
    assert (result.stop, result.turns) == ("done", 2)
    # The second reply was made from what the tools returned, read out of the SDK's second request.
    assert result.text == "Paris: 18°C / London: 18°C"
    assert sorted(seen) == ["London", "Paris"]
    assert [request.api for request in model.requests] == [provider, provider]
    assert [request.stream for request in model.requests] == [stream, stream]
    assert model.unused == 0
    if provider != "gemini":
        # The ID the script gave is the one the results answer; the other one was made by the provider.
        assert "ldn" in str(model.requests[1].body)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_reply_body_is_read_by_the_adapter_as_the_api_would_send_it(provider: str) -> None:
    calls = MODULES[provider].calls_from(response_body(provider, CALLS, number=3))  # type: ignore[arg-type]
    # OpenAI's formats carry arguments as JSON text, as the model wrote them; the others as objects.
    decoded = [(call.name, json.loads(call.args) if isinstance(call.args, str) else call.args) for call in calls]
    assert decoded == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "London"}),
    ]
    assert calls[1].id == "ldn"
    if provider == "anthropic":
        assert calls[0].id == "toolu_3_0"
    elif provider != "gemini":
        assert calls[0].id == "call_3_0"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_streamed_reply_carries_the_arguments_in_pieces_at_the_reply_pace(provider: str) -> None:
    reply = Reply(tool_uses=[ToolUse("t", {"query": "a" * 40})], tokens_per_second=100, token_chars=4)
    events = stream_events(provider, reply)  # type: ignore[arg-type]
    waited = sum(event.delay for event in events)
    # 50 characters of JSON arguments at 4 characters a token, 100 tokens a second: about 0.12 s.
    assert 0.11 <= waited <= 0.14
    assert json.dumps({"query": "a" * 40}) in "".join(_argument_text(provider, event.data) for event in events)


def _argument_text(provider: str, data: Any) -> str:
    if not isinstance(data, dict):
        return ""
    if provider == "anthropic":
        return str(data.get("delta", {}).get("partial_json", ""))
    if provider == "openai_responses":
        return str(data.get("delta", "")) if data["type"].endswith("arguments.delta") else ""
    if provider == "openai_chat":
        return "".join(call["function"]["arguments"] for call in data["choices"][0]["delta"].get("tool_calls", []))
    return "".join(
        json.dumps(part["functionCall"]["args"])
        for part in data["candidates"][0]["content"]["parts"]
        if "functionCall" in part
    )


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_request_past_the_script_is_a_400_the_sdk_raises_and_does_not_retry(provider: str) -> None:
    with ScriptedProvider([Reply(text="only one")]) as model:
        async with Client(provider, model.url) as client:
            await _ask(client)
            with pytest.raises(Exception, match="no reply left for request 2") as raised:
                await _ask(client)
    assert "400" in str(raised.value) or getattr(raised.value, "status_code", None) == 400
    assert len(model.requests) == 2


async def _ask(client: Client) -> Any:
    sdk = client.sdk
    if client.provider == "anthropic":
        return await sdk.messages.create(model="m", max_tokens=9, messages=[{"role": "user", "content": "hi"}])
    if client.provider == "openai_responses":
        return await sdk.responses.create(model="m", input="hi")
    if client.provider == "openai_chat":
        return await sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    return await sdk.aio.models.generate_content(model="m", contents="hi")


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_script_function_that_raises_is_answered_with_its_error() -> None:
    def broken(request: Request) -> Reply:
        raise LookupError("nothing scripted for this")

    with ScriptedProvider([broken]) as model:
        async with Client("anthropic", model.url) as client:
            with pytest.raises(Exception, match="nothing scripted for this"):
                await _ask(client)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_stream_cut_by_break_after_fails_in_the_sdk() -> None:
    with ScriptedProvider([CALLS], break_after={0: 3}) as model:
        async with Client("anthropic", model.url) as client:
            with pytest.raises(Exception):  # noqa: B017 - the SDK's own error for a broken body
                async for _ in await client.stream():
                    pass
    assert model.sent_at == []


def _open_stream(url: str) -> http.client.HTTPResponse:
    """A streamed Chat request to ``url``, its answer open for reading."""
    body = json.dumps({"model": "m", "messages": [], "stream": True}).encode()
    request = urllib.request.Request(f"{url}/chat/completions", data=body, method="POST")
    response: http.client.HTTPResponse = urllib.request.urlopen(request, timeout=30)
    return response


def _data_lines(raw: bytes) -> list[Any]:
    lines = [line[len("data: ") :] for line in raw.decode().splitlines() if line.startswith("data: ")]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


def test_end_after_ends_a_stream_cleanly_and_break_after_past_the_last_event_cuts_before_the_end() -> None:
    events = stream_events("openai_chat", CALLS)
    with ScriptedProvider([CALLS, CALLS], end_after={0: 2}, break_after={1: len(events)}) as model:
        with _open_stream(model.url) as response:
            assert _data_lines(response.read()) == [event.data for event in events[:2]]
        with _open_stream(model.url) as response, pytest.raises(http.client.IncompleteRead) as raised:
            response.read()
        assert _data_lines(raised.value.partial) == [
            event.data for event in stream_events("openai_chat", CALLS, number=2)
        ]
    assert len(model.sent_at) == 1


def test_a_gate_holds_the_end_of_a_stream_until_it_is_set() -> None:
    gate = threading.Event()
    with ScriptedProvider([CALLS], end_after={0: 1}, gates={0: gate}) as model:
        with _open_stream(model.url) as response:
            first = response.readline() + response.readline()
            assert _data_lines(first) == [stream_events("openai_chat", CALLS)[0].data]
            # The event is read; the body does not end while the gate is shut.
            assert model.sent_at == []
            gate.set()
            assert _data_lines(response.read()) == []
    assert len(model.sent_at) == 1


def test_a_client_that_closes_a_stream_midway_is_recorded_as_hung_up() -> None:
    endless = [(0.01, None, {"n": number}) for number in range(3000)]
    with ScriptedProvider([Reply(text="hi"), endless]) as model:
        with _open_stream(model.url) as response:
            response.read()
        with _open_stream(model.url) as response:
            assert _data_lines(response.readline()) == [{"n": 0}]
        assert model.hang_up.wait(20)
    assert model.hung_up == [1]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_tool_use_sent_without_an_id_carries_none_in_either_form(provider: str) -> None:
    reply = Reply(tool_uses=[ToolUse("get_weather", {"city": "Oslo"}, id="kept", send_id=False)])
    whole = json.dumps(response_body(provider, reply))
    streamed = json.dumps([event.data for event in stream_events(provider, reply)])
    assert "Oslo" in whole
    for text in (whole, streamed):
        assert "kept" not in text
        assert '"call_id"' not in text and "toolu_" not in text and '"id": "call_' not in text
    # The adapters read such a call and give it an ID of their own.
    calls = MODULES[provider].calls_from(response_body(provider, reply))
    assert [call.id.startswith("toolsched_call_") for call in calls] == [True]


def test_exact_answers_are_sent_as_given() -> None:
    body = {"id": "chatcmpl-x", "object": "chat.completion", "choices": [], "custom": True}
    with ScriptedProvider([body, [(0.0, None, {"custom": 1}), (0.0, None, "[DONE]")]]) as model:
        request = urllib.request.Request(f"{model.url}/chat/completions", data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            assert json.loads(response.read()) == body
        with _open_stream(model.url) as response:
            assert _data_lines(response.read()) == [{"custom": 1}, "[DONE]"]


def test_an_unknown_path_is_404_and_paths_name_their_api() -> None:
    assert api_of("/v1/messages") == "anthropic"
    assert api_of("/v1/responses") == "openai_responses"
    assert api_of("/chat/completions") == "openai_chat"
    assert api_of("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse") == "gemini"
    assert api_of("/v1/embeddings") is None
    with ScriptedProvider([Reply(text="hi")]) as model:
        request = urllib.request.Request(f"{model.url}/v1/embeddings", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(request, timeout=10)
        assert raised.value.code == 404
        assert model.unused == 1


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ToolUse(""), "name must be a non-empty string"),
        (lambda: ToolUse("t", ["not", "a", "mapping"]), "args must be a mapping"),  # type: ignore[arg-type]
        (lambda: ToolUse("t", {"when": object()}), "are not JSON"),
        (lambda: ToolUse("t", {"x": float("nan")}), "are not JSON"),
        (lambda: ToolUse("t", id=""), "id must be a non-empty string"),
        (lambda: ToolUse("t", send_id=0), "send_id must be True or False"),  # type: ignore[arg-type]
        (lambda: ScriptedProvider([[{"a": 1, "b": 2, "c": 3}]]), "must hold \\(delay, name, data\\) events"),  # type: ignore[list-item]
        (lambda: Reply(text=3), "text must be a string"),  # type: ignore[arg-type]
        (lambda: Reply(tool_uses=[("t", {})]), "must be ToolUse values"),  # type: ignore[list-item]
        (lambda: Reply(tokens_per_second=-1), "tokens_per_second must be"),
        (lambda: Reply(first_token=float("inf")), "first_token must be"),
        (lambda: Reply(token_chars=0), "token_chars must be"),
        (lambda: ScriptedProvider(["hello"]), "script entry 0 must be a Reply"),  # type: ignore[list-item]
        (lambda: response_body("bedrock", Reply()), "unknown API 'bedrock'"),  # type: ignore[arg-type]
        (lambda: stream_events("bedrock", Reply()), "unknown API 'bedrock'"),  # type: ignore[arg-type]
    ],
)
def test_bad_script_values_are_refused_with_a_readable_option_error(make: Any, message: str) -> None:
    with pytest.raises(ts.OptionError, match=message):
        make()


def test_the_url_is_only_there_while_the_provider_serves() -> None:
    provider = ScriptedProvider([])
    with pytest.raises(RuntimeError, match="not running"):
        provider.url  # noqa: B018
    with provider:
        assert provider.url.startswith("http://127.0.0.1:")
    with pytest.raises(RuntimeError, match="not running"):
        provider.url  # noqa: B018


def test_the_package_imports_no_sdk() -> None:
    code = (
        "import sys, toolsched.testing; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'anthropic', 'openai', 'google', 'httpx', 'httpx2'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
