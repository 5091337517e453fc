"""Nested runs: agent tools whose body runs a child executor."""

from __future__ import annotations

import datetime
from collections import Counter
from typing import Annotated, Any

import anyio
import pydantic
import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio


class Child:
    """A child executor with a read tool, a tool that needs approval, and counts of what ran."""

    def __init__(self, **options: Any) -> None:
        self.ran: Counter[str] = Counter()
        ran = self.ran

        @ts.tool(concurrency_safe=True)
        async def fetch(url: str) -> str:
            ran[f"fetch {url}"] += 1
            return f"page {url}"

        @ts.tool(needs_approval=True)
        async def delete(path: str) -> str:
            ran[f"delete {path}"] += 1
            return f"deleted {path}"

        self.executor = ts.Executor([fetch, delete], **options)


def parent_tools(child: Child, body_runs: Counter[str]) -> list[ts.Tool]:
    @ts.agent_tool(child.executor, description="Tidies a site with its own tools.")
    async def tidy(site: str, child: ts.ChildRun) -> str:
        body_runs["tidy"] += 1
        plan = await child.step(lambda: body_runs.update(["plan"]) or ["a.html", "b.html"])
        fetched = await child.run([ts.ToolCall(f"f{i}", "fetch", {"url": f"{site}/{p}"}) for i, p in enumerate(plan)])
        pages = [r.output for r in fetched.results]
        removed = await child.run([ts.ToolCall("d1", "delete", {"path": f"{site}/old"})])
        return f"{len(pages)} pages; {removed.results[0].output or removed.results[0].error}"

    @ts.tool(concurrency_safe=True)
    async def note(text: str) -> str:
        body_runs["note"] += 1
        return text

    return [tidy, note]


async def test_a_child_run_answers_the_parent_call_and_its_events_name_the_parent() -> None:
    child = Child(approver=lambda request: True)
    events: list[ts.Event] = []
    body_runs: Counter[str] = Counter()
    executor = ts.Executor(parent_tools(child, body_runs), on_event=events.append)
    outcome = await executor.run([ts.ToolCall("p1", "tidy", {"site": "s"}), ts.ToolCall("p2", "note", {"text": "x"})])
    assert outcome.results[0].output == "2 pages; deleted s/old"
    assert outcome.results[1].output == "x"
    child_started = [e for e in events if isinstance(e, ts.ToolStarted) and e.parent_call_id == "p1"]
    assert [e.call_id for e in child_started] == ["f0", "f1", "d1"]
    child_finished = [e for e in events if isinstance(e, ts.ToolFinished) and e.parent_call_id == "p1"]
    assert sorted(e.result.call_id for e in child_finished) == ["d1", "f0", "f1"]
    own = [e for e in events if isinstance(e, ts.ToolFinished) and e.parent_call_id is None]
    assert sorted(e.result.call_id for e in own) == ["p1", "p2"]
    # The child's events come before the parent call's own result.
    finished_order = [e.result.call_id for e in events if isinstance(e, ts.ToolFinished)]
    assert finished_order.index("d1") < finished_order.index("p1")


async def test_the_child_executors_own_listeners_see_the_parent_too() -> None:
    seen: list[ts.Event] = []
    child = Child(approver=lambda request: True, on_event=seen.append)
    executor = ts.Executor(parent_tools(child, Counter()))
    await executor.run([ts.ToolCall("p1", "tidy", {"site": "s"})])
    tool_events = [e for e in seen if isinstance(e, ts.ToolStarted | ts.ToolFinished)]
    assert tool_events and all(e.parent_call_id == "p1" for e in tool_events)


async def test_stream_carries_child_events() -> None:
    child = Child(approver=lambda request: True)
    executor = ts.Executor(parent_tools(child, Counter()))
    events = [event async for event in executor.stream([ts.ToolCall("p1", "tidy", {"site": "s"})])]
    assert isinstance(events[-1], ts.RunFinished)
    assert {e.call_id for e in events if isinstance(e, ts.ToolStarted) and e.parent_call_id == "p1"} == {
        "f0",
        "f1",
        "d1",
    }


async def test_a_childs_pending_approval_surfaces_and_resuming_the_parent_resumes_the_child() -> None:
    child = Child()
    body_runs: Counter[str] = Counter()
    executor = ts.Executor(parent_tools(child, body_runs))
    outcome = await executor.run([ts.ToolCall("p1", "tidy", {"site": "s"}), ts.ToolCall("p2", "note", {"text": "x"})])
    assert outcome.interrupted
    assert [r.call_id for r in outcome.results] == ["p2"]
    assert outcome.pending == [
        ts.ApprovalRequest("p1/d1", "delete", {"path": "s/old"}, "`delete` needs approval before it runs", "p1")
    ]
    assert child.ran == {"fetch s/a.html": 1, "fetch s/b.html": 1}
    state = outcome.state
    assert state is not None
    assert state.decisions == {"p1": "nested", "p1/f0": "done", "p1/f1": "done", "p1/d1": "pending", "p2": "done"}
    state.approve("p1/d1")
    # The state crosses a process boundary as JSON.
    restored = ts.RunState.from_json(state.to_json())
    assert restored.decisions["p1/d1"] == "approved"
    final = await executor.resume(restored)
    assert not final.interrupted
    assert [r.output for r in final.results] == ["2 pages; deleted s/old", "x"]
    # Nothing ran twice: the fetches were replayed, the delete ran once, the plan step was replayed.
    assert child.ran == {"fetch s/a.html": 1, "fetch s/b.html": 1, "delete s/old": 1}
    assert body_runs == {"tidy": 2, "plan": 1, "note": 1}


async def test_a_rejected_child_call_is_answered_inside_the_child() -> None:
    child = Child()
    executor = ts.Executor(parent_tools(child, Counter()))
    outcome = await executor.run([ts.ToolCall("p1", "tidy", {"site": "s"})])
    state = outcome.state
    assert state is not None
    state.reject("p1/d1", "keep old pages")
    final = await executor.resume(state)
    assert final.results[0].output.startswith("2 pages; the call to `delete` was not approved: keep old pages")
    assert child.ran == {"fetch s/a.html": 1, "fetch s/b.html": 1}


async def test_rejecting_the_parent_call_abandons_its_child_run() -> None:
    child = Child()
    body_runs: Counter[str] = Counter()
    executor = ts.Executor(parent_tools(child, body_runs))
    outcome = await executor.run([ts.ToolCall("p1", "tidy", {"site": "s"})])
    state = outcome.state
    assert state is not None
    with pytest.raises(ts.ApprovalError, match="p1/d1"):
        state.approve("p1")
    state.reject("p1", "not now")
    assert state.pending == []
    final = await executor.resume(state)
    assert final.results[0].error_kind == "permission_denied"
    assert "not now" in (final.results[0].error or "")
    assert body_runs["tidy"] == 1
    assert "delete s/old" not in child.ran


async def test_a_body_that_strays_on_resume_fails_without_running_anything_again() -> None:
    child = Child()
    urls = iter(["a", "b"])

    @ts.agent_tool(child.executor)
    async def fickle(child: ts.ChildRun) -> str:
        await child.run([ts.ToolCall("f1", "fetch", {"url": next(urls)})])
        await child.run([ts.ToolCall("d1", "delete", {"path": "x"})])
        return "done"

    executor = ts.Executor([fickle])
    outcome = await executor.run([ts.ToolCall("p1", "fickle", {})])
    state = outcome.state
    assert state is not None
    state.approve("p1/d1")
    final = await executor.resume(state)
    result = final.results[0]
    assert result.error_kind == "execution_error"
    assert "StateError" in (result.error or "") and "cannot be resumed" in (result.error or "")
    assert child.ran == {"fetch a": 1}


async def test_a_body_that_swallows_the_hold_still_waits() -> None:
    child = Child()

    @ts.agent_tool(child.executor)
    async def stubborn(child: ts.ChildRun) -> str:
        try:
            await child.run([ts.ToolCall("d1", "delete", {"path": "x"})])
        except Exception:
            return "pretended to finish"
        return "finished"

    outcome = await ts.Executor([stubborn]).run([ts.ToolCall("p1", "stubborn", {})])
    assert outcome.interrupted
    assert [request.call_id for request in outcome.pending] == ["p1/d1"]
    assert outcome.results == []


async def test_grandchild_approvals_and_events_carry_the_whole_path() -> None:
    inner = Child()
    events: list[ts.Event] = []

    @ts.agent_tool(inner.executor)
    async def cleaner(path: str, child: ts.ChildRun) -> Any:
        outcome = await child.run([ts.ToolCall("d1", "delete", {"path": path})])
        return outcome.results[0].output

    middle = ts.Executor([cleaner])

    @ts.agent_tool(middle)
    async def manager(child: ts.ChildRun) -> Any:
        outcome = await child.run([ts.ToolCall("a1", "cleaner", {"path": "tmp"})])
        return f"manager: {outcome.results[0].output}"

    executor = ts.Executor([manager], on_event=events.append)
    outcome = await executor.run([ts.ToolCall("p1", "manager", {})])
    assert [(r.call_id, r.parent_call_id) for r in outcome.pending] == [("p1/a1/d1", "p1/a1")]
    assert any(isinstance(e, ts.ToolStarted) and e.call_id == "a1" and e.parent_call_id == "p1" for e in events)
    state = ts.RunState.from_json(outcome.state.to_json() if outcome.state else "")
    state.approve("p1/a1/d1")
    final = await executor.resume(state)
    assert final.results[0].output == "manager: deleted tmp"
    assert inner.ran == {"delete tmp": 1}
    assert any(
        isinstance(e, ts.ToolFinished) and e.result.call_id == "d1" and e.parent_call_id == "p1/a1" for e in events
    )


async def test_cancelling_the_parent_run_cancels_the_child() -> None:
    started = anyio.Event()
    seen: list[str] = []

    @ts.tool
    async def crawl() -> str:
        started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            seen.append("child cancelled")
            raise
        return "never"

    @ts.agent_tool(ts.Executor([crawl]))
    async def research(child: ts.ChildRun) -> str:
        await child.run([ts.ToolCall("c1", "crawl", {})])
        seen.append("body went on")
        return "done"

    executor = ts.Executor([research])
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(executor.run, [ts.ToolCall("p1", "research", {})])
            await started.wait()
            scope.cancel()
    assert seen == ["child cancelled"]


async def test_the_parent_calls_timeout_ends_a_child_run_that_never_ends() -> None:
    seen: list[str] = []

    @ts.tool
    async def endless() -> str:
        try:
            await anyio.sleep_forever()
        finally:
            seen.append("child stopped")
        return "never"

    @ts.agent_tool(ts.Executor([endless]), timeout=0.05)
    async def research(child: ts.ChildRun) -> str:
        await child.run([ts.ToolCall("c1", "endless", {})])
        return "done"

    @ts.tool
    async def other() -> str:
        return "other"

    outcome = await ts.Executor([research, other]).run([ts.ToolCall("p1", "research", {}), ts.ToolCall("p2", "other")])
    assert outcome.results[0].error_kind == "timeout"
    assert outcome.results[1].output == "other"
    assert seen == ["child stopped"]


async def test_an_executor_factory_gives_each_call_its_own_child() -> None:
    made: list[ts.Executor] = []

    @ts.tool
    async def echo(text: str) -> str:
        return text

    def fresh() -> ts.Executor:
        made.append(ts.Executor([echo]))
        return made[-1]

    @ts.agent_tool(fresh)
    async def relay(text: str, child: ts.ChildRun) -> Any:
        assert child.executor is made[-1] and child.parent_call_id == child.ctx.call_id
        return (await child.run([ts.ToolCall("e", "echo", {"text": text})])).results[0].output

    outcome = await ts.Executor([relay]).run(
        [ts.ToolCall("p1", "relay", {"text": "a"}), ts.ToolCall("p2", "relay", {"text": "b"})]
    )
    assert [r.output for r in outcome.results] == ["a", "b"]
    assert len(made) == 2


async def test_arguments_an_agent_tools_parameters_refuse_are_invalid_input_and_start_no_child() -> None:
    """As for any ``@tool`` function, naming the argument (it was the tool failing, pydantic's raw text); an
    argument under an alias reaches the body as the parameter it names."""
    made: list[ts.Executor] = []
    ran: list[str] = []

    def fresh() -> ts.Executor:
        made.append(ts.Executor([]))
        return made[-1]

    @ts.agent_tool(fresh)
    async def plan(day: datetime.date, source: Annotated[str, pydantic.Field(alias="from")], child: ts.ChildRun) -> str:
        ran.append(day.isoformat())
        return f"{source} {day.isoformat()}"

    outcome = await ts.Executor([plan]).run(
        [
            ts.ToolCall("refused", "plan", {"day": "2024-13-45", "from": "desk"}),
            ts.ToolCall("fine", "plan", {"day": "2024-12-25", "from": "desk"}),
        ]
    )
    refused, fine = outcome.results
    assert (refused.error_kind, refused.error) == (
        "invalid_input",
        "arguments for `plan` refused by its parameters: `day`: "
        "Input should be a valid date or datetime, month value is outside expected range of 1-12",
    )
    assert (fine.error, fine.output) == (None, "desk 2024-12-25")
    assert (ran, len(made)) == (["2024-12-25"], 1)


def test_agent_tool_definitions_are_checked() -> None:
    executor = ts.Executor([])
    with pytest.raises(ts.ToolDefinitionError, match="async function"):

        @ts.agent_tool(executor)  # type: ignore[arg-type]
        def sync_body(child: ts.ChildRun) -> None: ...

    with pytest.raises(ts.ToolDefinitionError, match="`child` parameter"):

        @ts.agent_tool(executor)
        async def no_child(text: str) -> None: ...

    with pytest.raises(ts.ToolDefinitionError, match="child Executor"):

        @ts.agent_tool("executor")  # type: ignore[arg-type]
        async def bad_executor(child: ts.ChildRun) -> None: ...

    @ts.agent_tool(executor, name="helper", timeout=5)
    async def fine(question: str, child: ts.ChildRun) -> None: ...

    schema = ts.ToolRegistry([fine]).to_anthropic()[0]
    assert schema["name"] == "helper"
    assert list(schema["input_schema"]["properties"]) == ["question"]


async def test_parent_and_child_approvals_wait_together_and_decisions_are_not_asked_twice() -> None:
    child = Child()
    asked: list[str] = []

    @ts.agent_tool(child.executor, needs_approval=True)
    async def purge(paths: list[str], child: ts.ChildRun) -> list[Any]:
        outcome = await child.run([ts.ToolCall(f"d{i}", "delete", {"path": p}) for i, p in enumerate(paths)])
        return [r.output or r.error_kind for r in outcome.results]

    def log_asks(event: ts.HookEvent) -> None:
        asked.append(event.call_id)

    executor = ts.Executor([purge], hooks=ts.Hooks().pre_tool_use("purge", log_asks))
    first = await executor.run([ts.ToolCall("p1", "purge", {"paths": ["a", "b", "c"]})])
    assert [r.call_id for r in first.pending] == ["p1"]
    state = first.state
    assert state is not None
    state.approve("p1")
    second = await executor.resume(state)
    # The agent tool ran; now its child waits for three deletions.
    assert [r.call_id for r in second.pending] == ["p1/d0", "p1/d1", "p1/d2"]
    assert all(r.parent_call_id == "p1" for r in second.pending)
    state = second.state
    assert state is not None
    with pytest.raises(ts.ApprovalError, match="p1/d0"):
        state.approve("p1/d9")
    state.reject("p1/d1")
    state.approve("p1/d0", always=True)  # approves every waiting `delete` of the child run
    assert state.decisions == {"p1": "nested", "p1/d0": "approved", "p1/d1": "rejected", "p1/d2": "approved"}
    third = await executor.resume(ts.RunState.from_json(state.to_json(key="k"), key="k"))
    assert third.results[0].output == ["deleted a", "permission_denied", "deleted c"]
    assert child.ran == {"delete a": 1, "delete c": 1}
    # The hooks see the call at each admission, but the approval given once holds: it is not asked again.
    assert asked == ["p1", "p1", "p1"]
    assert not third.interrupted and third.pending == []


async def test_a_state_is_an_independent_copy_down_to_its_child_runs() -> None:
    child = Child()
    executor = ts.Executor(parent_tools(child, Counter()))
    outcome = await executor.run([ts.ToolCall("p1", "tidy", {"site": "s"})])
    one, two = outcome.state, outcome.state
    assert one is not None and two is not None
    one.approve("p1/d1")
    assert two.decisions["p1/d1"] == "pending"
    final = await executor.resume(two)
    assert final.interrupted and [r.call_id for r in final.pending] == ["p1/d1"]
    assert "delete s/old" not in child.ran
