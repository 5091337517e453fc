"""A human-approval flow: a turn stops for a person's decision and finishes in another process.

    python examples/human_approval.py                       # asks you at the terminal
    python examples/human_approval.py --approve c2 --reject c3

Step 1 runs the model's calls: what needs no decision runs at once, deletions
wait for approval, and the run's state is saved as signed JSON. A person
decides, then step 2 — a fresh process — resumes the run from the saved state:
the approved call runs, the rejected one is answered, nothing runs twice.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio

import toolsched as ts

KEY = b"demo signing key: keep the real one out of reach of the model"


def build_executor(workspace: Path) -> ts.Executor:
    @ts.tool(read_only=True, concurrency_safe=True, rule_subject="path")
    def list_files(path: str = ".") -> list[str]:
        """List a directory of the workspace."""
        return sorted(entry.name for entry in (workspace / path).iterdir())

    @ts.tool(needs_approval=True, destructive=True, rule_subject="path")
    def delete_file(path: str) -> str:
        """Delete a file of the workspace."""
        (workspace / path).unlink()
        return f"deleted {path}"

    permissions = ts.Permissions(deny=["delete_file(**/.git/**)"], root=workspace)
    return ts.Executor([list_files, delete_file], permissions=permissions)


def show(outcome: ts.Outcome) -> None:
    for result in outcome.results:
        shown = f"error {result.error_kind}: {result.error}" if result.is_error else repr(result.output)
        print(f"  {result.call_id} {result.tool_name} -> {shown}")


async def first_step(workspace: Path) -> ts.Outcome:
    calls = [
        ts.ToolCall("c1", "list_files", {"path": "."}),
        ts.ToolCall("c2", "delete_file", {"path": "draft.txt"}),
        ts.ToolCall("c3", "delete_file", {"path": "./notes/../notes.txt"}),
        ts.ToolCall("c4", "delete_file", {"path": "src/../.git/config"}),
    ]
    outcome = await build_executor(workspace).run(calls)
    print(f"step 1: {len(outcome.results)} of {len(calls)} calls answered; {len(outcome.pending)} wait for a person")
    show(outcome)
    return outcome


def ask_the_person(outcome: ts.Outcome, decisions: dict[str, bool]) -> ts.RunState:
    state = outcome.state
    assert state is not None
    for request in outcome.pending:
        print(f"  waiting: {request.call_id} {request.tool_name} {request.args} ({request.reason})")
        approved = decisions.get(request.call_id)
        if approved is None:
            approved = input(f"approve {request.call_id}? [y/N] ").strip().lower() == "y"
        if approved:
            state.approve(request.call_id)
        else:
            state.reject(request.call_id, "the person said no")
        print(f"person: {'approved' if approved else 'rejected'} {request.call_id}")
    return state


async def second_step(workspace: Path, saved: str) -> None:
    state = ts.RunState.from_json(saved, key=KEY)
    outcome = await build_executor(workspace).resume(state)
    print("step 2 (a new process): every call answered, in the model's order")
    show(outcome)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--approve", action="append", default=[], metavar="CALL_ID")
    parser.add_argument("--reject", action="append", default=[], metavar="CALL_ID")
    parser.add_argument("--resume", nargs=2, metavar=("WORKSPACE", "STATE"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.resume:
        anyio.run(second_step, Path(options.resume[0]), Path(options.resume[1]).read_text())
        return
    decisions = {call_id: True for call_id in options.approve} | {call_id: False for call_id in options.reject}
    with tempfile.TemporaryDirectory() as directory:
        workspace = Path(directory)
        for name in ("draft.txt", "notes.txt", ".git/config"):
            (workspace / name).parent.mkdir(parents=True, exist_ok=True)
            (workspace / name).write_text(name)
        state = ask_the_person(anyio.run(first_step, workspace), decisions)
        saved = workspace / "run-state.json"
        saved.write_text(state.to_json(key=KEY))
        subprocess.run([sys.executable, __file__, "--resume", str(workspace), str(saved)], check=True)
        left = sorted(str(p.relative_to(workspace)) for p in workspace.rglob("*") if p.is_file() and p != saved)
        print(f"files left: {', '.join(left)}")


if __name__ == "__main__":
    main()
