"""Hostile calls of the tool loops (``toolsched.loops``) with the official SDK clients against a scripted provider
on 127.0.0.1: what a loop refuses is refused with a typed error before any request is sent."""

from __future__ import annotations

from typing import Any

import pytest
from google.genai import types as genai_types
from openai import NOT_GIVEN
from sdk_clients import Client
from weather import weather

import toolsched as ts
from toolsched.loops import anthropic_loop, gemini_loop, openai_chat_loop, openai_responses_loop
from toolsched.testing import Reply, ScriptedProvider, ToolUse

pytestmark = pytest.mark.anyio

MESSAGE = {"role": "user", "content": "Weather in Oslo?"}


def _start(provider: str, conversation: Any) -> Any:
    """The loop of ``provider`` started from ``conversation`` (its ``messages``, ``input`` or ``contents``)."""

    async def start(sdk: Any, executor: ts.Executor) -> Any:
        if provider == "anthropic":
            return await anthropic_loop(sdk, executor, messages=conversation, model="m", max_tokens=99)
        if provider == "openai_chat":
            return await openai_chat_loop(sdk, executor, messages=conversation, model="m")
        if provider == "openai_responses":
            return await openai_responses_loop(sdk, executor, input=conversation, model="m")
        return await gemini_loop(sdk, executor, model="m", contents=conversation)

    return start


ONE_MESSAGE = [
    ("anthropic", MESSAGE),
    ("anthropic", "Weather in Oslo?"),
    ("anthropic", None),
    ("openai_chat", MESSAGE),
    ("openai_chat", "Weather in Oslo?"),
    ("openai_responses", MESSAGE),
    ("openai_responses", 7),
    ("gemini", {"role": "user", "parts": [{"text": "Weather in Oslo?"}]}),
    ("gemini", genai_types.Content(role="user", parts=[genai_types.Part(text="Weather in Oslo?")])),
    ("gemini", None),
]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize(
    ("provider", "conversation"),
    ONE_MESSAGE,
    ids=[f"{provider}-{type(value).__name__}" for provider, value in ONE_MESSAGE],
)
async def test_a_loop_given_one_message_instead_of_a_list_refuses_it_and_sends_nothing(
    provider: str, conversation: Any
) -> None:
    # Read as a list, a message was its keys (or its characters): the request carried "role", "content" as the
    # conversation, and Gemini's SDK turned them into the user's text.
    with ScriptedProvider([Reply(text="It is sunny.")]) as scripted:
        async with Client(provider, scripted.url) as client:
            with pytest.raises(ts.OptionError, match="takes a list"):
                await _start(provider, conversation)(client.sdk, ts.Executor(weather([])))
    assert scripted.requests == []


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", ["anthropic", "openai_chat", "gemini"])
@pytest.mark.parametrize("empty", [[], ()], ids=["list", "tuple"])
async def test_a_loop_given_an_empty_conversation_refuses_it_and_sends_nothing(provider: str, empty: Any) -> None:
    # Gemini's SDK raised its own ValueError ("contents are required"); the other two APIs answer 400.
    with ScriptedProvider([Reply(text="It is sunny.")]) as scripted:
        async with Client(provider, scripted.url) as client:
            with pytest.raises(ts.OptionError, match="is empty"):
                await _start(provider, empty)(client.sdk, ts.Executor(weather([])))
    assert scripted.requests == []


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", ["anthropic", "openai_chat", "openai_responses", "gemini"])
async def test_a_loop_takes_its_conversation_as_any_list_of_messages(provider: str) -> None:
    if provider == "gemini":
        first: Any = {"role": "user", "parts": [{"text": "Weather in Oslo?"}]}
    else:
        first = MESSAGE
    with ScriptedProvider([Reply(text="It is sunny."), Reply(text="It is sunny.")]) as scripted:
        async with Client(provider, scripted.url) as client:
            for conversation in ([first], (first,)):
                result = await _start(provider, conversation)(client.sdk, ts.Executor(weather([])))
                assert (result.stop, result.text) == ("done", "It is sunny.")
    assert "Weather in Oslo?" in str(scripted.requests[0].body)


def _with_own_tools(provider: str, tools: Any) -> Any:
    """The loop of ``provider`` asked "Weather in Oslo?" with ``tools`` as the caller's own tools."""

    async def start(sdk: Any, executor: ts.Executor) -> Any:
        if provider == "anthropic":
            return await anthropic_loop(sdk, executor, messages=[MESSAGE], model="m", max_tokens=99, tools=tools)
        if provider == "openai_chat":
            return await openai_chat_loop(sdk, executor, messages=[MESSAGE], model="m", tools=tools)
        if provider == "openai_responses":
            return await openai_responses_loop(sdk, executor, input=[MESSAGE], model="m", tools=tools)
        return await gemini_loop(sdk, executor, model="m", contents="Weather in Oslo?", config={"tools": tools})

    return start


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", ["anthropic", "openai_chat", "openai_responses", "gemini"])
@pytest.mark.parametrize("none", [None, NOT_GIVEN, ()], ids=["None", "NOT_GIVEN", "empty"])
async def test_a_loop_whose_own_tools_are_none_sends_the_executors_tools(provider: str, none: Any) -> None:
    with ScriptedProvider([Reply(text="It is sunny.")]) as scripted:
        async with Client(provider, scripted.url) as client:
            result = await _with_own_tools(provider, none)(client.sdk, ts.Executor(weather([])))
    assert result.stop == "done"
    assert "get_weather" in str(scripted.requests[0].body)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", ["anthropic", "openai_chat", "openai_responses", "gemini"])
async def test_a_loop_given_one_tool_instead_of_a_list_refuses_it_and_sends_nothing(provider: str) -> None:
    # Spread into the request, a tool's dict gave its keys as tools.
    hosted = {"type": "web_search", "name": "web_search"}
    with ScriptedProvider([Reply(text="It is sunny.")]) as scripted:
        async with Client(provider, scripted.url) as client:
            with pytest.raises(ts.OptionError, match="tools= takes a list"):
                await _with_own_tools(provider, hosted)(client.sdk, ts.Executor(weather([])))
    assert scripted.requests == []


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", ["anthropic", "openai_chat", "openai_responses", "gemini"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_loop_cancelled_while_its_tools_run_stops_them_as_its_doc_says(provider: str, stream: bool) -> None:
    # Whole: every call in flight is cancelled. Streamed: wound down as a broken stream, a "block" call finishing
    # first. Either way the cancellation propagates, nothing is left running and no second request is sent.
    import asyncio

    ended: dict[str, str] = {}
    started = {"cancel": asyncio.Event(), "block": asyncio.Event()}
    cancelled = asyncio.Event()
    release = asyncio.Event()

    def held(behaviour: str) -> ts.Tool:
        @ts.tool(name=f"{behaviour}_tool", concurrency_safe=True, interrupt_behavior=behaviour)
        async def body(city: str) -> str:
            """Waits until released."""
            started[behaviour].set()
            try:
                await release.wait()
            except asyncio.CancelledError:
                ended[behaviour] = "cancelled"
                cancelled.set()
                raise
            ended[behaviour] = "finished"
            return city

        return body

    tools = [held("cancel"), held("block")]
    uses = [ToolUse("cancel_tool", {"city": "Paris"}), ToolUse("block_tool", {"city": "Rome"})]
    with ScriptedProvider([Reply(tool_uses=uses), Reply(text="Sunny.")]) as scripted:
        async with Client(provider, scripted.url) as client:
            task = asyncio.ensure_future(client.loop(ts.Executor(tools), "Weather?", stream=stream))
            await started["cancel"].wait()
            await started["block"].wait()
            task.cancel()
            if stream:
                # The "cancel" call is stopped at once; the "block" one is waited for: released only then.
                await cancelled.wait()
                release.set()
            with pytest.raises(asyncio.CancelledError):
                await task
    assert ended == {"cancel": "cancelled", "block": "finished" if stream else "cancelled"}
    assert len(scripted.requests) == 1
