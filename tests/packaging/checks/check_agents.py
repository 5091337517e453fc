"""examples/agents_sdk.py with the ``agents`` extra alone, driven by a scripted Agents SDK model."""

from __future__ import annotations

import json
from typing import Any

import anyio
from agents import Model, ModelResponse, Usage, set_tracing_disabled
from example_scripts import load_example
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText


class ScriptedAgentModel(Model):
    """Each turn returns the next list of output items; records each turn's input."""

    def __init__(self, turns: list[list[Any]]) -> None:
        self.turns = turns
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        self.inputs.append(input)
        return ModelResponse(output=self.turns.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the scripted model does not stream")


def call(call_id: str, name: str, args: dict[str, Any]) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call", call_id=call_id, name=name, arguments=json.dumps(args), id=f"fc_{call_id}"
    )


async def main() -> None:
    set_tracing_disabled(True)  # the SDK would upload its traces
    module = load_example("agents_sdk")
    text = ResponseOutputText(type="output_text", text="Paris is 18°C; noted.", annotations=[])
    model = ScriptedAgentModel(
        [
            [
                call("c1", "get_weather", {"city": "Paris"}),
                call("c2", "save_note", {"text": "Paris 18", "folder": "/etc/cron.d"}),
                call("c3", "save_note", {"text": "Paris 18", "folder": "weather"}),
            ],
            [ResponseOutputMessage(type="message", id="m", role="assistant", status="completed", content=[text])],
        ]
    )
    print("answer:", await module.main(model))
    for item in model.inputs[1]:
        if item.get("type") == "function_call_output":
            print(f"{item['call_id']}: {item['output']}")
    print("notes:", module.NOTES)


anyio.run(main)
