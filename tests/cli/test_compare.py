"""benches/compare.py runs end to end on a tiny configuration and writes the report it promises."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import toolsched as ts

COMPARE = Path(__file__).resolve().parents[2] / "benches" / "compare.py"
TOOLSCHED_ROWS = ["taskgroup", "toolsched", "toolsched_full", "toolsched_resource_aware"]
SIZES = [1, 3, 20]


def run_compare(tmp_path: Path, *extra: str) -> tuple[dict[str, Any], str]:
    report_path = tmp_path / "report.json"
    command = [
        sys.executable, str(COMPARE), "--quick", "--json", str(report_path),
        "--only", ",".join(TOOLSCHED_ROWS), "--sizes", ",".join(map(str, SIZES)),
        "--rounds", "2", "--budget", "0", "--validation-calls", "50", "--planning-calls", "500",
        "--memory-calls", "40", *extra,
    ]  # fmt: skip
    completed = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    return json.loads(report_path.read_text()), completed.stdout


def test_report_covers_every_requested_row_and_size(tmp_path: Path) -> None:
    report, stdout = run_compare(tmp_path)

    turns = report["turns"]
    assert turns["sizes"] == SIZES
    assert [row["key"] for row in turns["rows"]] == TOOLSCHED_ROWS
    for row in turns["rows"]:
        assert row["label"] in stdout
        assert not row["errors"], row["errors"]
        if not row["available"]:
            assert row["note"] and not row["cells"]
            continue
        assert sorted(row["cells"], key=int) == [str(n) for n in SIZES]
        for n, cell in row["cells"].items():
            assert cell["count"] == cell["verified_tool_runs"] == int(n)
            assert 0 < cell["min_us"] <= cell["median_us"]
            assert cell["clock"] == "cpu" and cell["cpu"]["median_us"] == cell["median_us"]
            assert 0 < cell["wall"]["min_us"] <= cell["wall"]["median_us"]
            assert cell["rounds"] >= 2
            assert cell["ratio_min"] == cell["min_us"] / turns["rows"][0]["cells"][n]["min_us"]
    floor = turns["rows"][0]
    assert all(cell["ratio_median"] == 1.0 for cell in floor["cells"].values())

    keys = [row["key"] for row in report["single_call"]["rows"]]
    assert keys == ["direct", "taskgroup", "toolsched", "toolsched_full"] + (
        ["toolsched_resource_aware"] if hasattr(ts, "ResourceAware") else []
    )
    assert report["single_call"]["rows"][0]["above_direct_median_us"] == 0.0

    assert report["targets"]["rows"] == []  # no competitor was asked for
    assert report["scale"] == {"count": 0, "rows": []}

    validation = report["validation"]
    assert validation["calls"] == 50
    assert validation["schema"]["required"] == ["path"]
    by_key = {row["key"]: row for row in validation["rows"]}
    assert {"toolsched", "toolsched_with_calls", "json_loads", "jsonschema_rs", "jsonschema"} <= set(by_key)
    assert by_key["toolsched"]["ratio_to_toolsched_median"] == 1.0

    planning = report["planning"]
    assert planning["calls"] == 500
    assert 0 < planning["total_ms"]["min"] <= planning["total_ms"]["median"]

    memory = report["memory"]
    assert memory["count"] == 40
    for row in memory["rows"]:
        if row["key"] == "toolsched_resource_aware" and not hasattr(ts, "ResourceAware"):
            assert "not available" in row["note"]
            continue
        # Every call of the turn was suspended in its tool body at once, toolsched's included.
        assert row["in_flight"] == 40, row
        assert row["peak_bytes_per_call"] >= row["held_bytes_per_call"] > 0

    meta = report["meta"]
    assert meta["toolsched"]["features"]["resource_aware"] == hasattr(ts, "ResourceAware")
    assert meta["toolsched"]["features"]["hooks"] == hasattr(ts, "Hooks")
    assert "--quick" in meta["command"]


def test_rows_name_what_this_toolsched_lacks(tmp_path: Path) -> None:
    report, _ = run_compare(tmp_path, "--memory-calls", "0", "--planning-calls", "0", "--validation-calls", "0")
    labels = {row["key"]: row["label"] for row in report["turns"]["rows"]}
    full = labels["toolsched_full"]
    if hasattr(ts, "Hooks") and hasattr(ts, "Permissions"):
        assert full.startswith("toolsched full pipeline (") and "not available" not in full
    else:
        assert "not available" in full
    resource_aware = next(row for row in report["turns"]["rows"] if row["key"] == "toolsched_resource_aware")
    assert resource_aware["available"] == hasattr(ts, "ResourceAware")
    assert report["validation"] == {} and report["planning"] == {} and report["memory"]["rows"] == []


def test_unknown_contender_is_refused_by_name(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, str(COMPARE), "--only", "toolsched,bogus", "--json", str(tmp_path / "r.json")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert completed.returncode != 0
    assert "unknown contender(s): bogus" in completed.stderr
    assert not (tmp_path / "r.json").exists()


def test_the_floor_with_hooks_and_rules_by_hand_is_measured_and_set_beside_the_full_pipeline(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    command = [
        sys.executable, str(COMPARE), "--quick", "--json", str(report_path),
        "--only", "taskgroup,taskgroup_hooked,toolsched_full", "--sizes", "1,5",
        "--rounds", "2", "--budget", "0", "--validation-calls", "0", "--planning-calls", "0", "--memory-calls", "20",
    ]  # fmt: skip
    completed = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    report = json.loads(report_path.read_text())
    rows = {row["key"]: row for row in report["turns"]["rows"]}
    hooked, full = rows["taskgroup_hooked"], rows["toolsched_full"]
    for n in ("1", "5"):
        # Checked before timing: every tool body ran, and both hooks ran once per call.
        assert hooked["cells"][n]["verified_tool_runs"] == int(n)
        by_hand = report["targets"]["by_hand"][n]
        assert by_hand["min"] == full["cells"][n]["min_us"] / hooked["cells"][n]["min_us"]
        assert by_hand["median"] == full["cells"][n]["median_us"] / hooked["cells"][n]["median_us"]
    assert "the floor with the same hooks and rules by hand" in completed.stdout
    memory = {row["key"]: row for row in report["memory"]["rows"]}
    assert memory["taskgroup_hooked"]["in_flight"] == 20
