"""The executor: every call answered once, in model order, scheduled as promised."""

from __future__ import annotations

import copy
import datetime
import json
import os
import threading
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import toolsched as ts
from tests.conftest import InFlight
from toolsched._executor.strategies import resolve_cap

pytestmark = pytest.mark.anyio


def make_tools(in_flight: InFlight, runs: list[str]) -> list[ts.Tool]:
    @ts.tool(concurrency_safe=True, read_only=True)
    async def read(path: str, delay: float = 0.02) -> str:
        runs.append(path)
        await in_flight.hold(path, delay)
        return f"read {path}"

    @ts.tool
    async def write(path: str, delay: float = 0.02) -> str:
        runs.append(path)
        await in_flight.hold(path, delay)
        return f"wrote {path}"

    return [read, write]


async def test_results_come_back_in_model_order_whatever_finishes_first() -> None:
    @ts.tool(concurrency_safe=True)
    async def wait(delay: float) -> float:
        await anyio.sleep(delay)
        return delay

    delays = [0.05, 0.0, 0.03, 0.01, 0.04, 0.02]
    calls = [ts.ToolCall(f"c{i}", "wait", {"delay": d}) for i, d in enumerate(delays)]
    outcome = await ts.Executor([wait]).run(calls)
    assert [r.call_id for r in outcome.results] == [f"c{i}" for i in range(len(delays))]
    assert [r.output for r in outcome.results] == delays
    assert all(r.was_concurrent and r.batch == 0 for r in outcome.results)


async def test_partitioned_runs_unsafe_calls_alone(in_flight: InFlight) -> None:
    runs: list[str] = []
    executor = ts.Executor(make_tools(in_flight, runs))
    calls = [
        ts.ToolCall("1", "read", {"path": "a"}),
        ts.ToolCall("2", "read", {"path": "b"}),
        ts.ToolCall("3", "write", {"path": "c"}),
        ts.ToolCall("4", "read", {"path": "d"}),
        ts.ToolCall("5", "read", {"path": "e"}),
    ]
    outcome = await executor.run(calls)
    assert [r.output for r in outcome.results] == ["read a", "read b", "wrote c", "read d", "read e"]
    # The two safe groups each overlapped internally...
    assert in_flight.position("start", "b") < in_flight.position("end", "a")
    assert in_flight.position("start", "e") < in_flight.position("end", "d")
    # ...the unsafe call started after the first group ended, and ran alone...
    assert in_flight.position("start", "c") > max(in_flight.position("end", "a"), in_flight.position("end", "b"))
    # ...and the second group started only after it.
    assert min(in_flight.position("start", "d"), in_flight.position("start", "e")) > in_flight.position("end", "c")
    assert [r.batch for r in outcome.results] == [0, 0, 1, 2, 2]
    assert [r.was_concurrent for r in outcome.results] == [True, True, False, True, True]


@pytest.mark.parametrize(
    ("strategy", "expected_peak"),
    [(ts.Sequential(), 1), (ts.Parallel(max_concurrency=3), 3), (ts.Batched(2), 2), (ts.Partitioned(4), 4)],
)
async def test_each_strategy_respects_its_cap(in_flight: InFlight, strategy: ts.Strategy, expected_peak: int) -> None:
    runs: list[str] = []
    executor = ts.Executor(make_tools(in_flight, runs), strategy=strategy)
    outcome = await executor.run([ts.ToolCall(str(i), "read", {"path": f"p{i}"}) for i in range(8)])
    assert len(outcome.results) == 8
    assert in_flight.peak == expected_peak


async def test_parallel_ignores_safety(in_flight: InFlight) -> None:
    runs: list[str] = []
    executor = ts.Executor(make_tools(in_flight, runs), strategy=ts.Parallel())
    await executor.run([ts.ToolCall(str(i), "write", {"path": f"p{i}"}) for i in range(4)])
    assert in_flight.peak == 4


async def test_the_environment_sets_the_default_cap(in_flight: InFlight, monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[str] = []
    executor = ts.Executor(make_tools(in_flight, runs))
    monkeypatch.setenv("TOOLSCHED_MAX_CONCURRENCY", "2")
    await executor.run([ts.ToolCall(str(i), "read", {"path": f"p{i}"}) for i in range(6)])
    assert in_flight.peak == 2
    # Read when the run starts, not at import or construction.
    monkeypatch.setenv("TOOLSCHED_MAX_CONCURRENCY", "5")
    in_flight.peak = 0
    await executor.run([ts.ToolCall(str(i), "read", {"path": f"p{i}"}) for i in range(6)])
    assert in_flight.peak == 5
    # An explicit argument wins.
    in_flight.peak = 0
    explicit = ts.Executor(make_tools(in_flight, runs), strategy=ts.Partitioned(max_concurrency=3))
    await explicit.run([ts.ToolCall(str(i), "read", {"path": f"p{i}"}) for i in range(6)])
    assert in_flight.peak == 3


async def test_a_bad_environment_value_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    @ts.tool
    async def noop() -> None:
        return None

    monkeypatch.setenv("TOOLSCHED_MAX_CONCURRENCY", "lots")
    with pytest.raises(ts.OptionError, match="TOOLSCHED_MAX_CONCURRENCY"):
        await ts.Executor([noop]).run([ts.ToolCall("1", "noop")])


async def test_the_default_cap_is_ten(in_flight: InFlight, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLSCHED_MAX_CONCURRENCY", raising=False)
    runs: list[str] = []
    await ts.Executor(make_tools(in_flight, runs)).run(
        [ts.ToolCall(str(i), "read", {"path": f"p{i}"}) for i in range(15)]
    )
    assert in_flight.peak == 10


async def test_per_tool_max_concurrency_is_shared_by_runs(in_flight: InFlight) -> None:
    @ts.tool(concurrency_safe=True, max_concurrency=2)
    async def api(n: int) -> int:
        await in_flight.hold(f"n{n}", 0.02)
        return n

    executor = ts.Executor([api], strategy=ts.Parallel())
    async with anyio.create_task_group() as group:
        for run in range(2):
            group.start_soon(executor.run, [ts.ToolCall(f"{run}-{i}", "api", {"n": run * 10 + i}) for i in range(4)])
    assert in_flight.peak == 2


async def test_a_repeated_call_id_runs_once() -> None:
    runs: list[int] = []

    @ts.tool
    async def bump(n: int) -> int:
        runs.append(n)
        return n

    calls = [ts.ToolCall("a", "bump", {"n": 1}), ts.ToolCall("b", "bump", {"n": 2}), ts.ToolCall("a", "bump", {"n": 3})]
    outcome = await ts.Executor([bump]).run(calls)
    assert runs == [1, 2]
    assert [r.call_id for r in outcome.results] == ["a", "b"]
    assert outcome.duplicates == [ts.Duplicate("a", 2, 0, True)]


async def test_bad_calls_get_the_right_error_and_never_run() -> None:
    runs: list[Any] = []

    @ts.tool
    async def read(path: str, limit: int = 10) -> str:
        runs.append(path)
        return path

    deep: dict[str, Any] = {"path": "x"}
    node = deep
    for _ in range(70):
        node["n"] = {}
        node = node["n"]
    calls = [
        ts.ToolCall("unknown", "nope", {}),
        ts.ToolCall("invalid", "read", {"path": "a", "limit": "ten"}),
        ts.ToolCall("missing", "read", {}),
        ts.ToolCall("malformed", "read", '{"path": '),
        ts.ToolCall("oversized", "read", json.dumps({"path": "x" * 2000})),
        ts.ToolCall("oversized-object", "read", {"path": "x" * 2000}),
        ts.ToolCall("deep", "read", deep),
        ts.ToolCall("deep-text", "read", json.dumps(deep)),
        ts.ToolCall("not-json", "read", {"path": {1, 2}}),
        ts.ToolCall("not-object", "read", "[1, 2]"),
    ]
    outcome = await ts.Executor([read], max_input_bytes=1000).run(calls)
    kinds = {r.call_id: r.error_kind for r in outcome.results}
    assert kinds == {
        "unknown": "unknown_tool",
        "invalid": "invalid_input",
        "missing": "invalid_input",
        "malformed": "invalid_input",
        "oversized": "invalid_input",
        "oversized-object": "invalid_input",
        "deep": "invalid_input",
        "deep-text": "invalid_input",
        "not-json": "invalid_input",
        "not-object": "invalid_input",
    }
    assert runs == []
    errors = {r.call_id: r.error for r in outcome.results}
    assert "available tools: read" in str(errors["unknown"])
    assert "/limit" in str(errors["invalid"])
    assert '"path" is a required property' in str(errors["missing"])
    assert "not valid JSON" in str(errors["malformed"])
    assert "over the limit of 1000 bytes" in str(errors["oversized"])
    assert "deeper than the limit of 64" in str(errors["deep"])
    assert "set" in str(errors["not-json"])
    assert "must be a JSON object, got array" in str(errors["not-object"])
    assert all(r.is_error for r in outcome.results)


async def test_unknown_tools_can_raise() -> None:
    @ts.tool
    async def read(path: str) -> str:
        return path

    with pytest.raises(ts.UnknownToolError, match="nope"):
        await ts.Executor([read], unknown_tool="raise").run([ts.ToolCall("1", "nope", {})])


async def test_json_text_arguments_are_decoded() -> None:
    @ts.tool
    async def echo(items: list[int], note: str | None = None) -> Any:
        return {"items": items, "note": note}

    outcome = await ts.Executor([echo]).run([ts.ToolCall("1", "echo", '{"items": [1, 2]}')])
    assert outcome.results[0].output == {"items": [1, 2], "note": None}


async def test_a_classifier_that_raises_makes_the_call_serial(in_flight: InFlight) -> None:
    def classify(args: Any) -> bool:
        if args["path"] == "boom":
            raise RuntimeError("cannot tell")
        return True

    @ts.tool(concurrency_safe=classify)
    async def read(path: str) -> str:
        await in_flight.hold(path)
        return path

    calls = [ts.ToolCall(p, "read", {"path": p}) for p in ["a", "b", "boom", "c"]]
    outcome = await ts.Executor([read]).run(calls)
    assert [r.batch for r in outcome.results] == [0, 0, 1, 2]
    assert in_flight.position("start", "boom") > in_flight.position("end", "b")
    assert in_flight.position("start", "c") > in_flight.position("end", "boom")


async def test_sync_tools_run_in_worker_threads() -> None:
    loop_thread = threading.get_ident()

    @ts.tool
    def where() -> int:
        return threading.get_ident()

    outcome = await ts.Executor([where]).run([ts.ToolCall("1", "where")])
    assert outcome.results[0].output != loop_thread


async def test_a_failing_tool_becomes_an_execution_error_and_siblings_keep_their_results() -> None:
    @ts.tool(concurrency_safe=True)
    async def maybe(fail: bool) -> str:
        if fail:
            raise ValueError("disk is full")
        await anyio.sleep(0.01)
        return "ok"

    calls = [ts.ToolCall("1", "maybe", {"fail": False}), ts.ToolCall("2", "maybe", {"fail": True})]
    outcome = await ts.Executor([maybe]).run(calls)
    assert outcome.results[0].output == "ok"
    assert outcome.results[1].error_kind == "execution_error"
    assert outcome.results[1].error == "ValueError: disk is full"


async def test_on_error_raise_reports_the_first_failure_after_the_batch_settles() -> None:
    finished: list[str] = []

    @ts.tool(concurrency_safe=True)
    async def step(name: str, fail: bool = False) -> str:
        await anyio.sleep(0.01 if fail else 0.03)
        if fail:
            raise RuntimeError(name)
        finished.append(name)
        return name

    calls = [
        ts.ToolCall("1", "step", {"name": "a"}),
        ts.ToolCall("2", "step", {"name": "b", "fail": True}),
        ts.ToolCall("3", "step", {"name": "c", "fail": True}),
    ]
    with pytest.raises(ts.ToolCallFailed) as caught:
        await ts.Executor([step], on_error="raise").run(calls)
    assert caught.value.result.call_id == "2"
    assert [r.call_id for r in caught.value.others] == ["3"]
    assert [r.call_id for r in caught.value.results] == ["1", "2", "3"]
    assert finished == ["a"]


async def test_a_timeout_becomes_a_timeout_result() -> None:
    @ts.tool(timeout=0.05)
    async def stuck() -> None:
        await anyio.sleep(30)

    with anyio.fail_after(5):
        outcome = await ts.Executor([stuck]).run([ts.ToolCall("1", "stuck")])
    assert outcome.results[0].error_kind == "timeout"
    assert "0.05 seconds" in str(outcome.results[0].error)


async def test_semantic_validation_refuses_before_running() -> None:
    runs: list[str] = []

    class Read(ts.Tool):
        name = "read"
        input_schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}

        async def validate_input(self, args: Any, ctx: ts.ToolContext) -> None:
            if args["path"].startswith("/"):
                raise ts.SemanticError("path must be relative to the workspace")

        async def call(self, args: Any, ctx: ts.ToolContext) -> str:
            runs.append(args["path"])
            return str(args["path"])

    outcome = await ts.Executor([Read()]).run(
        [ts.ToolCall("1", "read", {"path": "/etc"}), ts.ToolCall("2", "read", {"path": "a"})]
    )
    assert outcome.results[0].error_kind == "semantic_error"
    assert outcome.results[0].error == "path must be relative to the workspace"
    assert outcome.results[1].output == "a"
    assert runs == ["a"]


async def test_steering_stops_the_remaining_calls() -> None:
    runs: list[int] = []

    @ts.tool
    async def step(n: int) -> int:
        runs.append(n)
        return n

    async def steer() -> list[str] | None:
        return ["user: stop, use the other file"] if len(runs) >= 2 else None

    outcome = await ts.Executor([step], strategy=ts.Sequential()).run(
        [ts.ToolCall(str(i), "step", {"n": i}) for i in range(5)], steering=steer
    )
    assert runs == [0, 1]
    assert [r.error_kind for r in outcome.results] == [None, None, "skipped", "skipped", "skipped"]
    assert outcome.steering_messages == ["user: stop, use the other file"]


async def test_disabled_tools_are_unknown_this_turn() -> None:
    switch = {"on": False}

    @ts.tool(enabled=lambda: switch["on"])
    async def gated() -> str:
        return "ran"

    executor = ts.Executor([gated])
    outcome = await executor.run([ts.ToolCall("1", "gated")])
    assert outcome.results[0].error_kind == "unknown_tool"
    switch["on"] = True
    outcome = await executor.run([ts.ToolCall("2", "gated")])
    assert outcome.results[0].output == "ran"


async def test_pydantic_types_are_coerced_for_the_function() -> None:
    @ts.tool
    async def when(day: datetime.date) -> str:
        return day.isoformat()

    outcome = await ts.Executor([when]).run([ts.ToolCall("1", "when", {"day": "2026-01-02"})])
    assert outcome.results[0].output == "2026-01-02"


async def test_class_tools_get_their_model_and_context() -> None:
    from tests.executor.test_tools import EditFile

    outcome = await ts.Executor([EditFile()]).run(
        [ts.ToolCall("e1", "edit_file", {"path": "a.py", "old": "x", "new": "y"})], context={"user": "u"}
    )
    assert outcome.results[0].output == "a.py: x->y (e1)"


async def test_non_toolcall_input_is_a_type_error() -> None:
    @ts.tool
    async def noop() -> None:
        return None

    with pytest.raises(TypeError, match=r"calls\[0\]"):
        await ts.Executor([noop]).run([{"id": "1", "name": "noop"}])  # type: ignore[list-item]


async def test_any_call_that_is_not_a_toolcall_stops_the_turn_before_anything_runs() -> None:
    """Not only the first: an object that looks like a call (id, name, args) is refused wherever it stands,
    named by its position and type, and no call of the turn runs; a subclass of ToolCall is a ToolCall."""
    ran: list[str] = []

    @ts.tool
    async def note(text: str) -> str:
        ran.append(text)
        return text

    class LooksLikeACall:
        id = "c3"
        name = "note"
        args = '{"text": "c"}'

    class NamedCall(ts.ToolCall):
        pass

    executor = ts.Executor([note])
    calls: list[Any] = [ts.ToolCall("c1", "note", '{"text": "a"}'), NamedCall("c2", "note", {"text": "b"})]
    with pytest.raises(ts.MalformedCallError, match=r"^calls\[2\] must be a ToolCall, got LooksLikeACall$"):
        await executor.run([*calls, LooksLikeACall()])
    assert ran == []
    outcome = await executor.run(calls)
    assert [result.output for result in outcome.results] == ["a", "b"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    turn=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c", "d", "e", "f"]),
            st.sampled_from(["read", "write", "nope"]),
            st.integers(0, 3),
        ),
        max_size=14,
    )
)
async def test_every_unique_call_id_gets_exactly_one_result(turn: list[tuple[str, str, int]]) -> None:
    counts: dict[str, int] = {}

    @ts.tool(concurrency_safe=True)
    async def read(n: int) -> int:
        await anyio.sleep(n / 1000)
        return n

    @ts.tool
    async def write(n: int) -> int:
        await anyio.sleep(n / 1000)
        return n

    class Count:
        def __call__(self, event: ts.Event) -> None:
            if isinstance(event, ts.ToolStarted) and event.ran:
                counts[event.call_id] = counts.get(event.call_id, 0) + 1

    calls = [ts.ToolCall(i, name, {"n": n}) for i, name, n in turn]
    outcome = await ts.Executor([read, write], on_event=Count()).run(calls)
    first_seen = list(dict.fromkeys(i for i, _, _ in turn))
    assert [r.call_id for r in outcome.results] == first_seen
    assert all(count == 1 for count in counts.values())
    assert len(outcome.duplicates) == len(turn) - len(first_seen)


def test_the_cap_follows_an_environment_replaced_wholesale(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "environ", {"TOOLSCHED_MAX_CONCURRENCY": "4"})
    assert resolve_cap(ts.Partitioned()) == 4
    monkeypatch.setattr(os, "environ", {})
    assert resolve_cap(ts.Partitioned()) == 10


async def test_a_deep_copy_of_what_holds_an_executor_shares_the_executor(in_flight: InFlight) -> None:
    # An executor is a service, not a value: a deep copy of an object that holds one (an Agents SDK
    # agent and the run items naming it) holds the same executor, which runs as before.
    runs: list[str] = []
    executor = ts.Executor(make_tools(in_flight, runs))
    holder = {"executor": executor, "calls": [ts.ToolCall("c1", "read", {"path": "a", "delay": 0})]}
    copied = copy.deepcopy(holder)
    assert copied["executor"] is executor
    outcome = await copied["executor"].run(copied["calls"])
    assert [result.output for result in outcome.results] == ["read a"]
