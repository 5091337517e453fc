"""A scripted Agents SDK ``Model`` (needs ``openai-agents``): what the tests and benchmarks drive ``Runner.run`` with.

``ScriptedAgentModel(turns)`` answers each request with the next list of output items; given a
function of the request's input instead, it answers with what that returns (any number of times).
``function_call``, ``final_message`` and ``calls_then`` build the items.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from agents import AgentOutputSchemaBase, Handoff, Model, ModelResponse, ModelSettings, ModelTracing, Tool, Usage
from agents.items import TResponseInputItem, TResponseStreamEvent
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

Input = str | list[TResponseInputItem]


class ScriptedAgentModel(Model):
    """Answers each request with the next turn of its script (or what ``turns(input)`` returns); records the
    inputs in ``inputs`` unless ``record`` is false (a benchmark's thousands of runs)."""

    def __init__(self, turns: list[list[Any]] | Callable[[Input], list[Any]], *, record: bool = True) -> None:
        self.turns = turns
        self.record = record
        self.inputs: list[Input] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: Input,
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any | None,
    ) -> ModelResponse:
        if self.record:
            self.inputs.append(input)
        if callable(self.turns):
            return ModelResponse(output=self.turns(input), usage=Usage(), response_id=None)
        if not self.turns:
            raise AssertionError("the model was called more often than its script allows")
        return ModelResponse(output=self.turns.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the scripted model does not stream")


def function_call(call_id: str, name: str, args: dict[str, Any] | str) -> ResponseFunctionToolCall:
    """The model's call of ``name`` (``args`` as a dict, or the argument text as sent)."""
    arguments = args if isinstance(args, str) else json.dumps(args)
    return ResponseFunctionToolCall(
        type="function_call", call_id=call_id, name=name, arguments=arguments, id=f"fc_{call_id}", status="completed"
    )


def final_message(text: str) -> ResponseOutputMessage:
    """The model's final answer."""
    return ResponseOutputMessage(
        type="message",
        id="msg_final",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def calls_then(calls: Sequence[Any], final: str) -> Callable[[Input], list[Any]]:
    """A script for any number of runs: ``calls`` asked for, then, once their outputs are in, ``final``."""
    asked, answered = list(calls), [final_message(final)]

    def turn(input: Input) -> list[Any]:
        last = input[-1] if isinstance(input, list) and input else None
        kind = last.get("type") if isinstance(last, dict) else getattr(last, "type", None)
        return list(answered if kind == "function_call_output" else asked)

    return turn
