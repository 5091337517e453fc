"""The OpenAI Agents SDK's Runner.run, end to end with a scripted Model, its function tools run by toolsched."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ToolCallOutputItem
from scripted_models import ScriptedAgentModel, final_message, function_call

import toolsched as ts
from tests.conftest import InFlight
from toolsched.integrations.agents import AgentsFunctionTool, from_function_tool, function_tools, scheduled

pytestmark = pytest.mark.anyio

NO_TRACING = RunConfig(tracing_disabled=True)


@pytest.fixture
def anyio_backend() -> str:
    # The Agents SDK runs on asyncio only.
    return "asyncio"


def outputs(result: Any) -> dict[str, Any]:
    """The SDK's output items of a run, by call ID."""
    found = {}
    for item in result.new_items:
        if isinstance(item, ToolCallOutputItem):
            found[item.raw_item["call_id"]] = item.output
    return found


def sent_outputs(model: ScriptedAgentModel, turn: int) -> dict[str, str]:
    """The function_call_output items the model received on a turn."""
    items = model.inputs[turn]
    assert isinstance(items, list)
    return {item["call_id"]: item["output"] for item in items if item.get("type") == "function_call_output"}


def file_tools(in_flight: InFlight, ran: list[str]) -> tuple[Any, Any]:
    @function_tool
    async def read_file(path: str) -> str:
        """Read a text file."""
        ran.append(f"read {path}")
        await in_flight.hold(path)
        return f"contents of {path}"

    @function_tool
    async def write_file(path: str, text: str) -> str:
        """Write a text file."""
        ran.append(f"write {path}")
        await in_flight.hold(path)
        return f"wrote {len(text)} characters to {path}"

    return read_file, write_file


async def test_runner_run_answers_every_call_through_toolsched(in_flight: InFlight) -> None:
    ran: list[str] = []
    read_file, write_file = file_tools(in_flight, ran)
    model = ScriptedAgentModel(
        [
            [
                function_call("c1", "read_file", {"path": "a.txt"}),
                function_call("c2", "write_file", {"path": "c.txt", "text": "hello"}),
                function_call("c3", "read_file", {"path": "b.txt"}),
            ],
            [final_message("copied")],
        ]
    )
    agent = scheduled(
        Agent(name="files", model=model, tools=[read_file, write_file]),
        tools=[from_function_tool(read_file, read_only=True, concurrency_safe=True), from_function_tool(write_file)],
    )
    result = await Runner.run(agent, "copy a and b into c", run_config=NO_TRACING)

    assert result.final_output == "copied"
    expected = {"c1": "contents of a.txt", "c2": "wrote 5 characters to c.txt", "c3": "contents of b.txt"}
    assert outputs(result) == expected
    assert sent_outputs(model, 1) == expected
    assert sorted(ran) == ["read a.txt", "read b.txt", "write c.txt"]
    # The SDK starts all three at once; the write, given flags and not concurrency-safe, never overlapped a read.
    write_start, write_end = in_flight.position("start", "c.txt"), in_flight.position("end", "c.txt")
    for path in ("a.txt", "b.txt"):
        start, end = in_flight.position("start", path), in_flight.position("end", path)
        assert end < write_start or start > write_end
    assert agent.toolsched_executor.registry.names == ["read_file", "write_file"]  # type: ignore[attr-defined]


async def test_reads_overlap_inside_a_run_and_separate_runs_do_not_wait_for_each_other() -> None:
    reading = 0
    all_reading = anyio.Event()
    written: list[str] = []

    @function_tool
    async def read_file(path: str) -> str:
        """Read a text file (returns once four reads are in flight at the same time)."""
        nonlocal reading
        reading += 1
        if reading == 4:
            all_reading.set()
        await all_reading.wait()
        return f"contents of {path}"

    @function_tool
    def write_file(path: str, text: str) -> str:
        """Write a text file."""
        written.append(path)
        return "ok"

    def script(prefix: str) -> ScriptedAgentModel:
        return ScriptedAgentModel(
            [
                [
                    function_call("c1", "read_file", {"path": f"{prefix}-1"}),
                    function_call("c2", "read_file", {"path": f"{prefix}-2"}),
                ],
                [function_call("c3", "write_file", {"path": f"{prefix}-out", "text": "x"})],
                [final_message("ok")],
            ]
        )

    base = Agent(name="files", tools=[read_file, write_file])
    safe_reads = [from_function_tool(read_file, concurrency_safe=True)]

    async def conversation(prefix: str) -> None:
        agent = scheduled(base.clone(model=script(prefix)), tools=safe_reads)
        result = await Runner.run(agent, "go", run_config=NO_TRACING)
        assert result.final_output == "ok"

    # Two reads per run, two runs: all four must be in flight together for any of them to return.
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(conversation, "alice")
            group.start_soon(conversation, "bob")
    assert sorted(written) == ["alice-out", "bob-out"]


async def test_refusals_and_failures_answer_the_model_instead_of_ending_the_run(in_flight: InFlight) -> None:
    ran: list[str] = []
    read_file, write_file = file_tools(in_flight, ran)

    @ts.tool
    def fail() -> str:
        """Always fails."""
        raise RuntimeError("backend down")

    model = ScriptedAgentModel(
        [
            [
                function_call("c1", "write_file", {"path": "/etc/passwd", "text": "x"}),
                function_call("c2", "read_file", {"path": 7}),
                function_call("c3", "read_file", "{not json"),
                function_call("c4", "fail", {}),
            ],
            [final_message("sorry")],
        ]
    )
    agent = scheduled(
        Agent(name="files", model=model, tools=[read_file, write_file]),
        tools=[from_function_tool(write_file, rule_subject="path"), fail],
        permissions=ts.Permissions(deny=["write_file(/etc/**)"]),
    )
    result = await Runner.run(agent, "break things", run_config=NO_TRACING)
    answers = outputs(result)
    assert result.final_output == "sorry"
    assert "denied by the rule `write_file(/etc/**)`" in answers["c1"]
    # Arguments the SDK tool's own preparation refuses are answered by its failure policy, as in the SDK.
    assert answers["c2"] == answers["c3"] == "An error occurred while running the tool. Please try again."
    assert answers["c4"] == "RuntimeError: backend down"
    assert ran == []


async def test_an_executors_tools_offered_to_an_agent(in_flight: InFlight) -> None:
    @ts.tool(read_only=True, concurrency_safe=True)
    async def weather(city: str) -> dict[str, Any]:
        """Today's weather."""
        return {"city": city, "sky": "clear"}

    executor = ts.Executor([weather])
    model = ScriptedAgentModel([[function_call("c1", "weather", {"city": "Oslo"})], [final_message("clear")]])
    agent = Agent(name="weather", model=model, tools=function_tools(executor))
    result = await Runner.run(agent, "weather in Oslo?", run_config=NO_TRACING)
    assert json.loads(outputs(result)["c1"]) == {"city": "Oslo", "sky": "clear"}


async def test_calls_that_ask_go_to_the_approver(in_flight: InFlight) -> None:
    ran: list[str] = []
    _, write_file = file_tools(in_flight, ran)
    asked: list[ts.ApprovalRequest] = []

    async def approver(request: ts.ApprovalRequest) -> bool:
        asked.append(request)
        return request.args["path"] == "ok.txt"

    def script() -> ScriptedAgentModel:
        return ScriptedAgentModel(
            [
                [
                    function_call("c1", "write_file", {"path": "ok.txt", "text": "x"}),
                    function_call("c2", "write_file", {"path": "no.txt", "text": "y"}),
                ],
                [final_message("done")],
            ]
        )

    gated = [from_function_tool(write_file, needs_approval=True)]
    agent = scheduled(Agent(name="w", model=script(), tools=[write_file]), tools=gated, approver=approver)
    answers = outputs(await Runner.run(agent, "write", run_config=NO_TRACING))
    assert answers["c1"] == "wrote 1 characters to ok.txt"
    assert "was not approved" in answers["c2"]
    assert [request.call_id for request in asked] == ["c1", "c2"]

    unattended = scheduled(Agent(name="w", model=script(), tools=[write_file]), tools=gated)
    answers = outputs(await Runner.run(unattended, "write", run_config=NO_TRACING))
    assert all("needs approval" in answer for answer in answers.values())
    assert ran == ["write ok.txt"]


async def test_an_sdk_tool_imported_into_a_plain_executor(in_flight: InFlight) -> None:
    ran: list[str] = []
    read_file, _ = file_tools(in_flight, ran)
    imported = from_function_tool(read_file, concurrency_safe=True)
    assert isinstance(imported, AgentsFunctionTool)
    assert imported.input_schema["required"] == ["path"]
    outcome = await ts.Executor([imported]).run(
        [
            ts.ToolCall("c1", "read_file", {"path": "x"}),
            ts.ToolCall("c2", "read_file", {"path": "y"}),
        ]
    )
    assert [result.output for result in outcome.results] == ["contents of x", "contents of y"]
    assert in_flight.peak == 2


async def test_the_run_is_visible_to_opentelemetry(in_flight: InFlight) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from toolsched.integrations import otel

    ran: list[str] = []
    read_file, _ = file_tools(in_flight, ran)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    model = ScriptedAgentModel([[function_call("c1", "read_file", {"path": "a"})], [final_message("ok")]])
    agent = scheduled(Agent(name="files", model=model, tools=[read_file]))
    otel.instrument(agent.toolsched_executor, tracer_provider=provider)  # type: ignore[attr-defined]
    await Runner.run(agent, "read", run_config=NO_TRACING)
    (span,) = [span for span in exporter.get_finished_spans() if span.name == "execute_tool read_file"]
    assert dict(span.attributes or {})["gen_ai.tool.call.id"] == "c1"


def test_bad_arguments_are_refused_by_name() -> None:
    with pytest.raises(ts.OptionError, match="takes an Agents SDK Agent"):
        scheduled("agent")  # type: ignore[arg-type]
    with pytest.raises(ts.ToolDefinitionError, match="takes an Agents SDK FunctionTool"):
        from_function_tool(lambda: None)  # type: ignore[arg-type]
    with pytest.raises(ts.OptionError, match=r"tools\[0\] must be a toolsched tool"):
        scheduled(Agent(name="a"), tools=["read_file"])  # type: ignore[list-item]


def test_strict_sets_the_copies_strict_mode_and_schema_as_the_sdk_normalizes_them() -> None:
    @function_tool(strict_mode=False)
    def lookup(query: str, limit: int = 5) -> str:
        """Look something up."""
        return query

    loose_schema = json.loads(json.dumps(lookup.params_json_schema))
    agent = scheduled(Agent(name="a", tools=[lookup]), strict=True)
    (copied,) = agent.tools
    assert copied.strict_json_schema is True
    assert copied.params_json_schema["additionalProperties"] is False
    assert sorted(copied.params_json_schema["required"]) == ["limit", "query"]
    # The original keeps its own mode and schema.
    assert lookup.strict_json_schema is False
    assert lookup.params_json_schema == loose_schema
    # strict=False on a strict tool: the copy is not strict; its schema is the tool's.
    strict_tool = function_tool(lambda query: query, name_override="find")
    (unstrict,) = scheduled(Agent(name="b", tools=[strict_tool]), strict=False).tools
    assert (unstrict.strict_json_schema, strict_tool.strict_json_schema) == (False, True)
    assert unstrict.params_json_schema == strict_tool.params_json_schema


def _files_agent(ran: list[str]) -> tuple[Any, Any]:
    """A scheduled agent whose ``delete(path)`` tool (also returned, unscheduled) is denied ``/etc/**``."""

    @function_tool
    async def delete(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    agent = scheduled(
        Agent(name="files", tools=[delete]),
        tools=[from_function_tool(delete, rule_subject="path")],
        permissions=ts.Permissions(deny=["delete(/etc/**)"]),
    )
    return agent, delete


async def _runs_under_its_rules(with_model: Callable[[Any], Any], ran: list[str]) -> None:
    """The agent ``with_model`` makes runs a denied and an allowed ``delete`` through the scheduled agent's
    executor: only the allowed one runs."""
    model = ScriptedAgentModel(
        [
            [function_call("c1", "delete", {"path": "/etc/passwd"}), function_call("c2", "delete", {"path": "a.txt"})],
            [final_message("done")],
        ]
    )
    result = await Runner.run(with_model(model), "delete them", run_config=NO_TRACING)
    found = outputs(result)
    assert ran == ["a.txt"]
    assert found["c2"] == "deleted a.txt"
    assert "denied" in found["c1"] or "not allowed" in found["c1"], found["c1"]


async def test_a_clone_of_a_scheduled_agent_keeps_its_executor() -> None:
    """Promise: a scheduled agent's executor is its ``toolsched_executor``. The SDK's ``agent.clone(...)`` builds
    a new agent from the fields only: the clone's calls still went through toolsched, but the clone had no
    ``toolsched_executor`` (code that reads it, ``otel.instrument(agent.toolsched_executor)``, failed). The clone,
    and a clone of it, keep the same executor, which runs their calls under its rules."""
    ran: list[str] = []
    agent, _ = _files_agent(ran)
    executor = agent.toolsched_executor  # type: ignore[attr-defined]
    clone = agent.clone(name="renamed")
    assert clone.toolsched_executor is executor  # type: ignore[attr-defined]
    assert clone.clone(instructions="again").toolsched_executor is executor  # type: ignore[attr-defined]
    assert clone.clone(tools=[*clone.tools]).toolsched_executor is executor  # type: ignore[attr-defined]
    assert isinstance(clone, Agent) and type(clone).__name__ == "Agent" and clone.name == "renamed"
    await _runs_under_its_rules(lambda model: clone.clone(model=model), ran)


async def test_a_dataclasses_replace_of_a_scheduled_agent_keeps_its_executor() -> None:
    """Promise: a scheduled agent's executor is its ``toolsched_executor``, on every agent made from it. The
    SDK's agents are dataclasses: ``dataclasses.replace(agent, ...)`` builds ``agent.__class__(**fields)``,
    which had no ``toolsched_executor``. The replaced agent, and a clone of it, keep the executor, and two
    scheduled agents keep their own."""
    ran: list[str] = []
    agent, delete = _files_agent(ran)
    other = scheduled(Agent(name="other", tools=[delete]))
    executor = agent.toolsched_executor  # type: ignore[attr-defined]
    replaced = dataclasses.replace(agent, name="renamed")
    assert replaced.toolsched_executor is executor  # type: ignore[attr-defined]
    assert dataclasses.replace(replaced.clone(instructions="x")).toolsched_executor is executor  # type: ignore[attr-defined]
    assert other.toolsched_executor is not executor  # type: ignore[attr-defined]
    assert dataclasses.replace(other).toolsched_executor is other.toolsched_executor  # type: ignore[attr-defined]
    assert isinstance(replaced, Agent) and type(replaced).__name__ == "Agent" and replaced.name == "renamed"
    await _runs_under_its_rules(lambda model: dataclasses.replace(replaced, model=model), ran)


def test_pickling_a_scheduled_agent_says_it_cannot_be_done_and_its_tools_pickle_as_in_the_sdk() -> None:
    """Promise: bad input gets a typed readable error. A scheduled agent cannot be pickled: its calls run
    through an executor of this process. pickle said "Can't pickle <class 'agents.tool.FunctionTool'>: it's
    not the same object as agents.tool.FunctionTool", which names neither the agent nor the reason; the error
    is ``ts.UnpicklableError`` (a ``TypeError``) naming both. Its tools are the agent's own: pickling one does
    what it does without toolsched. Copies of the agent still work."""

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    def pickling_error(tool: Any) -> tuple[type, str]:
        with pytest.raises(Exception) as raised:
            pickle.dumps(tool)
        return type(raised.value), str(raised.value)

    before = pickling_error(add)
    agent = scheduled(Agent(name="maths", tools=[add]))
    assert agent.tools[0] is add
    assert pickling_error(add) == before
    with pytest.raises(TypeError, match=r"the scheduled agent 'maths' cannot be pickled: its function tools run"):
        pickle.dumps(agent)
    copied = copy.deepcopy(agent)
    assert copied.toolsched_executor is agent.toolsched_executor  # type: ignore[attr-defined]
    assert [tool.name for tool in copied.tools] == ["add"] and copy.copy(agent.tools[0]).name == "add"


def test_scheduling_a_scheduled_agent_again_is_refused_rather_than_dropping_its_options() -> None:
    """Promise: an option given is applied or refused, never dropped. ``scheduled(scheduled(agent,
    permissions=rules))`` scheduled the agent's SDK tools afresh with the outer options only: the inner rules no
    longer applied, silently (a deny rule gone). It raises ``OptionError`` for a scheduled agent and any agent
    made from one (a clone); the agent's tools are its own objects, which any other agent may hold and be
    scheduled with, each agent with its own executor."""

    @function_tool
    def delete(path: str) -> str:
        """Delete a file."""
        return path

    original = Agent(name="files", tools=[delete])
    inner = scheduled(original, permissions=ts.Permissions(deny=["delete"]))
    for given in [inner, inner.clone(name="clone"), dataclasses.replace(inner, name="replaced")]:
        with pytest.raises(ts.OptionError, match=r"which another scheduled\(\) made \(or one made from it\)"):
            scheduled(given)
    again = scheduled(original, permissions=ts.Permissions(allow=["delete"]))
    other = scheduled(Agent(name="other", tools=[*inner.tools]), tools=[from_function_tool(inner.tools[0])])
    assert len({id(inner.toolsched_executor), id(again.toolsched_executor), id(other.toolsched_executor)}) == 3  # type: ignore[attr-defined]
    assert inner.tools[0] is again.tools[0] is other.tools[0] is delete


class ToolsSeen(ScriptedAgentModel):
    """A scripted model that records the tools it was offered on each turn."""

    def __init__(self, turns: list[list[Any]]) -> None:
        super().__init__(turns)
        self.offered: list[list[Any]] = []

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        self.offered.append(list(kwargs["tools"] if "tools" in kwargs else args[3]))
        return await super().get_response(*args, **kwargs)


DENIED = "`delete` with this input is denied by the rule `delete`"


def denied_delete(ran: list[str]) -> Any:
    @function_tool
    async def delete(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    return delete


def delete_script(model_kind: Callable[[list[list[Any]]], ScriptedAgentModel] = ScriptedAgentModel) -> Any:
    return model_kind([[function_call("c1", "delete", {"path": "a.txt"})], [final_message("done")]])


async def test_the_sdk_its_hooks_and_the_model_see_the_agents_own_tool_objects() -> None:
    """Promise: ``scheduled(agent)`` is a drop-in. Its function tools were copies: ``agent.tools[0] is
    my_tool`` and ``== my_tool`` were false, a hook's ``tool is my_tool`` never matched, and the model was
    offered the copies. They are the agent's own objects now (the invoker too), and the call still goes
    through toolsched (its deny rule answers)."""
    from agents import RunHooks

    ran: list[str] = []
    delete = denied_delete(ran)
    invoker = delete.on_invoke_tool
    seen: list[Any] = []

    class Hooks(RunHooks[Any]):
        async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
            seen.append(tool)

        async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
            seen.append(tool)

    model = delete_script(ToolsSeen)
    agent = scheduled(Agent(name="files", model=model, tools=[delete]), permissions=ts.Permissions(deny=["delete"]))
    assert agent.tools[0] is delete and agent.tools == [delete]
    assert delete.on_invoke_tool is invoker
    result = await Runner.run(agent, "delete a.txt", run_config=NO_TRACING, hooks=Hooks())
    assert outputs(result)["c1"] == DENIED
    assert ran == []
    assert len(seen) == 2 and all(tool is delete for tool in seen)
    assert isinstance(model, ToolsSeen) and all(offered == [delete] for offered in model.offered)
    assert model.offered[0][0] is delete


async def test_an_unscheduled_agent_sharing_the_tool_runs_it_as_the_sdk_does() -> None:
    """Promise: ``scheduled`` changes no other agent. A plain agent that holds the same tool object, run at
    the same time as the scheduled one, runs its call as the SDK does: the executor's hooks see the
    scheduled agent's call only."""
    ran: list[str] = []
    delete = denied_delete(ran)
    seen_by_toolsched: list[str] = []

    async def watch(event: ts.HookEvent) -> None:
        seen_by_toolsched.append(event.call_id)

    def script(call_id: str, path: str) -> ScriptedAgentModel:
        return ScriptedAgentModel([[function_call(call_id, "delete", {"path": path})], [final_message("done")]])

    plain = Agent(name="plain", model=script("p1", "plain.txt"), tools=[delete])
    scheduled_agent = scheduled(
        Agent(name="files", model=script("s1", "scheduled.txt"), tools=[delete]),
        hooks=ts.Hooks().pre_tool_use("*", watch),
    )
    results: dict[str, Any] = {}

    async def run(name: str, agent: Any) -> None:
        results[name] = outputs(await Runner.run(agent, "delete", run_config=NO_TRACING))

    async with anyio.create_task_group() as group:
        group.start_soon(run, "plain", plain)
        group.start_soon(run, "scheduled", scheduled_agent)
    assert results == {"plain": {"p1": "deleted plain.txt"}, "scheduled": {"s1": "deleted scheduled.txt"}}
    assert sorted(ran) == ["plain.txt", "scheduled.txt"]
    assert seen_by_toolsched == ["s1"]
    assert plain.tools[0] is delete and not hasattr(plain, "toolsched_executor")


async def test_a_handoff_to_a_plain_agent_sharing_the_tool_runs_it_as_the_sdk_does() -> None:
    """Within one run: the scheduled agent's call goes through its executor (denied); after a handoff, the
    plain agent's call of the same tool object runs as the SDK runs it."""
    ran: list[str] = []
    delete = denied_delete(ran)
    plain = Agent(
        name="plain",
        model=ScriptedAgentModel([[function_call("c2", "delete", {"path": "b.txt"})], [final_message("done")]]),
        tools=[delete],
    )
    front = scheduled(
        Agent(
            name="front",
            model=ScriptedAgentModel(
                [[function_call("c1", "delete", {"path": "a.txt"}), function_call("h1", "transfer_to_plain", {})]]
            ),
            tools=[delete],
            handoffs=[plain],
        ),
        permissions=ts.Permissions(deny=["delete"]),
    )
    result = await Runner.run(front, "delete them", run_config=NO_TRACING)
    found = outputs(result)
    assert found["c1"] == DENIED
    assert found["c2"] == "deleted b.txt"
    assert ran == ["b.txt"]


async def test_two_scheduled_agents_sharing_a_tool_each_run_it_under_their_own_rules() -> None:
    ran: list[str] = []
    delete = denied_delete(ran)
    denying = scheduled(
        Agent(name="denying", model=delete_script(), tools=[delete]), permissions=ts.Permissions(deny=["delete"])
    )
    allowing = scheduled(Agent(name="allowing", model=delete_script(), tools=[delete]))
    assert outputs(await Runner.run(denying, "go", run_config=NO_TRACING))["c1"] == DENIED
    assert outputs(await Runner.run(allowing, "go", run_config=NO_TRACING))["c1"] == "deleted a.txt"
    assert ran == ["a.txt"]


def test_scheduling_one_tool_from_many_threads_routes_it_once() -> None:
    """``scheduled`` routes a function_tool's body in place, once, under a lock: agents scheduled from many
    threads at once share that one routing (never a routing of a routing)."""
    import threading

    from agents.tool import _FailureHandlingFunctionToolInvoker

    delete = denied_delete([])
    invoker = delete.on_invoke_tool
    assert isinstance(invoker, _FailureHandlingFunctionToolInvoker)
    body = invoker._invoke_tool_impl
    start = threading.Barrier(8)
    made: list[Any] = []

    def schedule() -> None:
        start.wait()
        made.append(scheduled(Agent(name="a", tools=[delete])))

    threads = [threading.Thread(target=schedule) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    routed = invoker._invoke_tool_impl
    assert len(made) == 8 and all(agent.tools[0] is delete for agent in made)
    assert routed is not body and routed.body is body  # type: ignore[attr-defined]
    assert delete.on_invoke_tool is invoker


async def test_a_routed_body_hands_any_other_agent_the_sdk_bodys_own_coroutine() -> None:
    """For a call of an agent ``scheduled`` did not make (or of no agent), the routed body returns the SDK
    body's own coroutine: no frame of toolsched's runs while the tool does. For the scheduled agent's call it
    returns toolsched's."""
    from agents.tool import _FailureHandlingFunctionToolInvoker
    from agents.tool_context import ToolContext as SdkToolContext

    ran: list[str] = []
    delete = denied_delete(ran)
    invoker = delete.on_invoke_tool
    assert isinstance(invoker, _FailureHandlingFunctionToolInvoker)
    body = invoker._invoke_tool_impl
    agent = scheduled(Agent(name="files", tools=[delete]), permissions=ts.Permissions(deny=["delete"]))
    routed = invoker._invoke_tool_impl
    plain = Agent(name="plain", tools=[delete])
    for other in (plain, None):
        context = SdkToolContext(None, tool_name="delete", tool_call_id="c1", tool_arguments="{}", agent=other)
        made = routed(context, '{"path": "a.txt"}')
        assert made.cr_code is body.__code__  # type: ignore[attr-defined]
        assert await made == "deleted a.txt"
    context = SdkToolContext(None, tool_name="delete", tool_call_id="c2", tool_arguments="{}", agent=agent)
    made = routed(context, '{"path": "b.txt"}')
    assert made.cr_code is not body.__code__  # type: ignore[attr-defined]
    assert await made == DENIED
    assert ran == ["a.txt", "a.txt"]
