"""Attacks on ``toolsched bench``'s recorded workloads: whatever a file holds, the benchmark is refused in one
readable line (``WorkloadError``) before it builds what it cannot run, never a traceback or a message the size of
the file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from toolsched._cli import bench
from toolsched.errors import WorkloadError


def run_bench(workload: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolsched", "bench", "--workload", str(workload), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_number_of_too_many_digits_is_refused_in_one_line(tmp_path: Path) -> None:
    """Python's JSON reader refuses an integer of more than 4,300 digits with a ValueError that is no
    JSONDecodeError: it left the bench as a traceback."""
    workload = tmp_path / "w.jsonl"
    digits = "1" + "0" * 5000
    workload.write_text('{"calls": [{"id": "c1", "name": "read", "latency_ms": 1, "args": {"a": ' + digits + "}}]}\n")
    done = run_bench(workload)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "line 1" in lines[0] and "digits" in lines[0], lines[0]


def test_a_workload_of_more_calls_than_a_synthetic_one_may_hold_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--turns x --calls`` is refused past ``MAX_SYNTHETIC_CALLS`` (every call is built before the first turn runs,
    and each strategy runs them all); a recorded workload had no bound, its turns built until memory ran out."""
    monkeypatch.setattr(bench, "MAX_SYNTHETIC_CALLS", 10)
    call = {"id": "c", "name": "read", "latency_ms": 0}
    workload = tmp_path / "w.jsonl"
    workload.write_text("".join(json.dumps({"calls": [call] * 4}) + "\n" for _ in range(3)))
    with pytest.raises(WorkloadError, match=r"line 3: a workload holds at most 10 calls in all"):
        bench.load_workload(workload)
    # The first N turns (``--turns``) are all that is built, and all that counts.
    assert len(bench.load_workload(workload, turns=2).turns) == 2


@pytest.mark.parametrize(
    "bad",
    [
        {"calls": "x" * 100_000},
        {"calls": [{"id": "c1", "name": "read", "latency_ms": 1, "args": ["x"] * 100_000}]},
        {"calls": [{"id": "c1", "name": "read" * 100_000, "latency_ms": 1}]},
        {"calls": [{"id": "c1", "name": "read", "latency_ms": 1, "reads": "x" * 100_000}]},
    ],
)
def test_a_refused_value_is_quoted_cut_short(tmp_path: Path, bad: dict[str, object]) -> None:
    """Each refusal quoted the whole value it refused: a line of the file hundreds of kilobytes long."""
    workload = tmp_path / "w.jsonl"
    workload.write_text(json.dumps(bad) + "\n")
    with pytest.raises(WorkloadError) as caught:
        bench.load_workload(workload)
    message = str(caught.value)
    assert len(message) < 400, message[:400]
    assert "characters)" in message
