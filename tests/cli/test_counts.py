"""The instruction-count benchmarks run their workloads (valgrind itself is left to the benchmark runs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHES = Path(__file__).resolve().parents[2] / "benches"
sys.path.insert(0, str(BENCHES))

import instructions  # noqa: E402
import live_objects  # noqa: E402
import pieces  # noqa: E402


@pytest.mark.parametrize("name", list(pieces.pieces()))
def test_every_piece_runs_in_the_loop_it_is_counted_in(name: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHES / "pieces.py"), "--inner", name, "50"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_the_rules_piece_and_its_plain_form_give_the_same_answer() -> None:
    made = pieces.pieces()
    assert made["rules: set and prefix tests (evaluate)"]() == made["rules: plain (every pattern in turn)"]()
    assert made["rules: set and prefix tests (evaluate)"]()[0] == "allow"


@pytest.mark.parametrize(
    "options",
    [
        [],
        ["--full"],
        ["--floor"],
        ["--floor", "--full"],
        ["--wait"],
        ["--floor", "--wait"],
        ["--floor", "--wait", "--full"],
        ["--runs", "3"],
        ["--wait", "--no-collector"],
    ],
)
def test_every_turn_shape_runs_in_the_loop_it_is_counted_in(options: list[str]) -> None:
    command = [sys.executable, str(BENCHES / "instructions.py"), "--inner", "3", "2", *options]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_without_the_collector_the_measured_turns_run_with_it_off_and_the_warm_up_with_it_on() -> None:
    import asyncio
    import gc

    seen: list[bool] = []

    async def turn() -> None:
        seen.append(gc.isenabled())

    instructions.COLLECTOR = False
    try:
        asyncio.run(instructions.measured(turn, 2, 1))
    finally:
        instructions.COLLECTOR = True
        gc.enable()
        gc.unfreeze()
    assert seen == [True] * 30 + [False, False]


@pytest.mark.parametrize("full", [False, True])
def test_live_objects_counts_what_a_waiting_turn_keeps_beside_the_floor(full: bool) -> None:
    import asyncio

    ours = asyncio.run(live_objects.count_live(3, full, floor=False))
    floor = asyncio.run(live_objects.count_live(3, full, floor=True))
    # Taken while every call waits: each call's job on one side, the TaskGroup's tasks on the other. The first
    # call runs in the run's own task (its ``execute`` coroutine suspended); the others run stepped, with no
    # coroutine of the executor's (``toolsched._executor.stepped``), but where the run has post hooks.
    assert ours["Job"] == 3 and ours["coroutine execute"] == (3 if full else 1)
    assert floor["Task"] >= 3 and floor["Job"] == 0
    done = subprocess.run(
        [sys.executable, str(BENCHES / "live_objects.py"), "2"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "tracked objects alive while 2 calls wait" in done.stdout


def test_walks_counts_what_the_collector_walks_by_kind_beside_the_floor() -> None:
    command = [sys.executable, str(BENCHES / "instructions.py"), "3", "6", "--runs", "100", "--wait", "--walks", "40"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = {line.split(" | ")[0]: line.split(" | ")[1:] for line in done.stdout.splitlines() if " | " in line}
    # Every call waits, so the collector passes over the waiting calls: each has its job (toolsched's
    # alone) and its tool's coroutine (on both sides, under their own names).
    assert float(rows["collector passes (x 1,000)"][0]) > 0 and float(rows["collector passes (x 1,000)"][1]) > 0
    job = [float(value) for value in rows["Job"]]
    assert job[0] > 0 and job[1] > 0 and job[2:] == [0.0, 0.0]
    waiting = [float(value) for value in rows["coroutine waiting_noop"]]
    assert waiting[:2] == [0.0, 0.0] and waiting[2] > 0


def test_walks_refuses_what_it_does_not_compare() -> None:
    command = [sys.executable, str(BENCHES / "instructions.py"), "3", "5", "--walks", "--floor"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "--walks measures toolsched beside its floor" in done.stderr


def test_the_platform_shapes_print_each_lane_with_its_paired_ratio() -> None:
    """``platform_runs.py`` times every lane on one small shape and prints, per lane, the ratio of bests and the
    median of the rounds' paired ratios to the floor (the floor's own: 1.00x)."""
    done = subprocess.run(
        [
            sys.executable,
            str(BENCHES / "platform_runs.py"),
            *("--runs", "2", "--calls", "2", "--rounds", "3", "--budget", "0.01"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 2 |")]
    assert [row.split("|")[4].strip() for row in rows] == [
        "taskgroup",
        "taskgroup_hooked",
        "toolsched",
        "toolsched_full",
    ]
    floor = rows[0].split("|")
    assert floor[7].strip() == "1.00x" and floor[8].strip() == "1.00x"
    for row in rows[1:]:
        paired = float(row.split("|")[8].strip().rstrip("x"))
        assert 0 < paired < 100
