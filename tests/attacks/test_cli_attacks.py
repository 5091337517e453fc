"""Attacks on the ``toolsched`` command line: arguments that could only fail once the benchmark has run are
refused before it runs, in one line; so are a workload file without end and an interrupt."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runs import run_cli

from toolsched._cli.cli import main

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


def _limited_memory() -> None:
    """Run in the child before it starts: its address space capped at 2 GiB (a read without bound fails there,
    not on the machine)."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def test_a_workload_file_without_end_is_refused_in_one_line_not_read_into_memory() -> None:
    """Before: the whole file was read before anything was checked; /dev/zero ended in a MemoryError traceback
    (without a cap on the process, after taking the machine's memory)."""
    done = subprocess.run(
        [sys.executable, "-m", "toolsched", "bench", "--workload", "/dev/zero"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=_limited_memory,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        "toolsched bench: error: /dev/zero: a workload file holds at most 256 MiB; this one holds more"
    ]


def test_a_bench_interrupted_with_ctrl_c_says_so_in_one_line() -> None:
    """Before: SIGINT mid-run ended in a KeyboardInterrupt traceback from asyncio's runner."""
    # The --mix note is written just before the benchmark starts: the interrupt lands while it runs.
    argv = ["bench", "--mix", "reads=2", "--turns", "50", "--calls", "50", "--latency", "50"]
    # The child takes Ctrl-C as a terminal's foreground program does, whatever this process was started with (a
    # shell without job control starts its background jobs with SIGINT ignored, and a child inherits that).
    child = subprocess.Popen(
        [sys.executable, "-m", "toolsched", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert child.stderr is not None
    note = child.stderr.readline()
    assert note.startswith("--mix: the shares add up to 2")
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 130
    assert out == ""
    assert err.splitlines() == ["toolsched bench: interrupted"]


@pytest.mark.parametrize("cpus", ["inf", "nan", "0", "-1"])
def test_ray_cpus_that_no_cluster_could_place_are_refused_before_anything_starts(
    cpus: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # ``inf`` was taken: each simulated call asked Ray for infinitely many CPUs, a task no cluster places.
    with pytest.raises(SystemExit) as refused:
        main(["bench", "--turns", "1", "--backend", "ray", "--ray-cpus", cpus])
    assert refused.value.code == 2
    assert "--ray-cpus: must be a finite number more than 0" in capsys.readouterr().err
