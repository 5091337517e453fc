"""A stdio MCP server written by hand, to send what an SDK server never would.

Run as ``python raw_mcp_server.py LISTING [PID_FILE]``: its tool list is the text of the JSON file LISTING,
read at every ``tools/list`` and sent as it is (a test can shift it between two listings, or write one
that nests deeper than a JSON parser goes). The page after it is the file LISTING.CURSOR when the file
LISTING.next holds CURSOR (and so on, LISTING.CURSOR.next naming the one after). It writes its process
ID to PID_FILE when given. ``tools/call`` answers ``"<name>:<arguments as JSON>"``, except the tools
named after a hostile answer, which get that answer instead:

- ``garbage``: a line that is not JSON; ``wrong_id``: an answer to another request ID;
- ``bad_error``: an error whose code and message have the wrong types;
- ``content_not_a_list`` and ``unknown_block``: results that are not MCP;
- ``twice``: two answers to one request; ``slow``: an answer after 1.5 s; ``hang``: no answer at all;
- ``structured``: text with the structured content ``{"x": "no"}``;
- ``odd_progress``: progress notifications of NaN and infinite amounts, then ``"done"``.

Run as ``python raw_mcp_server.py --http PORT LISTING`` it answers the same over streamable HTTP on
127.0.0.1 (each POST answered with the first line it would write, as JSON; nothing else of the transport);
with ``--http-sse`` instead of ``--http``, as one server-sent event. With ``--http-session`` it answers as
``--http`` does under a session ID, and never answers the DELETE that ends the session.
"""

import http.server
import json
import os
import sys
import threading
import time


def write_line(line: str) -> None:
    """Sends one line to the client: on stdout, or (over HTTP) as the body answering the request."""
    if _http.lines is not None:
        _http.lines.append(line)
        return
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def send(message: object) -> None:
    write_line(json.dumps(message))


def answer(request_id: object, result: object) -> None:
    send({"jsonrpc": "2.0", "id": request_id, "result": result})


def text(value: str) -> dict[str, object]:
    return {"content": [{"type": "text", "text": value}]}


def call(name: str, arguments: object, request_id: object, token: object = None) -> None:
    if name == "odd_progress":
        nan, inf = float("nan"), float("inf")
        for progress, total in [(nan, 1), (1, nan), (nan, nan), (inf, inf), (1, 2)]:
            params = {"progressToken": token, "progress": progress, "total": total}
            send({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
        answer(request_id, text("done"))
    elif name == "garbage":
        write_line("this is not json")
    elif name == "wrong_id":
        answer(99999, {"content": []})
    elif name == "bad_error":
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": "x", "message": 5}})
    elif name == "content_not_a_list":
        answer(request_id, {"content": "text"})
    elif name == "unknown_block":
        answer(request_id, {"content": [{"type": "hologram", "data": 1}]})
    elif name == "structured":
        answer(request_id, {**text("structured"), "structuredContent": {"x": "no"}})
    elif name == "twice":
        answer(request_id, text("first"))
        answer(request_id, text("second"))
    elif name == "slow":
        time.sleep(1.5)
        answer(request_id, text("late"))
    elif name == "hang":
        time.sleep(3600)
    else:
        answer(request_id, text(name + ":" + json.dumps(arguments or {})))


def list_tools(cursor: object, request_id: object) -> None:
    """Sends a page of the listing as its text stands, so that it may nest deeper than `json` reads."""
    page = sys.argv[1] if cursor is None else f"{sys.argv[1]}.{cursor}"
    with open(page) as listing:
        tools = listing.read()
    result = f'{{"tools": {tools}'
    if os.path.exists(f"{page}.next"):
        with open(f"{page}.next") as following:
            result += f', "nextCursor": {json.dumps(following.read())}'
    write_line(f'{{"jsonrpc": "2.0", "id": {json.dumps(request_id)}, "result": {result}}}}}')


def handle(request: dict[str, object]) -> None:
    method, request_id = request.get("method"), request.get("id")
    params = request.get("params") if isinstance(request.get("params"), dict) else {}
    assert isinstance(params, dict)
    if method == "initialize":
        answer(request_id, {
            "protocolVersion": params["protocolVersion"],
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "raw", "version": "0"},
        })  # fmt: skip
    elif method == "tools/list":
        list_tools(params.get("cursor"), request_id)
    elif method == "tools/call":
        meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
        call(str(params["name"]), params.get("arguments"), request_id, meta.get("progressToken"))
    elif request_id is not None:
        answer(request_id, {})


class _Http(threading.local):
    # The lines written while answering this thread's HTTP request (None: write on stdout).
    lines: list[str] | None = None


_http = _Http()


class _Handler(http.server.BaseHTTPRequestHandler):
    """Streamable HTTP, the least of it: each POST is answered with the first line written for it, as JSON."""

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _http.lines = []
        try:
            handle(request)
            lines = _http.lines
        finally:
            _http.lines = None
        if not lines:
            self.send_response(202)
            self.end_headers()
            return
        sse = self.server.server_port in _sse_ports
        body = (f"event: message\ndata: {lines[0]}\n\n" if sse else lines[0]).encode()
        self.send_response(200)
        if self.server.server_port in _session_ports:
            self.send_header("Mcp-Session-Id", "raw-session")
        self.send_header("Content-Type", "text/event-stream" if sse else "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.send_response(405)
        self.end_headers()

    def do_DELETE(self) -> None:
        if self.server.server_port in _session_ports:
            time.sleep(3600)
        self.do_GET()

    def log_message(self, format: str, *args: object) -> None:
        pass


# The ports answered as server-sent events, and those answered under a session ID.
_sse_ports: set[int] = set()
_session_ports: set[int] = set()


def main() -> None:
    if sys.argv[1] in ("--http", "--http-sse", "--http-session"):
        port = int(sys.argv[2])
        if sys.argv[1] == "--http-sse":
            _sse_ports.add(port)
        if sys.argv[1] == "--http-session":
            _session_ports.add(port)
        del sys.argv[1:3]
        http.server.ThreadingHTTPServer(("127.0.0.1", port), _Handler).serve_forever()
        return
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as pid_file:
            pid_file.write(str(os.getpid()))
    for line in sys.stdin:
        handle(json.loads(line))


if __name__ == "__main__":
    main()
