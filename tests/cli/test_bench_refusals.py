"""`toolsched bench` and the strategies refuse absurd input in one line: no traceback, no
overflow at run time, no benchmark that never ends."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import toolsched as ts


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    shape = () if "--workload" in args else ("--turns", "1", "--calls", "2")
    return subprocess.run(
        [sys.executable, "-m", "toolsched", "bench", *shape, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def assert_one_line_refusal(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--max-concurrency", str(10**20)), ("at most",)),
        (("--batch-size", str(10**20)), ("at most",)),
        (("--latency", "1e300"), ("at most",)),
        (("--latency", "shell=1e300"), ("at most",)),
        (("--mix", "reads=1e308,writes=1e308"), ("add up to more than",)),
    ],
)
def test_absurd_options_are_refused_in_one_line(args: tuple[str, ...], words: tuple[str, ...]) -> None:
    assert_one_line_refusal(bench(*args), *words)


def write_workload(path: Path, call: dict[str, object]) -> Path:
    path.write_text(json.dumps({"calls": [call]}) + "\n")
    return path


def test_a_workload_latency_past_a_minute_is_refused(tmp_path: Path) -> None:
    workload = write_workload(tmp_path / "w.jsonl", {"id": "c1", "name": "read", "latency_ms": 1e300})
    assert_one_line_refusal(bench("--workload", str(workload)), "latency_ms")


def test_a_workload_with_a_surrogate_id_is_refused(tmp_path: Path) -> None:
    workload = tmp_path / "w.jsonl"
    workload.write_text('{"calls": [{"id": "c\\ud800", "name": "read", "latency_ms": 1}]}\n')
    assert_one_line_refusal(bench("--workload", str(workload)), "surrogate")


def test_a_workload_nested_too_deep_is_refused(tmp_path: Path) -> None:
    workload = tmp_path / "w.jsonl"
    deep = "[" * 100_000 + "]" * 100_000
    workload.write_text('{"calls": [{"id": "c1", "name": "read", "latency_ms": 1, "args": {"x": ' + deep + "}}]}\n")
    assert_one_line_refusal(bench("--workload", str(workload)), "too deep")


@pytest.mark.parametrize("strategy", [ts.Parallel, ts.Partitioned, ts.ResourceAware])
def test_a_concurrency_cap_past_the_limit_is_refused_when_the_strategy_is_built(strategy: type) -> None:
    with pytest.raises(ts.OptionError, match="at most"):
        strategy(max_concurrency=2**64)
    with pytest.raises(ts.OptionError, match="at most"):
        ts.Batched(2**64)


def toolsched(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolsched", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_bare_toolsched_prints_help_and_version_prints_the_version() -> None:
    bare = toolsched()
    assert bare.returncode == 0 and "usage: toolsched" in bare.stdout and "bench" in bare.stdout
    version = toolsched("--version")
    assert version.returncode == 0 and version.stdout.startswith("toolsched ")


def test_the_strategies_help_names_them() -> None:
    text = toolsched("bench", "--help").stdout
    for name in ("sequential", "parallel", "batched", "partitioned", "resource_aware"):
        assert name in text


def test_a_plot_into_a_missing_directory_is_refused_before_the_benchmark_runs(tmp_path: Path) -> None:
    done = toolsched("bench", "--plot", str(tmp_path / "no" / "such" / "x.png"))
    assert done.returncode == 2
    assert "does not exist" in done.stderr
    assert "bench: sequential" not in done.stderr  # nothing ran


def test_mix_shares_that_do_not_add_up_to_one_are_scaled_and_it_is_said() -> None:
    done = bench("--mix", "reads=0.3", "--strategies", "sequential")
    assert done.returncode == 0, done.stderr
    assert "scaled to reads=1.00" in done.stderr
