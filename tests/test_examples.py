"""Every script in examples/ runs and prints what it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str) -> str:
    completed = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=120, check=False
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_quickstart() -> None:
    out = run_example("quickstart.py")
    lines = out.splitlines()
    assert lines[0] == "c1 read_file batch=0 'first 100 lines of a.py'"
    assert lines[1].startswith("c2 grep batch=0 [")
    assert lines[2] == "c3 write_file batch=1 'wrote 7 characters to b.py'"
    assert lines[3].startswith("c4 read_file batch=None error (invalid_input)")
    assert "at /path: 42 is not of type" in out


def test_demo_command() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "toolsched", "demo"], capture_output=True, text=True, timeout=120, check=False
    )
    assert completed.returncode == 0, completed.stderr
    out = completed.stdout
    for strategy in ["Sequential()", "Parallel(", "Batched(", "Partitioned("]:
        assert strategy in out
    assert "identical under every strategy" in out
    assert "unknown tool `deploy`" in out


def test_failures() -> None:
    lines = run_example("failures.py").splitlines()
    assert lines[1:5] == [
        "  f1 'fetched https://example.com/a'",
        "  f2 timeout: `fetch` did not finish within 0.1 seconds",
        "  l1 'a.py: clean'",
        "  l2 execution_error: lint failed: b.bin is not a text file. Check the arguments or try another tool.",
    ]
    assert lines[6:10] == [
        "  d1 cancelled: `deploy` was cancelled: call d2 (`deploy`) failed and cancelled the rest of its batch",
        "  d2 execution_error: ConnectionError: eu gateway refused the release",
        "  d3 cancelled: not run: call d2 (`deploy`) failed and cancelled the rest of its batch",
        "  a1 \"announced 'release halted'\"",
    ]
    assert lines[11] == "  raised for l1; results: ['execution_error', 'skipped']"
    assert lines[13:16] == [
        "  s1 cancelled: `search` was cancelled because the user interrupted the run (the user sent a new message)",
        "  n1 \"saved 'draft'\"",
        "  n2 skipped: not run: the user interrupted the run (the user sent a new message)",
    ]
    assert lines[17:] == [
        "  p1 execution_error: WorkerProcessError: the worker process running `parse_pdf` exited "
        "before returning a result",
        "  a1 \"announced 'parsed'\"",
    ]
