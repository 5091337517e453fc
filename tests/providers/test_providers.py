"""Provider adapters: calls out of each API's responses (SDK objects and raw dicts), replies in its format."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from typing import Any, Literal

import pydantic
import pytest
from recorded import load, sdk_response

import toolsched as ts
from toolsched.providers import anthropic, gemini, openai_chat, openai_responses
from toolsched.providers._strict import admits_null, drop_strict_nulls

pytestmark = pytest.mark.anyio

BUDGET = 2_000


class Point(pydantic.BaseModel):
    x: int
    y: int


class Filters(pydantic.BaseModel):
    lang: str = "en"
    since: int | None = None


def make_executor(ran: list[tuple[str, Any]]) -> ts.Executor:
    """The tools the recorded responses call; ``ran`` records every call that reached a tool."""

    @ts.tool(read_only=True, concurrency_safe=True)
    async def get_weather(city: str, unit: Literal["c", "f"] = "c") -> dict[str, Any]:
        """Current weather for a city."""
        ran.append(("get_weather", city))
        return {"city": city, "temp": 18 if unit == "c" else 59, "unit": unit}

    @ts.tool
    async def lookup(term: str) -> str:
        """Look a term up."""
        ran.append(("lookup", term))
        return f"definition of {term}"

    @ts.tool(max_result_chars=BUDGET)
    async def big_report(lines: int) -> str:
        """A long report."""
        ran.append(("big_report", lines))
        return "\n".join(f"line {number}: " + "x" * 40 for number in range(lines))

    @ts.tool
    async def search(query: str, limit: int = 10, label: str | None = None, filters: Filters | None = None) -> str:
        """Search with optional settings."""
        ran.append(("search", (query, limit, label, filters)))
        return "found"

    return ts.Executor([get_weather, lookup, big_report, search])


FIXTURES = [
    ("anthropic", anthropic, "tool_use"),
    ("anthropic", anthropic, "bad_calls"),
    ("anthropic", anthropic, "hosted_and_unknown"),
    ("openai_responses", openai_responses, "function_calls"),
    ("openai_responses", openai_responses, "bad_calls"),
    ("openai_responses", openai_responses, "hosted_and_unknown"),
    ("openai_chat", openai_chat, "tool_calls"),
    ("openai_chat", openai_chat, "bad_calls"),
    ("gemini", gemini, "function_calls"),
    ("gemini", gemini, "bad_calls"),
]


@pytest.mark.parametrize(("provider", "module", "name"), FIXTURES)
async def test_sdk_objects_and_raw_dicts_give_the_same_calls(provider: str, module: Any, name: str) -> None:
    from_sdk = module.calls_from(await sdk_response(provider, name))
    from_dict = module.calls_from(load(provider, name))
    assert from_sdk == from_dict
    assert from_sdk, "every recorded response here carries calls"
    assert len({call.id for call in from_sdk}) >= 1


# -- Anthropic ------------------------------------------------------------------------------------


async def test_anthropic_answers_every_tool_use_in_one_user_message() -> None:
    ran: list[tuple[str, Any]] = []
    executor = make_executor(ran)
    turn = await anthropic.execute(executor, await sdk_response("anthropic", "tool_use"))
    assert turn.message is not None
    assert turn.message["role"] == "user"
    blocks = turn.message["content"]
    assert [block["type"] for block in blocks] == ["tool_result", "tool_result"]
    assert [block["tool_use_id"] for block in blocks] == ["toolu_01Paris", "toolu_02London"]
    assert json.loads(blocks[0]["content"]) == {"city": "Paris", "temp": 18, "unit": "c"}
    assert json.loads(blocks[1]["content"]) == {"city": "London", "temp": 59, "unit": "f"}
    assert all("is_error" not in block for block in blocks)
    assert sorted(ran) == [("get_weather", "London"), ("get_weather", "Paris")]


def synthetic(call_id: str) -> str:
    """A synthesised ID without its content digest (``toolsched_call_0_<12 hex>`` -> ``toolsched_call_0``)."""
    return re.sub(r"^(toolsched_call_\d+)_[0-9a-f]{12}$", r"\1", call_id)


async def test_anthropic_bad_calls_each_get_one_readable_result() -> None:
    ran: list[tuple[str, Any]] = []
    executor = make_executor(ran)
    turn = await anthropic.execute(executor, await sdk_response("anthropic", "bad_calls"))
    assert turn.message is not None
    blocks = {synthetic(block["tool_use_id"]): block for block in turn.message["content"]}
    # A missing ID is synthesised from the call's position; a repeated ID is answered once.
    assert list(blocks) == ["toolsched_call_0", "toolu_dup", "toolu_unknown", "toolu_text_input", "toolu_big"]
    assert blocks["toolsched_call_0"]["content"] == "definition of no id"
    assert blocks["toolu_dup"]["content"] == "definition of first"
    assert [(d.call_id, d.args_differ) for d in turn.outcome.duplicates] == [("toolu_dup", True)]
    unknown = blocks["toolu_unknown"]
    assert unknown["is_error"] is True and "launch_rockets" in unknown["content"] and "lookup" in unknown["content"]
    broken = blocks["toolu_text_input"]
    # Anthropic's input is an object: text there is answered invalid_input, whatever it holds.
    assert broken["is_error"] is True and "must be a JSON object, got string" in broken["content"]
    big = blocks["toolu_big"]
    assert "is_error" not in big and len(big["content"]) <= BUDGET
    assert big["content"].startswith("line 0: ")
    assert ran == [("lookup", "no id"), ("lookup", "first"), ("big_report", 5000)]


async def test_anthropic_leaves_server_tools_and_unknown_blocks_alone(caplog: pytest.LogCaptureFixture) -> None:
    ran: list[tuple[str, Any]] = []
    with caplog.at_level(logging.WARNING, logger="toolsched.providers"):
        turn = await anthropic.execute(make_executor(ran), await sdk_response("anthropic", "hosted_and_unknown"))
    assert [call.id for call in turn.calls] == ["toolu_03Lookup"]
    assert turn.message is not None and [b["tool_use_id"] for b in turn.message["content"]] == ["toolu_03Lookup"]
    assert ran == [("lookup", "scheduler")]
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1 and "future_widget" in warnings[0] and "content[4]" in warnings[0]


async def test_anthropic_outputs_are_serialised_and_errors_kept_in_budget() -> None:
    @ts.tool
    async def count() -> int:
        return 3

    @ts.tool
    async def nothing() -> None:
        return None

    @ts.tool
    async def point() -> Point:
        return Point(x=1, y=2)

    @ts.tool(max_result_chars=300)
    async def explode() -> str:
        raise RuntimeError("E" * 100_000)

    executor = ts.Executor([count, nothing, point, explode])
    blocks: list[dict[str, Any]] = [
        {"type": "tool_use", "id": name, "name": name, "input": {}} for name in ("count", "nothing", "point")
    ]
    blocks.append({"type": "tool_use", "id": "explode", "name": "explode", "input": {}})
    turn = await anthropic.execute(executor, {"role": "assistant", "content": blocks})
    assert turn.message is not None
    out = {block["tool_use_id"]: block for block in turn.message["content"]}
    assert out["count"] == {"type": "tool_result", "tool_use_id": "count", "content": "3"}
    assert out["nothing"] == {"type": "tool_result", "tool_use_id": "nothing"}
    assert json.loads(out["point"]["content"]) == {"x": 1, "y": 2}
    assert out["explode"]["is_error"] is True and len(out["explode"]["content"]) <= 300
    assert out["explode"]["content"].startswith("RuntimeError: EEE")


async def test_anthropic_response_without_calls_needs_no_reply() -> None:
    ran: list[tuple[str, Any]] = []
    turn = await anthropic.execute(make_executor(ran), await sdk_response("anthropic", "end_turn"))
    assert turn.calls == [] and turn.message is None and ran == []


# -- OpenAI Responses -----------------------------------------------------------------------------


async def test_responses_answers_each_call_id_with_a_function_call_output() -> None:
    ran: list[tuple[str, Any]] = []
    turn = await openai_responses.execute(make_executor(ran), await sdk_response("openai_responses", "function_calls"))
    assert [item["type"] for item in turn.items] == ["function_call_output"] * 2
    assert [item["call_id"] for item in turn.items] == ["call_paris", "call_london"]
    assert json.loads(turn.items[1]["output"]) == {"city": "London", "temp": 59, "unit": "f"}
    assert sorted(ran) == [("get_weather", "London"), ("get_weather", "Paris")]


async def test_responses_bad_calls_each_get_one_readable_result() -> None:
    ran: list[tuple[str, Any]] = []
    turn = await openai_responses.execute(make_executor(ran), await sdk_response("openai_responses", "bad_calls"))
    outputs = {synthetic(item["call_id"]): item["output"] for item in turn.items}
    assert list(outputs) == ["call_broken", "toolsched_call_1", "call_dup", "call_unknown", "call_big"]
    assert outputs["call_broken"].startswith("Error: ") and "not valid JSON" in outputs["call_broken"]
    assert outputs["toolsched_call_1"] == "definition of no call id"
    assert outputs["call_dup"] == "definition of first"
    assert outputs["call_unknown"].startswith("Error: unknown tool `launch_rockets`")
    assert len(outputs["call_big"]) <= BUDGET and not outputs["call_big"].startswith("Error")
    assert ran == [("lookup", "no call id"), ("lookup", "first"), ("big_report", 5000)]
    assert [d.call_id for d in turn.outcome.duplicates] == ["call_dup"]


async def test_responses_leaves_hosted_items_alone(caplog: pytest.LogCaptureFixture) -> None:
    ran: list[tuple[str, Any]] = []
    with caplog.at_level(logging.WARNING, logger="toolsched.providers"):
        response = await sdk_response("openai_responses", "hosted_and_unknown")
        turn = await openai_responses.execute(make_executor(ran), response)
    assert [item["call_id"] for item in turn.items] == ["call_lookup"]
    assert ran == [("lookup", "scheduler")]
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1 and "future_item" in warnings[0]


@pytest.mark.parametrize("provider", ["openai_responses", "openai_chat"])
async def test_openai_strict_nulls_for_optional_parameters_are_dropped(provider: str) -> None:
    ran: list[tuple[str, Any]] = []
    executor = make_executor(ran)
    module = openai_responses if provider == "openai_responses" else openai_chat
    exported = {
        tool["name"] if "name" in tool else tool["function"]["name"]: tool
        for tool in module.tool_definitions(executor, strict=True)
    }
    parameters = exported["search"].get("parameters") or exported["search"]["function"]["parameters"]
    assert parameters["required"] == ["query", "limit", "label", "filters"]

    turn = await module.execute(executor, await sdk_response(provider, "strict_nulls"))
    # limit and filters.lang do not admit null: dropped, so their defaults apply;
    # label and filters.since admit null: kept as the model's value.
    assert ran[0] == ("search", ("rust", 10, None, Filters(lang="en", since=None)))
    assert turn.results[0].output == "found"
    if provider == "openai_responses":
        # A null for a required parameter is kept, and the engine reports it.
        assert turn.results[1].error_kind == "invalid_input" and "/query" in (turn.results[1].error or "")
        assert len(ran) == 1


def test_strict_null_rule_follows_the_original_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {"type": ["integer", "null"]},
            "c": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "d": {"enum": ["x", "y"]},
            "e": {"description": "anything"},
            "items": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
            "req": {"type": "string"},
        },
        "required": ["req"],
    }
    text = '{"a": null, "b": null, "c": null, "d": null, "e": null, "req": null, "items": [{"k": null}, {"k": "v"}]}'
    assert drop_strict_nulls(text, schema) == {
        "b": None,
        "c": None,
        "e": None,
        "req": None,
        "items": [{}, {"k": "v"}],
    }
    untouched = '{"a": 1}'
    assert drop_strict_nulls(untouched, schema) is untouched
    broken = '{"a": null'
    assert drop_strict_nulls(broken, schema) is broken
    assert admits_null({}) and not admits_null({"const": 1}) and admits_null({"oneOf": [{"type": "null"}]})


# -- OpenAI Chat Completions ----------------------------------------------------------------------


async def test_chat_answers_each_tool_call_with_a_tool_message() -> None:
    ran: list[tuple[str, Any]] = []
    turn = await openai_chat.execute(make_executor(ran), await sdk_response("openai_chat", "tool_calls"))
    assert [message["role"] for message in turn.messages] == ["tool", "tool"]
    assert [message["tool_call_id"] for message in turn.messages] == ["call_paris", "call_london"]
    assert json.loads(turn.messages[0]["content"])["temp"] == 18


async def test_chat_bad_calls_each_get_one_readable_result(caplog: pytest.LogCaptureFixture) -> None:
    ran: list[tuple[str, Any]] = []
    with caplog.at_level(logging.WARNING, logger="toolsched.providers"):
        turn = await openai_chat.execute(make_executor(ran), await sdk_response("openai_chat", "bad_calls"))
    contents = {synthetic(message["tool_call_id"]): message["content"] for message in turn.messages}
    assert list(contents) == ["call_broken", "toolsched_call_1", "call_dup", "call_unknown", "call_big"]
    assert contents["call_broken"].startswith("Error: ") and "not valid JSON" in contents["call_broken"]
    assert contents["toolsched_call_1"] == "definition of no id"
    assert contents["call_dup"] == "definition of first"
    assert "launch_rockets" in contents["call_unknown"]
    assert len(contents["call_big"]) <= BUDGET
    assert ran == [("lookup", "no id"), ("lookup", "first"), ("big_report", 5000)]
    # The custom tool call is known and left alone; the unknown type is left alone with a warning.
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1 and "future_tool" in warnings[0]


# -- Gemini ---------------------------------------------------------------------------------------


async def test_gemini_answers_with_function_response_parts() -> None:
    ran: list[tuple[str, Any]] = []
    turn = await gemini.execute(make_executor(ran), await sdk_response("gemini", "function_calls"))
    assert turn.content is not None and turn.content["role"] == "user"
    assert turn.parts == [
        {
            "functionResponse": {
                "name": "get_weather",
                "response": {"output": {"city": "Paris", "temp": 18, "unit": "c"}},
            }
        },
        {
            "functionResponse": {
                "name": "get_weather",
                "response": {"output": {"city": "London", "temp": 59, "unit": "f"}},
            }
        },
    ]


async def test_gemini_bad_calls_each_get_one_readable_result(caplog: pytest.LogCaptureFixture) -> None:
    ran: list[tuple[str, Any]] = []
    with caplog.at_level(logging.WARNING, logger="toolsched.providers"):
        turn = await gemini.execute(make_executor(ran), load("gemini", "bad_calls"))
    responses = [part["functionResponse"] for part in turn.parts]
    assert [response.get("id") for response in responses] == ["fc-with-id", None, None, None, None]
    assert [response["name"] for response in responses] == [
        "lookup",
        "lookup",
        "launch_rockets",
        "lookup",
        "big_report",
    ]
    assert responses[0]["response"] == {"output": "definition of with id"}
    assert responses[1]["response"] == {"output": "definition of no id"}
    assert "launch_rockets" in responses[2]["response"]["error"]
    assert "term" in responses[3]["response"]["error"]
    assert len(responses[4]["response"]["output"]) <= BUDGET
    assert ran == [("lookup", "with id"), ("lookup", "no id"), ("big_report", 5000)]
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1 and "futureWidget" in warnings[0]


# -- every provider -------------------------------------------------------------------------------

MODULES = [anthropic, openai_responses, openai_chat, gemini]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[1])
@pytest.mark.parametrize("response", [42, "text", None, {"unrelated": 1}])
def test_what_is_not_a_response_is_a_typed_error(module: Any, response: Any) -> None:
    with pytest.raises(ts.ResponseFormatError, match=module.PROVIDER):
        module.calls_from(response)


@pytest.mark.parametrize(
    ("module", "response", "where"),
    [
        (anthropic, {"content": [{"text": "no type"}]}, "content\\[0\\]"),
        (anthropic, {"content": ["just text"]}, "content\\[0\\]"),
        (anthropic, {"content": {"type": "tool_use"}}, "content"),
        (openai_responses, {"output": [7]}, "output\\[0\\]"),
        (openai_chat, {"choices": [{"message": {"role": "assistant", "tool_calls": [{"id": "x"}]}}]}, "tool_calls"),
        (openai_chat, {"choices": []}, "choice 0"),
        (gemini, {"candidates": [{"content": {"parts": ["text"]}}]}, "parts\\[0\\]"),
    ],
)
def test_malformed_blocks_name_where_they_are(module: Any, response: Any, where: str) -> None:
    with pytest.raises(ts.ResponseFormatError, match=where):
        module.calls_from(response)


def test_a_reply_needs_a_result_for_every_call() -> None:
    calls = [ts.ToolCall("a", "lookup", {}), ts.ToolCall("b", "lookup", {})]
    results = [ts.ToolResult("a", "lookup", "ok")]
    builders = [
        anthropic.results_to_message,
        openai_responses.results_to_items,
        openai_chat.results_to_messages,
        gemini.results_to_content,
    ]
    for build in builders:
        with pytest.raises(ts.MissingResultError, match="'b'"):
            build(calls, results)


def test_tool_definitions_reuse_the_registry_export() -> None:
    executor = make_executor([])
    registry = executor.registry
    assert anthropic.tool_definitions(executor) == registry.to_anthropic()
    assert openai_responses.tool_definitions(registry, strict=True) == registry.to_openai(strict=True)
    assert openai_chat.tool_definitions(executor) == registry.to_openai_chat()
    assert gemini.tool_definitions(executor) == registry.to_gemini()
    assert [tool["name"] for tool in anthropic.tool_definitions(executor)] == sorted(registry.names)
    assert all("$ref" not in json.dumps(tool) for tool in openai_responses.tool_definitions(executor))
    with pytest.raises(TypeError, match="Executor or ToolRegistry"):
        anthropic.tool_definitions([])  # type: ignore[arg-type]


def test_adapters_loops_and_the_bridge_import_without_any_sdk() -> None:
    script = """
import sys
for name in ("anthropic", "openai", "google", "google.genai", "mcp", "mcp_types", "httpx2"):
    sys.modules[name] = None  # an import of any of these now fails
import anyio
import toolsched as ts
from toolsched import loops, mcp
from toolsched.providers import anthropic, gemini, openai_chat, openai_responses

@ts.tool
async def ping() -> str:
    return "pong"

async def main():
    turn = await anthropic.execute(ts.Executor([ping]), {"content": [{"type": "tool_use", "id": "a", "name": "ping"}]})
    print(turn.message["content"][0]["content"])
    try:
        async with mcp.connect_stdio("true"):
            pass
    except ImportError as exc:
        print(exc)

anyio.run(main)
"""
    completed = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == [
        "pong",
        "toolsched.mcp needs the `mcp` package: pip install 'toolsched[mcp]'",
    ]


async def test_gemini_blocked_prompt_has_nothing_to_call() -> None:
    ran: list[tuple[str, Any]] = []
    for response in (await sdk_response("gemini", "blocked"), load("gemini", "blocked")):
        turn = await gemini.execute(make_executor(ran), response)
        assert turn.calls == [] and turn.content is None
    assert ran == []


def test_synthesised_ids_are_stable_for_a_response_and_distinct_across_calls() -> None:
    def response(args: dict[str, Any]) -> dict[str, Any]:
        return {
            "candidates": [
                {
                    "content": {
                        "role": "model",
                        "parts": [
                            {"functionCall": {"name": "define", "args": args}},
                            {"functionCall": {"name": "define", "args": {"word": "same"}}},
                        ],
                    }
                }
            ]
        }

    first = [call.id for call in gemini.calls_from(response({"word": "a"}))]
    again = [call.id for call in gemini.calls_from(response({"word": "a"}))]
    other = [call.id for call in gemini.calls_from(response({"word": "b"}))]
    assert first == again
    assert first[0] != other[0]
    assert first[1] == other[1]  # the same call at the same position
    assert len(set(first)) == 2
