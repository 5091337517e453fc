"""The registry: the tools of a run, their lookup, and their export to each provider.

A registry holds one immutable tool set at a time. A turn reads the set once,
when it starts, and keeps it to the end, so the set may change between turns
(``refresh()``, ``load()``) and never within one.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, SupportsIndex

from toolsched import _core
from toolsched._tools.schema import NotStrictError, inline_refs, strict_schema, to_gemini_schema
from toolsched._tools.search import ToolSearch
from toolsched._tools.tools import Tool, tool
from toolsched._values.exception_text import described
from toolsched.errors import OptionError, RefreshError, ToolNameError, UnpicklableError

if TYPE_CHECKING:
    from toolsched._policy.permissions import Permissions

logger = logging.getLogger("toolsched")

__all__ = ["RefreshTools", "ToolRegistry"]

ToolSource = Iterable[Tool | Callable[..., Any]]
# Returns (or resolves to) the current tool list, a ToolRegistry, or None to keep the set.
RefreshTools = Callable[[], Any]

# The name of the built-in tool that finds and loads deferred tools.
SEARCH_TOOL_NAME = "tool_search"


class ToolSet:
    """One version of a registry's tools (internal, immutable): what a turn sees from start to end.

    ``given`` are the tools the registry was given; ``tools`` adds the
    built-in ``tool_search`` when some tool is deferred. ``hidden`` holds the
    positions of deferred tools not loaded yet: absent from exports and
    answered ``unknown_tool`` when called.
    """

    __slots__ = ("by_name", "deferred", "gated", "given", "hidden", "loaded", "search", "table", "tools")

    table: _core.ToolTable
    given: tuple[Tool, ...]
    tools: tuple[Tool, ...]
    by_name: dict[str, Tool]
    deferred: dict[str, int]
    loaded: frozenset[str]
    hidden: frozenset[int]
    gated: tuple[int, ...]
    search: Tool | None

    @classmethod
    def build(cls, given: tuple[Tool, ...], loaded: frozenset[str], search: Callable[[], Tool]) -> ToolSet:
        """Checks and compiles a tool list (``ToolNameError``, ``SchemaError``, ``ToolDefinitionError``)."""
        members = list(given)
        deferred_any = any(member.should_defer and not member.always_load for member in members)
        search_tool: Tool | None = None
        if deferred_any and not any(SEARCH_TOOL_NAME in (m.name, *m.aliases) for m in members):
            search_tool = search()
            members.append(search_tool)
        facts = [member.facts for member in members]
        table = _core.ToolTable(
            [
                (member.name, list(member.aliases), fact.input_schema)
                for member, fact in zip(members, facts, strict=True)
            ]
        )
        toolset = object.__new__(cls)
        toolset.table = table
        toolset.given = given
        toolset.tools = tuple(members)
        toolset.by_name = {key: member for member in members for key in (member.name, *member.aliases)}
        toolset.deferred = {
            member.name: index for index, member in enumerate(members) if member.should_defer and not member.always_load
        }
        toolset.search = search_tool
        toolset._show(loaded & toolset.deferred.keys())
        return toolset

    def _show(self, loaded: frozenset[str]) -> None:
        self.loaded = loaded
        self.hidden = frozenset(index for name, index in self.deferred.items() if name not in loaded)
        self.gated = tuple(
            index for index, member in enumerate(self.tools) if index in self.hidden or not _always_enabled(member)
        )

    def with_loaded(self, loaded: frozenset[str]) -> ToolSet:
        """The same tools with another set of loaded deferred tools (the compiled table is shared)."""
        toolset = object.__new__(ToolSet)
        for name in ("table", "given", "tools", "by_name", "deferred", "search"):
            setattr(toolset, name, getattr(self, name))
        toolset._show(loaded)
        return toolset

    def disabled_mask(self) -> list[bool]:
        """Per tool, whether it is absent this turn: hidden, or ``is_enabled()`` says no (an error counts as no)."""
        if not self.gated:
            return []
        tools = self.tools
        hidden = self.hidden
        mask = [False] * len(tools)
        for index in self.gated:
            if index in hidden:
                mask[index] = True
                continue
            try:
                mask[index] = not tools[index].is_enabled()
            except Exception:
                mask[index] = True
        return mask


class ToolRegistry:
    """The tools a model may call, looked up by name or alias.

    Plain functions are wrapped with ``@tool``. Names and aliases must be
    unique across the registry (``ToolNameError``); every schema is compiled
    once here (``SchemaError``).

    The tool set can change between turns, never within one:

    - ``refresh_tools``: a plain or async callable returning the current tool
      list (tools, functions, or a ``ToolRegistry``; None keeps the set).
      An ``Executor`` consults it through ``refresh()`` after each run's
      results are complete, so the next turn sees the new list;
    - tools with ``should_defer=True`` are left out of exports (and answered
      ``unknown_tool`` when called) until loaded. With any such tool the
      registry adds a built-in ``tool_search`` tool that finds deferred tools
      by name and description and loads them for the next turn (unless a tool
      of that name is given). ``always_load=True`` tools are never deferred.
    """

    def __init__(self, tools: ToolSource = (), *, refresh_tools: RefreshTools | None = None) -> None:
        if refresh_tools is not None and not callable(refresh_tools):
            raise OptionError(f"refresh_tools must be a callable returning the tool list, got {refresh_tools!r}")
        self._source = refresh_tools
        self._search: Tool | None = None
        self._wrapped: dict[Any, Tool] = {}
        self._started = 0
        self._applied = 0
        given, self._wrapped = self._members(tools)
        # The tool set as it is now (read by the executor: a run takes it once and keeps it to the end).
        self.toolset = ToolSet.build(given, frozenset(), self._search_tool)

    def _members(self, tools: ToolSource | ToolRegistry) -> tuple[tuple[Tool, ...], dict[Any, Tool]]:
        """The tools of a list, functions wrapped with ``@tool`` (the same wrapper for the same function)."""
        if isinstance(tools, ToolRegistry):
            return tools.toolset.given, dict(tools._wrapped)
        if isinstance(tools, str | bytes | dict) or not isinstance(tools, Iterable):
            raise TypeError(f"tools must be a collection of tools or functions, got {type(tools).__name__}")
        wrapped: dict[Any, Tool] = {}
        members: list[Tool] = []
        for item in tools:
            if isinstance(item, Tool):
                members.append(item)
                continue
            if isinstance(item, Hashable):
                member = self._wrapped.get(item) or tool(item)
                wrapped[item] = member
            else:
                member = tool(item)
            members.append(member)
        return tuple(members), wrapped

    def __deepcopy__(self, memo: dict[int, Any]) -> ToolRegistry:
        """The registry itself, as for the ``Executor`` that holds one: a deep copy of what holds it shares it
        (its tools' compiled schemas cannot be copied)."""
        return self

    def __copy__(self) -> ToolRegistry:
        copied = object.__new__(type(self))
        copied.__dict__.update(self.__dict__)
        return copied

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        raise UnpicklableError(
            "a ToolRegistry cannot be pickled: it holds its tools' compiled schemas; build one where it is "
            "needed (module-level @tool functions pickle by reference, class-form tools by value)"
        )

    def _search_tool(self) -> Tool:
        if self._search is None:
            self._search = ToolSearch(self._deferred_tools, self.load)
        return self._search

    def _deferred_tools(self) -> dict[str, Tool]:
        toolset = self.toolset
        return {name: toolset.tools[index] for name, index in toolset.deferred.items()}

    @property
    def refreshes(self) -> bool:
        """Whether the registry has ``refresh_tools`` (it is then refreshed after every run)."""
        return self._source is not None

    # -- lookup -----------------------------------------------------------------

    @property
    def _table(self) -> _core.ToolTable:
        return self.toolset.table

    def get(self, name: str) -> Tool | None:
        """The tool called ``name`` (by name or alias), or None."""
        return self.toolset.by_name.get(name)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.toolset.tools)

    def __len__(self) -> int:
        return len(self.toolset.tools)

    def __contains__(self, name: object) -> bool:
        return name in self.toolset.by_name

    @property
    def names(self) -> list[str]:
        """Canonical names, sorted."""
        return sorted(member.name for member in self.toolset.tools)

    def disabled_mask(self) -> list[bool]:
        """Per tool, whether it is absent this turn: disabled by ``is_enabled()``, or deferred and not loaded."""
        return self.toolset.disabled_mask()

    # -- a changing tool set -------------------------------------------------------

    @property
    def deferred(self) -> list[str]:
        """The names of the deferred tools (loaded or not), sorted."""
        return sorted(self.toolset.deferred)

    @property
    def loaded(self) -> frozenset[str]:
        """The deferred tools loaded so far: exported and callable from the next turn on."""
        return self.toolset.loaded

    def load(self, *names: str) -> None:
        """Loads deferred tools by name, as ``tool_search`` does: the next turn exports and accepts them."""
        toolset = self.toolset
        unknown = [name for name in names if name not in toolset.deferred]
        if unknown:
            choices = ", ".join(sorted(toolset.deferred)) or "none"
            listed = ", ".join(map(repr, unknown))
            raise ToolNameError(f"cannot load {listed}: no such deferred tool (deferred: {choices})")
        if not set(names) <= toolset.loaded:
            self.toolset = toolset.with_loaded(toolset.loaded | frozenset(names))

    async def refresh(self) -> bool:
        """Asks ``refresh_tools`` for the current tool list and makes it the set the next turn sees.

        Returns whether the set changed (False without ``refresh_tools``, when
        it returns None, or when it returns the very same tools). On any error
        the previous set stays: ``RefreshError`` when the callable fails or
        returns something other than tools; ``ToolNameError``, ``SchemaError``
        or ``ToolDefinitionError`` when the new tools clash or are malformed.
        Deferred tools loaded before stay loaded while they exist.
        """
        source = self._source
        if source is None:
            return False
        self._started += 1
        ticket = self._started
        try:
            fresh = source()
            if inspect.isawaitable(fresh):
                fresh = await fresh
        except Exception as exc:
            detail = described(exc)
            raise RefreshError(f"refresh_tools failed ({detail}); the previous tool set stays") from exc
        if fresh is None:
            return False
        if isinstance(fresh, ToolRegistry):
            fresh = fresh.toolset.given
        if isinstance(fresh, str | bytes | dict) or not isinstance(fresh, Iterable):
            raise RefreshError(
                f"refresh_tools must return a list of tools, a ToolRegistry or None, got {type(fresh).__name__}; "
                "the previous tool set stays"
            )
        given, wrapped = self._members(fresh)
        if ticket < self._applied:
            # A refresh that started later has already given a newer set.
            return False
        current = self.toolset
        if len(given) == len(current.given) and all(a is b for a, b in zip(given, current.given, strict=True)):
            self._applied = ticket
            return False
        toolset = ToolSet.build(given, current.loaded, self._search_tool)
        self._applied = ticket
        self.toolset = toolset
        self._wrapped = wrapped
        return True

    # -- exports --------------------------------------------------------------------

    def exported(self, *, permissions: Permissions | None = None) -> list[Tool]:
        """The tools the model should see this turn, sorted by name (stable for prompt caching).

        Disabled tools and deferred tools not loaded yet are left out; with
        ``permissions``, so are tools that no call could ever run (denied outright).
        """
        toolset = self.toolset
        mask = toolset.disabled_mask()
        offered = [
            member
            for index, member in enumerate(toolset.tools)
            if not (mask and mask[index]) and not (permissions is not None and permissions.denies_outright(member))
        ]
        return sorted(offered, key=lambda member: member.name)

    def _schemas(self, permissions: Permissions | None) -> Iterator[tuple[Tool, dict[str, Any]]]:
        for member in self.exported(permissions=permissions):
            yield member, inline_refs(member.facts.input_schema)

    def to_anthropic(self, *, permissions: Permissions | None = None) -> list[dict[str, Any]]:
        """Tool definitions for the Anthropic Messages API."""
        return [
            {"name": member.name, "description": member.description, "input_schema": schema}
            for member, schema in self._schemas(permissions)
        ]

    def to_openai(self, *, strict: bool = False, permissions: Permissions | None = None) -> list[dict[str, Any]]:
        """Function tools for the OpenAI Responses API (strict form on request).

        A tool whose schema strict mode cannot express (a map with free keys,
        such as ``dict[str, int]``) is exported non-strict, with a warning
        logged, rather than closed to ``{}``.
        """
        exported = []
        for member, schema in self._schemas(permissions):
            parameters, tool_strict = schema, False
            if strict:
                try:
                    parameters, tool_strict = strict_schema(schema), True
                except NotStrictError as exc:
                    logger.warning(
                        "tool `%s` is exported without strict mode: its schema holds %s, which strict mode "
                        "cannot express",
                        member.name,
                        exc,
                    )
            exported.append(
                {
                    "type": "function",
                    "name": member.name,
                    "description": member.description,
                    "parameters": parameters,
                    "strict": tool_strict,
                }
            )
        return exported

    def to_openai_chat(self, *, strict: bool = False, permissions: Permissions | None = None) -> list[dict[str, Any]]:
        """Function tools for the OpenAI Chat Completions API."""
        return [
            {"type": "function", "function": {key: value for key, value in item.items() if key != "type"}}
            for item in self.to_openai(strict=strict, permissions=permissions)
        ]

    def to_gemini(self, *, permissions: Permissions | None = None) -> list[dict[str, Any]]:
        """A Gemini ``tools`` list: one entry holding every function declaration."""
        declarations = [
            {"name": member.name, "description": member.description, "parameters": to_gemini_schema(schema)}
            for member, schema in self._schemas(permissions)
        ]
        return [{"function_declarations": declarations}] if declarations else []


def _always_enabled(member: Tool) -> bool:
    return type(member).is_enabled is Tool.is_enabled and not callable(member.enabled) and bool(member.enabled)
