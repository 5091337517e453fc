"""Attacks on the ``toolsched`` command line: arguments that could only fail once the benchmark has run are
refused before it runs, in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cli_runs import run_cli

TINY = ["--turns", "1", "--calls", "2", "--strategies", "sequential"]


def test_a_plot_that_names_a_directory_is_refused_before_the_benchmark_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: the directory and its folder passed the checks, the whole benchmark ran, and writing the plot
    ended it with an IsADirectoryError traceback (the report printed, the exit status 1)."""
    pytest.importorskip("matplotlib")
    target = tmp_path / "figure.png"
    target.mkdir()
    code, out, err = run_cli(["bench", *TINY, "--plot", str(target)], capsys)
    assert code == 2
    assert out == ""
    assert "done" not in err  # no strategy ran: progress says "bench: sequential done (1/1 turns)"
    assert err.splitlines()[-1] == f"toolsched bench: error: --plot: {str(target)!r} is a directory, not a file"


@pytest.mark.parametrize("argv", [["demo"], ["bench", *TINY, "--json"], ["bench", *TINY]], ids=" ".join)
def test_output_that_cannot_be_written_is_one_line_on_standard_error(argv: list[str]) -> None:
    """Before: an OSError traceback (No space left on device) when standard output is a full disk."""
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "toolsched", *argv],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"toolsched {argv[0]}: error: cannot write the output: [Errno 28] No space left on device"
    )
