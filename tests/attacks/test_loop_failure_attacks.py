"""A tool loop (``toolsched.loops``) whose request fails after its tools ran: the official SDK clients against a
scripted provider on 127.0.0.1 that answers a request with an HTTP error. The results of the tools that ran are
never lost: the loop raises ``LoopFailed`` with the history so far, and sending that history again goes on from
there without running any tool a second time."""

from __future__ import annotations

from typing import Any

import pytest
from sdk_clients import PROVIDERS, Client
from tool_loops import run, user

import toolsched as ts
from toolsched.testing import Reply, ScriptedProvider, ToolUse

pytestmark = pytest.mark.anyio


def weather(ran: list[str]) -> ts.Tool:
    """``get_weather``, which notes in ``ran`` every city it ran for."""

    @ts.tool
    async def get_weather(city: str) -> str:
        """Current weather for a city."""
        ran.append(city)
        return f"{city}: 18°C"

    return get_weather


def asking(city: str) -> Reply:
    return Reply(tool_uses=[ToolUse("get_weather", {"city": city})])


def unavailable(request: Any) -> Reply:
    """A script entry the provider answers with an HTTP error (the model's API is down for this request)."""
    raise RuntimeError("the model is unavailable")


# Gemini's client runs on asyncio only (it asks asyncio for the running loop).
EVENT_LOOPS = [("asyncio", provider) for provider in PROVIDERS] + [
    ("trio", provider) for provider in PROVIDERS if provider != "gemini"
]


@pytest.mark.parametrize(("anyio_backend", "provider"), EVENT_LOOPS)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_request_that_fails_after_tools_ran_keeps_their_results_in_the_history(
    provider: str, stream: bool
) -> None:
    # The SDK's own error came out of the loop with no history: the caller could only start over, running
    # the tools of every earlier turn again.
    ran: list[str] = []
    script = [asking("Paris"), asking("Rome"), unavailable, Reply(text="Sunny in both.")]
    with ScriptedProvider(script) as scripted:
        async with Client(provider, scripted.url) as client:
            executor = ts.Executor([weather(ran)])
            with pytest.raises((ts.LoopFailed, ts.StreamFailed)) as caught:
                await run(provider, client.sdk, executor, [user(provider, "Weather?")], stream=stream)
            failed = caught.value
            assert ran == ["Paris", "Rome"]
            if isinstance(failed, ts.LoopFailed):
                # The SDK's error is the cause; the outcome is the last turn's, the requests this call made are counted.
                assert failed.__cause__ is not None and not isinstance(failed.__cause__, ts.ToolschedError)
                assert failed.turns == 2 and failed.executor is executor
                assert [result.output for result in failed.outcome.results] == ["Rome: 18°C"]
            else:
                # A streamed answer whose API reports the error in the stream (Gemini) breaks as a stream does.
                assert provider == "gemini" and stream
            assert failed.history is not None
            finished = await run(provider, client.sdk, executor, failed.history, stream=stream)
    assert (finished.stop, finished.text, ran) == ("done", "Sunny in both.", ["Paris", "Rome"])
    # The request sent again carries both turns' results, each after its call.
    assert scripted.requests[-1].tool_outputs() == ["Paris: 18°C", "Rome: 18°C"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_first_request_that_fails_raises_the_sdks_own_error(provider: str) -> None:
    # Nothing ran and nothing was answered: the conversation given is still the one to send, and the error a
    # caller catches today (the SDK's) is unchanged.
    ran: list[str] = []
    with ScriptedProvider([unavailable, Reply(text="Hello.")]) as scripted:
        async with Client(provider, scripted.url) as client:
            executor = ts.Executor([weather(ran)])
            with pytest.raises(Exception) as caught:
                await run(provider, client.sdk, executor, [user(provider, "Weather?")])
            assert not isinstance(caught.value, ts.ToolschedError)
            finished = await run(provider, client.sdk, executor, [user(provider, "Weather?")])
    assert (finished.stop, ran) == ("done", [])


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_refresh_tools_that_fails_keeps_the_turns_results(provider: str) -> None:
    ran: list[str] = []

    def refresh_tools() -> ts.Executor:
        raise ConnectionError("the tool server is gone")

    with ScriptedProvider([asking("Paris"), Reply(text="Sunny.")]) as scripted:
        async with Client(provider, scripted.url) as client:
            executor = ts.Executor([weather(ran)])
            with pytest.raises(ts.LoopFailed, match="the tool server is gone") as caught:
                await run(provider, client.sdk, executor, [user(provider, "Weather?")], refresh_tools=refresh_tools)
            assert isinstance(caught.value.__cause__, ConnectionError) and ran == ["Paris"]
            finished = await run(provider, client.sdk, executor, caught.value.history)
    assert (finished.stop, finished.text, ran) == ("done", "Sunny.", ["Paris"])
    assert scripted.requests[-1].tool_outputs() == ["Paris: 18°C"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_request_that_fails_after_a_resume_keeps_the_resumed_calls_results(provider: str) -> None:
    # The resumed turn's calls ran before the first request of this call of the loop.
    ran: list[str] = []

    @ts.tool(needs_approval=True)
    async def get_weather(city: str) -> str:
        """Current weather for a city (asks first)."""
        ran.append(city)
        return f"{city}: 18°C"

    with ScriptedProvider([asking("Paris"), unavailable, Reply(text="Sunny.")]) as scripted:
        async with Client(provider, scripted.url) as client:
            paused = await run(provider, client.sdk, ts.Executor([get_weather]), [user(provider, "Weather?")])
            for request in paused.pending:
                paused.state.approve(request.call_id)
            with pytest.raises(ts.LoopFailed) as caught:
                await run(provider, client.sdk, paused.executor, paused.history, resume=paused)
            assert ran == ["Paris"] and caught.value.turns == 0
            finished = await run(provider, client.sdk, paused.executor, caught.value.history)
    assert (finished.stop, ran) == ("done", ["Paris"])
    assert scripted.requests[-1].tool_outputs() == ["Paris: 18°C"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", [provider for provider in PROVIDERS if provider != "gemini"])
async def test_an_answer_that_cannot_be_read_after_tools_ran_keeps_their_results(provider: str) -> None:
    # Only the request itself was covered: an answer the adapter cannot read (a proxy's empty JSON body) raised
    # ResponseFormatError with no history, and the caller could only start over. (Gemini's SDK reads an empty
    # body as an answer without calls.)
    ran: list[str] = []
    with ScriptedProvider([asking("Paris"), {}, Reply(text="Sunny.")]) as scripted:
        async with Client(provider, scripted.url) as client:
            executor = ts.Executor([weather(ran)])
            with pytest.raises(ts.LoopFailed) as caught:
                await run(provider, client.sdk, executor, [user(provider, "Weather?")])
            assert isinstance(caught.value.__cause__, ts.ResponseFormatError) and ran == ["Paris"]
            assert [result.output for result in caught.value.outcome.results] == ["Paris: 18°C"]
            finished = await run(provider, client.sdk, executor, caught.value.history)
    assert (finished.stop, finished.text, ran) == ("done", "Sunny.", ["Paris"])
    # The unreadable answer is not in the history sent again: it ends with the first turn's result.
    assert scripted.requests[-1].tool_outputs() == ["Paris: 18°C"]
