"""Hostile resumes of the tool loops (``toolsched.loops``): the official SDK clients against a scripted provider on
127.0.0.1. A resume that cannot pair the results with the interrupted turn is refused before any call runs or any
request is sent, and the interruption still resumes afterwards with what the loop handed back."""

from __future__ import annotations

from typing import Any

import pytest
from sdk_clients import PROVIDERS, Client
from tool_loops import KEYWORD, run, user

import toolsched as ts
from toolsched.loops import LoopResult
from toolsched.testing import Reply, ScriptedProvider, ToolUse

pytestmark = pytest.mark.anyio


def held(ran: list[str]) -> list[ts.Tool]:
    """``get_weather``, each call held for a person's approval; ``ran`` notes every city it ran for."""

    @ts.tool(needs_approval=True)
    async def get_weather(city: str) -> str:
        """Current weather for a city (asks first)."""
        ran.append(city)
        return f"{city}: 18°C"

    return [get_weather]


def asking(*cities: str) -> Reply:
    return Reply(tool_uses=[ToolUse("get_weather", {"city": city}) for city in cities])


def approve_all(paused: LoopResult) -> None:
    for request in paused.pending:
        paused.state.approve(request.call_id)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("given", ["RunState", "dict", "text"])
async def test_a_resume_that_is_no_loop_result_is_refused_naming_resume(provider: str, given: str) -> None:
    # It was read for its ``stop`` attribute: an AttributeError from inside the loop.
    ran: list[str] = []
    with ScriptedProvider([asking("Paris"), Reply(text="Sunny.")]) as scripted:
        async with Client(provider, scripted.url) as client:
            paused = await run(provider, client.sdk, ts.Executor(held(ran)), [user(provider, "Weather?")])
            approve_all(paused)
            wrong = {"RunState": paused.state, "dict": {"stop": "interrupted"}, "text": "interrupted"}[given]
            with pytest.raises(ts.OptionError, match="resume= takes the LoopResult"):
                await run(provider, client.sdk, paused.executor, paused.history, resume=wrong)
            assert ran == [] and len(scripted.requests) == 1
            finished = await run(provider, client.sdk, paused.executor, paused.history, resume=paused)
    assert (finished.stop, ran) == ("done", ["Paris"])


def _edited(provider: str, paused: LoopResult, edit: str) -> list[Any]:
    if edit == "the first message only":
        return paused.history[:1]
    if edit == "a user message after the turn":
        return [*paused.history, user(provider, "And Rome?")]
    # The caller answered the calls itself.
    return [*paused.history, user(provider, "Paris: 20°C")]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("edit", ["the first message only", "a user message after the turn", "an answer of its own"])
async def test_a_resume_whose_history_does_not_end_with_the_interrupted_turn_runs_and_sends_nothing(
    provider: str, edit: str
) -> None:
    # The results were appended wherever the history ended: after the user's message (Anthropic and Chat refuse
    # a tool result that does not follow its call) or with no call at all, once the approved calls had run.
    ran: list[str] = []
    with ScriptedProvider([asking("Paris", "Rome"), Reply(text="Sunny.")]) as scripted:
        async with Client(provider, scripted.url) as client:
            paused = await run(provider, client.sdk, ts.Executor(held(ran)), [user(provider, "Weather?")])
            approve_all(paused)
            with pytest.raises(ts.OptionError, match=f"{KEYWORD[provider]}= must end with the assistant turn"):
                await run(provider, client.sdk, paused.executor, _edited(provider, paused, edit), resume=paused)
            assert ran == [] and len(scripted.requests) == 1
            # Nothing was taken: the interruption resumes with the history the loop handed back.
            finished = await run(provider, client.sdk, paused.executor, paused.history, resume=paused)
    assert (finished.stop, sorted(ran)) == ("done", ["Paris", "Rome"])
    assert scripted.requests[1].tool_outputs() == ["Paris: 18°C", "Rome: 18°C"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_resume_given_the_history_of_an_earlier_interruption_runs_and_sends_nothing(
    provider: str, stream: bool
) -> None:
    # The second interruption's results answered the first turn's calls, already answered in that history.
    ran: list[str] = []
    script = [asking("Paris"), asking("Rome"), Reply(text="Sunny.")]
    with ScriptedProvider(script) as scripted:
        async with Client(provider, scripted.url) as client:
            first = await run(provider, client.sdk, ts.Executor(held(ran)), [user(provider, "Weather?")], stream=stream)
            approve_all(first)
            second = await run(provider, client.sdk, first.executor, first.history, resume=first, stream=stream)
            assert second.stop == "interrupted" and ran == ["Paris"]
            approve_all(second)
            with pytest.raises(ts.OptionError, match="must end with the assistant turn"):
                await run(provider, client.sdk, second.executor, first.history, resume=second, stream=stream)
            assert ran == ["Paris"] and len(scripted.requests) == 2
            finished = await run(provider, client.sdk, second.executor, second.history, resume=second, stream=stream)
    assert (finished.stop, ran) == ("done", ["Paris", "Rome"])


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_resume_whose_history_is_a_copy_in_other_types_still_resumes(provider: str) -> None:
    # The check reads the turn's calls, not the objects: a history saved as JSON and read back, handed as a
    # tuple, resumes.
    import json

    ran: list[str] = []
    with ScriptedProvider([asking("Paris"), Reply(text="Sunny.")]) as scripted:
        async with Client(provider, scripted.url) as client:
            paused = await run(provider, client.sdk, ts.Executor(held(ran)), [user(provider, "Weather?")])
            approve_all(paused)
            saved = tuple(json.loads(json.dumps(paused.history, default=lambda sdk: sdk.model_dump(exclude_none=True))))
            finished = await run(provider, client.sdk, paused.executor, saved, resume=paused)
    assert (finished.stop, ran) == ("done", ["Paris"])
    assert scripted.requests[1].tool_outputs() == ["Paris: 18°C"]


OTHER = {
    "anthropic": "openai_chat",
    "openai_chat": "gemini",
    "gemini": "openai_responses",
    "openai_responses": "anthropic",
}


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_result_resumed_by_another_providers_loop_runs_nothing(provider: str) -> None:
    # The approved call ran, then the other API's loop could not read the response (ResponseFormatError) or read
    # no calls in it and dropped the result: either way the call ran and its result was lost.
    ran: list[str] = []
    other = OTHER[provider]
    with ScriptedProvider([asking("Paris"), Reply(text="Sunny.")]) as scripted:
        async with Client(provider, scripted.url) as client:
            paused = await run(provider, client.sdk, ts.Executor(held(ran)), [user(provider, "Weather?")])
            approve_all(paused)
        async with Client(other, scripted.url) as client:
            with pytest.raises(ts.OptionError, match="resume="):
                await run(other, client.sdk, paused.executor, paused.history, resume=paused)
        assert ran == [] and len(scripted.requests) == 1
        async with Client(provider, scripted.url) as client:
            finished = await run(provider, client.sdk, paused.executor, paused.history, resume=paused)
    assert (finished.stop, ran) == ("done", ["Paris"])


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_the_calls_a_resume_runs_get_the_loops_context_and_steering(provider: str, stream: bool) -> None:
    # The approved calls ran with ctx.context None (a tool scoped to the caller's user ran for nobody) and no
    # steering was asked between them: the loop resumed the state without either.
    seen: list[tuple[str, Any]] = []

    @ts.tool(needs_approval=True)
    async def get_weather(city: str, ctx: ts.ToolContext) -> str:
        """Current weather for a city (asks first; one call at a time)."""
        seen.append((city, ctx.context))
        return f"{city}: 18°C"

    def steering() -> list[str] | None:
        return ["Only Paris, please."] if seen else None

    options: dict[str, Any] = {"context": {"user": "u1"}, "stream": stream}
    with ScriptedProvider([asking("Paris", "Rome"), Reply(text="Sunny.")]) as scripted:
        async with Client(provider, scripted.url) as client:
            paused = await run(
                provider, client.sdk, ts.Executor([get_weather]), [user(provider, "Weather?")], **options
            )
            approve_all(paused)
            finished = await run(
                provider, client.sdk, paused.executor, paused.history, resume=paused, steering=steering, **options
            )
    assert seen == [("Paris", {"user": "u1"})]
    assert (finished.stop, finished.steering_messages) == ("steered", ["Only Paris, please."])
    assert len(scripted.requests) == 1


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_responses_resume_whose_turn_lost_its_text_item_still_resumes(stream: bool) -> None:
    # The turn is read from the model's items at the end of the input, however many the caller kept: one
    # that dropped the turn's message item (its text) still ends with the turn's calls.
    ran: list[str] = []
    script = [Reply(text="Looking.", tool_uses=[ToolUse("get_weather", {"city": "Paris"})]), Reply(text="Sunny.")]
    with ScriptedProvider(script) as scripted:
        async with Client("openai_responses", scripted.url) as client:
            paused = await run(
                "openai_responses",
                client.sdk,
                ts.Executor(held(ran)),
                [user("openai_responses", "Weather?")],
                stream=stream,
            )
            approve_all(paused)
            kinds = [getattr(item, "type", None) or item.get("type") for item in paused.history[1:]]
            assert kinds == ["message", "function_call"]
            kept = [paused.history[0], paused.history[2]]
            finished = await run("openai_responses", client.sdk, paused.executor, kept, resume=paused, stream=stream)
    assert (finished.stop, ran) == ("done", ["Paris"])
    assert scripted.requests[1].tool_outputs() == ["Paris: 18°C"]
