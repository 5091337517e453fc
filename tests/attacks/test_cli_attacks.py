"""Attacks on the ``toolsched`` command line: arguments that could only fail once the benchmark has run are
refused before it runs, in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolsched._cli.cli import main

TINY = ["--turns", "1", "--calls", "2", "--strategies", "sequential"]


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


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
