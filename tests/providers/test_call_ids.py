"""Every call in the assistant turn sent back carries the ID its result answers, for every API.

A call the model sent without an ID (or with an empty or non-text one) gets a
synthesised ID; the assistant turn toolsched hands back (``turn.assistant``,
and the loops' history) carries that same ID, so the next request pairs. The
loops are driven by the official SDK clients over HTTP against a scripted
provider on 127.0.0.1, streamed and not.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import anyio
import pytest
from sdk_clients import MODULES, PROVIDERS, Client, reply_of
from weather import weather

import toolsched as ts
from toolsched.providers import gemini as ts_gemini
from toolsched.testing import Reply, ScriptedProvider, ToolUse, response_body, stream_events

pytestmark = pytest.mark.anyio


def mixed_turn() -> Reply:
    """Three calls: the first and last without an ID."""
    return Reply(
        text="Looking.",
        tool_uses=[
            ToolUse("get_weather", {"city": "Paris"}, send_id=False),
            ToolUse("get_weather", {"city": "London"}, id="call_london"),
            ToolUse("get_weather", {"city": "Rome"}, send_id=False),
        ],
    )


def sent_pairs(provider: str, request: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """(the IDs of the calls in the assistant turn a request sends back, the IDs its results answer), in order."""
    if provider == "anthropic":
        messages = request["messages"]
        turn = [b.get("id") for m in messages if m["role"] == "assistant" for b in m["content"] if _is(b, "tool_use")]
        answers = [
            b["tool_use_id"] for m in messages if m["role"] == "user" for b in m["content"] if _is(b, "tool_result")
        ]
        return turn, answers
    if provider == "openai_responses":
        items = request["input"]
        turn = [item.get("call_id") for item in items if item.get("type") == "function_call"]
        return turn, [item["call_id"] for item in items if item.get("type") == "function_call_output"]
    if provider == "openai_chat":
        messages = request["messages"]
        turn = [call.get("id") for m in messages if m["role"] == "assistant" for call in m.get("tool_calls") or ()]
        return turn, [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    parts = [part for content in request["contents"] for part in content["parts"]]
    turn = [part["functionCall"].get("id") for part in parts if "functionCall" in part]
    return turn, [part["functionResponse"].get("id") for part in parts if "functionResponse" in part]


def _is(block: Any, kind: str) -> bool:
    return isinstance(block, dict) and block.get("type") == kind


def turn_pairs(provider: str, execution: Any) -> tuple[list[Any], list[Any]]:
    """The same pairs for an execution: its assistant turn and its reply, as they would be sent (JSON)."""
    assistant = execution.assistant
    reply = reply_of(provider, execution)
    if provider == "anthropic":
        request = {"messages": [_plain(assistant), reply]}
    elif provider == "openai_responses":
        request = {"input": [*(_plain(item) for item in assistant), *reply]}
    elif provider == "openai_chat":
        request = {"messages": [_plain(assistant), *reply]}
    else:
        request = {"contents": [_plain(assistant), reply]}
    return sent_pairs(provider, json.loads(json.dumps(request, default=_plain)))


def _plain(value: Any) -> Any:
    """An SDK object as the JSON the SDK would send."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_none=True)
    return value


def _assert_paired(provider: str, turn: list[Any], answers: list[Any], expected: list[Any]) -> None:
    assert turn == answers
    if provider == "gemini":
        # Gemini matches a call without an ID by order and name: its answer carries no ID either.
        assert turn == expected
        return
    assert all(isinstance(call_id, str) and call_id for call_id in turn), turn
    assert len(set(turn)) == len(turn)
    assert [call_id for call_id, given in zip(turn, expected, strict=True) if given is not None] == [
        given for given in expected if given is not None
    ]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_loop_sends_back_calls_without_ids_under_the_ids_their_results_answer(
    provider: str, stream: bool
) -> None:
    ran: list[str] = []
    build = partial(stream_events if stream else response_body, provider)
    answers = [build(mixed_turn()), build(Reply(text="All 18°C."))]
    with ScriptedProvider(answers) as scripted:
        with anyio.fail_after(30):
            async with Client(provider, scripted.url) as client:
                result = await client.loop(ts.Executor(weather(ran)), "weather?", stream=stream)
    assert (result.stop, result.turns, result.text) == ("done", 2, "All 18°C.")
    assert sorted(ran) == ["London", "Paris", "Rome"]
    turn, answered = sent_pairs(provider, scripted.requests[1].body)
    _assert_paired(provider, turn, answered, [None, "call_london", None])


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_execute_hands_back_the_assistant_turn_with_the_ids_of_its_results(provider: str) -> None:
    module = MODULES[provider]
    execution = await module.execute(ts.Executor(weather([])), response_body(provider, mixed_turn()))
    turn, answered = turn_pairs(provider, execution)
    _assert_paired(provider, turn, answered, [None, "call_london", None])
    # The assistant turn reads back as the same calls.
    assert module.calls_from(execution.assistant) == execution.calls


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_response_whose_calls_all_have_ids_is_handed_back_as_it_is(provider: str) -> None:
    module = MODULES[provider]
    response = response_body(
        provider,
        Reply(
            tool_uses=[
                ToolUse("get_weather", {"city": "Oslo"}, id="call_a"),
                ToolUse("get_weather", {"city": "Bern"}, id="call_b"),
            ]
        ),
    )
    execution = await module.execute(ts.Executor(weather([])), response)
    if provider == "anthropic":
        assert execution.assistant == {"role": "assistant", "content": response["content"]}
        assert all(a is b for a, b in zip(execution.assistant["content"], response["content"], strict=True))
    elif provider == "openai_responses":
        assert all(a is b for a, b in zip(execution.assistant, response["output"], strict=True))
    elif provider == "openai_chat":
        assert execution.assistant is response["choices"][0]["message"]
    else:
        assert execution.assistant is response["candidates"][0]["content"]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_streamed_answer_without_ids_is_assembled_with_the_ids_its_results_answer(provider: str) -> None:
    module = MODULES[provider]
    events = [data for _, _, data in stream_events(provider, mixed_turn())]
    execution = await module.execute_stream(ts.Executor(weather([])), events)
    turn, answered = turn_pairs(provider, execution)
    _assert_paired(provider, turn, answered, [None, "call_london", None])
    assert module.calls_from(execution.assistant) == execution.calls
    # The same answer whole gets the same IDs.
    assert module.calls_from(response_body(provider, mixed_turn())) == execution.calls


def _with_raw_ids(provider: str, response: dict[str, Any], ids: list[Any]) -> dict[str, Any]:
    """``response`` (a whole answer) with its calls' ID fields set to ``ids`` (a missing marker drops one)."""
    if provider == "anthropic":
        entries, key = [b for b in response["content"] if b["type"] == "tool_use"], "id"
    elif provider == "openai_responses":
        entries, key = [i for i in response["output"] if i["type"] == "function_call"], "call_id"
    elif provider == "openai_chat":
        entries, key = response["choices"][0]["message"]["tool_calls"], "id"
    else:
        parts = response["candidates"][0]["content"]["parts"]
        entries, key = [p["functionCall"] for p in parts if "functionCall" in p], "id"
    for entry, raw in zip(entries, ids, strict=True):
        entry.pop(key, None)
        if raw is not MISSING:
            entry[key] = raw
    return response


MISSING = object()


@pytest.mark.parametrize(
    "ids",
    [["", ""], [None, None], [42, "call_b"], [MISSING, "call_b"], [{"nested": 1}, MISSING]],
    ids=["empty", "null", "number", "missing", "object"],
)
@pytest.mark.parametrize("provider", ["anthropic", "openai_responses", "openai_chat"])
async def test_ids_that_are_not_usable_text_are_replaced_in_the_turn_and_the_reply_alike(
    provider: str, ids: list[Any]
) -> None:
    module = MODULES[provider]
    turn = Reply(
        tool_uses=[ToolUse("get_weather", {"city": "Oslo"}, id="x"), ToolUse("get_weather", {"city": "Bern"}, id="y")]
    )
    response = _with_raw_ids(provider, response_body(provider, turn), ids)
    execution = await module.execute(ts.Executor(weather([])), response)
    sent, answered = turn_pairs(provider, execution)
    _assert_paired(provider, sent, answered, [raw if isinstance(raw, str) and raw else None for raw in ids])
    assert [result.output for result in execution.results] == ["Oslo: 18°C", "Bern: 18°C"]


@pytest.mark.parametrize("provider", ["anthropic", "openai_responses", "openai_chat"])
async def test_a_model_id_equal_to_a_synthesised_one_keeps_both_calls_apart(provider: str) -> None:
    module = MODULES[provider]
    oslo = ToolUse("get_weather", {"city": "Oslo"}, send_id=False)
    # The ID a call without one gets at position 0, sent by the model for another call.
    synthetic = module.calls_from(response_body(provider, Reply(tool_uses=[oslo])))[0].id
    response = response_body(provider, Reply(tool_uses=[oslo, ToolUse("get_weather", {"city": "Bern"}, id=synthetic)]))
    execution = await module.execute(ts.Executor(weather([])), response)
    sent, answered = turn_pairs(provider, execution)
    _assert_paired(provider, sent, answered, [None, synthetic])
    assert [result.output for result in execution.results] == ["Oslo: 18°C", "Bern: 18°C"]


async def test_a_gemini_id_that_looks_synthesised_is_still_the_models_and_answered_with_it() -> None:
    calls = [
        ToolUse("get_weather", {"city": "Oslo"}, id="toolsched_call_0"),
        ToolUse("get_weather", {"city": "Bern"}, id="toolsched_call_1_model"),
        ToolUse("get_weather", {"city": "Rome"}, send_id=False),
    ]
    execution = await ts_gemini.execute(ts.Executor(weather([])), response_body("gemini", Reply(tool_uses=calls)))
    sent, answered = turn_pairs("gemini", execution)
    assert sent == answered == ["toolsched_call_0", "toolsched_call_1_model", None]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_id_the_model_reuses_in_a_later_turn_runs_again(provider: str, stream: bool) -> None:
    ran: list[str] = []
    build = partial(stream_events if stream else response_body, provider)
    answers = [
        build(Reply(tool_uses=[ToolUse("get_weather", {"city": "Paris"}, id="call_1")])),
        build(Reply(tool_uses=[ToolUse("get_weather", {"city": "London"}, id="call_1")])),
        build(Reply(text="Done.")),
    ]
    with ScriptedProvider(answers) as scripted:
        with anyio.fail_after(30):
            async with Client(provider, scripted.url) as client:
                result = await client.loop(ts.Executor(weather(ran)), "weather?", stream=stream)
    assert (result.stop, result.turns) == ("done", 3)
    assert ran == ["Paris", "London"]
    assert "London: 18°C" in json.dumps(scripted.requests[2].body, ensure_ascii=False)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_repeated_id_in_one_turn_runs_once_and_is_answered_once(provider: str) -> None:
    ran: list[str] = []
    module = MODULES[provider]
    calls = [ToolUse("get_weather", {"city": "Oslo"}, id="dup"), ToolUse("get_weather", {"city": "Bern"}, id="dup")]
    execution = await module.execute(ts.Executor(weather(ran)), response_body(provider, Reply(tool_uses=calls)))
    assert ran == ["Oslo"]
    assert [result.call_id for result in execution.results] == ["dup"]
    assert [(d.call_id, d.args_differ) for d in execution.outcome.duplicates] == [("dup", True)]
    sent, answered = turn_pairs(provider, execution)
    assert (sent, answered) == (["dup", "dup"], ["dup"])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_resume_keeps_the_assistant_turn_of_the_interrupted_execution(provider: str, stream: bool) -> None:
    @ts.tool(needs_approval=True)
    async def get_weather(city: str) -> str:
        """Current weather for a city (asks first)."""
        return f"{city}: 18°C"

    module = MODULES[provider]
    executor = ts.Executor([get_weather])
    turn = Reply(tool_uses=[ToolUse("get_weather", {"city": "Oslo"}, send_id=False)])
    if stream:
        held = await module.execute_stream(executor, [data for _, _, data in stream_events(provider, turn)])
    else:
        held = await module.execute(executor, response_body(provider, turn))
    assert held.interrupted and held.assistant is not None
    state = held.outcome.state
    state.approve(held.calls[0].id)
    finished = await module.resume(executor, held, state)
    assert finished.assistant is held.assistant
    sent, answered = turn_pairs(provider, finished)
    assert sent == answered and len(sent) == 1


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_loop_held_for_approval_resumes_calls_without_ids_under_the_same_ids(
    provider: str, stream: bool
) -> None:
    @ts.tool(needs_approval=True)
    async def get_weather(city: str) -> str:
        """Current weather for a city (asks first)."""
        return f"{city}: 18°C"

    build = partial(stream_events if stream else response_body, provider)
    turn = Reply(
        tool_uses=[
            ToolUse("get_weather", {"city": "Oslo"}, send_id=False),
            ToolUse("get_weather", {"city": "Bern"}, send_id=False),
        ]
    )
    answers = [build(turn), build(Reply(text="Done."))]
    with ScriptedProvider(answers) as scripted:
        async with Client(provider, scripted.url) as client:
            with anyio.fail_after(30):
                paused = await client.loop(ts.Executor([get_weather]), "weather?", stream=stream)
                assert paused.stop == "interrupted"
                for request in paused.pending:
                    paused.state.approve(request.call_id)
                finished = await client.resume(paused, stream=stream)
    assert (finished.stop, finished.text) == ("done", "Done.")
    sent, answered = sent_pairs(provider, scripted.requests[1].body)
    _assert_paired(provider, sent, answered, [None, None])
    assert "Oslo: 18°C" in json.dumps(scripted.requests[1].body, ensure_ascii=False)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_the_same_call_without_an_id_in_two_turns_runs_in_each(provider: str, stream: bool) -> None:
    ran: list[str] = []
    build = partial(stream_events if stream else response_body, provider)
    again = Reply(tool_uses=[ToolUse("get_weather", {"city": "Paris"}, send_id=False)])
    with ScriptedProvider([build(again), build(again), build(Reply(text="Done."))]) as scripted:
        async with Client(provider, scripted.url) as client:
            with anyio.fail_after(30):
                result = await client.loop(ts.Executor(weather(ran)), "weather?", stream=stream)
    assert (result.stop, result.turns, ran) == ("done", 3, ["Paris", "Paris"])
    # Both turns went back paired (the same synthesised ID in each: the same call at the same position).
    sent, answered = sent_pairs(provider, scripted.requests[2].body)
    assert sent == answered and len(sent) == 2
