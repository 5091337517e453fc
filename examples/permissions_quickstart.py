"""Permissions, hooks and approvals in one turn: the README's example, runnable.

Run with ``python examples/permissions_quickstart.py``.
"""

from __future__ import annotations

import anyio

import toolsched as ts

FILES = {"docs/guide.md": "# Guide", ".env": "TOKEN=...", "build/out.bin": "..."}


@ts.tool(read_only=True, concurrency_safe=True, rule_subject="path")
def read_file(path: str) -> str:
    """Read a text file."""
    return FILES[path]


@ts.tool(needs_approval=True, destructive=True, rule_subject="path")
def delete_file(path: str) -> str:
    """Delete a file."""
    del FILES[path]
    return f"deleted {path}"


def no_env_files(event: ts.HookEvent) -> ts.Decision | None:
    return ts.Decision.deny("secrets stay secret") if event.args["path"].endswith(".env") else None


executor = ts.Executor(
    [read_file, delete_file],
    permissions=ts.Permissions(allow=["read_file(docs/**)"], deny=["delete_file(docs/**)"], root="/repo"),
    hooks=ts.Hooks()
    .pre_tool_use("read_file|delete_file", no_env_files)
    .post_tool_use("*", lambda event: print("ran", event.call_id)),
)


async def main() -> None:
    outcome = await executor.run(
        [
            ts.ToolCall("c1", "read_file", {"path": "docs/guide.md"}),
            ts.ToolCall("c2", "read_file", {"path": ".env"}),  # hook_blocked
            ts.ToolCall("c3", "delete_file", {"path": "build/../docs/x.md"}),  # permission_denied
            ts.ToolCall("c4", "delete_file", {"path": "build/out.bin"}),  # needs approval
        ]
    )
    assert outcome.interrupted and [p.call_id for p in outcome.pending] == ["c4"]
    assert outcome.state is not None
    saved = outcome.state.to_json(key=b"server-side secret")  # store it anywhere

    # Later, perhaps in another process, once a person has said yes:
    state = ts.RunState.from_json(saved, key=b"server-side secret")
    state.approve("c4")
    outcome = await executor.resume(state)  # runs c4 only; c1 is not run again
    for result in outcome.results:
        print(result.call_id, result.error_kind or result.output)


if __name__ == "__main__":
    anyio.run(main)
