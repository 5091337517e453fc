"""A scripted reply in each API's wire format: the JSON body of a plain answer, or the events of a streamed one."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from toolsched.errors import OptionError
from toolsched.testing._script import APIS, Api, Reply, ToolUse


class StreamEvent(NamedTuple):
    """One server-sent event of a streamed answer."""

    delay: float
    """Seconds to wait before sending it."""
    name: str | None
    """The ``event:`` line, or None for APIs that send ``data:`` lines only."""
    data: Any
    """The ``data:`` payload: a JSON value, or raw text such as ``[DONE]``."""


def response_body(api: Api, reply: Reply, *, number: int = 1) -> dict[str, Any]:
    """The JSON body with which ``api`` answers a request that did not ask to stream.

    ``number`` is the reply's position in its script, used for the IDs the
    reply does not give. The official SDKs parse it as a live answer, and
    toolsched's provider adapters read it as it is (a plain dict). Raises
    ``OptionError`` for an unknown ``api`` or a ``reply`` that is no ``Reply``.
    """
    _check_api(api)
    _check_reply(reply)
    if api == "anthropic":
        content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        content += [
            {"type": "tool_use", **_id(api, use, number, index), "name": use.name, "input": dict(use.args)}
            for index, use in enumerate(reply.tool_uses)
        ]
        return {
            "id": f"msg_scripted_{number}",
            "type": "message",
            "role": "assistant",
            "model": "scripted",
            "content": content,
            "stop_reason": "tool_use" if reply.tool_uses else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
    if api == "openai_responses":
        output = [_responses_message(reply.text, number)] if reply.text else []
        output += [_responses_call(use, number, index, done=True) for index, use in enumerate(reply.tool_uses)]
        return {**_responses_base(number), "status": "completed", "output": output, "usage": _responses_usage()}
    if api == "openai_chat":
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.tool_uses:
            message["tool_calls"] = [
                {
                    **_id(api, use, number, index),
                    "type": "function",
                    "function": {"name": use.name, "arguments": json.dumps(dict(use.args))},
                }
                for index, use in enumerate(reply.tool_uses)
            ]
        return {
            "id": f"chatcmpl-scripted-{number}",
            "object": "chat.completion",
            "created": 0,
            "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if reply.tool_uses else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
    parts: list[dict[str, Any]] = [{"text": reply.text}] if reply.text else []
    parts += [{"functionCall": _gemini_call(use)} for use in reply.tool_uses]
    return {**_gemini_chunk(parts, "STOP"), "usageMetadata": _gemini_usage()}


def stream_events(api: Api, reply: Reply, *, number: int = 1) -> list[StreamEvent]:
    """The server-sent events with which ``api`` streams ``reply``, each with the delay before it.

    Text and tool arguments are cut into pieces of ``reply.token_chars``
    characters sent at ``reply.tokens_per_second``; Gemini sends each call
    whole, once the model would have produced all of it. Raises
    ``OptionError`` as ``response_body`` does.
    """
    _check_api(api)
    _check_reply(reply)
    if api == "anthropic":
        return _anthropic_events(reply, number)
    if api == "openai_responses":
        return _responses_events(reply, number)
    if api == "openai_chat":
        return _chat_events(reply, number)
    return _gemini_events(reply)


def error_body(api: Api, message: str) -> dict[str, Any]:
    """The JSON error body ``api`` answers a bad request with."""
    if api == "anthropic":
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    if api == "gemini":
        return {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}


def _check_api(api: str) -> None:
    if api not in APIS:
        raise OptionError(f"unknown API {api!r}: expected one of {', '.join(APIS)}")


def _check_reply(reply: Any) -> None:
    if not isinstance(reply, Reply):
        raise OptionError(f"reply must be a Reply, not {type(reply).__name__}")


def _call_id(api: Api, use: ToolUse, number: int, index: int) -> str:
    if use.id is not None:
        return use.id
    return f"toolu_{number}_{index}" if api == "anthropic" else f"call_{number}_{index}"


def _id(api: Api, use: ToolUse, number: int, index: int, key: str = "id") -> dict[str, str]:
    """The call's ID field for a call record (``{key: id}``), or none when the call is sent without one."""
    return {key: _call_id(api, use, number, index)} if use.send_id else {}


def _pieces(text: str, reply: Reply) -> list[tuple[float, str]]:
    """``text`` cut into tokens, each with the delay before it at the reply's pace."""
    size = reply.token_chars
    gap = 1.0 / reply.tokens_per_second if reply.tokens_per_second else 0.0
    return [(gap, text[start : start + size]) for start in range(0, len(text), size)] or [(0.0, "")]


def _anthropic_events(reply: Reply, number: int) -> list[StreamEvent]:
    message = {**response_body("anthropic", Reply(), number=number), "content": [], "stop_reason": None}
    message["usage"] = {"input_tokens": 10, "output_tokens": 1}
    events = [StreamEvent(reply.first_token, "message_start", {"type": "message_start", "message": message})]

    def block(index: int, start: dict[str, Any], deltas: list[tuple[float, dict[str, Any]]]) -> None:
        events.append(
            StreamEvent(
                0.0, "content_block_start", {"type": "content_block_start", "index": index, "content_block": start}
            )
        )
        for gap, delta in deltas:
            events.append(
                StreamEvent(gap, "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            )
        events.append(StreamEvent(0.0, "content_block_stop", {"type": "content_block_stop", "index": index}))

    index = 0
    if reply.text:
        pieces = _pieces(reply.text, reply)
        block(index, {"type": "text", "text": ""}, [(gap, {"type": "text_delta", "text": p}) for gap, p in pieces])
        index += 1
    for position, use in enumerate(reply.tool_uses):
        start = {"type": "tool_use", **_id("anthropic", use, number, position), "name": use.name, "input": {}}
        pieces = _pieces(json.dumps(dict(use.args)), reply)
        block(index, start, [(gap, {"type": "input_json_delta", "partial_json": p}) for gap, p in pieces])
        index += 1
    stop = "tool_use" if reply.tool_uses else "end_turn"
    delta = {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}}
    events.append(StreamEvent(0.0, "message_delta", {**delta, "usage": {"output_tokens": 5}}))
    events.append(StreamEvent(0.0, "message_stop", {"type": "message_stop"}))
    return events


def _responses_base(number: int) -> dict[str, Any]:
    return {
        "id": f"resp_scripted_{number}",
        "object": "response",
        "created_at": 0,
        "model": "scripted",
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


def _responses_usage() -> dict[str, Any]:
    return {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }


def _responses_message(text: str, number: int) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_scripted_{number}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _responses_call(use: ToolUse, number: int, index: int, *, done: bool) -> dict[str, Any]:
    call_id = _call_id("openai_responses", use, number, index)
    return {
        "type": "function_call",
        "id": f"fc_{call_id}" if use.send_id else f"fc_{number}_{index}",
        **_id("openai_responses", use, number, index, "call_id"),
        "name": use.name,
        "arguments": json.dumps(dict(use.args)) if done else "",
        "status": "completed" if done else "in_progress",
    }


def _responses_events(reply: Reply, number: int) -> list[StreamEvent]:
    sequence = iter(range(1_000_000))
    base = _responses_base(number)

    def event(delay: float, kind: str, **fields: Any) -> StreamEvent:
        return StreamEvent(delay, kind, {"type": kind, "sequence_number": next(sequence), **fields})

    events = [event(reply.first_token, "response.created", response={**base, "status": "in_progress", "output": []})]
    output: list[dict[str, Any]] = []
    if reply.text:
        # As the API streams a message: the item and its text part begin, the text comes in deltas, both end.
        message = _responses_message(reply.text, number)
        begun = {**message, "status": "in_progress", "content": []}
        part = {"item_id": message["id"], "output_index": 0, "content_index": 0}
        events.append(event(0.0, "response.output_item.added", output_index=0, item=begun))
        empty = {"type": "output_text", "text": "", "annotations": []}
        events.append(event(0.0, "response.content_part.added", **part, part=empty))
        for gap, piece in _pieces(reply.text, reply):
            events.append(event(gap, "response.output_text.delta", **part, delta=piece, logprobs=[]))
        events.append(event(0.0, "response.output_text.done", **part, text=reply.text, logprobs=[]))
        events.append(event(0.0, "response.content_part.done", **part, part=message["content"][0]))
        events.append(event(0.0, "response.output_item.done", output_index=0, item=message))
        output.append(message)
    for position, use in enumerate(reply.tool_uses):
        index = len(output)
        item = _responses_call(use, number, position, done=False)
        events.append(event(0.0, "response.output_item.added", output_index=index, item=item))
        for gap, piece in _pieces(json.dumps(dict(use.args)), reply):
            delta = {"item_id": item["id"], "output_index": index, "delta": piece}
            events.append(event(gap, "response.function_call_arguments.delta", **delta))
        done = _responses_call(use, number, position, done=True)
        events.append(event(0.0, "response.output_item.done", output_index=index, item=done))
        output.append(done)
    completed = {**base, "status": "completed", "output": output, "usage": _responses_usage()}
    events.append(event(0.0, "response.completed", response=completed))
    return events


def _chat_events(reply: Reply, number: int) -> list[StreamEvent]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-scripted-{number}",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "scripted",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    events = [StreamEvent(reply.first_token, None, chunk({"role": "assistant", "content": ""}))]
    for gap, piece in _pieces(reply.text, reply) if reply.text else []:
        events.append(StreamEvent(gap, None, chunk({"content": piece})))
    for index, use in enumerate(reply.tool_uses):
        opening = {
            "index": index,
            **_id("openai_chat", use, number, index),
            "type": "function",
            "function": {"name": use.name, "arguments": ""},
        }
        events.append(StreamEvent(0.0, None, chunk({"tool_calls": [opening]})))
        for gap, piece in _pieces(json.dumps(dict(use.args)), reply):
            events.append(
                StreamEvent(gap, None, chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
            )
    events.append(StreamEvent(0.0, None, chunk({}, "tool_calls" if reply.tool_uses else "stop")))
    events.append(StreamEvent(0.0, None, "[DONE]"))
    return events


def _gemini_call(use: ToolUse) -> dict[str, Any]:
    call: dict[str, Any] = {"name": use.name, "args": dict(use.args)}
    if use.id is not None and use.send_id:
        call["id"] = use.id
    return call


def _gemini_chunk(parts: list[dict[str, Any]], finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "modelVersion": "scripted"}


def _gemini_usage() -> dict[str, Any]:
    return {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}


def _gemini_events(reply: Reply) -> list[StreamEvent]:
    events: list[StreamEvent] = []
    delay = reply.first_token
    for gap, piece in _pieces(reply.text, reply) if reply.text else []:
        events.append(StreamEvent(delay + gap, None, _gemini_chunk([{"text": piece}])))
        delay = 0.0
    for use in reply.tool_uses:
        tokens = len(_pieces(json.dumps(dict(use.args)), reply))  # as many as the other APIs stream
        wait = tokens / reply.tokens_per_second if reply.tokens_per_second else 0.0
        events.append(StreamEvent(delay + wait, None, _gemini_chunk([{"functionCall": _gemini_call(use)}])))
        delay = 0.0
    final = _gemini_chunk([], "STOP")
    final["usageMetadata"] = _gemini_usage()
    events.append(StreamEvent(delay, None, final))
    return events
