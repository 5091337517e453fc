"""A scripted model provider on 127.0.0.1 that streams its answers as server-sent events, at a set pace.

The official SDK clients talk to it over real HTTP, exactly as to the real
service: each request gets the next scripted answer, whose events are written
one by one with the scripted delay before each. The event builders produce the
wire format of each API (Anthropic Messages, OpenAI Responses and Chat
Completions, Gemini ``streamGenerateContent?alt=sse``) from a plain
description of a turn: some text, then tool calls with their arguments, each
streamed in pieces at a token rate. ``benches/streaming.py`` uses it too.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# One SSE event: (seconds to wait before it, event name or None, data: a dict, or raw text such as "[DONE]").
Event = tuple[float, str | None, Any]


@dataclass
class Call:
    """A tool call of a scripted turn; a ``call_id`` of None is a call the model sent without an ID."""

    call_id: str | None
    name: str
    args: dict[str, Any]


def _with_id(record: dict[str, Any], key: str, call_id: str | None) -> dict[str, Any]:
    """``record`` with ``key`` set to ``call_id`` first, or without it when the call has no ID."""
    return record if call_id is None else {key: call_id, **record}


@dataclass
class Turn:
    """What the model says in one answer: text, then calls; ``tokens_per_second`` paces the stream."""

    text: str = ""
    calls: list[Call] = field(default_factory=list)
    tokens_per_second: float = 0.0
    # Characters per token: arguments are streamed in pieces of this many characters.
    token_chars: int = 4
    # Seconds before the first event (the model thinking).
    first_token: float = 0.0


def _pieces(text: str, turn: Turn) -> list[tuple[float, str]]:
    """``text`` cut into tokens, each with the delay before it at the turn's pace."""
    size = max(1, turn.token_chars)
    gap = 1.0 / turn.tokens_per_second if turn.tokens_per_second else 0.0
    return [(gap, text[start : start + size]) for start in range(0, len(text), size)] or [(0.0, "")]


def anthropic_events(turn: Turn) -> list[Event]:
    events: list[Event] = [
        (
            turn.first_token,
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_scripted",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-scripted",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                },
            },
        )
    ]
    index = 0
    if turn.text:
        events.append((0.0, "content_block_start", _block_start(index, {"type": "text", "text": ""})))
        for gap, piece in _pieces(turn.text, turn):
            delta = {"type": "text_delta", "text": piece}
            events.append((gap, "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        events.append((0.0, "content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    for call in turn.calls:
        block = {"type": "tool_use", **_with_id({}, "id", call.call_id), "name": call.name, "input": {}}
        events.append((0.0, "content_block_start", _block_start(index, block)))
        for gap, piece in _pieces(json.dumps(call.args), turn):
            delta = {"type": "input_json_delta", "partial_json": piece}
            events.append((gap, "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        events.append((0.0, "content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    stop = "tool_use" if turn.calls else "end_turn"
    events.append(
        (
            0.0,
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        )
    )
    events.append((0.0, "message_stop", {"type": "message_stop"}))
    return events


def _block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def responses_events(turn: Turn) -> list[Event]:
    sequence = iter(range(10_000))
    base = {"id": "resp_scripted", "object": "response", "created_at": 0, "model": "gpt-scripted"}
    events: list[Event] = [
        (
            turn.first_token,
            "response.created",
            {
                "type": "response.created",
                "sequence_number": next(sequence),
                "response": {**base, "status": "in_progress", "output": []},
            },
        )
    ]
    output: list[dict[str, Any]] = []
    if turn.text:
        message = {
            "type": "message",
            "id": "msg_scripted",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
        }
        events.append(
            (
                0.0,
                "response.output_item.done",
                {
                    "type": "response.output_item.done",
                    "sequence_number": next(sequence),
                    "output_index": 0,
                    "item": message,
                },
            )
        )
        output.append(message)
    for call in turn.calls:
        index = len(output)
        arguments = json.dumps(call.args)
        item = {
            "type": "function_call",
            "id": f"fc_{index}",
            **_with_id({}, "call_id", call.call_id),
            "name": call.name,
            "arguments": "",
            "status": "in_progress",
        }
        events.append(
            (
                0.0,
                "response.output_item.added",
                {
                    "type": "response.output_item.added",
                    "sequence_number": next(sequence),
                    "output_index": index,
                    "item": item,
                },
            )
        )
        for gap, piece in _pieces(arguments, turn):
            events.append(
                (
                    gap,
                    "response.function_call_arguments.delta",
                    {
                        "type": "response.function_call_arguments.delta",
                        "sequence_number": next(sequence),
                        "item_id": item["id"],
                        "output_index": index,
                        "delta": piece,
                    },
                )
            )
        done = {**item, "arguments": arguments, "status": "completed"}
        events.append(
            (
                0.0,
                "response.output_item.done",
                {
                    "type": "response.output_item.done",
                    "sequence_number": next(sequence),
                    "output_index": index,
                    "item": done,
                },
            )
        )
        output.append(done)
    events.append(
        (
            0.0,
            "response.completed",
            {
                "type": "response.completed",
                "sequence_number": next(sequence),
                "response": {**base, "status": "completed", "output": output},
            },
        )
    )
    return events


def _item_event(kind: str, sequence: int, index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "sequence_number": sequence, "output_index": index, "item": item}


def chat_events(turn: Turn) -> list[Event]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-scripted",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "gpt-scripted",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    events: list[Event] = [(turn.first_token, None, chunk({"role": "assistant", "content": ""}))]
    for gap, piece in _pieces(turn.text, turn) if turn.text else []:
        events.append((gap, None, chunk({"content": piece})))
    for index, call in enumerate(turn.calls):
        opening = {
            "index": index,
            **_with_id({}, "id", call.call_id),
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        events.append((0.0, None, chunk({"tool_calls": [opening]})))
        for gap, piece in _pieces(json.dumps(call.args), turn):
            events.append((gap, None, chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})))
    events.append((0.0, None, chunk({}, "tool_calls" if turn.calls else "stop")))
    events.append((0.0, None, "[DONE]"))
    return events


def gemini_events(turn: Turn) -> list[Event]:
    def chunk(parts: list[dict[str, Any]], finish: str | None = None) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if finish is not None:
            candidate["finishReason"] = finish
        return {"candidates": [candidate], "modelVersion": "gemini-scripted"}

    events: list[Event] = []
    delay = turn.first_token
    for gap, piece in _pieces(turn.text, turn) if turn.text else []:
        events.append((delay + gap, None, chunk([{"text": piece}])))
        delay = 0.0
    for call in turn.calls:
        # Gemini sends each call whole, once the model has produced all of it.
        tokens = max(1, len(json.dumps(call.args)) // max(1, turn.token_chars))
        wait = tokens / turn.tokens_per_second if turn.tokens_per_second else 0.0
        events.append(
            (
                delay + wait,
                None,
                chunk([{"functionCall": _with_id({"name": call.name, "args": call.args}, "id", call.call_id)}]),
            )
        )
        delay = 0.0
    final = chunk([], "STOP")
    final["usageMetadata"] = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}
    events.append((delay, None, final))
    return events


def anthropic_message(turn: Turn) -> dict[str, Any]:
    """The turn as one (non-streamed) Messages response."""
    content: list[dict[str, Any]] = [{"type": "text", "text": turn.text}] if turn.text else []
    content += [
        {"type": "tool_use", **_with_id({}, "id", call.call_id), "name": call.name, "input": call.args}
        for call in turn.calls
    ]
    return {
        "id": "msg_scripted",
        "type": "message",
        "role": "assistant",
        "model": "claude-scripted",
        "content": content,
        "stop_reason": "tool_use" if turn.calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def responses_response(turn: Turn) -> dict[str, Any]:
    """The turn as one (non-streamed) Responses response."""
    output: list[dict[str, Any]] = []
    if turn.text:
        output.append(
            {
                "type": "message",
                "id": "msg_scripted",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
            }
        )
    output += [
        {
            "type": "function_call",
            "id": f"fc_{index}",
            **_with_id({}, "call_id", call.call_id),
            "name": call.name,
            "arguments": json.dumps(call.args),
            "status": "completed",
        }
        for index, call in enumerate(turn.calls)
    ]
    return {
        "id": "resp_scripted",
        "object": "response",
        "created_at": 0,
        "model": "gpt-scripted",
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


def chat_completion(turn: Turn) -> dict[str, Any]:
    """The turn as one (non-streamed) chat completion."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
    if turn.calls:
        message["tool_calls"] = [
            {
                **_with_id({}, "id", call.call_id),
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.args)},
            }
            for call in turn.calls
        ]
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if turn.calls else "stop"}],
    }


def gemini_response(turn: Turn) -> dict[str, Any]:
    """The turn as one (non-streamed) generateContent response."""
    parts: list[dict[str, Any]] = [{"text": turn.text}] if turn.text else []
    parts += [
        {"functionCall": _with_id({"name": call.name, "args": call.args}, "id", call.call_id)} for call in turn.calls
    ]
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "index": 0, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": "gemini-scripted",
    }


WHOLE = {
    "anthropic": anthropic_message,
    "openai_responses": responses_response,
    "openai_chat": chat_completion,
    "gemini": gemini_response,
}

BUILDERS = {
    "anthropic": anthropic_events,
    "openai_responses": responses_events,
    "openai_chat": chat_events,
    "gemini": gemini_events,
}


class ScriptedProvider:
    """Streams scripted answers over HTTP on 127.0.0.1; use as a context manager (``url`` while open).

    ``answers`` are event lists (from the builders above), one per request,
    in order; a dict is a whole answer, sent as its JSON body.
    ``break_after`` maps an answer's position to the number of events after
    which the connection is cut (a stream that fails midway);
    ``end_after`` to the number after which the body ends as a whole HTTP
    body would (a stream that stops early without a transport error).
    ``gates`` maps an answer's position to an event the cut or end waits
    for (set by the test, e.g. once a tool started; at most ``GATE_LIMIT``
    seconds). ``requests`` keeps each request's JSON body; ``sent_at`` the
    time each answer's last event was written; ``hung_up`` the answers whose
    client closed the connection before their end (``hang_up`` is set at the first).
    """

    GATE_LIMIT = 20.0

    def __init__(
        self,
        answers: list[list[Event] | dict[str, Any]],
        *,
        break_after: dict[int, int] | None = None,
        end_after: dict[int, int] | None = None,
        gates: dict[int, threading.Event] | None = None,
    ) -> None:
        self.answers = list(answers)
        self.break_after = dict(break_after or {})
        self.end_after = dict(end_after or {})
        self.gates = dict(gates or {})
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.sent_at: list[float] = []
        # The answers whose client hung up before their last event was written.
        self.hung_up: list[int] = []
        self.hang_up = threading.Event()
        self._lock = threading.Lock()
        self._served = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "the provider is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> ScriptedProvider:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b"{}"
                with provider._lock:
                    provider.requests.append(json.loads(body or b"{}"))
                    provider.paths.append(self.path)
                    position = provider._served
                    provider._served += 1
                    events = provider.answers[position] if position < len(provider.answers) else None
                if isinstance(events, dict):
                    # A whole (non-streamed) answer: its JSON body.
                    payload = json.dumps(events).encode()
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.send_header("connection", "close")
                    self.end_headers()
                    self.close_connection = True
                    self.wfile.write(payload)
                    return
                if events is None:
                    payload = json.dumps({"error": {"message": "no scripted answer left", "type": "test"}}).encode()
                    self.send_response(400)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("transfer-encoding", "chunked")
                # Said, not only done: a client that pooled this connection could send its next request
                # on it as the server closes it ("Server disconnected" under load).
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                cut = provider.break_after.get(position)
                end = provider.end_after.get(position)
                gate = provider.gates.get(position)
                try:
                    for number, (delay, name, data) in enumerate(events):
                        if (cut is not None and number >= cut) or (end is not None and number >= end):
                            if gate is not None:
                                gate.wait(provider.GATE_LIMIT)
                            if end is not None and number >= end:
                                # The body ends where an event would have begun: a whole, shorter answer.
                                self.wfile.write(b"0\r\n\r\n")
                                self.wfile.flush()
                                return
                            # The connection drops in the middle of a chunk: the client sees a broken body.
                            self.wfile.write(b"400\r\ndata: {")
                            self.wfile.flush()
                            return
                        if delay:
                            time.sleep(delay)
                        text = data if isinstance(data, str) else json.dumps(data)
                        frame = ((f"event: {name}\n" if name else "") + f"data: {text}\n\n").encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
                        self.wfile.flush()
                    if cut is not None and cut >= len(events):
                        # Every event was sent, and the connection drops before the body's end.
                        self.wfile.write(b"400\r\ndata: {")
                        self.wfile.flush()
                        return
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    with provider._lock:
                        provider.hung_up.append(position)
                    provider.hang_up.set()
                    return
                with provider._lock:
                    provider.sent_at.append(time.perf_counter())

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
        self._server = None
