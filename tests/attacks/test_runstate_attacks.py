"""Attacks on a paused run's saved form (``RunState.to_json`` / ``from_json``): nested runs many levels deep, text
an attacker altered and sealed again (the seal without a key is a checksum, not a signature), text nested past what
a JSON reader takes. Each load either gives a state that resumes with every call run once, or a ``StateError``."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any

import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio


def resealed(body: dict[str, Any]) -> str:
    """``body`` as ``to_json`` writes it without a key: the seal is the SHA-256 of its canonical text."""
    body = {key: value for key, value in body.items() if key != "seal"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    body["seal"] = "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return json.dumps(body, ensure_ascii=False)


def chain(depth: int, ran: Counter[str]) -> ts.Executor:
    """An executor whose tool ``level`` runs a child run, ``depth`` levels down; the last asks for approval."""

    @ts.tool(needs_approval=True)
    async def delete(path: str) -> str:
        ran[path] += 1
        return f"deleted {path}"

    executor = ts.Executor([delete])
    for level in range(depth):

        def level_tool(child_executor: ts.Executor, level: int) -> ts.Tool:
            @ts.agent_tool(child_executor, name="level")
            async def run_level(path: str, child: ts.ChildRun) -> str:
                ran[f"level {level}"] += 1
                name = "delete" if level == 0 else "level"
                outcome = await child.run([ts.ToolCall(f"c{level}", name, {"path": path})])
                return str(outcome.results[0].output)

            return run_level

        executor = ts.Executor([level_tool(executor, level)])
    return executor


async def test_a_run_nested_fifty_deep_round_trips_through_json_and_runs_its_call_once() -> None:
    ran: Counter[str] = Counter()
    executor = chain(50, ran)
    outcome = await executor.run([ts.ToolCall("top", "level", {"path": "/tmp/x"})])
    state = outcome.state
    assert state is not None and len(state.pending) == 1
    loaded = ts.RunState.from_json(state.to_json())
    assert [p.call_id for p in loaded.pending] == [p.call_id for p in state.pending]
    loaded.approve(loaded.pending[0].call_id)
    resumed = await executor.resume(loaded)
    assert resumed.results[0].output == "deleted /tmp/x"
    assert ran["/tmp/x"] == 1


@pytest.mark.parametrize("kind", [["timeout"], {"kind": "timeout"}, 3])
async def test_a_result_whose_error_kind_is_not_text_is_refused_with_a_state_error(kind: object) -> None:
    @ts.tool()
    async def fail() -> str:
        raise ValueError("no")

    @ts.tool(needs_approval=True)
    async def ship() -> str:
        return "shipped"

    executor = ts.Executor([fail, ship])
    outcome = await executor.run([ts.ToolCall("f1", "fail", {}), ts.ToolCall("s1", "ship", {})])
    assert outcome.state is not None
    body = json.loads(outcome.state.to_json())
    [failed] = [call for call in body["calls"] if call.get("result") is not None]
    failed["result"]["error_kind"] = kind
    with pytest.raises(ts.StateError, match="error_kind"):
        ts.RunState.from_json(resealed(body))


@pytest.mark.parametrize("opening", ["[", '{"a":'])
def test_text_nested_past_the_json_readers_depth_is_refused_with_a_state_error(opening: str) -> None:
    with pytest.raises(ts.StateError, match="nests deeper"):
        ts.RunState.from_json(opening * 100_000)


@pytest.mark.parametrize(
    ("output", "reads_back"),
    [
        ("before\ud800after", "before\ud800after"),  # a lone surrogate (a badly decoded byte)
        ("split \ud83d\ude00 pair", "split \U0001f600 pair"),  # a surrogate pair held as two characters
    ],
)
async def test_a_state_holding_a_surrogate_is_saved_as_utf8_and_reads_back(
    output: str, reads_back: str, tmp_path: Any
) -> None:
    """A tool's output may hold surrogates (JSON text escapes them; Python strings keep them). ``to_json`` is for
    storage: its text must encode as UTF-8 (a file, a database column), and load back sealed."""
    ran: Counter[str] = Counter()

    @ts.tool()
    async def note() -> str:
        return output

    @ts.tool(needs_approval=True)
    async def ship() -> str:
        ran["ship"] += 1
        return "shipped"

    executor = ts.Executor([note, ship])
    outcome = await executor.run([ts.ToolCall("n1", "note", {}), ts.ToolCall("s1", "ship", {})])
    assert outcome.state is not None
    saved = tmp_path / "state.json"
    saved.write_text(outcome.state.to_json(), encoding="utf-8")
    loaded = ts.RunState.from_json(saved.read_text(encoding="utf-8"))
    loaded.approve("s1")
    resumed = await executor.resume(loaded)
    assert [result.output for result in resumed.results] == [reads_back, "shipped"]
    assert ran["ship"] == 1


async def paused_state() -> ts.RunState:
    @ts.tool(needs_approval=True)
    async def ship() -> str:
        return "shipped"

    outcome = await ts.Executor([ship]).run([ts.ToolCall("s1", "ship", {})])
    assert outcome.state is not None
    return outcome.state


@pytest.mark.parametrize("key", ["", b"", bytearray()])
async def test_an_empty_key_is_refused_not_taken_as_a_signature(key: Any) -> None:
    """``to_json(key=os.environ.get("STATE_KEY", ""))``: a state signed with an empty key can be altered and signed
    again by anyone; it must be refused, on saving and on loading, not taken as signed."""
    state = await paused_state()
    with pytest.raises(ts.OptionError, match="empty"):
        state.to_json(key=key)
    signed = state.to_json(key="secret")
    with pytest.raises(ts.OptionError, match="empty"):
        ts.RunState.from_json(signed, key=key)


@pytest.mark.parametrize("key", [5, ["secret"]])
async def test_a_key_that_is_not_bytes_or_text_is_an_option_error(key: Any) -> None:
    state = await paused_state()
    with pytest.raises(ts.OptionError, match="bytes or str"):
        state.to_json(key=key)
    with pytest.raises(ts.OptionError, match="bytes or str"):
        ts.RunState.from_json(state.to_json(), key=key)


@pytest.mark.parametrize("version", [True, 1.0, "1"])
async def test_a_version_that_only_equals_the_supported_one_is_refused(version: Any) -> None:
    """``"version": true`` equals 1 in Python; the saved form's version is the integer itself, or it is refused."""
    outcome = await chain(0, Counter()).run([ts.ToolCall("c", "delete", {"path": "/tmp/x"})])
    assert outcome.state is not None
    body = json.loads(outcome.state.to_json())
    assert body["version"] == 1 and type(body["version"]) is int
    ts.RunState.from_json(resealed(body))  # the same text, sealed again: taken
    body["version"] = version
    with pytest.raises(ts.StateError, match="is not supported"):
        ts.RunState.from_json(resealed(body))
