"""A stdio MCP server written by hand, to send what an SDK server never would.

Run as ``python raw_mcp_server.py LISTING [PID_FILE]``: its tool list is read from the JSON file LISTING at
every ``tools/list`` (a test can shift it between two listings); it writes its process ID to PID_FILE when
given. ``tools/call`` answers ``"<name>:<arguments as JSON>"``, except the tools named after a hostile
answer, which get that answer instead:

- ``garbage``: a line that is not JSON; ``wrong_id``: an answer to another request ID;
- ``bad_error``: an error whose code and message have the wrong types;
- ``content_not_a_list`` and ``unknown_block``: results that are not MCP;
- ``twice``: two answers to one request; ``slow``: an answer after 1.5 s; ``hang``: no answer at all.
"""

import json
import os
import sys
import time


def send(message: object) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request_id: object, result: object) -> None:
    send({"jsonrpc": "2.0", "id": request_id, "result": result})


def text(value: str) -> dict[str, object]:
    return {"content": [{"type": "text", "text": value}]}


def call(name: str, arguments: object, request_id: object) -> None:
    if name == "garbage":
        sys.stdout.write("this is not json\n")
        sys.stdout.flush()
    elif name == "wrong_id":
        answer(99999, {"content": []})
    elif name == "bad_error":
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": "x", "message": 5}})
    elif name == "content_not_a_list":
        answer(request_id, {"content": "text"})
    elif name == "unknown_block":
        answer(request_id, {"content": [{"type": "hologram", "data": 1}]})
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


def main() -> None:
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as pid_file:
            pid_file.write(str(os.getpid()))
    for line in sys.stdin:
        request = json.loads(line)
        method, request_id = request.get("method"), request.get("id")
        if method == "initialize":
            answer(request_id, {
                "protocolVersion": request["params"]["protocolVersion"],
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "raw", "version": "0"},
            })  # fmt: skip
        elif method == "tools/list":
            with open(sys.argv[1]) as listing:
                answer(request_id, {"tools": json.load(listing)})
        elif method == "tools/call":
            call(request["params"]["name"], request["params"].get("arguments"), request_id)
        elif request_id is not None:
            answer(request_id, {})


if __name__ == "__main__":
    main()
