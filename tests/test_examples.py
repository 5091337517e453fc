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
