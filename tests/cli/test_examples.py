"""Every script in examples/ runs, as a user would run it, and says what it should."""

from __future__ import annotations

import os
import subprocess
import sys

from example_scripts import PACKAGE_ROOT, run_example


def test_human_approval_flow() -> None:
    lines = run_example("human_approval.py", "--approve", "c2", "--reject", "c3").splitlines()
    assert lines[0] == "step 1: 2 of 4 calls answered; 2 wait for a person"
    assert "person: approved c2" in lines
    assert "person: rejected c3" in lines
    step_two = lines[lines.index("step 2 (a new process): every call answered, in the model's order") + 1 :]
    assert step_two[0] == "  c1 list_files -> ['.git', 'draft.txt', 'notes.txt']"
    assert step_two[1] == "  c2 delete_file -> 'deleted draft.txt'"
    assert step_two[2].startswith("  c3 delete_file -> error permission_denied: the call to `delete_file` was not")
    assert step_two[3].startswith("  c4 delete_file -> error permission_denied:")
    assert "delete_file(**/.git/**)" in step_two[3]
    # The approved deletion happened once; the rejected and denied ones never did.
    assert step_two[4] == "files left: .git/config, notes.txt"


def test_permissions_quickstart() -> None:
    assert run_example("permissions_quickstart.py").splitlines() == [
        "ran c1",
        "ran c4",
        "c1 # Guide",
        "c2 hook_blocked",
        "c3 permission_denied",
        "c4 deleted build/out.bin",
    ]


def test_quickstart() -> None:
    out = run_example("quickstart.py")
    lines = out.splitlines()
    assert lines[0] == "c1 read_file batch=0 'first 100 lines of a.py'"
    assert lines[1].startswith("c2 grep batch=0 [")
    assert lines[2] == "c3 write_file batch=1 'wrote 7 characters to b.py'"
    assert lines[3].startswith("c4 read_file batch=None error (invalid_input)")
    assert "at /path: 42 is not of type" in out


def test_demo_command() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([PACKAGE_ROOT, os.environ.get("PYTHONPATH", "")])}
    completed = subprocess.run(
        [sys.executable, "-m", "toolsched", "demo"], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert completed.returncode == 0, completed.stderr
    out = completed.stdout
    for strategy in ["Sequential()", "Parallel(", "Batched(", "Partitioned(", "ResourceAware("]:
        assert strategy in out
    same = next(line for line in out.splitlines() if line.startswith("Results and final workspace as when run"))
    # Strategies that keep conflicting calls apart give Sequential's results, whatever the timing.
    assert "Partitioned(max_concurrency=None)" in same
    assert "ResourceAware(max_concurrency=None)" in same
    assert "c4 edit_file  \"edited src/app.py: 2 x 'load()' -> 'load(cache=True)'\"" in out
    assert "unknown tool `deploy`" in out


def test_failures() -> None:
    lines = run_example("failures.py").splitlines()
    assert lines[1:5] == [
        "  f1 'fetched https://example.com/a'",
        "  f2 timeout: `fetch` did not finish within 0.1 seconds",
        "  l1 'a.py: clean'",
        "  l2 execution_error: lint failed: b.bin is not a text file. Check the arguments or try another tool.",
    ]
    assert lines[6:10] == [
        "  d1 cancelled: `deploy` was cancelled: call d2 (`deploy`) failed and cancelled the rest of its batch",
        "  d2 execution_error: ConnectionError: eu gateway refused the release",
        "  d3 cancelled: not run: call d2 (`deploy`) failed and cancelled the rest of its batch",
        "  a1 \"announced 'release halted'\"",
    ]
    assert lines[11] == "  raised for l1; results: ['execution_error', 'skipped']"
    assert lines[13:16] == [
        "  s1 cancelled: `search` was cancelled because the user interrupted the run (the user sent a new message)",
        "  n1 \"saved 'draft'\"",
        "  n2 skipped: not run: the user interrupted the run (the user sent a new message)",
    ]
    assert lines[17:] == [
        "  p1 execution_error: WorkerLostError: the worker process running `parse_pdf` exited "
        "before returning a result",
        "  a1 \"announced 'parsed'\"",
    ]


def test_dynamic_tools() -> None:
    lines = run_example("dynamic_tools.py").splitlines()
    assert lines[0] == "turn 1 offers: ['lookup_order', 'resolve_ticket', 'tool_search']"
    # One connection for the two lookups of turn 1, closed by that run, before the refresh.
    assert lines[1:4] == [
        "  database: connected",
        "  database: disconnected",
        "  tools changed: added ['track_parcel'], removed []",
    ]
    assert lines[4].startswith("  s1 tool_search -> {'tools': [{'name': 'refund_order'")
    assert "turn 2 offers: ['lookup_order', 'refund_order', 'resolve_ticket', 'tool_search', 'track_parcel']" in lines
    assert "waiting for a person: [('t1/x1', 'close_ticket', {'ticket': 'T-7'})]" in lines
    assert lines[-1] == "  t1 resolve_ticket -> 'T-7 is open; then closed T-7'"
    # The sub-agent read the ticket once: resuming replayed its finished call.
    assert lines.count("  support desk: read T-7") == 1
    assert lines.count("  support desk: closed T-7") == 1
    assert "  event from the sub-agent of t1: x1 finished" in lines
