"""Fixtures of the packaging tests: each test gets a fresh virtualenv holding the wheel and its one extra."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from wheel_venvs import Venv, Venvs

# The extras of the selected tests (each marked ``@pytest.mark.installs(EXTRA)``; "" is none), in test order.
_selected: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "installs(extra): the test needs the wheel installed with this extra")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("installs")
        if marker is not None and marker.args[0] not in _selected:
            _selected.append(marker.args[0])


@pytest.fixture(scope="session")
def venvs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Venvs]:
    made = Venvs(tmp_path_factory.mktemp("packaging"), _selected)
    yield made
    made.close()


@pytest.fixture
def venv(request: pytest.FixtureRequest, venvs: Venvs) -> Venv:
    """The virtualenv of the test's ``installs`` marker."""
    marker = request.node.get_closest_marker("installs")
    assert marker is not None, "mark the test with @pytest.mark.installs(EXTRA)"
    return venvs.get(marker.args[0])
