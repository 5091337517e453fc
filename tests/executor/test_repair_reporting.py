"""What a repaired call reports, and the executor's own repair callable (``repair_arguments=callable``).

``ToolResult.repaired`` and the ``ToolArgumentsRepaired`` event, on run, stream and streamed turns; the
repair callable's answers (a dict, text, None, a failure, no answer, invalid arguments, anything else),
always judged by the rules, hooks, approvals and guardrails as the arguments that run; and the retry
budget of a run given no ``Limits``, across its resume.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import toolsched as ts
from toolsched.errors import OptionError

pytestmark = pytest.mark.anyio


def reader(ran: list[dict[str, Any]], **options: Any) -> ts.Tool:
    @ts.tool(rule_subject="path", **options)
    def read(path: str, lines: int = 10) -> str:
        """Reads a file."""
        ran.append({"path": path, "lines": lines})
        return f"{path}:{lines}"

    return read


FENCED = "```json\n{'path': 'notes.txt', lines: '3',}\n```"
# Text the built-in repair leaves alone (nothing unambiguous explains it): only a repair callable can help.
HOPELESS = "read notes.txt, three lines please"


class Seen:
    """Collects a run's events."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def __call__(self, event: Any) -> None:
        self.events.append(event)

    def repaired(self) -> list[tuple[str, str, tuple[str, ...]]]:
        return [(e.call_id, e.tool_name, e.fixes) for e in self.events if isinstance(e, ts.ToolArgumentsRepaired)]

    def order(self, call_id: str) -> list[str]:
        names = []
        for event in self.events:
            if isinstance(event, ts.ToolFinished):
                if event.result.call_id == call_id:
                    names.append("finished")
            elif getattr(event, "call_id", None) == call_id:
                names.append(type(event).__name__)
        return names


# -- ToolResult.repaired and ToolArgumentsRepaired ---------------------------------------------------


async def test_a_repaired_call_says_so_and_names_its_fixes_before_it_starts() -> None:
    ran: list[dict[str, Any]] = []
    seen = Seen()
    executor = ts.Executor([reader(ran)], repair_arguments=True, on_event=seen)
    outcome = await executor.run([ts.ToolCall("1", "read", '{"path": "a"}'), ts.ToolCall("2", "read", FENCED)])
    assert [(r.output, r.repaired) for r in outcome.results] == [("a:10", False), ("notes.txt:3", True)]
    assert seen.repaired() == [
        ("2", "read", ("code_fence", "single_quotes", "unquoted_key", "trailing_comma", "number_as_string"))
    ]
    assert seen.order("2") == ["ToolArgumentsRepaired", "ToolStarted", "finished"]
    assert seen.order("1") == ["ToolStarted", "finished"]


async def test_a_call_refused_after_its_repair_still_says_it_was_repaired() -> None:
    ran: list[dict[str, Any]] = []
    rules = ts.Permissions(root="/repo", deny=["read(secret/**)"])
    executor = ts.Executor([reader(ran)], repair_arguments=True, permissions=rules)
    outcome = await executor.run([ts.ToolCall("1", "read", "{'path': 'secret/key',}")])
    result = outcome.results[0]
    assert (result.error_kind, result.repaired) == ("permission_denied", True)
    assert ran == []


async def test_without_repair_nothing_is_reported_repaired() -> None:
    ran: list[dict[str, Any]] = []
    seen = Seen()
    executor = ts.Executor([reader(ran)], on_event=seen)
    outcome = await executor.run([ts.ToolCall("1", "read", FENCED), ts.ToolCall("2", "read", {"path": "a"})])
    assert [(r.error_kind, r.repaired) for r in outcome.results] == [("invalid_input", False), (None, False)]
    assert seen.repaired() == []


async def test_stream_reports_repaired_calls() -> None:
    ran: list[dict[str, Any]] = []
    executor = ts.Executor([reader(ran)], repair_arguments=True)
    events = [event async for event in executor.stream([ts.ToolCall("1", "read", FENCED)])]
    kinds = [type(event).__name__ for event in events]
    assert kinds.index("ToolArgumentsRepaired") < kinds.index("ToolStarted")
    final = events[-1]
    assert isinstance(final, ts.RunFinished) and final.outcome.results[0].repaired


async def test_a_streamed_turn_reports_repaired_calls() -> None:
    ran: list[dict[str, Any]] = []
    seen = Seen()

    async def fix(call: ts.ToolCall, error: ts.ToolResult) -> dict[str, Any]:
        return {"path": "fixed"}

    executor = ts.Executor([reader(ran)], repair_arguments=fix, on_event=seen)
    async with executor.turn() as turn:
        turn.submit(ts.ToolCall("1", "read", FENCED))
        turn.submit(ts.ToolCall("2", "read", HOPELESS))
        turn.submit(ts.ToolCall("3", "read", '{"path": "plain"}'))
        turn.close()
        results = [result async for result in turn.results()]
    assert [(r.output, r.repaired) for r in results] == [("notes.txt:3", True), ("fixed:10", True), ("plain:10", False)]
    assert [(call_id, fixes[0]) for call_id, _, fixes in seen.repaired()] == [
        ("1", "code_fence"),
        ("2", "repair_function"),
    ]


# -- the repair callable ------------------------------------------------------------------------------


async def test_the_repair_callable_gets_the_call_and_its_answer_and_its_dict_runs() -> None:
    ran: list[dict[str, Any]] = []
    asked: list[tuple[str, Any, str | None, str | None]] = []
    seen = Seen()

    async def fix(call: ts.ToolCall, error: ts.ToolResult) -> dict[str, Any]:
        asked.append((call.id, call.args, error.error_kind, error.error))
        return {"path": "notes.txt", "lines": 3}

    executor = ts.Executor([reader(ran)], repair_arguments=fix, on_event=seen)
    outcome = await executor.run(
        [ts.ToolCall("1", "read", HOPELESS), ts.ToolCall("2", "read", FENCED), ts.ToolCall("3", "nope", HOPELESS)]
    )
    first, second, third = outcome.results
    assert (first.output, first.repaired) == ("notes.txt:3", True)
    assert (second.output, second.repaired) == ("notes.txt:3", True)
    assert third.error_kind == "unknown_tool"
    # Asked only about the call the built-in repair could not fix, with the answer it would get.
    assert len(asked) == 1 and asked[0][:3] == ("1", HOPELESS, "invalid_input")
    assert asked[0][3] is not None and "not valid JSON" in asked[0][3]
    assert ("1", "read", ("repair_function",)) in seen.repaired()
    assert ran == [{"path": "notes.txt", "lines": 3}, {"path": "notes.txt", "lines": 3}]


async def test_text_from_the_repair_callable_is_read_as_the_models_would_be() -> None:
    ran: list[dict[str, Any]] = []
    seen = Seen()

    def fix(call: ts.ToolCall, error: ts.ToolResult) -> str:  # a plain callable is taken too
        return '```json\n{"path": "b", "lines": "2"}\n```'

    executor = ts.Executor([reader(ran)], repair_arguments=fix, on_event=seen)
    outcome = await executor.run([ts.ToolCall("1", "read", HOPELESS)])
    assert outcome.results[0].output == "b:2"
    assert seen.repaired() == [("1", "read", ("repair_function", "code_fence", "number_as_string"))]


async def test_none_leaves_the_call_answered_as_it_was() -> None:
    ran: list[dict[str, Any]] = []

    async def fix(call: ts.ToolCall, error: ts.ToolResult) -> None:
        return None

    plain = await ts.Executor([reader(ran)], repair_arguments=True).run([ts.ToolCall("1", "read", HOPELESS)])
    fixed = await ts.Executor([reader(ran)], repair_arguments=fix).run([ts.ToolCall("1", "read", HOPELESS)])
    assert fixed.results[0] == plain.results[0]
    assert fixed.results[0].error_kind == "invalid_input" and not fixed.results[0].repaired
    assert ran == []


async def test_invalid_repaired_arguments_are_refused_saying_the_repair_was_invalid() -> None:
    ran: list[dict[str, Any]] = []

    async def fix(call: ts.ToolCall, error: ts.ToolResult) -> dict[str, Any]:
        return {"lines": 3}

    executor = ts.Executor([reader(ran)], repair_arguments=fix)
    result = (await executor.run([ts.ToolCall("1", "read", HOPELESS)])).results[0]
    assert result.error_kind == "invalid_input" and result.error is not None
    assert "not valid JSON" in result.error
    assert "the arguments repair_arguments gave are invalid too" in result.error and "path" in result.error
    assert ran == []


async def test_a_failing_repair_callable_loses_no_call() -> None:
    ran: list[dict[str, Any]] = []

    async def broken(call: ts.ToolCall, error: ts.ToolResult) -> str:
        raise RuntimeError("model unavailable")

    async def odd(call: ts.ToolCall, error: ts.ToolResult) -> Any:
        return 42

    for fix, note in ((broken, "repair_arguments raised RuntimeError: model unavailable"), (odd, "returned a int")):
        executor = ts.Executor([reader(ran)], repair_arguments=fix)
        outcome = await executor.run([ts.ToolCall("1", "read", HOPELESS), ts.ToolCall("2", "read", {"path": "a"})])
        first, second = outcome.results
        assert first.error_kind == "invalid_input" and first.error is not None
        assert "not valid JSON" in first.error and note in first.error
        assert second.output == "a:10"
    assert ran == [{"path": "a", "lines": 10}] * 2


async def test_a_hanging_repair_callable_gets_the_tools_timeout() -> None:
    ran: list[dict[str, Any]] = []

    async def hangs(call: ts.ToolCall, error: ts.ToolResult) -> str:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    executor = ts.Executor([reader(ran, timeout=0.05)], repair_arguments=hangs)
    result = (await executor.run([ts.ToolCall("1", "read", HOPELESS)])).results[0]
    assert result.error_kind == "invalid_input" and result.error is not None
    assert "gave no answer within the 0.05 s timeout of `read`" in result.error
    assert ran == []


@pytest.mark.parametrize("value", ["yes", 1, None, object()])
def test_repair_arguments_takes_a_bool_or_a_callable(value: Any) -> None:
    with pytest.raises(OptionError, match="repair_arguments"):
        ts.Executor([], repair_arguments=value)


# -- attacks: what is judged is what runs ------------------------------------------------------------


async def test_a_deny_rule_wins_over_the_repair_callable() -> None:
    ran: list[dict[str, Any]] = []

    async def sneaky(call: ts.ToolCall, error: ts.ToolResult) -> Any:
        return {"path": "secret/key"} if call.id == "1" else '{"path": "secret/../secret/key"}'

    rules = ts.Permissions(root="/repo", deny=["read(secret/**)"])
    executor = ts.Executor([reader(ran)], repair_arguments=sneaky, permissions=rules)
    outcome = await executor.run([ts.ToolCall("1", "read", HOPELESS), ts.ToolCall("2", "read", HOPELESS)])
    assert [(r.error_kind, r.repaired) for r in outcome.results] == [("permission_denied", True)] * 2
    assert ran == []
    async with executor.turn() as turn:
        turn.submit(ts.ToolCall("3", "read", HOPELESS))
        turn.close()
    assert (await turn.outcome()).results[0].error_kind == "permission_denied"
    assert ran == []


async def test_hooks_approver_and_guardrails_see_the_repaired_arguments() -> None:
    ran: list[dict[str, Any]] = []
    hooked: list[Any] = []
    approved: list[Any] = []
    guarded: list[Any] = []

    async def fix(call: ts.ToolCall, error: ts.ToolResult) -> dict[str, Any]:
        return {"path": "a", "lines": 4}

    def before(event: ts.HookEvent) -> None:
        hooked.append(dict(event.args))

    async def approver(request: ts.ApprovalRequest) -> bool:
        approved.append(dict(request.args))
        return True

    async def guard(event: Any) -> None:
        guarded.append(dict(event.args))

    executor = ts.Executor(
        [reader(ran)],
        repair_arguments=fix,
        hooks=ts.Hooks().pre_tool_use("read", before),
        permissions=ts.Permissions(ask=["read"]),
        approver=approver,
        input_guardrails=[guard],
    )
    result = (await executor.run([ts.ToolCall("1", "read", HOPELESS)])).results[0]
    assert (result.output, result.repaired) == ("a:4", True)
    assert hooked == approved == guarded == [{"path": "a", "lines": 4}]
    assert ran == [{"path": "a", "lines": 4}]


async def test_a_repaired_call_held_for_approval_resumes_with_the_arguments_held() -> None:
    ran: list[dict[str, Any]] = []
    answers = iter([{"path": "first"}, {"path": "second"}])

    async def fix(call: ts.ToolCall, error: ts.ToolResult) -> dict[str, Any]:
        return next(answers)

    executor = ts.Executor([reader(ran, needs_approval=True)], repair_arguments=fix)
    outcome = await executor.run([ts.ToolCall("1", "read", HOPELESS)])
    assert outcome.interrupted and outcome.state is not None
    assert [dict(request.args) for request in outcome.pending] == [{"path": "first"}]
    state = ts.RunState.from_json(outcome.state.to_json())
    state.approve("1")
    resumed = await executor.resume(state)
    assert (resumed.results[0].output, resumed.results[0].repaired) == ("first:10", True)
    assert ran == [{"path": "first", "lines": 10}]


# -- the retry budget of a run given no Limits ----------------------------------------------------------


async def test_a_run_without_limits_keeps_its_retry_budget_across_its_resume() -> None:
    ran: list[str] = []

    @ts.tool(max_model_retries=0, needs_approval=True)  # the first mistake is its last
    def send(to: str) -> str:
        ran.append(to)
        return f"sent to {to}"

    executor = ts.Executor([send])
    calls = [ts.ToolCall("1", "send", "{bad"), ts.ToolCall("2", "send", {"to": "bob"})]
    outcome = await executor.run(calls)
    assert outcome.interrupted and outcome.state is not None
    assert [r.error_kind for r in outcome.results] == ["invalid_input"]
    # A copy resumed by itself: another run, the same budget (``send`` spent it before the interruption).
    copied = ts.RunState.from_json(outcome.state.to_json())
    copied.approve("2")
    resumed = await executor.resume(copied)
    assert [r.error_kind for r in resumed.results] == ["invalid_input", "retries_exhausted"]
    assert ran == []
    # A new run without Limits has a budget of its own.
    fresh = await executor.run([ts.ToolCall("3", "send", "{bad")])
    assert fresh.results[0].error_kind == "invalid_input"
