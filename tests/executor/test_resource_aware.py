"""ResourceAware: calls overlap unless they conflict, and the result is that of running them in model order."""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import toolsched as ts
from tests.conftest import InFlight
from toolsched import _core

pytestmark = pytest.mark.anyio


# -- the oracle -------------------------------------------------------------------------------------------------


def normalized(key: str) -> str:
    return posixpath.normpath(key)


def covers(outer: str, inner: str) -> bool:
    """Whether key ``outer`` covers key ``inner`` (both normalised, relative)."""
    return outer == "." or inner == outer or inner.startswith(outer + "/")


def conflict(first: ts.Access | None, second: ts.Access | None) -> bool:
    """Two calls conflict when one writes what the other touches; unknown conflicts with everything."""
    if first is None or second is None:
        return True

    def touches(access: ts.Access, key: str) -> bool:
        return any(covers(k, key) or covers(key, k) for k in map(normalized, (*access.reads, *access.writes)))

    return any(touches(second, normalized(w)) for w in first.writes) or any(
        touches(first, normalized(w)) for w in second.writes
    )


# Spellings of a few keys, to exercise normalisation. No key starts with "//" (POSIX keeps that one).
KEYS = [
    ".",
    "./",
    "src",
    "src/",
    "./src",
    "src/a",
    "src//a",
    "./src/a",
    "src/lib/../a",
    "src/b",
    "src/lib",
    "src/lib/c",
    "srcs/a",
    "docs",
    "docs/x",
    "docs/./x",
    "src/lib/deep",
    "src/lib/deep/d",
    "src/lib//deep/e",
]

accesses = st.one_of(
    st.none(),
    st.builds(
        ts.Access,
        reads=st.lists(st.sampled_from(KEYS), max_size=3),
        writes=st.lists(st.sampled_from(KEYS), max_size=2),
    ),
)


def as_engine_input(access: ts.Access | None) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    return None if access is None else (access.reads, access.writes)


@settings(max_examples=200, deadline=None)
@given(turn=st.lists(accesses, max_size=40))
def test_the_plan_orders_every_conflict_and_waits_only_on_conflicts(turn: list[ts.Access | None]) -> None:
    wait_offsets, waits, dependent_offsets, dependents = _core.plan_conflicts([as_engine_input(a) for a in turn])
    reach: list[set[int]] = []
    for call in range(len(turn)):
        direct = waits[wait_offsets[call] : wait_offsets[call + 1]]
        assert direct == sorted(set(direct))
        closure: set[int] = set()
        for earlier in direct:
            assert earlier < call
            assert conflict(turn[earlier], turn[call]), (earlier, call)
            closure |= reach[earlier] | {earlier}
        reach.append(closure)
        for earlier in range(call):
            if conflict(turn[earlier], turn[call]):
                assert earlier in closure, (earlier, call)
    # The dependents are the same edges, seen from the other end.
    forward = {(e, c) for c in range(len(turn)) for e in waits[wait_offsets[c] : wait_offsets[c + 1]]}
    backward = {(e, d) for e in range(len(turn)) for d in dependents[dependent_offsets[e] : dependent_offsets[e + 1]]}
    assert forward == backward


@given(parts=st.lists(st.sampled_from(["a", "b", "..", ".", ""]), max_size=8), absolute=st.booleans())
def test_keys_normalise_like_posix_paths(parts: list[str], absolute: bool) -> None:
    # POSIX gives a leading "//" a meaning of its own; keys here have one slash at most.
    key = ("/" if absolute else "") + "/".join(parts).lstrip("/")
    assert _core.normalize_key(key) == posixpath.normpath(key)


# -- the guarantee: same store, same results as one by one in model order ---------------------------------------


class Workspace:
    """An in-memory store whose tools record what is in flight, to catch overlapping conflicts."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.in_flight: dict[str, ts.Access | None] = {}
        self.violations: list[tuple[str, str]] = []

    def enter(self, call_id: str, access: ts.Access | None) -> None:
        for other, other_access in self.in_flight.items():
            if conflict(access, other_access):
                self.violations.append((other, call_id))
        self.in_flight[call_id] = access

    def leave(self, call_id: str) -> None:
        del self.in_flight[call_id]

    def snapshot(self, keys: Sequence[str] | None) -> tuple[tuple[str, str], ...]:
        wanted = None if keys is None else [normalized(k) for k in keys]
        return tuple(
            sorted((k, v) for k, v in self.data.items() if wanted is None or any(covers(w, k) for w in wanted))
        )

    def update(self, key: str, mark: str) -> None:
        key = normalized(key)
        for existing in [k for k in self.data if covers(key, k)] or [key]:
            self.data[existing] = self.data.get(existing, "") + mark


def workspace_tools(space: Workspace) -> list[ts.Tool]:
    def read_access(args: Any) -> ts.Access:
        return ts.Access(reads=args["keys"])

    def write_access(args: Any) -> ts.Access:
        return ts.Access(writes=[args["key"]])

    def copy_access(args: Any) -> ts.Access:
        return ts.Access(reads=[args["source"]], writes=[args["target"]])

    def cannot_tell(args: Any) -> ts.Access:
        raise RuntimeError("resources unknown for this input")

    @ts.tool(resources=read_access)
    async def read(keys: list[str], delay: int, ctx: ts.ToolContext) -> Any:
        space.enter(ctx.call_id, read_access({"keys": keys}))
        seen = space.snapshot(keys)
        await anyio.sleep(delay / 1000)
        space.leave(ctx.call_id)
        return seen

    @ts.tool(resources=write_access)
    async def write(key: str, delay: int, ctx: ts.ToolContext) -> Any:
        space.enter(ctx.call_id, write_access({"key": key}))
        before = space.snapshot([key])
        await anyio.sleep(delay / 1000)
        space.update(key, f"<{ctx.call_id}")
        space.leave(ctx.call_id)
        return before

    @ts.tool(resources=copy_access)
    async def copy(source: str, target: str, delay: int, ctx: ts.ToolContext) -> Any:
        space.enter(ctx.call_id, copy_access({"source": source, "target": target}))
        seen = space.snapshot([source])
        await anyio.sleep(delay / 1000)
        space.update(target, f"<{len(seen)}{ctx.call_id}")
        space.leave(ctx.call_id)
        return seen

    @ts.tool
    async def shell(delay: int, ctx: ts.ToolContext) -> Any:
        space.enter(ctx.call_id, None)
        seen = space.snapshot(None)
        await anyio.sleep(delay / 1000)
        space.update("src/a", f"${len(seen)}")
        space.leave(ctx.call_id)
        return seen

    @ts.tool(resources=cannot_tell)
    async def guess(key: str, delay: int, ctx: ts.ToolContext) -> Any:
        space.enter(ctx.call_id, None)
        await anyio.sleep(delay / 1000)
        space.update(key, "?")
        seen = space.snapshot(None)
        space.leave(ctx.call_id)
        return seen

    return [read, write, copy, shell, guess]


delays = st.integers(0, 3)
turn_calls = st.lists(
    st.one_of(
        st.builds(
            lambda k, d: ("read", {"keys": k, "delay": d}),
            st.lists(st.sampled_from(KEYS), min_size=1, max_size=2),
            delays,
        ),
        st.builds(lambda k, d: ("write", {"key": k, "delay": d}), st.sampled_from(KEYS), delays),
        st.builds(
            lambda s, t, d: ("copy", {"source": s, "target": t, "delay": d}),
            st.sampled_from(KEYS),
            st.sampled_from(KEYS),
            delays,
        ),
        st.builds(lambda d: ("shell", {"delay": d}), delays),
        st.builds(lambda k, d: ("guess", {"key": k, "delay": d}), st.sampled_from(KEYS), delays),
    ),
    max_size=12,
)


async def run_in(strategy: ts.Strategy, turn: list[tuple[str, dict[str, Any]]]) -> tuple[Workspace, list[Any]]:
    space = Workspace()
    space.data = {"src/a": "A", "src/lib/c": "C", "docs/x": "X"}
    calls = [ts.ToolCall(f"c{i}", name, args) for i, (name, args) in enumerate(turn)]
    outcome = await ts.Executor(workspace_tools(space), strategy=strategy).run(calls)
    return space, [(r.call_id, r.output, r.error_kind) for r in outcome.results]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turn=turn_calls, cap=st.integers(1, 6))
async def test_a_resource_aware_run_equals_the_calls_one_by_one(
    turn: list[tuple[str, dict[str, Any]]], cap: int, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="toolsched"):
        reference, expected = await run_in(ts.Sequential(), turn)
        space, results = await run_in(ts.ResourceAware(max_concurrency=cap), turn)
    assert results == expected
    assert space.data == reference.data
    assert space.violations == []
    assert all(kind is None for _, _, kind in results)


# -- scheduling behaviour -----------------------------------------------------------------------------------------


def file_tools(in_flight: InFlight, runs: list[str]) -> list[ts.Tool]:
    @ts.tool(resources=lambda args: ts.Access(reads=[args["path"]]))
    async def read(path: str, delay: float = 0.02, ctx: ts.ToolContext | None = None) -> str:
        assert ctx is not None
        runs.append(ctx.call_id)
        await in_flight.hold(ctx.call_id, delay)
        return f"read {path}"

    @ts.tool(resources=lambda args: ts.Access(writes=[args["path"]]))
    async def write(path: str, delay: float = 0.02, ctx: ts.ToolContext | None = None) -> str:
        assert ctx is not None
        runs.append(ctx.call_id)
        await in_flight.hold(ctx.call_id, delay)
        return f"wrote {path}"

    @ts.tool
    async def shell(command: str, ctx: ts.ToolContext) -> str:
        runs.append(ctx.call_id)
        await in_flight.hold(ctx.call_id, 0.02)
        return f"ran {command}"

    return [read, write, shell]


async def test_independent_calls_overlap_and_conflicting_ones_keep_model_order(in_flight: InFlight) -> None:
    runs: list[str] = []
    calls = [
        ts.ToolCall("r1", "read", {"path": "src/a.py"}),
        ts.ToolCall("w1", "write", {"path": "src/a.py"}),
        ts.ToolCall("r2", "read", {"path": "docs/b.md"}),
        ts.ToolCall("w2", "write", {"path": "docs/c.md"}),
        ts.ToolCall("r3", "read", {"path": "./src//a.py"}),
    ]
    outcome = await ts.Executor(file_tools(in_flight, runs), strategy=ts.ResourceAware()).run(calls)
    assert [r.output for r in outcome.results] == [
        "read src/a.py",
        "wrote src/a.py",
        "read docs/b.md",
        "wrote docs/c.md",
        "read ./src//a.py",
    ]
    # The write of src/a.py waits for the read before it; the read after waits for the write.
    assert in_flight.position("start", "w1") > in_flight.position("end", "r1")
    assert in_flight.position("start", "r3") > in_flight.position("end", "w1")
    # The docs calls touch other keys: they overlap the first read, although they come after the write.
    assert in_flight.position("start", "r2") < in_flight.position("end", "r1")
    assert in_flight.position("start", "w2") < in_flight.position("end", "r1")
    assert [r.batch for r in outcome.results] == [0] * 5


async def test_a_directory_key_covers_what_is_below_it(in_flight: InFlight) -> None:
    runs: list[str] = []
    calls = [
        ts.ToolCall("a", "read", {"path": "src/a.py"}),
        ts.ToolCall("b", "read", {"path": "src/lib/b.py"}),
        ts.ToolCall("dir", "write", {"path": "src/"}),
        ts.ToolCall("sibling", "read", {"path": "srcs/c.py"}),
        ts.ToolCall("after", "read", {"path": "src/lib"}),
    ]
    await ts.Executor(file_tools(in_flight, runs), strategy=ts.ResourceAware()).run(calls)
    assert in_flight.position("start", "dir") > max(in_flight.position("end", "a"), in_flight.position("end", "b"))
    assert in_flight.position("start", "after") > in_flight.position("end", "dir")
    # "srcs" is not below "src": it did not wait.
    assert in_flight.position("start", "sibling") < in_flight.position("end", "a")


async def test_a_call_of_unknown_resources_runs_alone_between_the_others(in_flight: InFlight) -> None:
    runs: list[str] = []
    calls = [
        ts.ToolCall("r1", "read", {"path": "a"}),
        ts.ToolCall("r2", "read", {"path": "b"}),
        ts.ToolCall("sh", "shell", {"command": "make"}),
        ts.ToolCall("r3", "read", {"path": "c"}),
        ts.ToolCall("r4", "read", {"path": "d"}),
    ]
    outcome = await ts.Executor(file_tools(in_flight, runs), strategy=ts.ResourceAware()).run(calls)
    assert in_flight.position("start", "r2") < in_flight.position("end", "r1")
    assert in_flight.position("start", "sh") > max(in_flight.position("end", "r1"), in_flight.position("end", "r2"))
    assert min(in_flight.position("start", "r3"), in_flight.position("start", "r4")) > in_flight.position("end", "sh")
    assert in_flight.position("start", "r4") < in_flight.position("end", "r3")
    assert [r.was_concurrent for r in outcome.results] == [True, True, False, True, True]


@pytest.mark.parametrize("declare", ["raises", "not an Access"])
async def test_a_resources_method_that_fails_makes_the_call_conflict_with_everything(
    in_flight: InFlight, caplog: pytest.LogCaptureFixture, declare: str
) -> None:
    def resources(args: Any) -> Any:
        if args["path"] != "odd":
            return ts.Access(reads=[args["path"]])
        if declare == "raises":
            raise KeyError("no idea")
        return ["odd"]

    @ts.tool(resources=resources)
    async def read(path: str) -> str:
        await in_flight.hold(path)
        return path

    calls = [ts.ToolCall(p, "read", {"path": p}) for p in ["a", "b", "odd", "c", "d"]]
    with caplog.at_level(logging.WARNING, logger="toolsched"):
        outcome = await ts.Executor([read], strategy=ts.ResourceAware()).run(calls)
    assert [r.output for r in outcome.results] == ["a", "b", "odd", "c", "d"]
    assert in_flight.position("start", "b") < in_flight.position("end", "a")
    assert in_flight.position("start", "odd") > max(in_flight.position("end", "a"), in_flight.position("end", "b"))
    assert min(in_flight.position("start", "c"), in_flight.position("start", "d")) > in_flight.position("end", "odd")
    assert "resources() of read" in caplog.text
    assert "conflicts with every other call" in caplog.text


async def test_the_cap_holds_and_is_filled(in_flight: InFlight) -> None:
    runs: list[str] = []
    calls = [ts.ToolCall(f"r{i}", "read", {"path": f"f{i}"}) for i in range(12)]
    await ts.Executor(file_tools(in_flight, runs), strategy=ts.ResourceAware(max_concurrency=3)).run(calls)
    assert in_flight.peak == 3
    assert sorted(runs) == sorted(c.id for c in calls)


async def test_the_environment_sets_the_cap(in_flight: InFlight, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLSCHED_MAX_CONCURRENCY", "2")
    runs: list[str] = []
    calls = [ts.ToolCall(f"r{i}", "read", {"path": f"f{i}"}) for i in range(6)]
    await ts.Executor(file_tools(in_flight, runs), strategy=ts.ResourceAware()).run(calls)
    assert in_flight.peak == 2


async def test_ready_calls_start_in_model_order(in_flight: InFlight) -> None:
    runs: list[str] = []
    calls = [ts.ToolCall("w", "write", {"path": "x", "delay": 0.03})] + [
        ts.ToolCall(f"r{i}", "read", {"path": "x" if i % 2 else f"y{i}", "delay": 0.01}) for i in range(6)
    ]
    await ts.Executor(file_tools(in_flight, runs), strategy=ts.ResourceAware(max_concurrency=1)).run(calls)
    assert runs == ["w", "r0", "r1", "r2", "r3", "r4", "r5"]


async def test_steering_stops_the_calls_not_yet_started() -> None:
    runs: list[int] = []

    @ts.tool(resources=lambda args: ts.Access(writes=["log"]))
    async def step(n: int) -> int:
        runs.append(n)
        await anyio.lowlevel.checkpoint()
        return n

    def steer() -> list[str] | None:
        return ["user: stop"] if len(runs) >= 2 else None

    outcome = await ts.Executor([step], strategy=ts.ResourceAware()).run(
        [ts.ToolCall(str(i), "step", {"n": i}) for i in range(5)], steering=steer
    )
    assert runs == [0, 1]
    assert [r.error_kind for r in outcome.results] == [None, None, "skipped", "skipped", "skipped"]
    assert [r.batch for r in outcome.results] == [0, 0, None, None, None]
    assert outcome.steering_messages == ["user: stop"]


async def test_a_steering_callback_that_raises_stops_the_run_with_its_own_error() -> None:
    runs: list[int] = []
    second_started = anyio.Event()

    @ts.tool(resources=lambda args: ts.Access(reads=[str(args["n"])]))
    async def step(n: int) -> int:
        runs.append(n)
        if n == 0:
            await second_started.wait()
        else:
            second_started.set()
            await anyio.sleep(0.01)
        return n

    async def steer() -> None:
        raise LookupError("steering store is gone")

    with pytest.raises(LookupError, match="steering store is gone"):
        await ts.Executor([step], strategy=ts.ResourceAware(max_concurrency=2)).run(
            [ts.ToolCall(str(i), "step", {"n": i}) for i in range(6)], steering=steer
        )
    # The two calls in flight settled; nothing started after the failure.
    assert runs == [0, 1]


async def test_on_error_raise_starts_nothing_after_a_failure() -> None:
    runs: list[str] = []

    @ts.tool(resources=lambda args: ts.Access(writes=[args["key"]]))
    async def put(key: str, fail: bool = False) -> str:
        runs.append(key)
        await anyio.sleep(0.01)
        if fail:
            raise OSError(f"cannot write {key}")
        return key

    calls = [
        ts.ToolCall("1", "put", {"key": "a", "fail": True}),
        ts.ToolCall("2", "put", {"key": "b"}),
        ts.ToolCall("3", "put", {"key": "a"}),
    ]
    with pytest.raises(ts.ToolCallFailed) as caught:
        await ts.Executor([put], strategy=ts.ResourceAware(), on_error="raise").run(calls)
    assert caught.value.result.call_id == "1"
    # "b" overlapped the failure and settled; the second write of "a" waited for it and never ran.
    assert runs == ["a", "b"]
    # Every call is answered: the one that never started is skipped, naming the failure.
    assert [(r.call_id, r.error_kind) for r in caught.value.results] == [
        ("1", "execution_error"),
        ("2", None),
        ("3", "skipped"),
    ]
    assert caught.value.results[2].error == "not run: call 1 (`put`) failed"


async def test_every_call_is_answered_once_with_rejected_calls_mixed_in() -> None:
    started: list[str] = []

    @ts.tool(resources=lambda args: ts.Access(writes=[args["key"]]))
    async def put(key: str) -> str:
        started.append(key)
        return key

    calls = [
        ts.ToolCall("1", "put", {"key": "a"}),
        ts.ToolCall("2", "nope", {}),
        ts.ToolCall("3", "put", {"key": 3}),
        ts.ToolCall("1", "put", {"key": "again"}),
        ts.ToolCall("4", "put", {"key": "a"}),
    ]
    events: list[ts.Event] = []
    outcome = await ts.Executor([put], strategy=ts.ResourceAware(), on_event=events.append).run(calls)
    assert [(r.call_id, r.error_kind) for r in outcome.results] == [
        ("1", None),
        ("2", "unknown_tool"),
        ("3", "invalid_input"),
        ("4", None),
    ]
    assert started == ["a", "a"]
    assert [type(e).__name__ for e in events if isinstance(e, ts.BatchStarted | ts.BatchFinished)] == [
        "BatchStarted",
        "BatchFinished",
    ]


async def test_class_tools_declare_resources_by_method(in_flight: InFlight) -> None:
    class Edit(ts.Tool):
        name = "edit"
        input_schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}

        def resources(self, args: Any) -> ts.Access:
            return ts.Access(writes=[args["path"]])

        async def call(self, args: Any, ctx: ts.ToolContext) -> str:
            await in_flight.hold(ctx.call_id)
            return str(args["path"])

    calls = [
        ts.ToolCall("1", "edit", {"path": "a"}),
        ts.ToolCall("2", "edit", {"path": "b"}),
        ts.ToolCall("3", "edit", {"path": "a"}),
    ]
    await ts.Executor([Edit()], strategy=ts.ResourceAware()).run(calls)
    assert in_flight.position("start", "2") < in_flight.position("end", "1")
    assert in_flight.position("start", "3") > in_flight.position("end", "1")


@pytest.mark.parametrize("value", [0, -1, True, 2.5])
def test_bad_caps_are_refused(value: Any) -> None:
    with pytest.raises(ts.OptionError, match=r"ResourceAware\(max_concurrency=...\)"):
        ts.ResourceAware(max_concurrency=value)


# -- the control plane around the graph -----------------------------------------------------------------------


async def test_batch_hooks_see_the_whole_turn_as_one_batch() -> None:
    events: list[tuple[str, int, tuple[str, ...], tuple[Any, ...]]] = []

    @ts.tool(resources=lambda args: ts.Access(reads=[args["path"]]))
    async def read(path: str) -> str:
        return path

    async def before(event: ts.BatchEvent) -> None:
        events.append(("pre", event.batch, tuple(c.id for c in event.calls), ()))

    async def after(event: ts.BatchEvent) -> None:
        events.append(("post", event.batch, tuple(c.id for c in event.calls), tuple(r.output for r in event.results)))

    hooks = ts.Hooks().pre_batch("*", before).post_batch("*", after)
    calls = [ts.ToolCall("1", "read", {"path": "a"}), ts.ToolCall("2", "read", {"path": "b"})]
    await ts.Executor([read], strategy=ts.ResourceAware(), hooks=hooks).run(calls)
    assert events == [("pre", 0, ("1", "2"), ()), ("post", 0, ("1", "2"), ("a", "b"))]


async def test_a_pre_batch_hook_that_denies_blocks_every_call() -> None:
    runs: list[str] = []

    @ts.tool(resources=lambda args: ts.Access(writes=[args["path"]]))
    async def edit(path: str) -> str:
        runs.append(path)
        return path

    async def gate(event: ts.BatchEvent) -> ts.Decision:
        return ts.Decision.deny("snapshot failed")

    calls = [ts.ToolCall("1", "edit", {"path": "a"}), ts.ToolCall("2", "edit", {"path": "b"})]
    outcome = await ts.Executor([edit], strategy=ts.ResourceAware(), hooks=ts.Hooks().pre_batch("*", gate)).run(calls)
    assert [(r.error_kind, r.error) for r in outcome.results] == [("hook_blocked", "snapshot failed")] * 2
    assert runs == []


async def test_a_tripped_guardrail_starts_nothing_more() -> None:
    runs: list[str] = []
    evil_checked = anyio.Event()

    @ts.tool(resources=lambda args: ts.Access(reads=[args["url"]]))
    async def fetch(url: str) -> str:
        runs.append(url)
        if url == "slow":
            await evil_checked.wait()
        return url

    def tripwire(event: ts.GuardrailEvent) -> None:
        if event.args.get("url") == "evil":
            evil_checked.set()
            raise ts.GuardrailTripped("prompt injection detected")

    calls = [
        ts.ToolCall("1", "fetch", {"url": "slow"}),
        ts.ToolCall("2", "fetch", {"url": "evil"}),
        ts.ToolCall("3", "fetch", {"url": "later"}),
    ]
    executor = ts.Executor([fetch], strategy=ts.ResourceAware(max_concurrency=2), input_guardrails=[tripwire])
    with pytest.raises(ts.GuardrailTripped, match="prompt injection detected") as caught:
        await executor.run(calls)
    # The call in flight settled; the one after the trip never started.
    assert runs == ["slow"]
    assert [(r.call_id, r.error_kind) for r in caught.value.results] == [("1", None), ("2", "guardrail_rejected")]
