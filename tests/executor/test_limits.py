"""``ts.ModelRetry``, each tool's ``max_model_retries`` and ``ts.Limits``: answers the model can act on.

Each cap is checked where a user relies on it: the tool is not run past it (a counter in the tool), the
answer says why, and the counts hold across turns, streamed turns, resumes of copied states, journaled
recovery (SQLite and PostgreSQL) and concurrent calls of one tool racing the cap.
"""

from __future__ import annotations

import copy
import hashlib
import json
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from journal_child import Store, store_in

import toolsched as ts
from toolsched._values.digest import value_digest

pytestmark = pytest.mark.anyio


def counting_tools(ran: list[str]) -> list[ts.FunctionTool]:
    @ts.tool(concurrency_safe=True)
    async def read_file(path: str) -> str:
        ran.append(path)
        await anyio.lowlevel.checkpoint()
        return f"contents of {path}"

    @ts.tool(concurrency_safe=True)
    async def grep(pattern: str) -> list[str]:
        ran.append(pattern)
        return [pattern]

    return [read_file, grep]


def reads(*paths: str, prefix: str = "c") -> list[ts.ToolCall]:
    return [ts.ToolCall(f"{prefix}{i}", "read_file", {"path": path}) for i, path in enumerate(paths)]


# -- ModelRetry and max_model_retries ---------------------------------------------------------


async def test_model_retry_in_a_body_or_validate_input_is_answered_for_the_model() -> None:
    @ts.tool
    async def lookup(key: str) -> str:
        raise ts.ModelRetry(f"no key {key!r}: use one of a, b")

    class Checked(ts.Tool):
        name = "checked"
        description = "A tool whose input check asks for a retry."
        input_schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
        ran = 0

        async def validate_input(self, args: Any, ctx: Any) -> None:
            if args["n"] < 0:
                raise ts.ModelRetry("n must be >= 0")

        async def call(self, args: Any, ctx: Any) -> int:
            Checked.ran += 1
            return int(args["n"])

    executor = ts.Executor([lookup, Checked()])
    outcome = await executor.run([ts.ToolCall("a", "lookup", {"key": "z"}), ts.ToolCall("b", "checked", {"n": -1})])
    first, second = outcome.results
    assert (first.error_kind, first.error, first.is_error) == ("model_retry", "no key 'z': use one of a, b", True)
    assert (second.error_kind, second.error) == ("model_retry", "n must be >= 0")
    assert Checked.ran == 0
    assert not issubclass(ts.ModelRetry, ts.ToolschedError)


async def test_a_tool_past_its_retry_budget_is_answered_retries_exhausted_without_running() -> None:
    ran: list[int] = []

    @ts.tool(max_model_retries=2)
    async def picky(n: int) -> int:
        ran.append(n)
        raise ts.ModelRetry("try another n")

    class Strict(ts.Tool):
        name = "strict"
        description = "Refuses everything."
        input_schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        max_model_retries = 1

        async def call(self, args: Any, ctx: Any) -> int:
            raise AssertionError("never called with bad input")

    executor = ts.Executor([picky, Strict()])
    limits = ts.Limits()
    kinds = []
    for turn in range(4):
        outcome = await executor.run(
            [ts.ToolCall(f"p{turn}", "picky", {"n": turn}), ts.ToolCall(f"s{turn}", "strict", '{"n": "x"}')],
            limits=limits,
        )
        kinds.append([result.error_kind for result in outcome.results])
    # A budget of n retries: after the first mistake the tool runs n more times; past that it does not run.
    assert kinds == [
        ["model_retry", "invalid_input"],
        ["model_retry", "invalid_input"],
        ["model_retry", "retries_exhausted"],
        ["retries_exhausted", "retries_exhausted"],
    ]
    assert ran == [0, 1, 2]
    assert limits.retries_of("picky") == 3
    exhausted = outcome.results[0].error
    assert exhausted is not None and "picky" in exhausted and "3 times" in exhausted and "limit of 2" in exhausted


async def test_limits_max_model_retries_overrides_every_tools_budget() -> None:
    @ts.tool
    async def picky(n: int) -> int:
        raise ts.ModelRetry("no")

    executor = ts.Executor([picky])
    limits = ts.Limits(max_model_retries=0)
    # No retries: the tool runs once, and after its first mistake it is not called again.
    first = await executor.run([ts.ToolCall("a", "picky", {"n": 1})], limits=limits)
    again = await executor.run([ts.ToolCall("b", "picky", {"n": 2})], limits=limits)
    assert [first.results[0].error_kind, again.results[0].error_kind] == ["model_retry", "retries_exhausted"]


def test_max_model_retries_is_checked() -> None:
    @ts.tool(max_model_retries=-1)
    async def bad(n: int) -> int:
        return n

    with pytest.raises(ts.ToolDefinitionError, match="max_model_retries"):
        ts.Executor([bad])

    with pytest.raises(TypeError):
        ts.ModelRetry(3)  # type: ignore[arg-type]


# -- Limits --------------------------------------------------------------------------------


async def test_max_calls_holds_across_turns_and_says_what_to_do() -> None:
    ran: list[str] = []
    executor = ts.Executor(counting_tools(ran))
    limits = ts.Limits(max_calls=3)
    first = await executor.run(reads("a", "b"), limits=limits)
    second = await executor.run(reads("c", "d", prefix="t2-"), limits=limits)
    assert [r.error_kind for r in first.results] == [None, None]
    assert [r.error_kind for r in second.results] == [None, "limit_exceeded"]
    assert sorted(ran) == ["a", "b", "c"]
    message = second.results[1].error
    assert message is not None and "limit of 3 tool calls" in message and "answer with what you have" in message
    assert limits.calls == 3


async def test_max_calls_per_tool_as_an_int_or_a_mapping() -> None:
    ran: list[str] = []
    executor = ts.Executor(counting_tools(ran))
    calls = [*reads("a", "b"), ts.ToolCall("g1", "grep", {"pattern": "x"}), ts.ToolCall("g2", "grep", {"pattern": "y"})]
    outcome = await executor.run(calls, limits=ts.Limits(max_calls_per_tool=1))
    assert [r.error_kind for r in outcome.results] == [None, "limit_exceeded", None, "limit_exceeded"]
    ran.clear()
    outcome = await executor.run(calls, limits=ts.Limits(max_calls_per_tool={"read_file": 0}))
    assert [r.error_kind for r in outcome.results] == ["limit_exceeded", "limit_exceeded", None, None]
    assert ran == ["x", "y"]
    error = outcome.results[0].error
    assert error is not None and "`read_file` may be called 0 times" in error and "use another tool" in error


async def test_a_repeated_call_is_answered_with_what_it_returned_before() -> None:
    ran: list[str] = []
    executor = ts.Executor(counting_tools(ran))
    limits = ts.Limits(max_repeats=1)
    await executor.run([ts.ToolCall("a", "read_file", '{"path": "x"}')], limits=limits)
    # The same arguments spelled otherwise (JSON text, key order) are the same call.
    again = await executor.run([ts.ToolCall("b", "read_file", {"path": "x"}), *reads("y", prefix="n")], limits=limits)
    assert [r.error_kind for r in again.results] == ["limit_exceeded", None]
    assert ran == ["x", "y"]
    error = again.results[0].error
    assert error is not None and "already made once in this run" in error and "contents of x" in error


async def test_a_refusal_counts_in_words_the_model_reads() -> None:
    # "1 times", "1 tool calls", "1 retries" read as mistakes; a count of one is "once", "1 tool call".
    executor = ts.Executor(counting_tools([]))
    outcome = await executor.run([*reads("a", "b")], limits=ts.Limits(max_calls=1))
    assert "this run's limit of 1 tool call is reached" in str(outcome.results[1].error)
    outcome = await executor.run([*reads("a", "b")], limits=ts.Limits(max_calls_per_tool=1))
    assert "`read_file` may be called once in this run" in str(outcome.results[1].error)
    outcome = await executor.run([*reads("a", "b")], limits=ts.Limits(max_calls_per_tool=2))
    assert [r.error for r in outcome.results] == [None, None]


async def test_concurrent_calls_of_one_tool_never_run_past_the_cap() -> None:
    running = 0
    peak = 0
    ran: list[int] = []

    @ts.tool(concurrency_safe=True)
    async def fetch(n: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.01)
        ran.append(n)
        running -= 1
        return n

    executor = ts.Executor([fetch], strategy=ts.Parallel())
    limits = ts.Limits(max_calls_per_tool={"fetch": 3}, max_calls=5)
    calls = [ts.ToolCall(f"f{i}", "fetch", {"n": i}) for i in range(10)]
    outcome = await executor.run(calls, limits=limits)
    assert peak == 3  # they did run together
    assert sorted(ran) == [0, 1, 2]
    assert [r.error_kind for r in outcome.results] == [None] * 3 + ["limit_exceeded"] * 7


async def test_limits_hold_in_streamed_turns() -> None:
    ran: list[str] = []
    executor = ts.Executor(counting_tools(ran))
    limits = ts.Limits(max_calls=2)
    finished: list[ts.ToolResult] = []
    for turn, paths in enumerate([("a",), ("b", "c")]):
        async for event in executor.stream(reads(*paths, prefix=f"t{turn}-"), limits=limits):
            if isinstance(event, ts.ToolFinished):
                finished.append(event.result)

    async def arriving() -> Any:
        for call in reads("d", prefix="late-"):
            yield call

    late = await executor.run(arriving(), limits=limits)
    assert {r.call_id: r.error_kind for r in finished} == {"t0-0": None, "t1-0": None, "t1-1": "limit_exceeded"}
    assert [r.error_kind for r in late.results] == ["limit_exceeded"]
    assert ran == ["a", "b"]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"max_calls": -1}, "max_calls"),
        ({"max_calls": 1.5}, "max_calls"),
        ({"max_calls": True}, "max_calls"),
        ({"max_calls": "3"}, "max_calls"),
        ({"max_calls_per_tool": "3"}, "max_calls_per_tool"),
        ({"max_calls_per_tool": {"read_file": -2}}, "read_file"),
        ({"max_calls_per_tool": {"read_file": None}}, "read_file"),
        ({"max_calls_per_tool": {3: 1}}, "tool names"),
        ({"max_repeats": -1}, "max_repeats"),
        ({"max_model_retries": [1]}, "max_model_retries"),
    ],
)
def test_bad_limits_are_refused_with_a_readable_error(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ts.OptionError, match=match):
        ts.Limits(**options)


async def test_limits_must_be_a_limits_object() -> None:
    executor = ts.Executor(counting_tools([]))
    with pytest.raises(ts.OptionError, match=r"ts\.Limits"):
        await executor.run(reads("a"), limits={"max_calls": 1})  # type: ignore[arg-type]


async def test_shared_limits_share_the_budget_and_copies_count_apart() -> None:
    ran: list[str] = []
    executor = ts.Executor(counting_tools(ran))
    limits = ts.Limits(max_calls=3)
    await executor.run(reads("a"), limits=limits)
    twin = copy.copy(limits)
    fresh = limits.fresh()
    results: dict[str, list[str | None]] = {}

    async def agent(name: str, shared: ts.Limits) -> None:
        outcome = await executor.run(reads("x", "y", prefix=name), limits=shared)
        results[name] = [r.error_kind for r in outcome.results]

    async with anyio.create_task_group() as group:
        group.start_soon(agent, "one-", limits)
        group.start_soon(agent, "two-", limits)
    # Two concurrent runs on one Limits: three calls in all, never more.
    assert sum(kind is None for kinds in results.values() for kind in kinds) == 2
    assert ran.count("x") + ran.count("y") == 2
    assert limits.calls == 3
    # The copy kept the count at the time (1) and counts on its own; the fresh one starts at 0.
    assert (twin.calls, fresh.calls) == (1, 0)
    outcome = await executor.run(reads("p", "q", "r"), limits=twin)
    assert [r.error_kind for r in outcome.results] == [None, None, "limit_exceeded"]
    assert repr(fresh) == "Limits(max_calls=3, max_calls_per_tool=None, max_model_retries=None, max_repeats=None)"


# -- resume and recover --------------------------------------------------------------------


def gated_tools(ran: list[str]) -> list[ts.FunctionTool]:
    @ts.tool(needs_approval=True)
    async def send(to: str) -> str:
        ran.append(to)
        return f"sent to {to}"

    return [*counting_tools(ran), send]


async def test_resuming_a_state_counts_its_calls_once() -> None:
    ran: list[str] = []
    executor = ts.Executor(gated_tools(ran))
    limits = ts.Limits(max_calls=3)
    outcome = await executor.run([*reads("a"), ts.ToolCall("s", "send", {"to": "bob"})], limits=limits)
    assert outcome.interrupted and outcome.state is not None
    assert limits.calls == 2  # the held call was admitted, and counted, once
    state = outcome.state
    copied = ts.RunState.from_json(state.to_json())
    state.approve("s")
    resumed = await executor.resume(state, limits=limits)
    assert [r.error_kind for r in resumed.results] == [None, None]
    assert limits.calls == 2
    copied.approve("s")
    with pytest.raises(ts.StateError):
        await executor.resume(copied, limits=limits)
    assert limits.calls == 2
    # One call is left in the budget; the next turn's second call is past it.
    after = await executor.run(reads("b", "c", prefix="n"), limits=limits)
    assert [r.error_kind for r in after.results] == [None, "limit_exceeded"]
    assert ran == ["a", "bob", "b"]


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_in(request.param, tmp_path, "limits_test")


async def test_recover_counts_what_the_journal_holds(store: Store) -> None:
    ran: list[str] = []
    async with store.open() as journal:
        executor = ts.Executor(gated_tools(ran), journal=journal)
        outcome = await executor.run([*reads("a", "b", "c"), ts.ToolCall("s", "send", {"to": "bob"})], run_id="limited")
        assert outcome.interrupted
    assert sorted(ran) == ["a", "b", "c"]
    # Another process recovers the run with the agent run's limits: the journal's three calls count.
    limits = ts.Limits(max_calls=3)
    async with store.open() as journal:
        executor = ts.Executor(gated_tools(ran), journal=journal)
        recovered = await executor.recover("limited", force=True, limits=limits)
        assert limits.calls == 3
        assert recovered.interrupted and recovered.state is not None
        recovered.state.approve("s")
        resumed = await executor.resume(recovered.state, limits=limits)
    assert [r.error_kind for r in resumed.results] == [None, None, None, "limit_exceeded"]
    assert sorted(ran) == ["a", "b", "c"]
    assert limits.calls == 3


# -- unknown tools ---------------------------------------------------------------------------


async def test_an_unknown_tool_is_named_as_sent_with_the_right_name_suggested() -> None:
    ran: list[str] = []
    executor = ts.Executor(counting_tools(ran))
    calls = [
        ts.ToolCall("a", "Read_File", {"path": "x"}),
        ts.ToolCall("b", "functions.read_file", {"path": "x"}),
        ts.ToolCall("c", "default_api:grep", {"pattern": "x"}),
        ts.ToolCall("d", "read_fiel", {"path": "x"}),
    ]
    outcome = await executor.run(calls)
    assert ran == []
    messages = [r.error or "" for r in outcome.results]
    assert all(r.error_kind == "unknown_tool" for r in outcome.results)
    assert messages[0].startswith("unknown tool `Read_File`") and "did you mean `read_file`?" in messages[0]
    assert messages[1].startswith("unknown tool `functions.read_file`") and "`read_file`" in messages[1]
    assert "did you mean `grep`?" in messages[2]
    assert "did you mean `read_file`" in messages[3]


async def test_at_most_twenty_names_are_listed() -> None:
    def make(i: int) -> ts.FunctionTool:
        async def body(n: int) -> int:
            return n

        return ts.FunctionTool(body, name=f"tool_{i:02}", description="A tool.")

    executor = ts.Executor([make(i) for i in range(25)])
    outcome = await executor.run([ts.ToolCall("a", "zzz", {"n": 1})])
    error = outcome.results[0].error or ""
    assert "tool_19" in error and "tool_20" not in error and error.endswith("and 5 more")


def _reference_value_digest(args: Any) -> str:
    """What ``value_digest`` means, written out: the canonical JSON (keys sorted, no spaces) of the
    arguments with every integral float as the integer it equals, hashed."""

    def by_value(value: Any) -> Any:
        if isinstance(value, float):
            return int(value) if value.is_integer() else value
        if isinstance(value, Mapping):
            return {key: by_value(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [by_value(item) for item in value]
        return value

    text = json.dumps(by_value(args), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.sampled_from([0.0, -0.0, 1.0, 2.0, 1e2, 2**53 + 0.0]),
    st.text(max_size=4),
)
_json_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=3), inner, max_size=3),
        st.builds(types.MappingProxyType, st.dictionaries(st.text(max_size=3), inner, max_size=3)),
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=3), _json_values, max_size=4))
def test_the_repeat_guards_key_is_the_canonical_value_of_the_arguments(args: dict[str, Any]) -> None:
    """Flat or nested, of any value types: ``value_digest`` is the digest of the canonical value form, so
    it tells two calls apart exactly when their arguments differ by value (``1`` and ``1.0`` are one,
    ``True`` and ``1`` two)."""
    assert value_digest(args) == _reference_value_digest(args)
    text = json.dumps(args, default=dict)  # a mapping proxy as the object it reads as
    assert value_digest(text) == _reference_value_digest(json.loads(text))


def test_the_repeat_guards_key_tells_numbers_by_value_and_booleans_apart() -> None:
    assert value_digest({"n": 1, "s": "a"}) == value_digest({"s": "a", "n": 1.0}) == value_digest('{"n":1e0,"s":"a"}')
    assert value_digest({"n": True}) != value_digest({"n": 1})
    assert value_digest({"n": None}) != value_digest({"n": "null"}) != value_digest({})
    assert value_digest({"n": 1.5}) != value_digest({"n": 1})
