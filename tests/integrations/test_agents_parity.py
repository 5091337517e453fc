"""The Agents SDK's function-tool features behave the same with and without toolsched.

Each test runs the same agent and the same scripted model twice, with the SDK's own
Runner.run: once as the SDK built it, once wrapped with ``scheduled(...)``.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from agents import (
    Agent,
    FunctionTool,
    ModelBehaviorError,
    RunConfig,
    RunContextWrapper,
    Runner,
    RunResult,
    function_tool,
)
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


# -- The SDK's own rules, both ways: each test runs the same agent and script stock and scheduled and compares. --


@dataclass
class Run:
    """What one form of a run left behind: what the model was sent, what came out, what ran, what was raised."""

    final_output: Any = None
    history: list[Any] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)
    interruptions: list[str] = field(default_factory=list)
    raised: str | None = None
    sent: list[Any] = field(default_factory=list)


async def run_form(
    wrap: Wrap, agent: Agent[Any], model: ScriptedAgentModel, text: str = "go", config: RunConfig = NO_TRACING
) -> Run:
    record = Run()
    try:
        result = await Runner.run(wrap(agent), text, run_config=config)
    except Exception as exc:
        record.raised = f"{type(exc).__name__}: {exc}"
    else:
        record.final_output = result.final_output
        record.history = result.to_input_list()
        record.outputs = tool_outputs(result)
        record.interruptions = [item.raw_item.call_id for item in result.interruptions]
    record.sent = model.inputs
    return record


async def both(build: Callable[[], tuple[Agent[Any], ScriptedAgentModel]], **options: Any) -> tuple[Run, Run]:
    """The same agent and script, stock then scheduled (each built afresh)."""
    runs = []
    for _, wrap in FORMS:
        agent, model = build()
        runs.append(await run_form(wrap, agent, model, **options))
    return runs[0], runs[1]


async def test_an_approval_policy_sees_the_arguments_the_tool_runs_with() -> None:
    # The model leaves out an argument whose default the policy guards: the SDK asks a person, since the
    # call would run with a value the policy never saw. Scheduled must not run it unasked.
    ran: list[str] = []

    def build() -> tuple[Agent[Any], ScriptedAgentModel]:
        async def protected(context: Any, params: dict[str, Any], call_id: str) -> bool:
            return params.get("endpoint") == "protected"

        @function_tool(needs_approval=protected)
        def operation(endpoint: str = "protected") -> str:
            """Call an endpoint."""
            ran.append(endpoint)
            return f"called {endpoint}"

        model = ScriptedAgentModel([[function_call("c1", "operation", {})], [final_message("done")]])
        return Agent(name="ops", model=model, tools=[operation]), model

    stock, wrapped = await both(build)
    assert stock.interruptions == ["c1"]
    assert wrapped.interruptions == stock.interruptions
    assert ran == []


@pytest.mark.parametrize(
    "arguments",
    [{"endpoint": "public"}, {"endpoint": "protected"}, {"endpoint": 5}, {"endpoint": "public", "extra": 1}],
    ids=["allowed", "asked", "coerced", "extra"],
)
async def test_an_approval_policy_decides_the_same_calls(arguments: dict[str, Any]) -> None:
    ran: list[str] = []

    def build() -> tuple[Agent[Any], ScriptedAgentModel]:
        async def protected(context: Any, params: dict[str, Any], call_id: str) -> bool:
            return params.get("endpoint") == "protected"

        @function_tool(needs_approval=protected, strict_mode=False)
        def operation(endpoint: str = "protected") -> str:
            """Call an endpoint."""
            ran.append(endpoint)
            return f"called {endpoint}"

        model = ScriptedAgentModel([[function_call("c1", "operation", arguments)], [final_message("done")]])
        return Agent(name="ops", model=model, tools=[operation]), model

    stock, wrapped = await both(build)
    assert (wrapped.interruptions, wrapped.outputs, wrapped.raised) == (
        stock.interruptions,
        stock.outputs,
        stock.raised,
    )
    assert ran[: len(ran) // 2] == ran[len(ran) // 2 :]


async def test_an_approved_call_runs_with_what_was_approved() -> None:
    ran: list[str] = []
    for _, wrap in FORMS:

        async def protected(context: Any, params: dict[str, Any], call_id: str) -> bool:
            return params.get("endpoint") == "protected"

        @function_tool(needs_approval=protected)
        def operation(endpoint: str = "protected") -> str:
            """Call an endpoint."""
            ran.append(endpoint)
            return f"called {endpoint}"

        model = ScriptedAgentModel([[function_call("c1", "operation", {})], [final_message("done")]])
        agent = wrap(Agent(name="ops", model=model, tools=[operation]))
        first = await Runner.run(agent, "go", run_config=NO_TRACING)
        state = first.to_state()
        state.approve(first.interruptions[0])
        second = await Runner.run(agent, state, run_config=NO_TRACING)
        assert tool_outputs(second) == ["called protected"]
    assert ran == ["protected", "protected"]


def cancelling_tool(failure: Any) -> Any:
    options = {} if failure == "default" else {"failure_error_function": failure}

    @function_tool(**options)
    async def fetch(key: str) -> str:
        """Fetch a key."""
        raise asyncio.CancelledError(f"upstream hung up while reading private-{key}")

    return fetch


def explain(context: Any, error: Exception) -> str:
    return f"fetch gave up: {type(error).__name__}"


@pytest.mark.parametrize("failure", ["default", explain], ids=["default", "custom"])
async def test_a_tool_that_raises_cancelled_is_answered_by_its_failure_policy(failure: Any) -> None:
    def build() -> tuple[Agent[Any], ScriptedAgentModel]:
        model = ScriptedAgentModel([[function_call("c1", "fetch", {"key": "k1"})], [final_message("done")]])
        return Agent(name="reader", model=model, tools=[cancelling_tool(failure)]), model

    stock, wrapped = await both(build)
    assert stock.raised is None
    assert wrapped.history == stock.history
    assert wrapped.sent == stock.sent
    assert "private-k1" not in str(wrapped.history)


async def test_a_cancelled_tool_without_a_failure_policy_cancels_the_run_and_its_siblings() -> None:
    finished: list[str] = []

    def build() -> tuple[Agent[Any], ScriptedAgentModel]:
        @function_tool
        async def slow(key: str) -> str:
            """Takes a while."""
            await asyncio.Event().wait()
            finished.append(key)
            return key

        model = ScriptedAgentModel(
            [
                [function_call("c1", "slow", {"key": "a"}), function_call("c2", "fetch", {"key": "b"})],
                [final_message("done")],
            ]
        )
        return Agent(name="reader", model=model, tools=[slow, cancelling_tool(None)]), model

    outcomes = []
    for _, wrap in FORMS:
        agent, _ = build()
        with pytest.raises(BaseException) as caught, anyio.fail_after(10):  # a hang guard: the run must end
            await Runner.run(wrap(agent), "go", run_config=NO_TRACING)
        outcomes.append(type(caught.value).__name__)
    assert outcomes == ["CancelledError", "CancelledError"]
    assert finished == []


async def test_two_tools_under_one_name_run_the_last_as_the_sdk_does() -> None:
    ran: list[str] = []

    def build() -> tuple[Agent[Any], ScriptedAgentModel]:
        @function_tool(name_override="lookup")
        def first_lookup() -> str:
            ran.append("first")
            return "first"

        @function_tool(name_override="lookup")
        def second_lookup() -> str:
            ran.append("second")
            return "second"

        model = ScriptedAgentModel([[function_call("c1", "lookup", {})], [final_message("done")]])
        return Agent(name="a", model=model, tools=[first_lookup, second_lookup]), model

    stock, wrapped = await both(build)
    assert stock.outputs == ["second"]
    assert (wrapped.outputs, wrapped.history, wrapped.raised) == (stock.outputs, stock.history, stock.raised)
    assert ran == ["second", "second"]


async def test_a_disabled_twin_leaves_its_name_to_the_enabled_one() -> None:
    ran: list[str] = []

    def build() -> tuple[Agent[Any], ScriptedAgentModel]:
        @function_tool(name_override="lookup")
        def enabled_lookup(key: str) -> str:
            ran.append(f"enabled {key}")
            return "enabled"

        @function_tool(name_override="lookup", is_enabled=False)
        def disabled_lookup(key: str, other: int) -> str:
            ran.append(f"disabled {key}")
            return "disabled"

        model = ScriptedAgentModel([[function_call("c1", "lookup", {"key": "k"})], [final_message("done")]])
        return Agent(name="a", model=model, tools=[enabled_lookup, disabled_lookup]), model

    stock, wrapped = await both(build)
    assert stock.outputs == ["enabled"]
    assert (wrapped.outputs, wrapped.history, wrapped.raised) == (stock.outputs, stock.history, stock.raised)
    assert ran == ["enabled k", "enabled k"]


async def test_calls_of_tools_that_declare_nothing_run_together_as_in_the_sdk() -> None:
    # Each tool returns only once the other has started: run one at a time, they would wait forever.
    def build() -> tuple[Agent[Any], ScriptedAgentModel]:
        started = {"ping": asyncio.Event(), "pong": asyncio.Event()}

        @function_tool
        async def ping() -> str:
            started["ping"].set()
            await started["pong"].wait()
            return "ping"

        @function_tool
        async def pong() -> str:
            started["pong"].set()
            await started["ping"].wait()
            return "pong"

        model = ScriptedAgentModel(
            [[function_call("c1", "ping", {}), function_call("c2", "pong", {})], [final_message("done")]]
        )
        return Agent(name="a", model=model, tools=[ping, pong]), model

    with anyio.fail_after(10):  # a hang guard: serialised, the two calls never return
        stock, wrapped = await both(build)
    assert stock.outputs == ["ping", "pong"]
    assert (wrapped.outputs, wrapped.history) == (stock.outputs, stock.history)


class Point:
    def __init__(self, x: int) -> None:
        self.x = x

    def __str__(self) -> str:
        return f"Point({self.x})"


@pytest.mark.parametrize(
    "value",
    [{"a": 1, "b": [1, 2]}, (1, "two"), ValueError("bad value"), Point(3), 7, None, [1, 2]],
    ids=["dict", "tuple", "exception", "object", "int", "none", "list"],
)
async def test_a_tool_output_reaches_the_run_as_the_sdk_keeps_it(value: Any) -> None:
    def build() -> tuple[Agent[Any], ScriptedAgentModel]:
        @function_tool
        def produce() -> Any:
            """Produce a value."""
            return value

        model = ScriptedAgentModel([[function_call("c1", "produce", {})], [final_message("done")]])
        return Agent(name="a", model=model, tools=[produce]), model

    stock, wrapped = await both(build)
    assert wrapped.outputs == stock.outputs
    assert wrapped.sent == stock.sent
    finals = []
    for _, wrap in FORMS:
        agent, _ = build()
        result = await Runner.run(
            wrap(agent.clone(tool_use_behavior="stop_on_first_tool")), "go", run_config=NO_TRACING
        )
        finals.append(result.final_output)
    assert finals[1] is value or finals[1] == finals[0]
    assert type(finals[1]) is type(finals[0])


@pytest.mark.parametrize("failure", ["default", explain, None], ids=["default", "custom", "none"])
async def test_arguments_that_are_not_json_follow_the_tools_failure_policy(failure: Any) -> None:
    ran: list[str] = []

    def build() -> tuple[Agent[Any], ScriptedAgentModel]:
        options = {} if failure == "default" else {"failure_error_function": failure}

        @function_tool(**options)
        def delete(path: str) -> str:
            """Delete a file."""
            ran.append(path)
            return "deleted"

        model = ScriptedAgentModel([[function_call("c1", "delete", "{not json")], [final_message("done")]])
        return Agent(name="a", model=model, tools=[delete]), model

    stock, wrapped = await both(build)
    assert (wrapped.outputs, wrapped.history, wrapped.raised) == (stock.outputs, stock.history, stock.raised)
    assert (stock.raised is not None) == (failure is None)
    assert ran == []


async def test_input_guardrails_see_arguments_that_are_not_json_first() -> None:
    from agents import ToolGuardrailFunctionOutput, tool_input_guardrail

    seen: list[str] = []

    def build() -> tuple[Agent[Any], ScriptedAgentModel]:
        @tool_input_guardrail
        def inspect_arguments(data: Any) -> ToolGuardrailFunctionOutput:
            seen.append(data.context.tool_arguments)
            return ToolGuardrailFunctionOutput.reject_content("arguments refused by policy")

        @function_tool(tool_input_guardrails=[inspect_arguments], failure_error_function=None)
        def delete(path: str) -> str:
            """Delete a file."""
            return "deleted"

        model = ScriptedAgentModel([[function_call("c1", "delete", "{not json")], [final_message("done")]])
        return Agent(name="a", model=model, tools=[delete]), model

    stock, wrapped = await both(build)
    assert stock.outputs == ["arguments refused by policy"]
    assert (wrapped.outputs, wrapped.raised) == (stock.outputs, stock.raised)
    assert seen == ["{not json", "{not json"]


async def test_a_handled_failure_is_reported_as_the_sdk_reports_it(caplog: pytest.LogCaptureFixture) -> None:
    from agents import _debug

    reports = []
    for _, wrap in FORMS:
        model = ScriptedAgentModel([[function_call("c1", "delete", {"path": "boom"})], [final_message("done")]])
        agent = wrap(make_agent([], model))
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="openai.agents"):
            original = _debug.DONT_LOG_TOOL_DATA
            _debug.DONT_LOG_TOOL_DATA = False
            try:
                await Runner.run(agent, "delete boom", run_config=NO_TRACING)
            finally:
                _debug.DONT_LOG_TOOL_DATA = original
        reports.append([record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR])
    assert reports[0] == reports[1]
    assert any("Tool delete failed" in message for message in reports[0])


class SpanRecorder:
    """An Agents SDK tracing processor that keeps the function spans that ended."""

    def __init__(self) -> None:
        self.spans: list[Any] = []

    def on_trace_start(self, trace: Any) -> None:
        pass

    def on_trace_end(self, trace: Any) -> None:
        pass

    def on_span_start(self, span: Any) -> None:
        pass

    def on_span_end(self, span: Any) -> None:
        if getattr(span.span_data, "type", None) == "function":
            self.spans.append(span)

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


@pytest.mark.parametrize("failure", ["default", explain], ids=["default", "custom"])
async def test_a_handled_failure_marks_the_function_span_as_the_sdk_does(failure: Any) -> None:
    from agents.tracing import set_trace_processors, set_tracing_disabled
    from agents.tracing.setup import get_trace_provider

    errors = []
    for _, wrap in FORMS:
        recorder = SpanRecorder()
        provider = get_trace_provider()
        set_trace_processors([recorder])  # type: ignore[list-item]
        # Another test of the process (test_integration_examples) turns tracing off globally.
        set_tracing_disabled(False)
        try:
            options = {} if failure == "default" else {"failure_error_function": failure}
            model = ScriptedAgentModel([[function_call("c1", "delete", {"path": "boom"})], [final_message("done")]])
            agent = wrap(make_agent([], model, **options))
            await Runner.run(agent, "delete boom", run_config=RunConfig(trace_include_sensitive_data=True))
        finally:
            set_trace_processors([])
        assert provider is get_trace_provider()
        errors.append([(span.span_data.name, span.error) for span in recorder.spans])
    assert errors[0] == errors[1]
    assert errors[0][0][1] is not None


async def test_a_runs_items_deep_copy_as_in_the_sdk() -> None:
    # Run items name their agent; a copy of them (as a handoff filter makes) copies the agent, whose
    # scheduled tools and executor are shared, not copied.
    copies = []
    for _, wrap in FORMS:
        model = ScriptedAgentModel([[function_call("c1", "delete", {"path": "a.txt"})], [final_message("done")]])
        agent = wrap(make_agent([], model))
        result = await Runner.run(agent, "delete a.txt", run_config=NO_TRACING)
        copied = copy.deepcopy(result.new_items)
        copies.append([item.to_input_item() for item in copied])
        executor = getattr(agent, "toolsched_executor", None)
        if executor is not None:
            assert getattr(copied[0].agent, "toolsched_executor", None) is executor
    assert copies[0] == copies[1]


async def test_a_plain_function_tool_is_handed_arguments_that_are_not_json_as_in_the_sdk() -> None:
    received: list[str] = []

    def build() -> tuple[Agent[Any], ScriptedAgentModel]:
        async def run_command(context: Any, arguments: str) -> str:
            received.append(arguments)
            try:
                json.loads(arguments)
            except ValueError:
                return "Invalid tool arguments."
            return "ran"

        tool = FunctionTool(
            name="run_command",
            description="Run a command.",
            params_json_schema={"type": "object", "properties": {"cmd": {"type": "string"}}},
            on_invoke_tool=run_command,
            strict_json_schema=False,
        )
        model = ScriptedAgentModel([[function_call("c1", "run_command", '{"cmd": "ls"')], [final_message("done")]])
        return Agent(name="a", model=model, tools=[tool]), model

    stock, wrapped = await both(build)
    assert stock.outputs == ["Invalid tool arguments."]
    assert (wrapped.outputs, wrapped.history, wrapped.raised) == (stock.outputs, stock.history, stock.raised)
    assert received == ['{"cmd": "ls"', '{"cmd": "ls"']


async def test_a_tool_named_as_toolsched_would_not_name_one_is_scheduled_as_in_the_sdk() -> None:
    def build() -> tuple[Agent[Any], ScriptedAgentModel]:
        tool = function_tool(lambda: "ok")
        model = ScriptedAgentModel([[function_call("c1", tool.name, {})], [final_message("done")]])
        return Agent(name="a", model=model, tools=[tool]), model

    stock, wrapped = await both(build)
    assert stock.outputs == ["ok"]
    assert (wrapped.outputs, wrapped.history, wrapped.raised) == (stock.outputs, stock.history, stock.raised)


async def test_context_variables_a_tool_sets_reach_its_output_guardrails_and_hooks_as_in_the_sdk() -> None:
    from agents import RunHooks, ToolGuardrailFunctionOutput, tool_output_guardrail

    state: contextvars.ContextVar[str] = contextvars.ContextVar("state", default="unset")
    seen: list[tuple[str, str]] = []

    @tool_output_guardrail
    def record(data: Any) -> ToolGuardrailFunctionOutput:
        seen.append(("guardrail", state.get()))
        return ToolGuardrailFunctionOutput.allow()

    class Recording(RunHooks[Any]):
        async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
            seen.append(("hook", state.get()))

    @function_tool(tool_output_guardrails=[record])
    async def remember() -> str:
        """Remember something."""
        state.set("from the tool")
        return "ok"

    for _, wrap in FORMS:
        model = ScriptedAgentModel([[function_call("c1", "remember", {})], [final_message("done")]])
        agent = wrap(Agent(name="a", model=model, tools=[remember]))
        await Runner.run(agent, "go", hooks=Recording(), run_config=NO_TRACING)
    assert seen == [("guardrail", "from the tool"), ("hook", "from the tool")] * 2
    assert state.get() == "unset"


async def test_a_tool_is_handed_the_context_its_first_parameter_asks_for_as_in_the_sdk() -> None:
    from agents.tool_context import ToolContext as SdkToolContext

    async def asks_tool_context(context: SdkToolContext[Any], arguments: str) -> str:
        return type(context).__name__

    async def asks_run_context(context: RunContextWrapper[Any], arguments: str) -> str:
        return type(context).__name__

    async def asks_nothing(context, arguments):  # type: ignore[no-untyped-def]
        return type(context).__name__

    received: dict[str, list[Any]] = {}
    for form, wrap in FORMS:
        tools = [
            FunctionTool(
                name=body.__name__,
                description="Say the context.",
                params_json_schema={"type": "object"},
                on_invoke_tool=body,
                strict_json_schema=False,
            )
            for body in (asks_tool_context, asks_run_context, asks_nothing)
        ]
        calls = [function_call(f"c{index}", tool.name, {}) for index, tool in enumerate(tools)]
        model = ScriptedAgentModel([calls, [final_message("done")]])
        result = await Runner.run(wrap(Agent(name="a", model=model, tools=tools)), "go", run_config=NO_TRACING)
        received[form] = tool_outputs(result)
    assert received["stock"] == ["ToolContext", "RunContextWrapper", "ToolContext"]
    assert received["scheduled"] == received["stock"]


async def test_a_function_tools_context_annotation_is_read_as_in_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    # The scheduled agent's function_tool is the SDK's own object: the SDK reads its invoker's annotation for
    # each call, as it does without toolsched.
    import agents.tool

    reading = agents.tool._string_annotation_mentions_context_type
    readings: list[str] = []

    def counted(annotation: str, *, type_name: str) -> bool:
        readings.append(annotation)
        return reading(annotation, type_name=type_name)

    @function_tool
    async def noop(index: int) -> str:
        """Does nothing."""
        return "ok"

    counts: dict[str, int] = {}
    for form, wrap in FORMS:
        calls = [function_call(f"c{index}", "noop", {"index": index}) for index in range(3)]
        agent = wrap(Agent(name="a", model=ScriptedAgentModel([calls, [final_message("done")]]), tools=[noop]))
        with monkeypatch.context() as patched:
            patched.setattr(agents.tool, "_string_annotation_mentions_context_type", counted)
            result = await Runner.run(agent, "go", run_config=NO_TRACING)
        assert tool_outputs(result) == ["ok"] * 3
        counts[form] = len(readings)
        readings.clear()
    assert counts == {"stock": 3, "scheduled": 3}


def agent_and_tool(ran: list[str], model: ScriptedAgentModel) -> tuple[Agent[Any], FunctionTool]:
    @function_tool
    async def delete(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    return Agent(name="helper", model=model, tools=[delete]), delete


@pytest.mark.parametrize(("form", "wrap"), FORMS, ids=[name for name, _ in FORMS])
async def test_an_approval_policy_set_on_the_tool_after_the_agent_was_built_holds_the_call(
    form: str, wrap: Wrap
) -> None:
    ran: list[str] = []
    agent, delete = agent_and_tool(ran, script())
    agent = wrap(agent)
    delete.needs_approval = True
    first = await Runner.run(agent, "delete a.txt", run_config=NO_TRACING)
    assert ran == [], form
    assert [item.raw_item.call_id for item in first.interruptions] == ["c1"]


@pytest.mark.parametrize(("form", "wrap"), FORMS, ids=[name for name, _ in FORMS])
async def test_a_caller_permission_revoked_on_the_tool_after_the_agent_was_built_refuses_the_call(
    form: str, wrap: Wrap
) -> None:
    ran: list[str] = []
    agent, delete = agent_and_tool(ran, script())
    agent = wrap(agent)
    delete.allowed_callers = ["programmatic"]
    with pytest.raises(ModelBehaviorError, match="caller direct"):
        await Runner.run(agent, "delete a.txt", run_config=NO_TRACING)
    assert ran == [], form


@pytest.mark.parametrize(("form", "wrap"), FORMS, ids=[name for name, _ in FORMS])
async def test_a_tool_disabled_after_the_agent_was_built_is_not_offered(form: str, wrap: Wrap) -> None:
    ran: list[str] = []
    agent, delete = agent_and_tool(ran, script())
    agent = wrap(agent)
    delete.is_enabled = False
    assert [tool.name for tool in await agent.get_all_tools(RunContextWrapper(None))] == [], form
    with pytest.raises(ModelBehaviorError, match="delete not found"):
        await Runner.run(agent, "delete a.txt", run_config=NO_TRACING)
    assert ran == [], form


async def test_a_field_set_on_a_scheduled_function_tool_is_set_on_the_agents_tool() -> None:
    # The scheduled agent's function_tool is the agent's own object: one tool, whichever agent it is read from.
    _, delete = agent_and_tool([], script())
    agent = scheduled(Agent(name="helper", tools=[delete]))
    (held,) = agent.tools
    assert held is delete and held == delete
    held.description = "Remove a file."
    assert delete.description == "Remove a file."


async def test_a_field_set_on_a_scheduled_copy_stays_its_own() -> None:
    # A FunctionTool built around an invoker of one's own is scheduled as a live copy: its fields read through
    # to the agent's tool, but for those set on the copy.
    async def delete_path(context: Any, arguments: str) -> str:
        return "deleted"

    delete = FunctionTool(
        name="delete", description="Delete a file.", params_json_schema={"type": "object"}, on_invoke_tool=delete_path
    )
    agent = scheduled(Agent(name="helper", tools=[delete]))
    (copied,) = agent.tools
    assert isinstance(copied, FunctionTool) and copied is not delete
    copied.description = "Remove a file."
    delete.timeout_seconds = 5.0
    assert (copied.description, delete.description) == ("Remove a file.", "Delete a file.")
    assert copied.timeout_seconds == 5.0
    assert copy.copy(copied).description == "Remove a file."
