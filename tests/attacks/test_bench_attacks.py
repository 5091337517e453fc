"""Attacks on ``toolsched bench``'s recorded workloads: whatever a file holds, the benchmark is refused in one
readable line (``WorkloadError``) before it builds what it cannot run, never a traceback or a message the size of
the file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolsched import _core
from toolsched._cli import bench
from toolsched._tools.tools import Access
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


def _deep_size(value: Any) -> int:
    """Bytes held by a read: the object and, for a tuple, what it holds."""
    size = sys.getsizeof(value)
    if isinstance(value, tuple):
        size += sum(_deep_size(item) for item in value)
    return size


@pytest.mark.parametrize("access", [None, Access(reads=["src"], writes=["src/a.py"])])
def test_what_each_call_read_is_kept_in_constant_space(access: Access | None) -> None:
    """A turn's simulation kept each call's read whole: every item it covered, with the IDs of every call that wrote
    it. In a turn of n calls writing the same place (or of unknown resources, which read everything), the reads held
    the square of n (a turn of 20,000 calls ran out of minutes and a gigabyte); each read is now a digest."""
    workspace = bench._Workspace()
    reads = []
    for n in range(2_000):
        reads.append(workspace.read(workspace.keys_of(access)))
        workspace.write(access, f"call-{n}")
    assert max(_deep_size(read) for read in reads) <= 64


# Keys of a small tree (and the workspace's whole), so that reads and writes cover one another.
_KEYS = st.sampled_from([".", "/", "src", "src/a.py", "src/b", "src/b/c.py", "src-x", "/etc", "/etc/hosts", "docs"])
_ACCESS = st.one_of(
    st.none(),
    st.builds(lambda r, w: Access(reads=r, writes=w), st.lists(_KEYS, max_size=2), st.lists(_KEYS, max_size=2)),
)


def _reads_as_written(history: list[tuple[Access | None, str]]) -> list[tuple[tuple[str, str], ...]]:
    """What each call of ``history`` read, by the workspace's definition written out: every item its keys cover
    (``bench._covers``; everything for unknown resources), each key with the IDs of the calls that wrote it."""
    data: dict[str, str] = {}
    reads = []
    for access, call_id in history:
        if access is None:
            reads.append(tuple(sorted(data.items())))
            data["(unknown)"] = data.get("(unknown)", "") + call_id + ";"
            continue
        keys = [_core.normalize_key(k) for k in (*access.reads, *access.writes)]
        reads.append(tuple(sorted((k, v) for k, v in data.items() if any(bench._covers(key, k) for key in keys))))
        for raw in access.writes:
            key = _core.normalize_key(raw)
            for target in [k for k in data if bench._covers(key, k)] or [key]:
                data[target] = data.get(target, "") + call_id + ";"
    return reads


def _reads_kept(history: list[tuple[Access | None, str]]) -> list[Any]:
    workspace = bench._Workspace()
    reads = []
    for access, call_id in history:
        reads.append(workspace.read(workspace.keys_of(access)))
        workspace.write(access, call_id)
    return reads


@settings(max_examples=300, deadline=None)
@given(st.lists(_ACCESS, max_size=12), st.randoms())
def test_reads_tell_runs_apart_as_the_workspace_definition_does(accesses: list[Access | None], rng: Any) -> None:
    """Two runs of the same calls in another order (as two strategies run them): a call's reads are the same by the
    digests exactly when they are by the items written out."""
    history = [(access, f"c{n}") for n, access in enumerate(accesses)]
    other = list(history)
    rng.shuffle(other)
    ids, other_ids = [call_id for _, call_id in history], [call_id for _, call_id in other]
    written = dict(zip(ids, _reads_as_written(history), strict=True))
    written_other = dict(zip(other_ids, _reads_as_written(other), strict=True))
    kept = dict(zip(ids, _reads_kept(history), strict=True))
    kept_other = dict(zip(other_ids, _reads_kept(other), strict=True))
    for call_id in ids:
        assert (written[call_id] == written_other[call_id]) == (kept[call_id] == kept_other[call_id]), call_id
