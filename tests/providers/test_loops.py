"""Tool loops with the real SDK clients, parsing recorded wire-format responses served in memory."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from recorded import Recorded, sdk_response

import toolsched as ts
from toolsched.loops import anthropic_loop, gemini_loop, openai_chat_loop, openai_responses_loop
from toolsched.providers import anthropic as ts_anthropic

pytestmark = pytest.mark.anyio

QUESTION = "What is the weather in Paris and London?"
ANSWER = "Paris is 18°C and London is 59°F."


def weather_tools(ran: list[str]) -> list[ts.Tool]:
    @ts.tool(read_only=True, concurrency_safe=True)
    async def get_weather(city: str, unit: Literal["c", "f"] = "c") -> str:
        """Current weather for a city."""
        ran.append(city)
        return f"{city}: {18 if unit == 'c' else 59}°{unit.upper()}"

    @ts.tool
    async def lookup(term: str) -> str:
        """Look a term up."""
        return term

    return [get_weather, lookup]


def approval_tools(ran: list[str]) -> list[ts.Tool]:
    @ts.tool(read_only=True, concurrency_safe=True, needs_approval=True)
    async def get_weather(city: str, unit: Literal["c", "f"] = "c") -> str:
        """Current weather for a city (each call needs a person's approval)."""
        ran.append(city)
        return f"{city}: {18 if unit == 'c' else 59}°{unit.upper()}"

    return [get_weather]


# -- Anthropic ------------------------------------------------------------------------------------


async def test_anthropic_loop_reinjects_results_until_the_model_stops() -> None:
    ran: list[str] = []
    recorded = Recorded("anthropic", "tool_use", "end_turn")
    result = await anthropic_loop(
        recorded.anthropic(),
        ts.Executor(weather_tools(ran)),
        messages=[{"role": "user", "content": QUESTION}],
        model="claude-sonnet-4-6",
        max_tokens=1024,
        tools=[{"type": "web_search_20250305", "name": "web_search"}],
    )
    assert (result.stop, result.turns, result.text) == ("done", 2, ANSWER)
    assert sorted(ran) == ["London", "Paris"]
    first, second = recorded.requests
    # The executor's tools, sorted, then the caller's server tools.
    assert [tool["name"] for tool in first["tools"]] == ["get_weather", "lookup", "web_search"]
    assert first["model"] == "claude-sonnet-4-6" and first["max_tokens"] == 1024
    sent = second["messages"]
    assert [message["role"] for message in sent] == ["user", "assistant", "user"]
    assert [block["type"] for block in sent[1]["content"]] == ["text", "tool_use", "tool_use"]
    assert sent[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_01Paris", "content": "Paris: 18°C"},
        {"type": "tool_result", "tool_use_id": "toolu_02London", "content": "London: 59°F"},
    ]
    assert len(result.history) == 4 and result.history[-1]["role"] == "assistant"


async def test_anthropic_loop_stops_at_the_turn_limit_with_every_call_answered() -> None:
    ran: list[str] = []
    recorded = Recorded("anthropic", "tool_use", "end_turn")
    result = await anthropic_loop(
        recorded.anthropic(),
        ts.Executor(weather_tools(ran)),
        messages=[{"role": "user", "content": QUESTION}],
        model="claude-sonnet-4-6",
        max_tokens=1024,
        max_turns=1,
    )
    assert (result.stop, result.turns) == ("max_turns", 1)
    assert len(recorded.requests) == 1
    assert [block["tool_use_id"] for block in result.history[-1]["content"]] == ["toolu_01Paris", "toolu_02London"]


async def test_anthropic_pause_turn_is_sent_back_as_it_is() -> None:
    recorded = Recorded("anthropic", "pause_turn", "end_turn")
    result = await anthropic_loop(
        recorded.anthropic(),
        ts.Executor(weather_tools([])),
        messages=[{"role": "user", "content": "Find weather records."}],
        model="claude-sonnet-4-6",
        max_tokens=1024,
    )
    assert (result.stop, result.turns) == ("done", 2)
    resent = recorded.requests[1]["messages"][-1]
    assert resent["role"] == "assistant" and resent["content"][0]["type"] == "server_tool_use"


async def test_held_calls_interrupt_the_loop_and_resume_runs_them_once() -> None:
    ran: list[str] = []
    executor = ts.Executor(approval_tools(ran))
    recorded = Recorded("anthropic", "tool_use", "end_turn")
    client = recorded.anthropic()
    options: dict[str, Any] = {"model": "claude-sonnet-4-6", "max_tokens": 1024}
    paused = await anthropic_loop(client, executor, messages=[{"role": "user", "content": QUESTION}], **options)
    assert paused.stop == "interrupted" and isinstance(paused.state, ts.RunState)
    assert [request.call_id for request in paused.pending] == ["toolu_01Paris", "toolu_02London"]
    assert ran == [] and len(recorded.requests) == 1
    assert [message["role"] for message in paused.history] == ["user", "assistant"]

    paused.state.approve("toolu_01Paris")
    paused.state.reject("toolu_02London", "not London today")
    finished = await anthropic_loop(client, paused.executor, messages=paused.history, resume=paused, **options)
    assert (finished.stop, finished.text) == ("done", ANSWER)
    assert ran == ["Paris"]
    paris, london = recorded.requests[1]["messages"][2]["content"]
    assert paris == {"type": "tool_result", "tool_use_id": "toolu_01Paris", "content": "Paris: 18°C"}
    assert london["tool_use_id"] == "toolu_02London" and london["is_error"] is True
    assert "not London today" in london["content"]
    with pytest.raises(ts.OptionError, match="interrupted"):
        await anthropic_loop(client, executor, messages=finished.history, resume=finished, **options)


async def test_an_interrupted_execute_is_finished_by_resume() -> None:
    ran: list[str] = []
    executor = ts.Executor(approval_tools(ran))
    response = await sdk_response("anthropic", "tool_use")
    turn = await ts_anthropic.execute(executor, response)
    assert turn.interrupted and turn.message is None and ran == []
    with pytest.raises(ts.MissingResultError, match="toolu_01Paris"):
        ts_anthropic.results_to_message(turn.calls, turn.results)
    state = turn.outcome.state
    assert state is not None
    state.approve("toolu_01Paris")
    state.approve("toolu_02London")
    finished = await ts_anthropic.resume(executor, turn, state)
    assert finished.message is not None
    assert [block["content"] for block in finished.message["content"]] == ["Paris: 18°C", "London: 59°F"]
    assert sorted(ran) == ["London", "Paris"]


# -- OpenAI Responses -----------------------------------------------------------------------------


async def test_responses_loop_keeps_the_conversation_in_input() -> None:
    ran: list[str] = []
    recorded = Recorded("openai_responses", "function_calls", "final")
    result = await openai_responses_loop(
        recorded.openai(),
        ts.Executor(weather_tools(ran)),
        input=QUESTION,
        model="gpt-5",
        strict=True,
        tools=[{"type": "web_search"}],
    )
    assert (result.stop, result.turns, result.text) == ("done", 2, ANSWER)
    first, second = recorded.requests
    assert [tool.get("name", tool["type"]) for tool in first["tools"]] == ["get_weather", "lookup", "web_search"]
    assert first["tools"][0]["strict"] is True
    assert [item.get("type", item.get("role")) for item in second["input"]] == [
        "user",
        "reasoning",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
    ]
    assert second["input"][4] == {"type": "function_call_output", "call_id": "call_paris", "output": "Paris: 18°C"}
    assert second["input"][5]["call_id"] == "call_london"
    assert sorted(ran) == ["London", "Paris"]


async def test_refresh_tools_changes_what_the_next_request_offers() -> None:
    ran: list[str] = []

    @ts.tool
    async def forecast(city: str, days: int = 3) -> str:
        """A forecast."""
        return city

    tools = weather_tools(ran)
    refreshed: list[ts.Executor] = []

    async def refresh_tools() -> ts.Executor:
        refreshed.append(ts.Executor([*tools, forecast]))
        return refreshed[-1]

    recorded = Recorded("openai_responses", "function_calls", "final")
    result = await openai_responses_loop(
        recorded.openai(), ts.Executor(tools), input=QUESTION, model="gpt-5", refresh_tools=refresh_tools
    )
    assert [tool["name"] for tool in recorded.requests[0]["tools"]] == ["get_weather", "lookup"]
    assert [tool["name"] for tool in recorded.requests[1]["tools"]] == ["forecast", "get_weather", "lookup"]
    assert len(refreshed) == 1 and result.executor is refreshed[0]


# -- OpenAI Chat Completions ----------------------------------------------------------------------


async def test_chat_loop_answers_with_tool_messages() -> None:
    ran: list[str] = []
    recorded = Recorded("openai_chat", "tool_calls", "final")
    result = await openai_chat_loop(
        recorded.openai(),
        ts.Executor(weather_tools(ran)),
        messages=[{"role": "user", "content": QUESTION}],
        model="gpt-4.1",
    )
    assert (result.stop, result.turns, result.text) == ("done", 2, ANSWER)
    sent = recorded.requests[1]["messages"]
    assert [message["role"] for message in sent] == ["user", "assistant", "tool", "tool"]
    assert [call["id"] for call in sent[1]["tool_calls"]] == ["call_paris", "call_london"]
    assert sent[2] == {"role": "tool", "tool_call_id": "call_paris", "content": "Paris: 18°C"}
    assert recorded.requests[0]["tools"][0]["function"]["name"] == "get_weather"


async def test_steering_stops_the_loop_after_answering_every_call() -> None:
    ran: list[str] = []

    @ts.tool
    async def get_weather(city: str, unit: str = "c") -> str:
        """Unsafe to share a batch: each call runs alone, with steering checked between."""
        ran.append(city)
        return city

    recorded = Recorded("openai_chat", "tool_calls", "final")
    result = await openai_chat_loop(
        recorded.openai(),
        ts.Executor([get_weather]),
        messages=[{"role": "user", "content": QUESTION}],
        model="gpt-4.1",
        steering=lambda: ["Only Paris, please."] if ran else None,
    )
    assert result.stop == "steered" and result.steering_messages == ["Only Paris, please."]
    assert ran == ["Paris"] and len(recorded.requests) == 1
    answered = {message["tool_call_id"]: message["content"] for message in result.history[2:]}
    assert answered["call_paris"] == "Paris" and answered["call_london"].startswith("Error: not run")


# -- Gemini ---------------------------------------------------------------------------------------


async def test_gemini_loop_answers_with_function_responses() -> None:
    ran: list[str] = []
    recorded = Recorded("gemini", "function_calls", "final")
    result = await gemini_loop(
        recorded.gemini(),
        ts.Executor(weather_tools(ran)),
        model="gemini-2.5-flash",
        contents=QUESTION,
        config={"temperature": 0.2},
    )
    assert (result.stop, result.turns, result.text) == ("done", 2, ANSWER)
    first, second = recorded.requests
    declarations = first["tools"][0]["functionDeclarations"]
    assert [declaration["name"] for declaration in declarations] == ["get_weather", "lookup"]
    assert first["generationConfig"]["temperature"] == 0.2
    contents = second["contents"]
    assert [content["role"] for content in contents] == ["user", "model", "user"]
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "get_weather", "response": {"output": "Paris: 18°C"}}},
        {"functionResponse": {"name": "get_weather", "response": {"output": "London: 59°F"}}},
    ]


QUESTION_MESSAGE = {"role": "user", "content": QUESTION}


async def test_loop_options_are_checked() -> None:
    recorded = Recorded("anthropic", "end_turn")
    with pytest.raises(ts.OptionError, match="max_turns"):
        await anthropic_loop(recorded.anthropic(), ts.Executor([]), messages=[QUESTION_MESSAGE], max_turns=0)
    with pytest.raises(TypeError, match="Executor"):
        await anthropic_loop(recorded.anthropic(), [], messages=[QUESTION_MESSAGE])  # type: ignore[arg-type]
    assert recorded.requests == []


# -- forced tool choice, sync clients --------------------------------------------------------------


async def test_a_forced_tool_choice_is_sent_only_until_a_turn_used_a_tool() -> None:
    ran: list[str] = []
    recorded = Recorded("anthropic", "tool_use", "end_turn")
    request = {"model": "claude-sonnet-4-6", "max_tokens": 1024, "tool_choice": {"type": "any"}}
    result = await anthropic_loop(
        recorded.anthropic(),
        ts.Executor(weather_tools(ran)),
        messages=[{"role": "user", "content": QUESTION}],
        **request,
    )
    assert result.stop == "done"
    first, second = recorded.requests
    assert first["tool_choice"] == {"type": "any"}
    assert "tool_choice" not in second
    # The caller's own keywords are left as they were.
    assert request["tool_choice"] == {"type": "any"}


async def test_a_forced_tool_choice_can_be_kept_on_purpose() -> None:
    recorded = Recorded("openai_chat", "tool_calls", "final")
    result = await openai_chat_loop(
        recorded.openai(),
        ts.Executor(weather_tools([])),
        messages=[{"role": "user", "content": QUESTION}],
        model="gpt-5",
        tool_choice="required",
        reset_tool_choice=False,
    )
    assert result.stop == "done"
    assert [request["tool_choice"] for request in recorded.requests] == ["required", "required"]


async def test_gemini_forced_calling_is_dropped_after_a_tool_turn() -> None:
    recorded = Recorded("gemini", "function_calls", "final")
    config = {"tool_config": {"function_calling_config": {"mode": "ANY"}}}
    result = await gemini_loop(
        recorded.gemini(),
        ts.Executor(weather_tools([])),
        model="gemini-2.5-flash",
        contents=QUESTION,
        config=config,
    )
    assert result.stop == "done"
    first, second = recorded.requests
    assert "toolConfig" in first or "tool_config" in first
    assert "toolConfig" not in second and "tool_config" not in second


def test_a_sync_client_is_refused_before_anything_is_sent() -> None:
    import anthropic
    import openai

    async def main() -> None:
        with pytest.raises(ts.OptionError, match="async client"):
            await anthropic_loop(
                anthropic.Anthropic(api_key="unused", base_url="http://127.0.0.1:9"),
                ts.Executor(weather_tools([])),
                messages=[{"role": "user", "content": QUESTION}],
                model="m",
                max_tokens=10,
            )
        with pytest.raises(ts.OptionError, match="async client"):
            await openai_chat_loop(
                openai.OpenAI(api_key="unused", base_url="http://127.0.0.1:9"),
                ts.Executor(weather_tools([])),
                messages=[{"role": "user", "content": QUESTION}],
                model="m",
            )
        with pytest.raises(ts.OptionError, match="async client"):
            await openai_responses_loop(
                openai.OpenAI(api_key="unused", base_url="http://127.0.0.1:9"),
                ts.Executor(weather_tools([])),
                input=QUESTION,
                model="m",
            )

    import anyio

    anyio.run(main)


async def test_a_structured_output_goes_through_parse() -> None:
    import pydantic

    class Report(pydantic.BaseModel):
        paris_c: int
        london_f: int

    recorded = Recorded("openai_responses", "function_calls", "final_structured")
    result = await openai_responses_loop(
        recorded.openai(), ts.Executor(weather_tools([])), input=QUESTION, model="gpt-5", text_format=Report
    )
    assert result.stop == "done"
    assert result.response.output_parsed == Report(paris_c=18, london_f=59)
    # The model was told the format on every request.
    assert all(request["text"]["format"]["type"] == "json_schema" for request in recorded.requests)


# -- limits ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "stop", "kinds"),
    [
        (ts.Limits(max_calls=1), "limit", [None, "limit_exceeded"]),
    ],
)
async def test_the_loop_passes_limits_on_and_stops_on_them(
    limits: ts.Limits, stop: str, kinds: list[str | None]
) -> None:
    ran: list[str] = []
    recorded = Recorded("anthropic", "tool_use", "end_turn")
    fresh = limits.fresh()
    result = await anthropic_loop(
        recorded.anthropic(),
        ts.Executor(weather_tools(ran)),
        messages=[{"role": "user", "content": QUESTION}],
        model="claude-sonnet-4-6",
        max_tokens=1024,
        limits=fresh,
    )
    assert (result.stop, result.turns) == (stop, 1)
    assert result.outcome is not None
    assert [r.error_kind for r in result.outcome.results] == kinds
    assert len(ran) == kinds.count(None)
    # The answers went back into the history before the loop stopped.
    assert "limit" in str(result.history[-1]) or "retries" in str(result.history[-1])


async def test_a_loop_refuses_limits_that_are_not_limits() -> None:
    with pytest.raises(ts.OptionError, match="limits="):
        await anthropic_loop(
            Recorded("anthropic", "tool_use").anthropic(),
            ts.Executor(weather_tools([])),
            messages=[{"role": "user", "content": QUESTION}],
            model="m",
            max_tokens=10,
            limits=3,  # type: ignore[arg-type]
        )


async def test_without_limits_a_loop_still_holds_each_tools_model_retries_across_turns() -> None:
    ran: list[str] = []

    @ts.tool(max_model_retries=1)
    async def get_weather(city: str, unit: str = "c") -> str:
        """Asks the model to call again, every time."""
        ran.append(city)
        raise ts.ModelRetry(f"no station in {city}; name a capital")

    recorded = Recorded("anthropic", "tool_use", "tool_use", "end_turn")
    result = await anthropic_loop(
        recorded.anthropic(),
        ts.Executor([get_weather]),
        messages=[{"role": "user", "content": QUESTION}],
        model="claude-sonnet-4-6",
        max_tokens=1024,
    )
    assert (result.stop, result.turns) == ("retries_exhausted", 2)
    assert result.outcome is not None
    assert {r.error_kind for r in result.outcome.results} == {"retries_exhausted"}
    assert len(ran) == 2  # the first turn's two calls ran; the second turn's were answered without running
