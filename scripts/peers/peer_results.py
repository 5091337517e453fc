"""pytest plugin: each test's outcome, written as JSON to the path in ``TOOLSCHED_PEER_RESULTS``.

Loaded by ``scripts/peers/run.py`` (``-p peer_results``) in both runs of a host's suite. The file
maps each test ID to ``{"outcome": ..., "message": ...}``: ``passed``, ``failed`` (the test
body), ``error`` (a fixture, a teardown, or a module that could not be collected), ``skipped``,
``xfailed`` or ``xpassed``; ``message`` is the first line of the failure. A test counts once, by
the first phase that did not pass (pytest's own summary counts a test that fails and then errors in
its teardown twice); a module that could not be collected, or skipped itself, counts as one. While
the run lasts, ``<path>.running`` names the test running now.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

__all__: list[str] = []


def _first_line(report: Any) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    return text.strip().splitlines()[0][:300] if text.strip() else ""


class _Recorder:
    def __init__(self, path: str) -> None:
        self.path = path
        self.results: dict[str, dict[str, str]] = {}

    def _set(self, nodeid: str, outcome: str, message: str = "") -> None:
        self.results[nodeid] = {"outcome": outcome, "message": message}

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        # The test running now, for watching a long run (a test that hangs waits for --timeout).
        with open(self.path + ".running", "w", encoding="utf-8") as out:
            out.write(nodeid + "\n")

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self._set(report.nodeid or "<collection>", "error", _first_line(report))
        elif report.skipped:  # a module that skips itself (``pytest.importorskip`` at its top)
            self._set(report.nodeid or "<collection>", "skipped")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        xfail = hasattr(report, "wasxfail")
        if report.when == "setup":
            if report.failed:
                self._set(report.nodeid, "error", _first_line(report))
            elif report.skipped:
                self._set(report.nodeid, "xfailed" if xfail else "skipped")
        elif report.when == "call":
            if report.passed:
                self._set(report.nodeid, "xpassed" if xfail else "passed")
            elif report.failed:
                self._set(report.nodeid, "failed", _first_line(report))
            else:
                self._set(report.nodeid, "xfailed" if xfail else "skipped")
        elif report.failed and self.results.get(report.nodeid, {}).get("outcome") != "failed":
            self._set(report.nodeid, "error", "teardown: " + _first_line(report))

    def pytest_sessionfinish(self) -> None:
        with open(self.path, "w", encoding="utf-8") as out:
            json.dump(self.results, out, indent=0, sort_keys=True)


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get("TOOLSCHED_PEER_RESULTS")
    if path:
        config.pluginmanager.register(_Recorder(path), "toolsched-peer-results")
