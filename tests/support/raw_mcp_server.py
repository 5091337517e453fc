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


def list_tools(cursor: object, request_id: object) -> None:
    """Sends a page of the listing as its text stands, so that it may nest deeper than `json` reads."""
    page = sys.argv[1] if cursor is None else f"{sys.argv[1]}.{cursor}"
    with open(page) as listing:
        tools = listing.read()
    result = f'{{"tools": {tools}'
    if os.path.exists(f"{page}.next"):
        with open(f"{page}.next") as following:
            result += f', "nextCursor": {json.dumps(following.read())}'
    sys.stdout.write(f'{{"jsonrpc": "2.0", "id": {json.dumps(request_id)}, "result": {result}}}}}\n')
    sys.stdout.flush()


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
            list_tools((request.get("params") or {}).get("cursor"), request_id)
        elif method == "tools/call":
            call(request["params"]["name"], request["params"].get("arguments"), request_id)
        elif request_id is not None:
            answer(request_id, {})


if __name__ == "__main__":
    main()
