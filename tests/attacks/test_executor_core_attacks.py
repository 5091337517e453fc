"""Attacks on the executor's core: the checks a call meets before it runs (``validate_input``, hooks,
``check_permissions``, the approver, the tool's judgements of its arguments, batch hooks) failing in ways an
``except Exception`` misses, and the executor's options and ``run``'s calls given the wrong types."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio


def cancelled_by_hand(*_: Any) -> Any:
    """What a check raises when something it awaited was cancelled by someone else (or it raised a cancellation
    itself): an ``asyncio.CancelledError`` while nothing cancelled the run."""
    raise asyncio.CancelledError("a future it awaited was cancelled elsewhere")


async def cancelled_by_hand_async(*_: Any) -> Any:
    raise asyncio.CancelledError("a future it awaited was cancelled elsewhere")


def checked_tool(ran: list[int], **methods: Any) -> ts.Tool:
    class Checked(ts.Tool):
        name = "checked"
        description = "A tool whose checks are given."
        input_schema = {"type": "object", "properties": {"n": {"type": "integer"}}}

        async def call(self, args: Any, ctx: Any) -> int:
            ran.append(args["n"])
            return int(args["n"])

    for name, method in methods.items():
        setattr(Checked, name, method)
    return Checked()


def calls() -> list[ts.ToolCall]:
    return [ts.ToolCall("c1", "checked", {"n": 1}), ts.ToolCall("c2", "checked", {"n": 2})]


# Each check raising a cancellation that is not the run's, with what its failure means for the calls:
# (the tool's methods, the executor's options, the error kind of both calls, which calls ran).
CHECKS: dict[str, tuple[dict[str, Any], dict[str, Any], str | None, list[int]]] = {
    "validate_input": ({"validate_input": cancelled_by_hand_async}, {}, "semantic_error", []),
    "check_permissions": ({"check_permissions": cancelled_by_hand_async}, {}, "permission_denied", []),
    "pre_tool_use hook": ({}, {"hooks": ts.Hooks().pre_tool_use("*", cancelled_by_hand_async)}, "hook_blocked", []),
    "pre_tool_use hook with a timeout": (
        {},
        {"hooks": ts.Hooks(timeout=30).pre_tool_use("*", cancelled_by_hand_async)},
        "hook_blocked",
        [],
    ),
    "approver": (
        {"needs_approval": lambda self, args: True},
        {"approver": cancelled_by_hand_async},
        "permission_denied",
        [],
    ),
    "pre_batch hook": ({}, {"hooks": ts.Hooks().pre_batch("*", cancelled_by_hand_async)}, "hook_blocked", []),
    "post_batch hook": ({}, {"hooks": ts.Hooks().post_batch("*", cancelled_by_hand_async)}, None, [1, 2]),
    # The tool's judgements of its arguments: a failure is the fail-closed answer.
    "is_concurrency_safe": ({"is_concurrency_safe": cancelled_by_hand}, {}, None, [1, 2]),
    "resources": ({"resources": cancelled_by_hand}, {"strategy": ts.ResourceAware()}, None, [1, 2]),
    "is_read_only in plan mode": (
        {"is_read_only": cancelled_by_hand},
        {"permissions": ts.Permissions(mode="plan")},
        "permission_denied",
        [],
    ),
}


@pytest.mark.parametrize("check", list(CHECKS))
async def test_a_check_that_raises_a_cancellation_not_the_runs_fails_as_that_check(check: str) -> None:
    """Documented for tools, post hooks and listeners: a cancellation that is not the run's is the code's own
    failure. The checks before a call are held to the same rule (a failing check is fail-closed); before, the
    run raised the CancelledError to a caller nobody had cancelled."""
    methods, options, kind, ran_expected = CHECKS[check]
    ran: list[int] = []
    outcome = await ts.Executor([checked_tool(ran, **methods)], **options).run(calls())
    assert [result.call_id for result in outcome.results] == ["c1", "c2"]
    assert [result.error_kind for result in outcome.results] == [kind, kind]
    assert ran == ran_expected


async def test_a_check_of_rewritten_input_that_raises_a_cancellation_not_the_runs_blocks_the_call() -> None:
    validated: list[int] = []

    async def validate_input(self: Any, args: Any, ctx: Any) -> None:
        validated.append(args["n"])
        if args["n"] == 7:
            raise asyncio.CancelledError("a future it awaited was cancelled elsewhere")

    hooks = ts.Hooks().pre_tool_use("*", lambda event: ts.Rewrite({"n": 7}))
    ran: list[int] = []
    outcome = await ts.Executor([checked_tool(ran, validate_input=validate_input)], hooks=hooks).run(calls())
    assert [result.error_kind for result in outcome.results] == ["hook_blocked", "hook_blocked"]
    assert ran == []


async def test_needs_approval_that_raises_a_cancellation_not_the_runs_asks() -> None:
    ran: list[int] = []
    outcome = await ts.Executor([checked_tool(ran, needs_approval=cancelled_by_hand)]).run(calls())
    assert outcome.interrupted
    assert [request.call_id for request in outcome.pending] == ["c1", "c2"]
    assert ran == []


@pytest.mark.parametrize("where", ["pre_tool_use", "pre_batch", "approver"])
async def test_the_runs_own_cancellation_during_a_check_still_stops_the_run(where: str) -> None:
    started = anyio.Event()

    async def waits(*_: Any) -> None:
        started.set()
        await anyio.sleep_forever()

    options: dict[str, Any] = {
        "pre_tool_use": {"hooks": ts.Hooks().pre_tool_use("*", waits)},
        "pre_batch": {"hooks": ts.Hooks().pre_batch("*", waits)},
        "approver": {"approver": waits},
    }[where]
    methods = {"needs_approval": lambda self, args: True} if where == "approver" else {}
    ran: list[int] = []
    executor = ts.Executor([checked_tool(ran, **methods)], **options)
    finished = False
    with anyio.CancelScope() as scope:

        async def cancel_once_started() -> None:
            await started.wait()
            scope.cancel()

        async with anyio.create_task_group() as group:
            group.start_soon(cancel_once_started)
            await executor.run(calls())
            finished = True
    assert scope.cancelled_caught
    assert not finished
    assert ran == []


async def test_a_repair_function_that_raises_a_cancellation_not_the_runs_leaves_the_call_refused() -> None:
    ran: list[int] = []
    executor = ts.Executor([checked_tool(ran)], repair_arguments=cancelled_by_hand_async)
    outcome = await executor.run([ts.ToolCall("c1", "checked", {"n": "one"}), ts.ToolCall("c2", "checked", {"n": 2})])
    assert [result.error_kind for result in outcome.results] == ["invalid_input", None]
    assert ran == [2]


@ts.tool(concurrency_safe=True)
async def echo(n: int) -> int:
    """Returns its number."""
    return n


@pytest.mark.parametrize("strategy", [ts.Sequential, ts.Parallel, ts.Batched, ts.Partitioned, ts.ResourceAware])
def test_a_strategy_class_given_without_parentheses_is_refused_when_built(strategy: type) -> None:
    """Before, every class has a ``kind``, so it passed: ``ts.Sequential`` ran as Sequential() and the others
    raised a bare TypeError (``int()`` of a slot descriptor) at the first run."""
    with pytest.raises(ts.OptionError, match=r"strategy must be a toolsched strategy .* got <class"):
        ts.Executor([echo], strategy=strategy)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("interactive", "no", "interactive must be True or False, got 'no'"),
        ("interactive", 0, "interactive must be True or False, got 0"),
        ("on_progress", 5, "on_progress must be a callable, got 5"),
        ("offload_dir", 5, r"offload_dir must be a path \(str or os.PathLike\), got 5"),
    ],
)
def test_an_option_of_the_wrong_type_is_refused_when_built(option: str, value: Any, message: str) -> None:
    """Before: ``interactive="no"`` made every run interactive (a non-empty string is true), ``on_progress=5``
    was taken and failed at each progress event, ``offload_dir=5`` raised a bare TypeError."""
    with pytest.raises(ts.OptionError, match=message):
        ts.Executor([echo], **{option: value})


def test_options_of_the_right_types_are_taken(tmp_path: Any) -> None:
    ts.Executor([echo], interactive=True, on_progress=print, offload_dir=tmp_path)
    ts.Executor([echo], interactive=False, offload_dir=str(tmp_path))


NOT_CALLS: list[Any] = [
    None,
    5,
    '[{"id": "c1", "name": "echo"}]',
    b"calls",
    {"c1": ts.ToolCall("c1", "echo", {"n": 1})},
    ts.ToolCall("c1", "echo", {"n": 1}),
]


@pytest.mark.parametrize("calls", NOT_CALLS, ids=lambda calls: type(calls).__name__)
@pytest.mark.parametrize("entry", ["run", "stream", "child run"])
async def test_calls_that_are_not_a_collection_of_calls_are_refused_by_name(entry: str, calls: Any) -> None:
    """Before: ``None`` or a number raised a bare TypeError ("not iterable"), ``stream(None)`` an
    AssertionError; text, a mapping and a lone ToolCall were read as calls (their characters, their keys)."""
    match = r"calls must be a list \(or another iterable\) of ToolCall, got "
    if entry == "run":
        with pytest.raises(ts.MalformedCallError, match=match):
            await ts.Executor([echo]).run(calls)
    elif entry == "stream":
        with pytest.raises(ts.MalformedCallError, match=match):
            async for _ in ts.Executor([echo]).stream(calls):
                pass
    else:

        @ts.agent_tool(ts.Executor([echo]))
        async def delegate(child: ts.ChildRun) -> str:
            """Runs a child turn."""
            await child.run(calls)
            return "ran"

        outcome = await ts.Executor([delegate]).run([ts.ToolCall("p1", "delegate", {})])
        assert outcome.results[0].error_kind == "execution_error"
        assert "MalformedCallError: calls must be a list (or another iterable) of ToolCall" in (
            outcome.results[0].error or ""
        )


async def test_calls_from_a_tuple_or_a_generator_are_taken() -> None:
    executor = ts.Executor([echo])
    first = await executor.run((ts.ToolCall("c1", "echo", {"n": 1}),))
    second = await executor.run(ts.ToolCall(f"c{n}", "echo", {"n": n}) for n in range(2))
    streamed = [event async for event in executor.stream(iter([ts.ToolCall("c1", "echo", {"n": 3})]))]
    assert [result.output for result in first.results] == [1]
    assert [result.output for result in second.results] == [0, 1]
    assert isinstance(streamed[-1], ts.RunFinished)
    assert [result.output for result in streamed[-1].outcome.results] == [3]


@ts.tool(concurrency_safe=True)
async def record(n: int) -> dict[str, Any]:
    """Returns a record the caller may change."""
    return {"n": n, "items": [1, 2]}


@ts.tool(needs_approval=True)
async def publish() -> str:
    """Needs a person's approval."""
    return "published"


async def test_outputs_the_caller_changes_after_an_interrupted_turn_are_not_what_the_state_holds() -> None:
    """The state of an interrupted turn keeps the completed calls' results for ``resume`` (which returns them)
    and ``to_json``. Before, it held the very outputs the outcome handed the caller: a caller (or a provider
    adapter) changing one in place changed what was saved and what the resumed run returned."""
    executor = ts.Executor([record, publish])
    outcome = await executor.run([ts.ToolCall("c1", "record", {"n": 1}), ts.ToolCall("c2", "publish", {})])
    state = outcome.state
    assert state is not None and outcome.interrupted
    outcome.results[0].output["n"] = 999
    outcome.results[0].output["items"].append(3)
    assert '"items": [1, 2]' in state.to_json().replace("\n", "")
    state.approve("c2")
    resumed = await executor.resume(state)
    assert [result.output for result in resumed.results] == [{"n": 1, "items": [1, 2]}, "published"]


async def test_outputs_changed_through_one_copy_of_a_state_are_not_changed_in_another() -> None:
    """ "Two states are independent copies": before, ``state.results`` handed out the outputs every copy
    shared, so changing one through a copy changed it in the original."""
    executor = ts.Executor([record, publish])
    outcome = await executor.run([ts.ToolCall("c1", "record", {"n": 1}), ts.ToolCall("c2", "publish", {})])
    state = outcome.state
    assert state is not None
    twin = state.copy()
    twin.results[0].output["items"].append(3)
    state.results[0].output["n"] = 999
    assert state.results[0].output == {"n": 1, "items": [1, 2]}
    assert twin.results[0].output == {"n": 1, "items": [1, 2]}
    state.approve("c2")
    resumed = await executor.resume(state)
    assert resumed.results[0].output == {"n": 1, "items": [1, 2]}


async def test_a_child_turns_outputs_the_body_changes_are_not_what_resume_replays() -> None:
    """A nested run's completed child turns are replayed from the state on resume (their tools never run
    again). Before, the record held the very outputs the body was handed, so a body that changed one in place
    was replayed the changed output."""
    ran: list[int] = []

    @ts.tool(concurrency_safe=True, name="record")
    async def counted_record(n: int) -> dict[str, Any]:
        ran.append(n)
        return {"n": n, "items": [1, 2]}

    seen: list[Any] = []
    child_executor = ts.Executor([counted_record, publish])

    @ts.agent_tool(child_executor)
    async def delegate(child: ts.ChildRun) -> str:
        """Runs three child turns; the second and third need approval."""
        first = await child.run([ts.ToolCall("k1", "record", {"n": 1})])
        seen.append(copy.deepcopy(first.results[0].output))
        first.results[0].output["items"].append(3)
        await child.run([ts.ToolCall("k2", "publish", {})])
        await child.run([ts.ToolCall("k3", "publish", {})])
        return "delegated"

    executor = ts.Executor([delegate])
    outcome = await executor.run([ts.ToolCall("p1", "delegate", {})])
    state = outcome.state
    assert state is not None and outcome.interrupted
    state.approve("p1/k2")
    again = await executor.resume(state)
    state = again.state
    assert state is not None and again.interrupted
    state.approve("p1/k3")
    resumed = await executor.resume(state)
    assert resumed.results[0].output == "delegated"
    assert ran == [1]
    assert seen == [{"n": 1, "items": [1, 2]}] * 3


def overwritten_access(args: Any) -> ts.Access:
    """An ``Access`` whose frozen field is set anew, after it was made and checked, to what is not keys."""
    access = ts.Access(writes=("shared",))
    if args["n"] == 1:
        object.__setattr__(access, "writes", ["shared", 5])
    return access


@pytest.mark.parametrize("entry", ["run", "async iterable"])
async def test_an_access_holding_what_is_not_keys_makes_its_call_conflict_with_every_call(entry: str) -> None:
    """Before, the engine's conflict planner raised a bare TypeError (``'int' object is not an instance of
    'str'``) out of the run, and no call of the turn was answered."""
    events: list[tuple[str, int]] = []

    @ts.tool(name="write", concurrency_safe=True, resources=overwritten_access)
    async def write(n: int) -> int:
        events.append(("start", n))
        await anyio.sleep(0.01)
        events.append(("end", n))
        return n

    executor = ts.Executor([write], strategy=ts.ResourceAware())
    turn = [ts.ToolCall(f"c{n}", "write", {"n": n}) for n in range(3)]
    if entry == "run":
        outcome = await executor.run(turn)
    else:

        async def arriving() -> Any:
            for call in turn:
                yield call

        outcome = await executor.run(arriving())
    assert [(result.call_id, result.output) for result in outcome.results] == [("c0", 0), ("c1", 1), ("c2", 2)]
    # c1 conflicts with every call, c0 and c2 with each other: one at a time, in model order.
    assert events == [("start", 0), ("end", 0), ("start", 1), ("end", 1), ("start", 2), ("end", 2)]


@pytest.mark.parametrize("strategy", [ts.Sequential(), ts.Parallel(), ts.Batched(2), ts.ResourceAware()])
@pytest.mark.parametrize("value", [str(2**64), "1000001"])
async def test_a_cap_from_the_environment_past_the_limit_is_refused(
    strategy: ts.Strategy, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The argument is refused past 1,000,000 (``OptionError``); before, the environment variable was not:
    past a machine word the run raised a bare OverflowError ("int too big to convert"), below it the cap was
    taken."""
    monkeypatch.setenv("TOOLSCHED_MAX_CONCURRENCY", value)
    with pytest.raises(ts.OptionError, match=f"TOOLSCHED_MAX_CONCURRENCY must be at most 1,000,000, got '{value}'"):
        await ts.Executor([echo], strategy=strategy).run([ts.ToolCall(f"c{n}", "echo", {"n": n}) for n in range(3)])


STEERED = [ts.Sequential(), ts.Batched(1), ts.ResourceAware()]


async def steered_run(strategy: ts.Strategy, entry: str, steering: Any) -> ts.Outcome:
    calls = [ts.ToolCall(f"c{n}", "echo", {"n": n}) for n in range(3)]
    executor = ts.Executor([echo], strategy=strategy)
    if entry == "run":
        return await executor.run(calls, steering=steering)

    async def arriving() -> Any:
        for call in calls:
            yield call

    return await executor.run(arriving(), steering=steering)


@pytest.mark.parametrize("strategy", STEERED, ids=lambda strategy: strategy.kind)
@pytest.mark.parametrize("entry", ["run", "async iterable"])
@pytest.mark.parametrize("answer", ["stop here", b"stop", {"stop": 1}, 5, True], ids=repr)
async def test_steering_that_answers_no_list_of_messages_is_refused_by_name(
    strategy: ts.Strategy, entry: str, answer: Any
) -> None:
    """Before: text came back as its characters (``['s', 't', 'o', ...]``), bytes as numbers, a mapping as its
    keys; a number or a bool raised a bare TypeError, under ResourceAware inside an ExceptionGroup naming
    the executor's pool."""
    with pytest.raises(ts.OptionError, match=r"steering must return a list of messages \(or None to go on\), got "):
        await steered_run(strategy, entry, lambda: answer)


@pytest.mark.parametrize("strategy", STEERED, ids=lambda strategy: strategy.kind)
@pytest.mark.parametrize("entry", ["run", "async iterable"])
async def test_steering_that_answers_an_empty_iterable_lets_the_turn_go_on(strategy: ts.Strategy, entry: str) -> None:
    """Before, an empty generator was taken as messages (it is true), so every call not started was skipped
    and ``steering_messages`` was empty."""
    outcome = await steered_run(strategy, entry, lambda: (message for message in ()))
    assert [result.output for result in outcome.results] == [0, 1, 2]
    assert outcome.steering_messages == []


@pytest.mark.parametrize("strategy", STEERED, ids=lambda strategy: strategy.kind)
async def test_steering_that_answers_a_tuple_or_a_generator_of_messages_stops_the_turn(strategy: ts.Strategy) -> None:
    for answer in (("use staging",), (message for message in ["use staging"])):
        outcome = await steered_run(strategy, "run", lambda answer=answer: answer)
        assert [result.error_kind for result in outcome.results] == [None, "skipped", "skipped"]
        assert outcome.steering_messages == ["use staging"]


@ts.tool(concurrency_safe=True)
async def reporting(n: int, ctx: ts.ToolContext) -> int:
    """Reports its progress once."""
    ctx.report_progress(0.5, f"half of {n}")
    return n


@pytest.mark.parametrize("option", ["on_event", "on_progress"])
async def test_a_plain_callback_that_hands_back_an_awaitable_has_it_awaited(option: str) -> None:
    """Hooks and steering await what a plain callable hands back; before, event callbacks did not: a lambda
    around an async handler lost every event (its coroutine was never awaited, with a RuntimeWarning)."""
    seen: list[str] = []

    async def handler(event: Any) -> None:
        await anyio.lowlevel.checkpoint()
        seen.append(type(event).__name__)

    executor = ts.Executor([reporting], **{option: lambda event: handler(event)})
    outcome = await executor.run([ts.ToolCall("c1", "reporting", {"n": 1}), ts.ToolCall("c2", "reporting", {"n": 2})])
    assert [result.output for result in outcome.results] == [1, 2]
    if option == "on_progress":
        assert seen == ["ToolProgress", "ToolProgress"]
    else:
        assert seen.count("ToolProgress") == 2
        assert seen.count("ToolFinished") == 2
        assert seen[0] == "BatchStarted" and seen[-1] == "BatchFinished"


async def test_an_awaitable_a_plain_callback_hands_back_that_fails_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def failing(event: Any) -> None:
        raise ValueError("listener broke")

    outcome = await ts.Executor([reporting], on_event=lambda event: failing(event)).run(
        [ts.ToolCall("c1", "reporting", {"n": 1})]
    )
    assert [result.output for result in outcome.results] == [1]
    assert "listener broke" in caplog.text


def deeply_nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@ts.tool
def deep_report() -> Any:
    """Returns lists nested past the recursion limit."""
    return deeply_nested(3000)


def failing_listener(event: Any) -> None:
    raise ValueError("listener broke")


async def failing_async_listener(event: Any) -> None:
    raise ValueError("listener broke")


@pytest.mark.parametrize(
    "listener",
    [failing_listener, failing_async_listener, lambda event: failing_async_listener(event)],
    ids=["plain", "async", "plain handing back an awaitable"],
)
async def test_a_failing_listener_on_an_event_whose_repr_recurses_is_logged_not_raised(
    listener: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Promise (``Executor(on_event=...)``): a failing event callback is logged, never the run's failure. The log
    line showed the event's ``repr``: for a result nested past the recursion limit that raised RecursionError,
    which ``logging`` re-raises, and the run failed with it, its result lost."""
    outcome = await ts.Executor([deep_report], on_event=listener).run([ts.ToolCall("c1", "deep_report", {})])
    assert [(result.call_id, result.is_error) for result in outcome.results] == [("c1", False)]
    assert "listener broke" in caplog.text
    assert "ToolFinished" in caplog.text and "c1" in caplog.text


def plain_checks_tool(ran: list[int], refused: int) -> ts.Tool:
    class PlainChecks(ts.Tool):
        name = "plain_checks"
        description = "Checks its input and its permission with plain methods."
        input_schema = {"type": "object", "properties": {"n": {"type": "integer"}}}

        def validate_input(self, args: Any, ctx: Any) -> None:  # type: ignore[override]
            if args["n"] == refused:
                raise ts.SemanticError(f"{refused} is out of scope")

        def check_permissions(self, args: Any, ctx: Any) -> ts.Decision:  # type: ignore[override]
            return ts.Decision.deny("not this one") if args["n"] == refused + 1 else ts.Decision.allow()

        def call(self, args: Any, ctx: Any) -> int:
            ran.append(args["n"])
            return int(args["n"])

    return PlainChecks()


async def test_plain_validate_input_and_check_permissions_are_taken() -> None:
    """``reconcile``, hooks and the approver may be plain functions; before, a plain ``validate_input`` refused
    every call ("TypeError: object NoneType can't be used in 'await' expression") and a plain
    ``check_permissions`` denied every call the same way."""
    ran: list[int] = []
    calls = [ts.ToolCall(f"c{n}", "plain_checks", {"n": n}) for n in range(3)]
    outcome = await ts.Executor([plain_checks_tool(ran, refused=1)]).run(calls)
    assert [(result.error_kind, result.error) for result in outcome.results] == [
        (None, None),
        ("semantic_error", "1 is out of scope"),
        ("permission_denied", "not this one"),
    ]
    assert ran == [0]


@pytest.mark.parametrize("cap", [1, 2])
async def test_a_call_nested_inside_a_call_of_its_own_tool_runs_on_that_calls_slot(cap: int) -> None:
    """An agent tool with ``max_concurrency`` whose child turn calls it again (a sub-agent that delegates to
    itself). Before, the nested call asked anyio's limiter for a second token on the task that held the first,
    and failed with "RuntimeError: this borrower is already holding one of this CapacityLimiter's tokens"
    (even with a slot free); taking another slot would wait forever on the one its ancestor holds. It runs on
    its ancestor's slot: the ancestor only waits for it."""
    box: dict[str, ts.Executor] = {}

    @ts.agent_tool(lambda: box["child"], max_concurrency=cap)
    async def delegate(depth: int, child: ts.ChildRun) -> str:
        """Delegates to itself until the depth runs out."""
        if depth == 0:
            return "leaf"
        outcome = await child.run([ts.ToolCall(f"d{depth}", "delegate", {"depth": depth - 1})])
        result = outcome.results[0]
        return f"{depth}/{result.output if not result.is_error else result.error}"

    box["child"] = ts.Executor([delegate])
    with anyio.fail_after(10):
        outcome = await ts.Executor([delegate]).run([ts.ToolCall("c1", "delegate", {"depth": 2})])
    assert [(result.error_kind, result.output) for result in outcome.results] == [(None, "2/1/leaf")]


async def test_the_cap_still_holds_for_calls_of_a_tool_not_nested_in_one_another() -> None:
    in_flight: list[int] = [0, 0]

    @ts.tool(concurrency_safe=True, max_concurrency=2)
    async def capped(n: int) -> int:
        in_flight[0] += 1
        in_flight[1] = max(in_flight[1], in_flight[0])
        await anyio.sleep(0.01)
        in_flight[0] -= 1
        return n

    executor = ts.Executor([capped])
    async with anyio.create_task_group() as group:
        for _ in range(4):
            calls = [ts.ToolCall(f"c{n}", "capped", {"n": n}) for n in range(5)]
            group.start_soon(executor.run, calls)
    assert in_flight[1] == 2


@ts.tool(isolation="process", concurrency_safe=True)
def raises_what_cannot_travel(n: int) -> int:
    """Raises an exception of a class defined inside the function: pickle cannot send it back."""

    class LocalFailure(Exception):
        pass

    if n:
        raise LocalFailure(f"call {n} failed")
    return n


async def test_a_process_isolated_tool_raising_what_cannot_be_pickled_fails_only_its_call() -> None:
    """Before, the call's error was pickle's ("AttributeError: Can't pickle local object ...", or with the tool
    in a script "WorkerLostError: the worker process ... exited"), never what the tool raised."""
    calls = [ts.ToolCall(f"c{n}", "raises_what_cannot_travel", {"n": n}) for n in range(2)]
    outcome = await ts.Executor([raises_what_cannot_travel]).run(calls)
    assert [result.error_kind for result in outcome.results] == [None, "execution_error"]
    error = outcome.results[1].error or ""
    assert "LocalFailure: call 1 failed" in error
    assert "cannot be sent back from its worker process" in error


@pytest.mark.parametrize("entry", ["run", "stream", "turn", "resume", "child run"])
async def test_steering_that_is_not_callable_is_refused_before_anything_runs(entry: str) -> None:
    """Before, ``steering=["stop"]`` (the messages instead of the callback) was taken: a turn of one batch ran
    without ever asking it, a longer one raised a bare TypeError ("'list' object is not callable") between
    batches, after the first batch had run."""
    ran: list[int] = []
    calls = [ts.ToolCall(f"c{n}", "checked", {"n": n}) for n in range(2)]
    executor = ts.Executor([checked_tool(ran)], strategy=ts.Sequential())
    match = r"steering must be a callable returning messages or None, got \['stop'\]"
    with pytest.raises(ts.OptionError, match=match):
        if entry == "run":
            await executor.run(calls, steering=["stop"])
        elif entry == "stream":
            async for _ in executor.stream(calls, steering=["stop"]):
                pass
        elif entry == "turn":
            async with executor.turn(steering=["stop"]) as turn:
                for call in calls:
                    await turn.submit(call)
        elif entry == "resume":
            held = ts.Executor([checked_tool(ran, needs_approval=lambda self, args: True)])
            outcome = await held.run(calls)
            assert outcome.state is not None
            await held.resume(outcome.state, steering=["stop"])
        else:

            @ts.agent_tool(executor)
            async def delegate(child: ts.ChildRun) -> str:
                """Runs a child turn."""
                await child.run(calls, steering=["stop"])  # type: ignore[arg-type]
                return "ran"

            outcome = await ts.Executor([delegate]).run([ts.ToolCall("p1", "delegate", {})])
            raise ts.OptionError(outcome.results[0].error or "")
    assert ran == []


class EqualToAll(str):
    """Text whose equality says yes to anything."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


@pytest.mark.parametrize("stage", ["pre_tool_use", "pre_batch"])
async def test_a_hook_matcher_of_a_text_subclass_matches_only_what_its_text_names(stage: str) -> None:
    """Before, a matcher compared equal to ``"*"`` by its own ``__eq__`` matched every tool: a hook meant for
    one tool blocked the others."""

    @ts.tool(name="alpha")
    async def alpha() -> str:
        return "alpha"

    hooks = getattr(ts.Hooks(), stage)(EqualToAll("alpha"), lambda event: ts.Decision.deny("not alpha"))
    outcome = await ts.Executor([echo, alpha], hooks=hooks, strategy=ts.Sequential()).run(
        [ts.ToolCall("c1", "echo", {"n": 1}), ts.ToolCall("c2", "alpha", {})]
    )
    assert [(result.output, result.error_kind) for result in outcome.results] == [(1, None), (None, "hook_blocked")]


async def test_a_permission_mode_of_a_text_subclass_is_the_mode_its_text_names() -> None:
    """Before, a mode equal to every text by its own ``__eq__`` passed the check and then was every mode at once:
    ``ask`` ran every call without asking (fail-open), ``plan`` let writes run."""
    ran: list[int] = []
    permissions = ts.Permissions(mode=EqualToAll("ask"))  # type: ignore[arg-type]
    assert type(permissions.mode) is str and permissions.mode == "ask"
    outcome = await ts.Executor([checked_tool(ran)], permissions=permissions).run(calls())
    assert outcome.interrupted
    assert [request.call_id for request in outcome.pending] == ["c1", "c2"]
    assert ran == []
    planned = ts.Permissions(mode=EqualToAll("plan"))  # type: ignore[arg-type]
    outcome = await ts.Executor([checked_tool(ran)], permissions=planned).run(calls())
    assert [result.error_kind for result in outcome.results] == ["permission_denied", "permission_denied"]
    assert ran == []


async def test_options_of_a_text_subclass_are_the_choice_their_text_names() -> None:
    """Before, ``on_error`` and ``unknown_tool`` equal to every text by their own ``__eq__`` passed the check and
    then compared equal to ``"raise"`` (a failed call and an unknown tool raised), and a tool's
    ``isolation`` of ``"none"`` compared equal to ``"process"`` (refused: its function is not at module level)."""

    @ts.tool(name="fails", isolation=EqualToAll("none"))  # type: ignore[arg-type]
    def fails() -> str:
        raise ValueError("it failed")

    executor = ts.Executor(
        [fails],
        on_error=EqualToAll("result"),  # type: ignore[arg-type]
        unknown_tool=EqualToAll("result"),  # type: ignore[arg-type]
    )
    outcome = await executor.run([ts.ToolCall("c1", "fails", {}), ts.ToolCall("c2", "missing", {})])
    assert [result.error_kind for result in outcome.results] == ["execution_error", "unknown_tool"]
    assert type(fails.isolation) is str and fails.isolation == "none"


async def test_no_calls_are_refused_by_name_with_limits_or_a_journal(anyio_backend: str, tmp_path: Path) -> None:
    """Promise: bad input is a typed, readable error. ``run(None)`` under ``Limits`` (and with a journal) raised a
    bare ``AssertionError`` (and ran on under ``python -O``)."""

    @ts.tool
    async def echo(x: int) -> int:
        return x

    with pytest.raises(ts.MalformedCallError, match="calls must be a list"):
        await ts.Executor([echo]).run(None, limits=ts.Limits(max_calls=5))  # type: ignore[arg-type]
    async with ts.SqliteJournal(str(tmp_path / "runs.db")) as journal:
        with pytest.raises(ts.MalformedCallError, match="calls must be a list"):
            await ts.Executor([echo], journal=journal).run(None)  # type: ignore[arg-type]
