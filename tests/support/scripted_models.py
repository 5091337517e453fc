"""Chat models that answer from a script instead of a network: what the integration tests drive frameworks with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import PrivateAttr

from toolsched.testing._agents_model import ScriptedAgentModel, final_message, function_call


class ScriptedChatModel(BaseChatModel):
    """A LangChain chat model that answers with the next message of its script and records what it was sent."""

    script: list[AIMessage]
    _seen: list[list[BaseMessage]] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def seen(self) -> list[list[BaseMessage]]:
        return self._seen

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self._seen.append(list(messages))
        if not self.script:
            raise AssertionError("the model was called more often than its script allows")
        return ChatResult(generations=[ChatGeneration(message=self.script.pop(0))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._generate(messages, stop)


def tool_calls_message(*calls: tuple[str, str, dict[str, Any]]) -> AIMessage:
    """An AIMessage asking for ``(id, name, args)`` calls."""
    return AIMessage(content="", tool_calls=[{"id": i, "name": n, "args": a, "type": "tool_call"} for i, n, a in calls])


# The scripted Agents SDK model is the package's own, shared with the benchmarks.
__all__ = ["ScriptedAgentModel", "ScriptedChatModel", "final_message", "function_call", "tool_calls_message"]
