"""``tool_search`` offers only tools a call could run: a deferred tool that the executor's rules deny outright
is neither listed nor loaded, whatever the query; a tool denied only for some arguments still is.
"""

from __future__ import annotations

from typing import Any

import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio


def deferred_tools(ran: list[str]) -> list[ts.Tool]:
    @ts.tool(should_defer=True, aliases=["remove_repository"])
    async def delete_repo(repo: str) -> str:
        """Delete a repository and all of its history."""
        ran.append(f"delete {repo}")
        return f"deleted {repo}"

    @ts.tool(should_defer=True, aliases=["drop_repo_table"])
    async def purge_repo(repo: str) -> str:
        """Purge a repository's caches."""
        ran.append(f"purge {repo}")
        return f"purged {repo}"

    @ts.tool(should_defer=True, read_only=True, rule_subject="path")
    async def read_repo_file(path: str) -> str:
        """Read a file of a repository."""
        ran.append(f"read {path}")
        return f"text of {path}"

    @ts.tool
    async def status() -> str:
        return "ok"

    return [delete_repo, purge_repo, read_repo_file, status]


def listed(result: ts.ToolResult) -> list[str]:
    assert not result.is_error, result
    return [tool["name"] for tool in result.output["tools"]]


# ``delete_repo`` is denied by its name, ``purge_repo`` by an alias; ``read_repo_file`` only for some paths.
RULES = ts.Permissions(deny=["delete_repo", "drop_repo_table", "read_repo_file(secret/**)"])


async def test_a_deferred_tool_denied_outright_is_neither_listed_nor_loaded() -> None:
    ran: list[str] = []
    registry = ts.ToolRegistry(deferred_tools(ran))
    executor = ts.Executor(registry, permissions=RULES)
    first = await executor.run(
        [
            ts.ToolCall("s1", "tool_search", {"query": "repository repo delete purge read file", "max_results": 20}),
            ts.ToolCall("s2", "tool_search", {"query": "delete_repo"}),
            ts.ToolCall("s3", "tool_search", {"query": "remove_repository"}),
            ts.ToolCall("s4", "tool_search", {"query": "purge_repo"}),
            ts.ToolCall("s5", "tool_search", {"query": "kubernetes"}),
        ]
    )
    assert listed(first.results[0]) == ["read_repo_file"]
    # Asked for by name or alias, a denied tool is not found (other matches may be).
    for result in first.results[1:4]:
        assert "delete_repo" not in listed(result) and "purge_repo" not in listed(result)
    # Nor is it named among the tools that can be loaded when nothing matches.
    assert listed(first.results[4]) == []
    note = first.results[4].output["note"]
    assert "read_repo_file" in note and "delete_repo" not in note and "purge_repo" not in note
    assert registry.loaded == frozenset({"read_repo_file"})
    assert "delete_repo" not in [item["name"] for item in registry.to_anthropic(permissions=RULES)]

    # Next turn: the tool denied for some paths runs where it is allowed; the denied tools never run, and
    # the model is not told to look for them with tool_search.
    second = await executor.run(
        [
            ts.ToolCall("r1", "read_repo_file", {"path": "README.md"}),
            ts.ToolCall("r2", "read_repo_file", {"path": "secret/key"}),
            ts.ToolCall("d1", "delete_repo", {"repo": "main"}),
            ts.ToolCall("d2", "remove_repository", {"repo": "main"}),
        ]
    )
    kinds: list[Any] = [(r.call_id, r.error_kind) for r in second.results]
    assert kinds == [("r1", None), ("r2", "permission_denied"), ("d1", "unknown_tool"), ("d2", "unknown_tool")]
    for result in second.results[2:]:
        assert "not loaded yet" not in (result.error or ""), result.error
    assert ran == ["read README.md"]


async def test_an_executor_without_the_rule_still_finds_the_tool_in_a_shared_registry() -> None:
    """The rules are the executor's, not the registry's: another executor of the same registry finds it."""
    registry = ts.ToolRegistry(deferred_tools([]))
    denied = await ts.Executor(registry, permissions=RULES).run([ts.ToolCall("s1", "tool_search", {"query": "delete"})])
    assert listed(denied.results[0]) == []
    assert registry.loaded == frozenset()
    allowed = await ts.Executor(registry).run([ts.ToolCall("s1", "tool_search", {"query": "delete"})])
    assert listed(allowed.results[0]) == ["delete_repo"]
    assert registry.loaded == frozenset({"delete_repo"})


async def test_plan_mode_offers_no_deferred_tool_that_changes_state() -> None:
    registry = ts.ToolRegistry(deferred_tools([]))
    planning = ts.Executor(registry, permissions=ts.Permissions(mode="plan"))
    outcome = await planning.run([ts.ToolCall("s1", "tool_search", {"query": "repository repo", "max_results": 20})])
    assert listed(outcome.results[0]) == ["read_repo_file"]
    assert registry.loaded == frozenset({"read_repo_file"})
