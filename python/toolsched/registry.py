"""The registry: the tools of a run, their lookup, and their export to each provider."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from toolsched import _core
from toolsched.schema import inline_refs, strict_schema, to_gemini_schema
from toolsched.tools import Tool, tool

if TYPE_CHECKING:
    from toolsched.permissions import Permissions

__all__ = ["ToolRegistry"]


class ToolRegistry:
    """An immutable set of tools, looked up by name or alias.

    Plain functions are wrapped with ``@tool``. Names and aliases must be
    unique across the registry (``ToolNameError``); every schema is compiled
    once here (``SchemaError``).
    """

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        members = [item if isinstance(item, Tool) else tool(item) for item in tools]
        facts = [member._facts() for member in members]
        self._table = _core.ToolTable(
            [
                (member.name, list(member.aliases), fact.input_schema)
                for member, fact in zip(members, facts, strict=True)
            ]
        )
        self._tools: tuple[Tool, ...] = tuple(members)
        self._by_name: dict[str, Tool] = {}
        for member in members:
            for key in (member.name, *member.aliases):
                self._by_name[key] = member
        # Tools whose availability must be asked every turn.
        self._gated = tuple(i for i, member in enumerate(members) if not _always_enabled(member))

    def get(self, name: str) -> Tool | None:
        """The tool called ``name`` (by name or alias), or None."""
        return self._by_name.get(name)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    @property
    def names(self) -> list[str]:
        """Canonical names, sorted."""
        return sorted(member.name for member in self._tools)

    def disabled_mask(self) -> list[bool]:
        """Per tool, whether ``is_enabled()`` says no this turn (an exception counts as no)."""
        if not self._gated:
            return []
        mask = [False] * len(self._tools)
        for index in self._gated:
            try:
                mask[index] = not self._tools[index].is_enabled()
            except Exception:
                mask[index] = True
        return mask

    def exported(self, *, permissions: Permissions | None = None) -> list[Tool]:
        """The tools the model should see this turn, sorted by name (stable for prompt caching).

        With ``permissions``, tools that no call could ever run (denied outright) are left out.
        """
        mask = self.disabled_mask()
        offered = [
            member
            for index, member in enumerate(self._tools)
            if not (mask and mask[index])
            and (member.always_load or not member.should_defer)
            and not (permissions is not None and permissions.denies_outright(member))
        ]
        return sorted(offered, key=lambda member: member.name)

    def _schemas(self, permissions: Permissions | None) -> Iterator[tuple[Tool, dict[str, Any]]]:
        for member in self.exported(permissions=permissions):
            yield member, inline_refs(member._facts().input_schema)

    def to_anthropic(self, *, permissions: Permissions | None = None) -> list[dict[str, Any]]:
        """Tool definitions for the Anthropic Messages API."""
        return [
            {"name": member.name, "description": member.description, "input_schema": schema}
            for member, schema in self._schemas(permissions)
        ]

    def to_openai(self, *, strict: bool = False, permissions: Permissions | None = None) -> list[dict[str, Any]]:
        """Function tools for the OpenAI Responses API (strict form on request)."""
        return [
            {
                "type": "function",
                "name": member.name,
                "description": member.description,
                "parameters": strict_schema(schema) if strict else schema,
                "strict": strict,
            }
            for member, schema in self._schemas(permissions)
        ]

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
