"""What a scripted model says (``Reply``, ``ToolUse``) and what it was asked (``Request``)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from toolsched.errors import OptionError

Api = Literal["anthropic", "openai_responses", "openai_chat", "gemini"]
"""The four wire formats a scripted provider speaks."""

APIS: tuple[Api, ...] = ("anthropic", "openai_responses", "openai_chat", "gemini")


@dataclass(frozen=True, slots=True)
class ToolUse:
    """One tool call in a scripted reply: the model calls ``name`` with ``args``.

    ``id`` is the call's ID as the API carries it; when it is None the
    provider makes one from the reply's and the call's positions
    (``toolu_1_0`` for Anthropic, ``call_1_0`` for OpenAI) and Gemini, whose
    calls need no ID, sends none. ``send_id=False`` sends the call without
    any ID, as some models and gateways do, whatever the API. Raises
    ``OptionError`` for an empty name, arguments that are not a JSON object,
    or an empty ``id``.
    """

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None
    send_id: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise OptionError(f"ToolUse name must be a non-empty string, not {self.name!r}")
        if not isinstance(self.args, Mapping):
            raise OptionError(f"ToolUse args must be a mapping (a JSON object), not {type(self.args).__name__}")
        try:
            json.dumps(dict(self.args), allow_nan=False)
        except (TypeError, ValueError) as error:
            raise OptionError(f"ToolUse args of {self.name!r} are not JSON: {error}") from None
        if self.id is not None and (not isinstance(self.id, str) or not self.id):
            raise OptionError(f"ToolUse id must be a non-empty string or None, not {self.id!r}")
        if not isinstance(self.send_id, bool):
            raise OptionError(f"ToolUse send_id must be True or False, not {self.send_id!r}")


@dataclass(frozen=True, slots=True)
class Reply:
    """One answer of a scripted model: ``text``, then ``tool_uses``, in that order.

    ``tool_uses`` is kept as a tuple. A reply with tool uses ends the way each API ends a turn that asks for
    tools (``stop_reason="tool_use"``, ``finish_reason="tool_calls"``, ...);
    one without ends the conversation's turn. When streamed, text and
    arguments are sent in pieces of ``token_chars`` characters at
    ``tokens_per_second`` (0: as fast as possible), after ``first_token``
    seconds. Raises ``OptionError`` for a value out of range.
    """

    text: str = ""
    tool_uses: Sequence[ToolUse] = ()
    tokens_per_second: float = 0.0
    token_chars: int = 4
    first_token: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise OptionError(f"Reply text must be a string, not {type(self.text).__name__}")
        given = self.tool_uses
        if isinstance(given, (str, bytes, Mapping)) or not isinstance(given, Iterable):
            raise OptionError(f"Reply tool_uses must be a list of ToolUse values, not {type(given).__name__}")
        uses = tuple(given)
        for use in uses:
            if not isinstance(use, ToolUse):
                raise OptionError(f"Reply tool_uses must be ToolUse values, not {type(use).__name__}")
        object.__setattr__(self, "tool_uses", uses)
        for name in ("tokens_per_second", "first_token"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise OptionError(f"Reply {name} must be a finite number of at least 0, not {value!r}")
        if isinstance(self.token_chars, bool) or not isinstance(self.token_chars, int) or self.token_chars < 1:
            raise OptionError(f"Reply token_chars must be an integer of at least 1, not {self.token_chars!r}")


@dataclass(frozen=True, slots=True)
class Request:
    """A request the scripted provider received.

    ``api`` is the wire format it was read as (from its path), ``body`` its
    JSON body, ``stream`` whether it asked for a streamed answer.
    """

    api: Api
    path: str
    body: dict[str, Any]
    stream: bool

    def tool_outputs(self) -> list[str]:
        """The text of every tool result the request carries back to the model, in the conversation's order.

        Non-text parts (images) are left out; a Gemini ``functionResponse`` is
        its ``output`` (or ``error``) when it holds only that, else its JSON.
        """
        if self.api == "anthropic":
            return [
                _text_of(block.get("content", ""))
                for message in _dicts(self.body.get("messages"))
                if message.get("role") == "user" and isinstance(message.get("content"), list)
                for block in _dicts(message["content"])
                if block.get("type") == "tool_result"
            ]
        if self.api == "openai_responses":
            items = self.body.get("input")
            return [
                _text_of(item.get("output", ""))
                for item in _dicts(items if isinstance(items, list) else [])
                if item.get("type") == "function_call_output"
            ]
        if self.api == "openai_chat":
            return [
                _text_of(message.get("content", ""))
                for message in _dicts(self.body.get("messages"))
                if message.get("role") == "tool"
            ]
        outputs = []
        for content in _dicts(self.body.get("contents")):
            for part in _dicts(content.get("parts")):
                response = part.get("functionResponse")
                if isinstance(response, dict):
                    outputs.append(_gemini_output(response.get("response")))
        return outputs


Script = Reply | Callable[[Request], Reply]
"""One entry of a script: a fixed reply, or a function of the request that returns one."""


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text")
        )
    return json.dumps(content)


def _gemini_output(response: Any) -> str:
    if isinstance(response, dict) and len(response) == 1:
        (value,) = response.values()
        if next(iter(response)) in ("output", "error"):
            return value if isinstance(value, str) else json.dumps(value)
    return json.dumps(response)
