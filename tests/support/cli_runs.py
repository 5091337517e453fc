"""Running the ``toolsched`` command line in-process, for tests."""

from __future__ import annotations

import pytest

from toolsched._cli.cli import main


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``toolsched argv``: its exit status, standard output and standard error."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err
