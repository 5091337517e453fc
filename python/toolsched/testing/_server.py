"""A scripted model on 127.0.0.1 speaking each provider's HTTP API, so the official SDK clients work against it."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from toolsched.errors import OptionError
from toolsched.testing._script import Api, Reply, Request, Script
from toolsched.testing._wire import StreamEvent, error_body, response_body, stream_events

# Seconds between the last event sent and the cut of a broken stream.
_CUT_DELAY = 0.1


def api_of(path: str) -> Api | None:
    """The API a request path belongs to, or None: ``/v1/messages`` is Anthropic's, and so on."""
    route = urlsplit(path).path
    if route.endswith("/messages"):
        return "anthropic"
    if route.endswith("/responses"):
        return "openai_responses"
    if route.endswith("/chat/completions"):
        return "openai_chat"
    if route.endswith((":generateContent", ":streamGenerateContent")):
        return "gemini"
    return None


class ScriptedProvider:
    """A local HTTP server that answers model requests from a script: one entry per request, in order.

    It speaks the Anthropic Messages, OpenAI Responses, OpenAI Chat
    Completions and Gemini APIs, each told by the request's path, and
    answers a request that asks to stream (``stream: true``, or Gemini's
    ``streamGenerateContent``) with that API's server-sent events, paced as
    the reply says; any other with the API's JSON body. Point an official
    SDK client at ``url`` (its ``base_url``; any API key) and it works as
    against the real service, nothing leaving the machine.

    Each entry of ``script`` is a ``Reply``, or a function that takes the
    ``Request`` and returns one, or an exact answer: a list of
    ``StreamEvent`` (or ``(delay, name, data)`` tuples), streamed as given
    whatever the request asked (to script error events or malformed
    streams), or a dict, sent as the JSON body. A request past the end of
    the script, or whose function raised (any ``BaseException``), is
    answered with the API's 400 error naming why, one to an unknown path
    with a 404 (SDKs retry neither).

    ``break_after`` maps an entry's position (from 0) to a number of events
    after which its stream's connection is cut mid-chunk, a tenth of a
    second after the last event sent (so the client has read those): a
    stream that breaks midway (a number of at least the event count cuts
    after the last event, before the body's end). ``end_after`` maps a
    position to a number of events after which the body ends cleanly, as a
    whole HTTP body: a stream that stops early with no transport error.
    ``gates`` maps a position to a ``threading.Event`` that its cut or end
    waits for (at most ``gate_limit`` seconds), so that a test can break a
    stream only once its code reached a point (a tool started, say).

    Use it as a context manager (it serves while the block runs). Raises
    ``OptionError`` for a script entry of the wrong kind, an exact answer
    that cannot be sent (not JSON, a delay that is not a finite number of
    seconds of at least 0), and options of the wrong kind.
    """

    def __init__(
        self,
        script: Iterable[Script | Sequence[StreamEvent | tuple[float, str | None, Any]] | Mapping[str, Any]],
        *,
        break_after: Mapping[int, int] | None = None,
        end_after: Mapping[int, int] | None = None,
        gates: Mapping[int, threading.Event] | None = None,
        gate_limit: float = 20.0,
    ) -> None:
        if isinstance(script, (str, bytes, Mapping)) or not isinstance(script, Iterable):
            raise OptionError(f"the script must be a list of entries, not {type(script).__name__}")
        self._script: list[Script | list[StreamEvent] | dict[str, Any]] = []
        for position, entry in enumerate(script):
            if isinstance(entry, Reply) or callable(entry):
                self._script.append(entry)
            elif isinstance(entry, Mapping):
                self._script.append(dict(entry))
                _check_json(entry, f"script entry {position}")
            elif isinstance(entry, Sequence) and not isinstance(entry, str | bytes):
                if not all(isinstance(event, tuple) and len(event) == 3 for event in entry):
                    raise OptionError(f"script entry {position} must hold (delay, name, data) events")
                events = [StreamEvent(*event) for event in entry]
                for number, event in enumerate(events):
                    _check_event(event, f"script entry {position}, event {number}")
                self._script.append(events)
            else:
                raise OptionError(
                    f"script entry {position} must be a Reply, a function returning one, a list of events or a"
                    f" JSON body, not {type(entry).__name__}"
                )
        # Checked here: a wrong value would fail the server's thread mid-answer, and the SDK, seeing the
        # connection drop, would send the request again and take the next entry's answer for this one.
        self.break_after: dict[int, int] = _counts(break_after, "break_after")
        self.end_after: dict[int, int] = _counts(end_after, "end_after")
        self.gates: dict[int, threading.Event] = dict(_mapping(gates, "gates"))
        for position, gate in self.gates.items():
            _check_position(position, "gates")
            if not callable(getattr(gate, "wait", None)):
                raise OptionError(f"gates[{position!r}] must be a threading.Event, not {type(gate).__name__}")
        if isinstance(gate_limit, bool) or not isinstance(gate_limit, int | float) or not 0 <= gate_limit < math.inf:
            raise OptionError(f"gate_limit must be a finite number of seconds of at least 0, not {gate_limit!r}")
        self.gate_limit = gate_limit
        self.requests: list[Request] = []
        """Every request received, in order."""
        self.sent_at: list[float] = []
        """``time.perf_counter()`` when each answer's last byte was written, in the order they finished."""
        self.hung_up: list[int] = []
        """The positions of the answers whose client closed the connection before their end."""
        self.hang_up = threading.Event()
        """Set when a client first closes the connection before its answer's end."""
        self._lock = threading.Lock()
        self._served = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL to give the SDK client (``http://127.0.0.1:PORT``), while the server runs."""
        if self._server is None:
            raise RuntimeError("the scripted provider is not running: use it in a `with` block")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def unused(self) -> int:
        """How many script entries no request has taken yet."""
        with self._lock:
            return max(0, len(self._script) - self._served)

    def __enter__(self) -> ScriptedProvider:
        if self._server is not None:
            raise RuntimeError("the scripted provider is already running")
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-provider", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join()

    def _take(self, request: Request) -> tuple[int, Script | list[StreamEvent] | dict[str, Any] | None]:
        with self._lock:
            self.requests.append(request)
            position = self._served
            self._served += 1
            return position, self._script[position] if position < len(self._script) else None

    def _finished(self) -> None:
        with self._lock:
            self.sent_at.append(time.perf_counter())

    def _hung_up(self, position: int) -> None:
        with self._lock:
            self.hung_up.append(position)
        self.hang_up.set()


# The longest wait the server makes at once: half of ``threading.TIMEOUT_MAX`` (146 years on Linux), since
# ``time.sleep`` refuses that maximum itself (EINVAL) and raises ``OverflowError`` past it, as ``Event.wait`` does.
_LONGEST_WAIT = threading.TIMEOUT_MAX / 2


def _waitable(seconds: float) -> float:
    """``seconds``, or the longest wait the platform takes at once when a finite delay is longer still."""
    return min(seconds, _LONGEST_WAIT)


def _check_json(value: Any, what: str) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise OptionError(f"{what} is not JSON: {error}") from None


def _check_event(event: StreamEvent, what: str) -> None:
    delay = event.delay
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay < math.inf:
        raise OptionError(f"{what}: the delay must be a finite number of seconds of at least 0, not {delay!r}")
    if event.name is not None and not isinstance(event.name, str):
        raise OptionError(f"{what}: the name must be a string or None, not {type(event.name).__name__}")
    if not isinstance(event.data, str):
        _check_json(event.data, f"{what}: the data")
    for text in (event.name, event.data):
        if isinstance(text, str):
            try:
                text.encode()
            except UnicodeEncodeError as error:
                raise OptionError(f"{what}: {text!r} cannot be sent as UTF-8 ({error.reason})") from None


def _check_position(position: Any, option: str) -> None:
    if isinstance(position, bool) or not isinstance(position, int) or position < 0:
        raise OptionError(f"{option} keys are script positions (integers from 0), not {position!r}")


def _mapping(value: Any, option: str) -> Mapping[Any, Any]:
    """An option keyed by script position: a mapping (None for none), else ``OptionError``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise OptionError(f"{option} must be a mapping of script positions, not {type(value).__name__}")
    return value


def _counts(counts: Mapping[int, int] | None, option: str) -> dict[int, int]:
    checked = dict(_mapping(counts, option))
    for position, count in checked.items():
        _check_position(position, option)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise OptionError(f"{option}[{position}] must be a number of events (an integer from 0), not {count!r}")
    return checked


def _handler_for(provider: ScriptedProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            api = api_of(self.path)
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = None
            if api is None or not isinstance(body, dict):
                why = "not JSON" if api is not None else f"no API is served at {self.path}"
                self._send_json(404 if api is None else 400, error_body(api or "openai_chat", why))
                return
            stream = ":streamGenerateContent" in self.path if api == "gemini" else body.get("stream") is True
            request = Request(api=api, path=self.path, body=body, stream=stream)
            position, entry = provider._take(request)
            if entry is None:
                self._send_json(400, error_body(api, f"the script has no reply left for request {position + 1}"))
                return
            if isinstance(entry, dict):
                self._send_json(200, entry)
                provider._finished()
                return
            if isinstance(entry, list):
                self._send_stream(entry, position)
                return
            try:
                reply = entry if isinstance(entry, Reply) else entry(request)
                if not isinstance(reply, Reply):
                    raise OptionError(f"a script function returned {type(reply).__name__}, not a Reply")
            except BaseException as error:  # ``pytest.fail`` too: a dropped connection would be sent again
                self._send_json(400, error_body(api, f"script entry {position} raised {error!r}"))
                return
            if stream:
                self._send_stream(stream_events(api, reply, number=position + 1), position)
            else:
                self._send_json(200, response_body(api, reply, number=position + 1))
                provider._finished()

        def _send_json(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("connection", "close")
            self.end_headers()
            self.close_connection = True
            self.wfile.write(data)
            self.wfile.flush()

        def _send_stream(self, events: list[StreamEvent], position: int) -> None:
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
                for number, event in enumerate(events):
                    if (cut is not None and number >= cut) or (end is not None and number >= end):
                        break
                    if event.delay:
                        time.sleep(_waitable(event.delay))
                    text = event.data if isinstance(event.data, str) else json.dumps(event.data)
                    frame = ((f"event: {event.name}\n" if event.name else "") + f"data: {text}\n\n").encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
                    self.wfile.flush()
                if gate is not None and (cut is not None or end is not None):
                    gate.wait(_waitable(provider.gate_limit))
                if cut is not None and (end is None or cut <= end):
                    # The connection drops in the middle of a chunk, a moment after the events before it
                    # (a client that read them together with the broken bytes would lose them unread).
                    time.sleep(_CUT_DELAY)
                    self.wfile.write(b"400\r\ndata: {")
                    self.wfile.flush()
                    return
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                provider._hung_up(position)
                return
            provider._finished()

    return Handler
