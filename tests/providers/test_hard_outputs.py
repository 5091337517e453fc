"""Outputs that are hard to send still reach the model, through every adapter, with the turn's other results.

Text the engine cannot take as UTF-8 (lone surrogates), values JSON cannot hold, and offloaded outputs
whose note names the file: none may raise once the calls ran, and none may lose what the model needs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import toolsched as ts
from toolsched.providers import anthropic, gemini, openai_chat, openai_responses

pytestmark = pytest.mark.anyio

ADAPTERS = [anthropic, openai_responses, openai_chat, gemini]

# What os.listdir / os.fsdecode give for a file name that is not UTF-8.
UNDECODABLE_NAME = os.fsdecode(b"caf\xe9.txt")


def response_for(module: ModuleType, names: list[str]) -> dict[str, Any]:
    """A model response calling each tool in ``names`` once, as the provider's raw JSON; call IDs are the names."""
    if module is anthropic:
        return {"content": [{"type": "tool_use", "id": name, "name": name, "input": {}} for name in names]}
    if module is openai_responses:
        return {
            "output": [{"type": "function_call", "call_id": name, "name": name, "arguments": "{}"} for name in names]
        }
    if module is openai_chat:
        calls = [{"id": name, "type": "function", "function": {"name": name, "arguments": "{}"}} for name in names]
        return {"choices": [{"message": {"role": "assistant", "tool_calls": calls}}]}
    parts = [{"functionCall": {"id": name, "name": name, "args": {}}} for name in names]
    return {"candidates": [{"content": {"role": "model", "parts": parts}}]}


def payload_of(module: ModuleType, turn: Any) -> Any:
    """The reply the adapter built: what goes into the next request."""
    if module is anthropic:
        return turn.message
    if module is openai_responses:
        return turn.items
    if module is openai_chat:
        return turn.messages
    return turn.content


def sent_by_call(module: ModuleType, turn: Any) -> dict[str, Any]:
    """What the model gets for each call ID: the text (or Gemini's ``response`` object)."""
    if module is anthropic:
        return {block["tool_use_id"]: block.get("content") for block in turn.message["content"]}
    if module is openai_responses:
        return {item["call_id"]: item["output"] for item in turn.items}
    if module is openai_chat:
        return {message["tool_call_id"]: message["content"] for message in turn.messages}
    return {part["functionResponse"]["id"]: part["functionResponse"]["response"] for part in turn.content["parts"]}


def sent_text(module: ModuleType, sent: Any) -> str:
    """The text of one call's reply (Gemini's ``output`` or ``error``)."""
    if module is gemini:
        value = sent.get("output", sent.get("error"))
        return value if isinstance(value, str) else json.dumps(value)
    assert isinstance(sent, str)
    return sent


def lines_of(text: str) -> int:
    """Lines as the budget counts them: separated by newlines, a final newline opening none."""
    return text.removesuffix("\n").count("\n") + 1


# -- lone surrogates --------------------------------------------------------------------


@pytest.mark.parametrize("module", ADAPTERS, ids=lambda module: module.__name__.rsplit(".", 1)[-1])
async def test_text_with_lone_surrogates_over_budget_is_cut_not_lost(module: ModuleType) -> None:
    @ts.tool(read_only=True, concurrency_safe=True, max_result_chars=80)
    def ls() -> str:
        return "\n".join([UNDECODABLE_NAME] + [f"file{i}.txt" for i in range(20)])

    @ts.tool(read_only=True, concurrency_safe=True, max_result_chars=80)
    def stat() -> str:
        raise FileNotFoundError(f"{UNDECODABLE_NAME} is gone; " * 5)

    executor = ts.Executor([ls, stat])
    turn = await module.execute(executor, response_for(module, ["ls", "stat"]))
    by_id = {result.call_id: result for result in turn.results}
    assert not by_id["ls"].is_error and by_id["ls"].truncated
    assert by_id["ls"].output.startswith("caf\ufffd.txt\nfile0.txt")
    assert by_id["stat"].error_kind == "execution_error"
    sent = sent_by_call(module, turn)
    assert sent_text(module, sent["ls"]).startswith("caf\ufffd.txt")
    error = sent_text(module, sent["stat"])
    assert "caf\ufffd.txt" in error and len(error) <= 80


# -- values JSON cannot hold ------------------------------------------------------------


def _containing_itself() -> list[Any]:
    looped: list[Any] = []
    looped.append(looped)
    return looped


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


AWKWARD_OUTPUTS = {
    "tuple_keys": lambda: {(1, 2): "b"},
    "containing_itself": _containing_itself,
    "huge_int": lambda: 10**5000,
    "huge_int_inside": lambda: {"n": 10**5000},
    "too_deep": lambda: _nested(100_000),
    "not_a_number": lambda: float("nan"),
    "not_a_number_inside": lambda: {"x": float("inf")},
}


def awkward_tools() -> list[ts.Tool]:
    def make(name: str) -> ts.Tool:
        produce = AWKWARD_OUTPUTS[name]

        async def run() -> Any:
            return produce()

        run.__name__ = name
        return ts.tool(read_only=True, concurrency_safe=True)(run)

    @ts.tool(read_only=True, concurrency_safe=True)
    async def sibling() -> str:
        return "done"

    return [sibling, *(make(name) for name in AWKWARD_OUTPUTS)]


@pytest.mark.parametrize("name", list(AWKWARD_OUTPUTS))
@pytest.mark.parametrize("module", ADAPTERS, ids=lambda module: module.__name__.rsplit(".", 1)[-1])
async def test_outputs_json_cannot_hold_are_sent_as_text_with_their_siblings(module: ModuleType, name: str) -> None:
    executor = ts.Executor(awkward_tools())
    turn = await module.execute(executor, response_for(module, ["sibling", name]))
    assert [result.is_error for result in turn.results] == [False, False]
    # Strict JSON, as an HTTP client sends it: no NaN, no int past Python's digit limit.
    json.dumps(payload_of(module, turn), allow_nan=False)
    sent = sent_by_call(module, turn)
    assert sent_text(module, sent["sibling"]) == "done"
    assert sent_text(module, sent[name])


# -- offloaded outputs ------------------------------------------------------------------


@pytest.mark.parametrize("module", ADAPTERS, ids=lambda module: module.__name__.rsplit(".", 1)[-1])
async def test_every_adapter_sends_an_offloaded_preview_whole_with_the_file_name(
    module: ModuleType, tmp_path: Path
) -> None:
    @ts.tool(read_only=True, concurrency_safe=True, max_result_lines=5, truncate="offload")
    def log() -> str:
        return "\n".join(f"line {i}" for i in range(1000))

    @ts.tool(read_only=True, concurrency_safe=True, max_result_chars=60, truncate="offload")
    def dump() -> str:
        return "row\n" * 1000

    executor = ts.Executor([log, dump], offload_dir=tmp_path)
    turn = await module.execute(executor, response_for(module, ["log", "dump"]))
    sent = sent_by_call(module, turn)
    for result in turn.results:
        assert result.offload_path is not None
        assert sent_text(module, sent[result.call_id]) == result.output
        assert result.offload_path in result.output
    log_text = sent_text(module, sent["log"])
    assert lines_of(log_text) <= 5 and log_text.startswith("line 0\nline 1\n")


@pytest.mark.parametrize("module", ADAPTERS, ids=lambda module: module.__name__.rsplit(".", 1)[-1])
async def test_adapters_send_a_cut_output_as_the_executor_cut_it(module: ModuleType) -> None:
    # Cut once, by the executor: a second cut would replace its marker with one counting the wrong characters.
    @ts.tool(read_only=True, concurrency_safe=True, max_result_lines=5)
    def log() -> str:
        return "\n".join(f"line {i}" for i in range(1000))

    turn = await module.execute(ts.Executor([log]), response_for(module, ["log"]))
    (result,) = turn.results
    assert result.truncated and result.output.endswith("[… 8855 more characters truncated]")
    assert sent_text(module, sent_by_call(module, turn)["log"]) == result.output
