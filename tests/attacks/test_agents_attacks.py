"""Attacks on ``scheduled(agent)`` (the Agents SDK integration). A ``function_tool`` stays the agent's own object,
its body routed in place: copies of it made the Python ways, in an agent made from the scheduled one, must
still run through the executor and its rules (and, in a plain agent, as the SDK runs them). Other tools are
live copies, instances of a cached subclass of each tool's class whose fields read through to the agent's
tool: scheduling must keep no tool class alive."""

from __future__ import annotations

import copy
import dataclasses
import gc
import weakref
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from agents import Agent, FunctionTool, RunConfig, Runner, RunState, function_tool
from agents.items import ToolCallOutputItem
from scripted_models import ScriptedAgentModel, final_message, function_call

import toolsched as ts
from toolsched.integrations.agents import from_function_tool, scheduled

pytestmark = pytest.mark.anyio

NO_TRACING = RunConfig(tracing_disabled=True)


@pytest.fixture
def anyio_backend() -> str:
    # The Agents SDK runs on asyncio only.
    return "asyncio"


async def _answer(context: Any, arguments: str) -> str:
    return "answered"


def test_a_tool_class_made_at_run_time_is_not_kept_alive_by_scheduling() -> None:
    """A tool class made per agent (``type(...)`` at run time): once neither the tool nor its scheduled agent is
    held, the class and the live class made for its copies go too (they were cached for the process's life)."""
    made: list[weakref.ref[type]] = []
    for number in range(3):
        kind = type(f"Made{number}", (FunctionTool,), {})
        tool = kind(
            name="lookup", description="Looks up.", params_json_schema={"type": "object"}, on_invoke_tool=_answer
        )
        agent = scheduled(Agent(name="helper", tools=[tool]))
        assert isinstance(agent.tools[0], kind)
        made.append(weakref.ref(kind))
        del kind, tool, agent
    gc.collect()
    assert [ref() for ref in made] == [None, None, None]


def test_a_live_class_is_shared_by_the_copies_that_live_at_once() -> None:
    lookup = FunctionTool(
        name="lookup", description="Looks a key up.", params_json_schema={"type": "object"}, on_invoke_tool=_answer
    )
    first = scheduled(Agent(name="a", tools=[lookup])).tools[0]
    second = scheduled(Agent(name="b", tools=[lookup])).tools[0]
    assert first is not lookup and type(first) is type(second)


COPIES: dict[str, Callable[[Any], Any]] = {
    "copy.copy": copy.copy,
    "copy.deepcopy": copy.deepcopy,
    "dataclasses.replace": lambda tool: dataclasses.replace(tool, description="Removes a file, for good."),
}


@pytest.mark.parametrize("how", list(COPIES))
async def test_a_copy_of_a_scheduled_tool_still_runs_through_the_executors_rules(how: str) -> None:
    """A copy of the scheduled agent's tool, given to an agent made from the scheduled one (the SDK copies
    tools this way too), runs through the executor: its rules hold. The same copy in a plain agent runs as
    the SDK runs it: scheduling is the agent's, not the tool's."""
    ran: list[str] = []

    @function_tool
    def remove(path: str) -> str:
        """Removes a file."""
        ran.append(path)
        return f"removed {path}"

    def script() -> ScriptedAgentModel:
        return ScriptedAgentModel([[function_call("c1", "remove", {"path": "a.txt"})], [final_message("done")]])

    agent = scheduled(Agent(name="files", tools=[remove]), permissions=ts.Permissions(deny=["remove"]))
    copied = COPIES[how](agent.tools[0])
    assert copied is not remove
    for made in [
        agent.clone(model=script(), tools=[copied]),
        dataclasses.replace(agent, model=script(), tools=[copied]),
    ]:
        result = await Runner.run(made, "remove a.txt", run_config=NO_TRACING)
        [output] = [item.output for item in result.new_items if isinstance(item, ToolCallOutputItem)]
        assert output == "`remove` with this input is denied by the rule `remove`"
    assert ran == []
    result = await Runner.run(Agent(name="plain", model=script(), tools=[copied]), "go", run_config=NO_TRACING)
    [output] = [item.output for item in result.new_items if isinstance(item, ToolCallOutputItem)]
    assert (output, ran) == ("removed a.txt", ["a.txt"])


async def test_a_tool_the_agent_holds_only_under_a_shared_body_runs_under_its_own_name() -> None:
    """Two tools of one agent that share one SDK body (``dataclasses.replace(tool, name=...)``): each call is
    checked by the rules of the tool it was made for, never the other's."""
    ran: list[str] = []

    @function_tool
    def remove(path: str) -> str:
        """Removes a file."""
        ran.append(path)
        return f"removed {path}"

    erase = dataclasses.replace(remove, name="erase")
    model = ScriptedAgentModel(
        [
            [function_call("c1", "remove", {"path": "a.txt"}), function_call("c2", "erase", {"path": "b.txt"})],
            [final_message("done")],
        ]
    )
    agent = scheduled(
        Agent(name="files", model=model, tools=[remove, erase]), permissions=ts.Permissions(deny=["erase"])
    )
    result = await Runner.run(agent, "remove them", run_config=NO_TRACING)
    found = {item.raw_item["call_id"]: item.output for item in result.new_items if isinstance(item, ToolCallOutputItem)}
    assert found == {"c1": "removed a.txt", "c2": "`erase` with this input is denied by the rule `erase`"}
    assert ran == ["a.txt"]


# What a scheduled agent must refuse: every test below gives it ``deny=["write_note"]`` and checks the note
# was never written, whichever way the SDK reaches the tool.
DENY_NOTES = ts.Permissions(deny=["write_note"])
DENIED = "`write_note` with this input is denied by the rule `write_note`"


def note_tool(written: list[str]) -> Any:
    @function_tool
    def write_note(text: str) -> str:
        """Writes a note."""
        written.append(text)
        return f"wrote {text}"

    return write_note


def note_script(*then: list[Any]) -> ScriptedAgentModel:
    return ScriptedAgentModel([[function_call("c1", "write_note", {"text": "hi"})], *then, [final_message("done")]])


def tool_outputs(result: Any) -> list[Any]:
    return [item.output for item in result.new_items if isinstance(item, ToolCallOutputItem)]


async def test_a_handoff_to_a_scheduled_agent_runs_its_calls_under_its_rules_and_a_plain_one_under_none() -> None:
    written: list[str] = []
    write_note = note_tool(written)
    writer = scheduled(Agent(name="writer", model=note_script(), tools=[write_note]), permissions=DENY_NOTES)
    triage = Agent(
        name="triage",
        model=ScriptedAgentModel([[function_call("h1", "transfer_to_writer", {})]]),
        handoffs=[writer],
    )
    result = await Runner.run(triage, "note hi", run_config=NO_TRACING)
    assert (DENIED in tool_outputs(result), written) == (True, [])
    # The other way: the scheduled agent hands off to a plain one holding the same tool, which runs it.
    plain = Agent(name="plain", model=note_script(), tools=[write_note])
    guarded = scheduled(
        Agent(
            name="guarded",
            model=ScriptedAgentModel([[function_call("h1", "transfer_to_plain", {})]]),
            tools=[write_note],
            handoffs=[plain],
        ),
        permissions=DENY_NOTES,
    )
    result = await Runner.run(guarded, "note hi", run_config=NO_TRACING)
    assert (tool_outputs(result), written) == (["wrote hi"], ["hi"])


async def test_a_scheduled_agent_used_as_a_tool_keeps_its_rules_inside_a_plain_agent() -> None:
    written: list[str] = []
    inner = scheduled(Agent(name="writer", model=note_script(), tools=[note_tool(written)]), permissions=DENY_NOTES)
    outer = Agent(
        name="outer",
        model=ScriptedAgentModel([[function_call("o1", "writer_tool", {"input": "note hi"})], [final_message("ok")]]),
        tools=[inner.as_tool(tool_name="writer_tool", tool_description="Writes notes.")],
    )
    result = await Runner.run(outer, "go", run_config=NO_TRACING)
    assert result.final_output == "ok"
    assert written == []


async def test_an_agent_used_as_a_tool_of_a_scheduled_agent_is_a_call_of_its_executor() -> None:
    written: list[str] = []
    inner = Agent(name="writer", model=note_script(), tools=[note_tool(written)])
    outer = scheduled(
        Agent(
            name="outer",
            model=ScriptedAgentModel([[function_call("o1", "writer_tool", {"input": "x"})], [final_message("ok")]]),
            tools=[inner.as_tool(tool_name="writer_tool", tool_description="Writes notes.")],
        ),
        permissions=ts.Permissions(deny=["writer_tool"]),
    )
    result = await Runner.run(outer, "go", run_config=NO_TRACING)
    assert tool_outputs(result) == ["`writer_tool` with this input is denied by the rule `writer_tool`"]
    assert written == []


async def test_a_streamed_run_of_a_scheduled_agent_keeps_its_rules() -> None:
    written: list[str] = []
    from agents.testing.model import ScriptedModel  # the SDK's own model, which streams

    model = ScriptedModel([[function_call("c1", "write_note", {"text": "hi"})], [final_message("done")]])
    agent = scheduled(Agent(name="writer", model=model, tools=[note_tool(written)]), permissions=DENY_NOTES)
    streamed = Runner.run_streamed(agent, "note hi", run_config=NO_TRACING)
    async for _ in streamed.stream_events():
        pass
    assert (tool_outputs(streamed), written) == ([DENIED], [])


@pytest.mark.parametrize("read_back", [False, True], ids=["in memory", "read back"])
async def test_an_approved_call_resumed_from_a_run_state_still_meets_the_scheduled_agents_rules(
    read_back: bool,
) -> None:
    """The SDK's approval says yes; toolsched's rules still say no, on the in-memory state and on one read back
    from its JSON text."""
    written: list[str] = []

    @function_tool(needs_approval=True)
    def write_note(text: str) -> str:
        """Writes a note."""
        written.append(text)
        return f"wrote {text}"

    agent = scheduled(Agent(name="writer", model=note_script(), tools=[write_note]), permissions=DENY_NOTES)
    first = await Runner.run(agent, "note hi", run_config=NO_TRACING)
    state = first.to_state()
    if read_back:
        state = await RunState.from_string(agent, state.to_string())
    state.approve(state.get_interruptions()[0])
    second = await Runner.run(agent, state, run_config=NO_TRACING)
    assert (tool_outputs(second), written) == ([DENIED], [])


async def test_one_tool_in_two_scheduled_agents_run_at_once_meets_each_agents_own_rules() -> None:
    """Both runs are in the tool at once (each waits for the other to arrive): each call meets its own agent's
    rules, never the other's."""
    written: list[str] = []
    arrived: list[str] = []
    both_in = anyio.Event()

    @function_tool
    async def write_note(text: str) -> str:
        """Writes a note."""
        arrived.append(text)
        if len(arrived) == 2:
            both_in.set()
        await both_in.wait()
        written.append(text)
        return f"wrote {text}"

    def script(text: str) -> ScriptedAgentModel:
        return ScriptedAgentModel([[function_call("c1", "write_note", {"text": text})], [final_message("done")]])

    def rules() -> dict[str, Any]:
        return {
            "tools": [from_function_tool(write_note, rule_subject="text")],
            "permissions": ts.Permissions(deny=["write_note(secret*)"]),
        }

    first = scheduled(Agent(name="first", model=script("secret"), tools=[write_note]), **rules())
    second = scheduled(Agent(name="second", model=script("open"), tools=[write_note]), **rules())
    other = scheduled(Agent(name="other", model=script("secret2"), tools=[write_note]))
    results: dict[str, Any] = {}

    async def run(agent: Any) -> None:
        results[agent.name] = await Runner.run(agent, "note", run_config=NO_TRACING)

    async with anyio.create_task_group() as group:
        for agent in (first, second, other):
            group.start_soon(run, agent)
    assert tool_outputs(results["first"]) == [
        "`write_note` with this input is denied by the rule `write_note(secret*)`"
    ]
    assert tool_outputs(results["second"]) == ["wrote open"]
    assert tool_outputs(results["other"]) == ["wrote secret2"]
    assert sorted(written) == ["open", "secret2"]


def _replace_body(tool: Any, written: list[str]) -> None:
    async def body(context: Any, arguments: str) -> str:
        written.append("replaced body")
        return "replaced"

    tool.on_invoke_tool._invoke_tool_impl = body


def _replace_invoker(tool: Any, written: list[str]) -> None:
    async def invoker(context: Any, arguments: str) -> str:
        written.append("replaced invoker")
        return "replaced"

    tool.on_invoke_tool = invoker


def _replace_with_a_new_function_tool(tool: Any, written: list[str]) -> None:
    tool.on_invoke_tool = note_tool(written).on_invoke_tool


CHANGES: dict[str, Callable[[Any, list[str]], None]] = {
    "body": _replace_body,
    "invoker": _replace_invoker,
    "function_tool invoker": _replace_with_a_new_function_tool,
}


@pytest.mark.parametrize("change", list(CHANGES))
async def test_a_tool_whose_invoker_is_replaced_after_scheduling_still_meets_the_rules(change: str) -> None:
    """The tool's body or invoker replaced after ``scheduled()``: the scheduled agent re-routes it (by the tool's
    name) when the SDK asks it for its tools, so the call still meets its rules; a plain agent runs the new one."""
    written: list[str] = []
    write_note = note_tool(written)
    agent = scheduled(Agent(name="writer", model=note_script(), tools=[write_note]), permissions=DENY_NOTES)
    CHANGES[change](write_note, written)
    result = await Runner.run(agent, "note hi", run_config=NO_TRACING)
    assert (tool_outputs(result), written) == ([DENIED], [])
    plain = Agent(name="plain", model=note_script(), tools=[write_note])
    result = await Runner.run(plain, "note hi", run_config=NO_TRACING)
    assert len(written) == 1


NEW_TOOLS: dict[str, Callable[[Any, Any], Any]] = {
    "clone": lambda agent, tool: agent.clone(tools=[tool]),
    "replace": lambda agent, tool: dataclasses.replace(agent, tools=[tool]),
    "list item": lambda agent, tool: (agent.tools.__setitem__(0, tool), agent)[1],
    "appended": lambda agent, tool: (agent.tools.clear(), agent.tools.append(tool), agent)[2],
}


@pytest.mark.parametrize("how", list(NEW_TOOLS))
async def test_a_new_tool_of_a_known_name_given_to_a_scheduled_agent_meets_that_names_rules(how: str) -> None:
    """Another ``write_note`` (a tool ``scheduled()`` never saw) given to the scheduled agent or an agent made
    from it runs through the executor as the ``write_note`` it knows."""
    written: list[str] = []
    agent = scheduled(Agent(name="writer", model=note_script(), tools=[note_tool([])]), permissions=DENY_NOTES)
    made = NEW_TOOLS[how](agent, note_tool(written))
    result = await Runner.run(made, "note hi", run_config=NO_TRACING)
    assert (tool_outputs(result), written) == ([DENIED], [])


def test_a_scheduled_tool_runs_under_its_rules_from_event_loops_in_two_threads() -> None:
    """Scheduled agents run by ``asyncio.run`` in two threads at once each (one executor, two event loops), and
    a plain agent holding the same tool in another: the denying one's calls are refused, the others run (the
    allowing one's through its executor, its tool not concurrency-safe: behind a run gate)."""
    import asyncio
    import threading

    written: list[str] = []
    write_note = note_tool(written)
    denying = scheduled(Agent(name="denying", tools=[write_note]), permissions=DENY_NOTES)
    allowing = scheduled(Agent(name="allowing", tools=[write_note]), tools=[from_function_tool(write_note)])
    outputs: dict[str, list[Any]] = {}
    errors: list[BaseException] = []

    def run(name: str, agent: Any) -> None:
        try:
            for _ in range(3):
                made = agent.clone(model=note_script())
                result = asyncio.run(Runner.run(made, "note hi", run_config=NO_TRACING))
                outputs.setdefault(name, []).extend(tool_outputs(result))
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=run, args=("denying", denying)),
        threading.Thread(target=run, args=("denying too", denying)),
        threading.Thread(target=run, args=("plain", Agent(name="plain", tools=[write_note]))),
        threading.Thread(target=run, args=("allowing", allowing)),
        threading.Thread(target=run, args=("allowing too", allowing)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    wrote = ["wrote hi"] * 3
    assert outputs == {
        "denying": [DENIED] * 3,
        "denying too": [DENIED] * 3,
        "plain": wrote,
        "allowing": wrote,
        "allowing too": wrote,
    }
    assert written == ["hi"] * 9


async def test_a_pickled_copy_of_a_routed_tool_given_to_an_agent_made_from_the_scheduled_one_meets_its_rules() -> None:
    """A routed tool pickles as its SDK body (the copy is unrouted): given back to an agent made from the
    scheduled one, it is routed again by its name; in a plain agent it runs as the SDK runs it."""
    import pickle

    from agents.tool import _FailureHandlingFunctionToolInvoker

    tool = FunctionTool(
        name="write_note",
        description="Writes a note.",
        params_json_schema={"type": "object"},
        on_invoke_tool=_FailureHandlingFunctionToolInvoker(_answer, None),
    )
    agent = scheduled(Agent(name="writer", tools=[tool]), permissions=DENY_NOTES)
    back = pickle.loads(pickle.dumps(tool))
    assert back.on_invoke_tool._invoke_tool_impl is _answer
    result = await Runner.run(agent.clone(model=note_script(), tools=[back]), "note hi", run_config=NO_TRACING)
    assert tool_outputs(result) == [DENIED]
    result = await Runner.run(Agent(name="plain", model=note_script(), tools=[back]), "note hi", run_config=NO_TRACING)
    assert tool_outputs(result) == ["answered"]


async def test_the_scheduled_agents_tool_check_calls_the_agent_classs_get_all_tools_as_it_is_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Agent.get_all_tools`` patched after ``scheduled()`` (as the SDK's own tests patch it): the scheduled
    agent asks the patched one, then routes what it returns."""
    written: list[str] = []
    agent = scheduled(Agent(name="writer", model=note_script(), tools=[note_tool([])]), permissions=DENY_NOTES)
    offered = note_tool(written)
    asked: list[str] = []

    async def patched(self: Any, run_context: Any) -> list[Any]:
        asked.append(self.name)
        return [offered]

    monkeypatch.setattr(Agent, "get_all_tools", patched)
    result = await Runner.run(agent, "note hi", run_config=NO_TRACING)
    assert (tool_outputs(result), written) == ([DENIED], [])
    assert asked and set(asked) == {"writer"}


async def test_tools_made_per_request_and_routed_by_a_clone_are_not_kept_alive_by_the_scheduled_agent() -> None:
    """A tool made per request (its closure holding the request) and given to a clone of the scheduled agent is
    routed for that run, and goes once the request is done: the schedule keeps no body or copy of it."""
    agent = scheduled(Agent(name="writer", tools=[note_tool([])]), permissions=DENY_NOTES)

    async def own_invoker(context: Any, arguments: str) -> str:
        return "ran"

    made: list[weakref.ref[Any]] = []
    for _ in range(3):
        routed = note_tool([])
        plain = FunctionTool(
            name="write_note",
            description="Writes a note.",
            params_json_schema={"type": "object"},
            on_invoke_tool=own_invoker,
        )
        for tool in (routed, plain):
            result = await Runner.run(agent.clone(model=note_script(), tools=[tool]), "note", run_config=NO_TRACING)
            assert tool_outputs(result) == [DENIED]
        made += [weakref.ref(routed), weakref.ref(routed.on_invoke_tool._invoke_tool_impl.body), weakref.ref(plain)]
        del routed, plain, tool, result
    await Runner.run(agent.clone(model=ScriptedAgentModel([[final_message("done")]])), "x", run_config=NO_TRACING)
    gc.collect()
    assert [ref() for ref in made] == [None] * 9
