"""The Agents SDK's function-tool features behave the same with and without toolsched.

Each test runs the same agent and the same scripted model twice, with the SDK's own
Runner.run: once as the SDK built it, once wrapped with ``scheduled(...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, RunResult, function_tool
from agents.items import ToolCallOutputItem
from scripted_models import ScriptedAgentModel, final_message, function_call

from toolsched.integrations.agents import scheduled

pytestmark = pytest.mark.anyio

NO_TRACING = RunConfig(tracing_disabled=True)


@pytest.fixture
def anyio_backend() -> str:
    # The Agents SDK runs on asyncio only.
    return "asyncio"


def tool_outputs(result: RunResult) -> list[Any]:
    return [item.output for item in result.new_items if isinstance(item, ToolCallOutputItem)]


def script() -> ScriptedAgentModel:
    return ScriptedAgentModel([[function_call("c1", "delete", {"path": "a.txt"})], [final_message("done")]])


def make_agent(ran: list[str], model: ScriptedAgentModel, **tool_options: Any) -> Agent[Any]:
    @function_tool(**tool_options)
    async def delete(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        if path == "boom":
            raise RuntimeError("disk on fire")
        return f"deleted {path}"

    return Agent(name="helper", model=model, tools=[delete])


Wrap = Callable[[Agent[Any]], Agent[Any]]
FORMS: list[tuple[str, Wrap]] = [("stock", lambda agent: agent), ("scheduled", lambda agent: scheduled(agent))]


@pytest.mark.parametrize(("form", "wrap"), FORMS, ids=[name for name, _ in FORMS])
async def test_needs_approval_interrupts_and_an_approval_runs_the_call_once(form: str, wrap: Wrap) -> None:
    ran: list[str] = []
    agent = wrap(make_agent(ran, script(), needs_approval=True))
    first = await Runner.run(agent, "delete a.txt", run_config=NO_TRACING)
    assert ran == [], form
    assert [item.raw_item.call_id for item in first.interruptions] == ["c1"]
    state = first.to_state()
    state.approve(first.interruptions[0])
    second = await Runner.run(agent, state, run_config=NO_TRACING)
    assert ran == ["a.txt"], form
    assert tool_outputs(second) == ["deleted a.txt"]
    assert second.final_output == "done"


@pytest.mark.parametrize(("form", "wrap"), FORMS, ids=[name for name, _ in FORMS])
async def test_a_rejection_never_runs_the_call(form: str, wrap: Wrap) -> None:
    ran: list[str] = []
    agent = wrap(make_agent(ran, script(), needs_approval=True))
    first = await Runner.run(agent, "delete a.txt", run_config=NO_TRACING)
    state = first.to_state()
    state.reject(first.interruptions[0])
    second = await Runner.run(agent, state, run_config=NO_TRACING)
    assert ran == [], form
    assert second.final_output == "done"
    assert len(tool_outputs(second)) == 1


async def test_a_rejection_tells_the_model_the_same_thing() -> None:
    texts = []
    for _, wrap in FORMS:
        agent = wrap(make_agent([], script(), needs_approval=True))
        first = await Runner.run(agent, "delete a.txt", run_config=NO_TRACING)
        state = first.to_state()
        state.reject(first.interruptions[0])
        texts.append(tool_outputs(await Runner.run(agent, state, run_config=NO_TRACING)))
    assert texts[0] == texts[1]


async def test_a_custom_failure_error_function_answers_the_model_the_same_way() -> None:
    def explain(context: Any, error: Exception) -> str:
        return f"the tool broke: {error}"

    outputs = []
    for _, wrap in FORMS:
        model = ScriptedAgentModel([[function_call("c1", "delete", {"path": "boom"})], [final_message("done")]])
        agent = wrap(make_agent([], model, failure_error_function=explain))
        result = await Runner.run(agent, "delete boom", run_config=NO_TRACING)
        outputs.append(tool_outputs(result))
    assert outputs[0] == outputs[1]
    assert "the tool broke: disk on fire" in str(outputs[1][0])


async def test_stop_on_first_tool_gives_the_same_final_output() -> None:
    finals = []
    for _, wrap in FORMS:
        model = ScriptedAgentModel([[function_call("c1", "delete", {"path": "a.txt"})]])
        agent = make_agent([], model)
        agent = wrap(agent.clone(tool_use_behavior="stop_on_first_tool"))
        finals.append((await Runner.run(agent, "delete a.txt", run_config=NO_TRACING)).final_output)
    assert finals == ["deleted a.txt", "deleted a.txt"]


async def test_a_failure_the_sdk_answers_as_text_is_a_failure_to_toolsched() -> None:
    # The model reads the SDK's own failure text, as without toolsched, while toolsched records a
    # failure: its post_tool_use_failure hooks run and the result is an execution_error.
    import toolsched as ts

    failures: list[str] = []

    async def on_failure(event: ts.HookEvent) -> None:
        assert event.result is not None
        failures.append(f"{event.tool_name} {event.result.error_kind}")

    outputs = []
    for form, _ in FORMS:
        model = ScriptedAgentModel([[function_call("c1", "delete", {"path": "boom"})], [final_message("done")]])
        agent = make_agent([], model)
        if form == "scheduled":
            agent = scheduled(agent, hooks=ts.Hooks().post_tool_use_failure("*", on_failure))
        result = await Runner.run(agent, "delete boom", run_config=NO_TRACING)
        outputs.append(tool_outputs(result))
    assert outputs[0] == outputs[1]
    assert "error occurred while running the tool" in str(outputs[1][0])
    assert failures == ["delete execution_error"]


async def test_without_a_failure_function_the_error_propagates_as_in_the_sdk() -> None:
    raised = []
    for _, wrap in FORMS:
        model = ScriptedAgentModel([[function_call("c1", "delete", {"path": "boom"})], [final_message("done")]])
        agent = wrap(make_agent([], model, failure_error_function=None))
        with pytest.raises(Exception) as caught:
            await Runner.run(agent, "delete boom", run_config=NO_TRACING)
        raised.append(type(caught.value).__name__)
    assert raised[0] == raised[1]


async def test_an_unknown_tool_name_ends_the_run_as_the_sdk_does_or_is_answered_when_asked() -> None:
    # Unknown names never reach a function tool: the SDK resolves them, with or without toolsched.
    # Its RunConfig(tool_not_found_behavior=...) decides, and scheduled(...) keeps that decision.
    from agents.exceptions import ModelBehaviorError

    for form, wrap in FORMS:
        ran: list[str] = []
        model = ScriptedAgentModel([[function_call("c1", "remove", {"path": "a.txt"})], [final_message("done")]])
        with pytest.raises(ModelBehaviorError, match="remove"):
            await Runner.run(wrap(make_agent(ran, model)), "delete a.txt", run_config=NO_TRACING)
        assert ran == [], form
    answered = []
    for form, wrap in FORMS:
        ran = []
        model = ScriptedAgentModel(
            [
                [function_call("c1", "remove", {"path": "a.txt"}), function_call("c2", "delete", {"path": "b.txt"})],
                [final_message("done")],
            ]
        )
        config = RunConfig(tracing_disabled=True, tool_not_found_behavior="return_error_to_model")
        result = await Runner.run(wrap(make_agent(ran, model)), "delete a.txt", run_config=config)
        assert result.final_output == "done", form
        assert ran == ["b.txt"], form
        answered.append(sorted(str(output) for output in tool_outputs(result)))
    assert answered[0] == answered[1]
    assert any("remove" in output for output in answered[1])
