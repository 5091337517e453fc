"""``tool_search``: the built-in tool that finds deferred tools and loads them for the next turn.

A registry holding tools with ``should_defer=True`` adds it on its own. The
model sends keywords; the tool ranks the deferred tools by how well their
names and descriptions match, loads the best ones into the registry, and
answers with their names and descriptions. The loaded tools are exported,
schema and all, from the next turn on.

It offers only tools a call could run: not a disabled one, nor one the
executor's rules deny outright (``Permissions.denies_outright``), which the
executor hands it with its context (``SearchContext``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from toolsched._tools.context import RunIdentity, ToolContext
from toolsched._tools.tools import Tool
from toolsched._values.events import Event
from toolsched.errors import SemanticError

if TYPE_CHECKING:
    from toolsched._policy.permissions import Permissions

__all__ = ["SearchContext", "ToolSearch"]

MAX_QUERY_CHARS = 1_000
MAX_RESULTS = 20
DEFAULT_RESULTS = 5
# Words of a query beyond this many are not considered (they add cost, not precision).
MAX_QUERY_WORDS = 32
# Descriptions in the answer are cut to this length.
MAX_DESCRIPTION_CHARS = 500
# How many deferred tool names a search without matches lists, to steer the next query.
NAMES_IN_HINT = 30

_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def relevance(query: str, words: list[str], tool: Tool) -> int:
    """How well ``tool`` matches a query: name matches weigh most, description words least; 0 is no match."""
    names = [tool.name.lower(), *(alias.lower() for alias in tool.aliases)]
    if query.strip().lower() in names:
        return 1_000
    name_words = {word for name in names for word in _words(name)}
    description_words = set(_words(tool.description))
    score = 0
    for word in words:
        if word in names:
            score += 100
        elif word in name_words:
            score += 10
        elif len(word) >= 3 and any(word in name for name in names):
            score += 4
        if word in description_words:
            score += 2
        elif len(word) >= 4 and any(candidate.startswith(word) for candidate in description_words):
            score += 1
    return score


class SearchContext(ToolContext):
    """The context ``tool_search`` runs with in an executor: a ``ToolContext`` and the executor's ``permissions``."""

    __slots__ = ("permissions",)

    def __init__(
        self,
        call_id: str,
        tool_name: str,
        context: Any,
        interactive: bool,
        emit: Callable[[Event], None] | None,
        cancel_call: Callable[[str], object] | None,
        permissions: Permissions | None,
        run: RunIdentity | None = None,
    ) -> None:
        super().__init__(call_id, tool_name, context, interactive, emit, cancel_call, run)
        self.permissions = permissions


def _offered(member: Tool, permissions: Permissions | None) -> bool:
    """Whether a call of ``member`` could run this turn: it is enabled, and no rule denies it outright."""
    try:
        if not member.is_enabled():
            return False
    except Exception:
        return False
    return permissions is None or not permissions.denies_outright(member)


class ToolSearch(Tool):
    """Finds deferred tools by keywords and loads the matches for the next turn (internal: one per registry)."""

    name = "tool_search"
    description = (
        "Search for more tools. Some tools are not listed until they are loaded: give keywords describing "
        "what you need (or a tool's exact name). Matching tools are loaded and can be called from your "
        "next turn on."
    )
    input_schema: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_QUERY_CHARS,
                "description": "Keywords for the capability you need, or the exact name of a tool.",
            },
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_RESULTS,
                "description": f"How many tools to load at most (default {DEFAULT_RESULTS}).",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    read_only = True
    concurrency_safe = True

    def __init__(self, deferred: Callable[[], Mapping[str, Tool]], load: Callable[..., None]) -> None:
        # The registry's deferred tools by name as they are now, and how to load some of them.
        self._deferred = deferred
        self._load = load

    async def validate_input(self, args: Mapping[str, Any], ctx: ToolContext) -> None:
        if not _words(args["query"]):
            raise SemanticError("the query has no words to search for: give keywords such as 'calendar events'")

    async def call(self, args: Mapping[str, Any], ctx: ToolContext | None) -> dict[str, Any]:
        query: str = args["query"]
        limit: int = args.get("max_results", DEFAULT_RESULTS)
        words = list(dict.fromkeys(_words(query)))[:MAX_QUERY_WORDS]
        # A tool the model may never call is not offered (the executor's rules come with its context).
        permissions = ctx.permissions if isinstance(ctx, SearchContext) else None
        offered = {name: member for name, member in self._deferred().items() if _offered(member, permissions)}
        ranked: list[tuple[int, str, Tool]] = []
        for name, member in offered.items():
            score = relevance(query, words, member)
            if score > 0:
                ranked.append((-score, name, member))
        ranked.sort(key=lambda entry: (entry[0], entry[1]))
        found = [member for _, _, member in ranked[:limit]]
        if not found:
            names = sorted(offered)
            listed = ", ".join(names[:NAMES_IN_HINT]) + (", ..." if len(names) > NAMES_IN_HINT else "")
            return {
                "tools": [],
                "note": f"no tool matches {query[:100]!r}; the tools that can be loaded are: {listed or 'none'}",
            }
        self._load(*(member.name for member in found))
        return {
            "tools": [
                {"name": member.name, "description": member.description[:MAX_DESCRIPTION_CHARS]} for member in found
            ],
            "note": "these tools are loaded: call them from your next turn on",
        }
