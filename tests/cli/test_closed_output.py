"""The command line started with its standard output closed: one line on standard error, no traceback."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest


@pytest.mark.parametrize("command", ["bench --calls 3 --turns 1", "demo"])
def test_a_closed_standard_output_is_a_one_line_error(command: str) -> None:
    # `>&-` closes descriptor 1 in the child, as a shell user would.
    line = f"exec {shlex.quote(sys.executable)} -m toolsched {command} >&-"
    done = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    lines = [text for text in done.stderr.splitlines() if text.strip()]
    assert lines == [f"toolsched {command.split()[0]}: error: standard output is closed; nothing would be shown"]
