from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

# Ray (tests/test_ray.py) reads these when it is imported, so they are set before
# any test module can import it: a cluster on the loopback interface only, with
# no usage reporting and no token file written to the home directory.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_AUTH_MODE"] = "disabled"

# The helpers every area's tests share (scripted models, recorded responses, child processes
# that tests run and kill) live in tests/support, importable by their module names.
sys.path.insert(0, str(Path(__file__).with_name("support")))


@pytest.fixture(scope="session", autouse=True)
def compiled_once(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The processes the tests start (journal writers killed mid-run, MCP servers, process tools' workers,
    Ray's workers, the examples) keep the bytecode of what they import in one directory of the session,
    outside the repository: each module is compiled by the first of them, not again by every one (as it
    is when the environment says PYTHONDONTWRITEBYTECODE). What they import and run is unchanged."""
    saved = {name: os.environ.get(name) for name in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(tmp_path_factory.mktemp("bytecode"))
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class InFlight:
    """Records which calls were running at once: the evidence of overlap."""

    def __init__(self) -> None:
        self.current: set[str] = set()
        self.peak = 0
        self.log: list[tuple[str, str]] = []

    async def hold(self, name: str, seconds: float = 0.02) -> None:
        self.current.add(name)
        self.peak = max(self.peak, len(self.current))
        self.log.append(("start", name))
        await anyio.sleep(seconds)
        self.log.append(("end", name))
        self.current.discard(name)

    def position(self, event: str, name: str) -> int:
        return self.log.index((event, name))


@pytest.fixture
def in_flight() -> InFlight:
    return InFlight()


def run(coro_fn: Any, *args: Any) -> Any:
    return anyio.run(coro_fn, *args)
