"""The Redis server a fleet test talks to (started by tests/redis_server.sh, as `make test` does), and a key
namespace of its own for each test, so that tests sharing the server never share a limit."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

import toolsched as ts

URL_VARIABLE = "TOOLSCHED_TEST_REDIS_URL"
#: A worker process of the fleet tests (``python fleet_child.py BACKEND URL NAMESPACE MODE CALLS``).
CHILD = Path(__file__).parent / "fleet_child.py"


def redis_url() -> str:
    url = os.environ.get(URL_VARIABLE)
    if not url:
        pytest.fail(f"{URL_VARIABLE} is not set: run the tests under tests/redis_server.sh (as `make test` does)")
    return url


def namespace() -> str:
    return f"test-{uuid.uuid4().hex}"


def delegating(box: dict[str, ts.Executor], cap: int = 1) -> ts.Tool:
    """``delegate``: an agent tool of ``cap`` concurrent calls that calls itself through ``box["child"]`` (the
    executor of its nested runs, set once made) until its depth runs out; depth 2 answers ``"2/1/leaf"``."""

    @ts.agent_tool(lambda: box["child"], name="delegate", max_concurrency=cap)
    async def delegate(depth: int, child: ts.ChildRun) -> str:
        """Delegates to itself until the depth runs out."""
        if depth == 0:
            return "leaf"
        outcome = await child.run([ts.ToolCall(f"d{depth}", "delegate", {"depth": depth - 1})])
        result = outcome.results[0]
        return f"{depth}/{result.output if not result.is_error else result.error}"

    return delegate
