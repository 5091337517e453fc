"""``toolsched bench``: workloads, the report, its formats, and the errors for bad input."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_runs import run_cli

import toolsched as ts
from toolsched._cli import bench
from toolsched._cli.cli import _ProgressBar

SAMPLE = Path(__file__).resolve().parents[2] / "benches" / "workloads" / "coding_agent.jsonl"
# Small and quick: 1 ms calls.
TINY = ["--turns", "2", "--calls", "8", "--latency", "1"]


def test_the_json_report_compares_every_strategy_with_sequential(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["bench", *TINY, "--json"], capsys)
    assert code == 0, err
    report = json.loads(out)
    names = [row["name"] for row in report["strategies"]]
    assert names == ["sequential", "parallel", "batched", "partitioned", "resource_aware"]
    rows = {row["name"]: row for row in report["strategies"]}
    assert rows["sequential"]["speedup"] == 1.0
    assert rows["sequential"]["same_results_as_sequential"] is True
    # Strategies that keep conflicting calls apart reproduce Sequential's results and workspace.
    assert rows["partitioned"]["same_results_as_sequential"] is True
    assert rows["resource_aware"]["same_results_as_sequential"] is True
    for row in report["strategies"]:
        assert row["makespan_s"] > 0
        assert row["throughput_calls_per_s"] == pytest.approx(16 / row["makespan_s"], rel=0.01)
        assert 0 < row["latency_p50_ms"] <= row["latency_p99_ms"] <= row["makespan_s"] * 1000
        assert row["speedup"] == pytest.approx(rows["sequential"]["makespan_s"] / row["makespan_s"], rel=0.01)
    assert report["workload"]["calls_per_turn"] == 8
    assert report["max_concurrency"] == 10
    # Progress went to standard error.
    assert "resource_aware done (10/10 turns)" in err


def test_the_table_names_each_strategy_and_its_speed_up(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        ["bench", *TINY, "--strategies", "partitioned,resource-aware", "--max-concurrency", "3"], capsys
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("workload: source synthetic; turns 2; calls per turn 8; mix reads=0.7,writes=0.2")
    header = next(line for line in lines if line.startswith("strategy"))
    for column in ("makespan", "calls/s", "p50 latency", "p99 latency", "speed-up", "same results"):
        assert column in header
    rows = [line for line in lines if line.split(" ")[0].endswith(")")]
    # Sequential runs too, as the baseline.
    assert [row.split()[0] for row in rows] == [
        "Sequential()",
        "Partitioned(max_concurrency=3)",
        "ResourceAware(max_concurrency=3)",
    ]
    assert rows[0].split()[-2:] == ["1.00x", "yes"]
    assert rows[2].split()[-1] == "yes"


def test_json_output_is_alone_on_standard_output_of_the_real_command() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "toolsched", "bench", *TINY, "--json", "--strategies", "resource_aware"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert [row["name"] for row in report["strategies"]] == ["sequential", "resource_aware"]
    assert "bench: sequential done" in completed.stderr


def test_the_progress_bar_draws_on_a_terminal() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    bar = _ProgressBar(stream)
    bar(1, 4, "sequential")
    bar(4, 4, "resource_aware")
    text = stream.getvalue()
    assert "\rsequential      [#######.......................] 1/4 turns" in text
    assert text.endswith("[##############################] 4/4 turns\n")


def test_a_plot_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "bench.png"
    code, _, err = run_cli(["bench", *TINY, "--strategies", "parallel,resource_aware", "--plot", str(target)], capsys)
    assert code == 0, err
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot written to {target}" in err


def test_plotting_without_matplotlib_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, out, err = run_cli(["bench", *TINY, "--plot", str(tmp_path / "x.png")], capsys)
    assert code == 2
    assert "--plot needs matplotlib: pip install 'toolsched[plot]'" in err
    assert out == ""
    assert not (tmp_path / "x.png").exists()


def test_the_sample_recorded_workload_runs(capsys: pytest.CaptureFixture[str]) -> None:
    workload = bench.load_workload(SAMPLE)
    assert workload.call_count == 21
    shell = next(call for turn in workload.turns for call in turn if call.args.get("command", "").startswith("git"))
    assert shell.access is None and shell.concurrency_safe is False
    grep = workload.turns[0][2]
    assert grep.access is not None and grep.access.reads == ("src",) and grep.concurrency_safe is True
    code, out, err = run_cli(
        ["bench", "--workload", str(SAMPLE), "--turns", "1", "--strategies", "resource_aware", "--json"], capsys
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["workload"] == {"source": str(SAMPLE), "turns": 1, "calls": 6}
    assert [(row["name"], row["same_results_as_sequential"]) for row in report["strategies"]] == [
        ("sequential", True),
        ("resource_aware", True),
    ]


def test_synthetic_workloads_follow_their_seed_and_options() -> None:
    first = bench.synthetic_workload(turns=3, calls=30, seed=7)
    assert first == bench.synthetic_workload(turns=3, calls=30, seed=7)
    assert first != bench.synthetic_workload(turns=3, calls=30, seed=8)
    only_writes = bench.synthetic_workload(mix={"writes": 1.0}, conflict_rate=1.0, turns=1, calls=10)
    paths = {call.access.writes for call in only_writes.turns[0] if call.access is not None}
    assert len(paths) == 1  # every call after the first reuses the path
    shells = bench.synthetic_workload(mix={"shell": 1.0}, latency_ms={"shell": 4.0}, turns=1, calls=5)
    assert all(call.access is None and 2.0 <= call.latency_ms <= 6.0 for call in shells.turns[0])


def test_parsing_mixes_latencies_and_strategies() -> None:
    assert bench.parse_mix("reads=3,writes=1") == {"reads": 0.75, "writes": 0.25}
    assert bench.parse_latency("25") == dict.fromkeys(bench.KINDS, 25.0)
    assert bench.parse_latency("shell=100")["shell"] == 100.0
    assert bench.parse_latency("shell=100")["reads"] == bench.DEFAULT_LATENCY_MS["reads"]
    chosen = bench.parse_strategies("Resource-Aware,batched", max_concurrency=2, batch_size=3)
    assert [(name, repr(strategy)) for name, strategy in chosen] == [
        ("resource_aware", "ResourceAware(max_concurrency=2)"),
        ("batched", "Batched(size=3, max_concurrency=2)"),
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--calls", "0"], "argument --calls: must be a positive integer, got 0"),
        (["--turns", "-2"], "argument --turns: must be a positive integer, got -2"),
        (["--max-concurrency", "0"], "argument --max-concurrency: must be a positive integer, got 0"),
        (["--batch-size", "-1"], "argument --batch-size: must be a positive integer, got -1"),
        (["--calls", "many"], "argument --calls: must be a positive integer, got 'many'"),
        (["--calls", "99999999999999999999"], "--turns x --calls must be at most 1,000,000 calls in all"),
        (["--turns", "1001", "--calls", "1000"], "got 1,001 x 1,000"),
        (["--latency", "-5"], "--latency must be a finite number of milliseconds, 0 or more; got -5"),
        (["--latency", "reads=-1"], "--latency: reads must be a finite number, 0 or more; got -1"),
        (["--conflict-rate", "1.5"], "argument --conflict-rate: must be between 0 and 1, got 1.5"),
        (["--mix", "reads=0.5,reads=0.5"], "--mix: 'reads' is given twice"),
        (["--mix", "reads=0.5,deletes=0.5"], "--mix: unknown kind 'deletes'; kinds are reads, search, writes, shell"),
        (["--mix", "reads"], "--mix takes KIND=NUMBER pairs separated by commas, got 'reads'"),
        (["--mix", "reads=0,writes=0"], "--mix: the shares must not all be zero"),
        (["--strategies", "fastest"], "--strategies: unknown strategy 'fastest'"),
        (["--strategies", "parallel,Parallel"], "--strategies: 'Parallel' is listed twice"),
        (["--strategies", "parallel,"], "--strategies takes names separated by commas"),
        (["--plot", "out.svg"], "--plot must name a .png file, got 'out.svg'"),
        (["--workload", str(SAMPLE), "--mix", "reads=1"], "--mix shapes a synthetic workload and cannot be combined"),
        (["--workload", str(SAMPLE), "--calls", "3", "--seed", "1"], "--calls, --seed shape a synthetic workload"),
        (["--workload", "/no/such/workload.jsonl"], "cannot read workload '/no/such/workload.jsonl'"),
    ],
)
def test_bad_options_are_refused_by_name(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["bench", *argv], capsys)
    assert code == 2
    assert out == ""
    assert message in err


def call(**fields: Any) -> dict[str, Any]:
    return {"id": "c1", "name": "read_file", "latency_ms": 5, "reads": ["a"], **fields}


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"calls": [' + json.dumps(call()) + "]}", '{"calls": [}'], "line 2: not valid JSON"),
        ([json.dumps({"calls": [call(), {"id": "c2", "name": "x"}]})], "line 1: calls[1]: field latency_ms is missing"),
        ([json.dumps({"calls": [call(latency_ms=-3)]})], "line 1: calls[0]: latency_ms must be a number, 0 or more"),
        ([json.dumps({"calls": [call(latency_ms="fast")]})], 'calls[0]: latency_ms must be a number, 0 or more; got "'),
        ([json.dumps({"calls": [call(reads="src")]})], 'reads must be a list of non-empty strings, got "src"'),
        ([json.dumps({"calls": [call(writes=["ok", ""])]})], "calls[0]: writes must be a list of non-empty strings"),
        ([json.dumps({"calls": [call(id="")]})], 'calls[0]: id must be a non-empty string, got ""'),
        ([json.dumps({"calls": [call(name="read file")]})], "calls[0]: name must be 1 to 64 letters"),
        ([json.dumps({"calls": [call(args=[1])]})], "calls[0]: args must be an object, got [1]"),
        ([json.dumps({"calls": [call(concurrency_safe="yes")]})], "calls[0]: concurrency_safe must be true or false"),
        ([json.dumps({"calls": [call(latency=5)]})], "line 1: calls[0] has unknown field(s) latency"),
        ([json.dumps({"calls": [3]})], "line 1: calls[0] must be an object, got 3"),
        ([json.dumps({"calls": []})], "line 1: calls must be a non-empty list, got []"),
        ([json.dumps({"turn": 1, "calls": [call()]})], "line 1: turn must be a string label, got 1"),
        ([json.dumps({"calls": [call()], "model": "x"})], "line 1: unknown field(s) model"),
        (["", "[1, 2]"], "line 2: a turn must be a JSON object with a calls list"),
        (["", "  "], "the workload has no turns"),
    ],
)
def test_malformed_workloads_name_the_line_and_field(
    tmp_path: Path, lines: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "turns.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ts.WorkloadError) as caught:
        bench.load_workload(path)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)
    code, out, err = run_cli(["bench", "--workload", str(path)], capsys)
    assert code == 2
    assert out == ""
    assert message in err
