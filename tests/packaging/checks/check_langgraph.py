"""examples/langgraph_tool_node.py with the ``langgraph`` extra alone, driven by a scripted chat model."""

from __future__ import annotations

from typing import Any

import anyio
from example_scripts import load_example
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult


class ScriptedChatModel(BaseChatModel):
    """Answers with the next message of its script; records the messages of each request."""

    script: list[AIMessage]
    seen: list[list[BaseMessage]] = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=self.script.pop(0))])


def calls(*entries: tuple[str, str, dict[str, Any]]) -> AIMessage:
    return AIMessage(
        content="", tool_calls=[{"id": i, "name": n, "args": a, "type": "tool_call"} for i, n, a in entries]
    )


async def main() -> None:
    module = load_example("langgraph_tool_node")
    model = ScriptedChatModel(
        script=[
            calls(
                ("c1", "get_weather", {"city": "Paris"}),
                ("c2", "save_note", {"text": "Paris 18", "folder": "/etc/cron.d"}),
                ("c3", "save_note", {"text": "Paris 18", "folder": "weather"}),
            ),
            AIMessage("Paris is 18°C; noted."),
        ]
    )
    print("answer:", await module.main(model))
    for message in model.seen[1]:
        if isinstance(message, ToolMessage):
            print(f"{message.tool_call_id} {message.status}: {message.content}")
    print("notes:", module.NOTES)


anyio.run(main)
