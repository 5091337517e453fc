"""The Redis server a fleet test talks to (started by tests/redis_server.sh, as `make test` does), and a key
namespace of its own for each test, so that tests sharing the server never share a limit."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

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
