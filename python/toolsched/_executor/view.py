"""What an executor works out once per tool set: each tool's facts and admission policy."""

from __future__ import annotations

from toolsched import _core
from toolsched._executor.settings import Settings
from toolsched._policy.hooks import Hook, ToolHooks
from toolsched._policy.tool_rules import UNDECIDED, EngineRules, ToolRules
from toolsched._tools.registry import ToolSet
from toolsched._tools.tools import Tool, ToolFacts, tool_fingerprint

__all__ = ["Policy", "View"]


class Policy:
    """What admission must do for one tool, worked out once per executor (internal).

    ``admit`` is False when nothing can stop or ask about the tool's calls:
    they go straight to scheduling. ``unasked`` is True when, if no rule names
    a call and no hook asks about it, nothing else would ask or deny (the mode,
    the tool's ``requires_approval`` and ``check_permissions``): it is allowed.
    """

    __slots__ = (
        "admit",
        "hooks",
        "post_failure",
        "post_success",
        "pre",
        "refuse_interaction",
        "rules",
        "unasked",
        "update",
    )

    def __init__(
        self, rules: ToolRules | None, hooks: ToolHooks | None, refuse_interaction: bool, admit: bool, unasked: bool
    ) -> None:
        self.rules = rules
        self.hooks = hooks
        self.pre: tuple[Hook, ...] = hooks.pre if hooks is not None else ()
        self.post_success: tuple[Hook, ...] = hooks.post_success if hooks is not None else ()
        self.post_failure: tuple[Hook, ...] = hooks.post_failure if hooks is not None else ()
        self.update: tuple[Hook, ...] = hooks.update if hooks is not None else ()
        self.refuse_interaction = refuse_interaction
        self.admit = admit
        self.unasked = unasked


def tool_policy(settings: Settings, member: Tool, facts: ToolFacts) -> Policy:
    """What admission must do for one tool: its rules, its hooks, whether it can be stopped or asked about."""
    permissions, hooks = settings.permissions, settings.hooks
    rules = permissions.for_tool(member) if permissions is not None else None
    tool_hooks = hooks.for_tool((member.name, *member.aliases)) if hooks is not None else None
    refuse_interaction = member.requires_user_interaction and not settings.interactive
    asks = facts.static_needs_approval is not False and settings.mode != "bypass"
    admit = bool(
        refuse_interaction
        or rules is not None
        or (tool_hooks is not None and tool_hooks.pre)
        or settings.mode not in ("default", "bypass")
        or facts.checks_permissions
        or asks
    )
    unasked = (
        not refuse_interaction and settings.mode in ("default", "bypass") and not asks and not facts.checks_permissions
    )
    return Policy(rules, tool_hooks, refuse_interaction, admit, unasked)


def engine_rules(policy: Policy, facts: ToolFacts) -> EngineRules:
    """What the engine judges of a tool's rules while it plans a turn (``Job.ruling``).

    Not for a tool with ``validate_input``: it gets the call's arguments
    themselves before admission, so only ``evaluate`` then judges them.
    """
    if policy.rules is None:
        return None
    return False if facts.validates_input else policy.rules.engine


class View:
    """What an executor works out for one tool set of its registry (internal, fixed once built).

    A turn takes the view current when it starts and uses it to the end, so
    a tool set that changes meanwhile never mixes into a running turn. A view
    is rebuilt only when the registry's set changes; loading deferred tools
    keeps the compiled table, and with it every tool's policy.
    """

    __slots__ = (
        "admits",
        "all_safe",
        "checks_input",
        "facts",
        "fingerprints",
        "plain",
        "policies",
        "post_hooked",
        "resourceful",
        "rules",
        "table",
        "tools",
        "toolset",
        "update_hooked",
    )

    tools: tuple[Tool, ...]
    facts: tuple[ToolFacts, ...]
    policies: tuple[Policy, ...]
    admits: bool
    all_safe: bool
    checks_input: bool
    post_hooked: bool
    update_hooked: bool
    resourceful: bool
    rules: _core.RuleTable
    fingerprints: dict[int, str]

    def __init__(self, settings: Settings, toolset: ToolSet, previous: View | None, refreshes: bool) -> None:
        self.toolset = toolset
        self.table = toolset.table
        if previous is not None and previous.table is toolset.table:
            self.tools = previous.tools
            self.facts = previous.facts
            self.policies = previous.policies
            self.admits = previous.admits
            self.all_safe = previous.all_safe
            self.checks_input = previous.checks_input
            self.post_hooked = previous.post_hooked
            self.update_hooked = previous.update_hooked
            self.resourceful = previous.resourceful
            self.rules = previous.rules
            self.fingerprints = previous.fingerprints
        else:
            self.tools = toolset.tools
            self.facts = tuple(member.facts for member in self.tools)
            settings.bind_backends(self.tools)
            reused: dict[int, Policy] = {}
            if previous is not None:
                reused = {id(member): policy for member, policy in zip(previous.tools, previous.policies, strict=True)}
            self.policies = tuple(
                reused.get(id(member)) or tool_policy(settings, member, facts)
                for member, facts in zip(self.tools, self.facts, strict=True)
            )
            self.admits = any(policy.admit for policy in self.policies)
            # Every tool declares itself concurrency-safe whatever its arguments: a Partitioned turn is one batch.
            self.all_safe = all(facts.static_safe is True for facts in self.facts)
            self.checks_input = any(facts.validates_input for facts in self.facts)
            self.post_hooked = any(policy.post_success or policy.post_failure for policy in self.policies)
            self.update_hooked = any(policy.update for policy in self.policies)
            self.resourceful = any(facts.run_resource is not None for facts in self.facts)
            self.rules = _core.RuleTable(
                UNDECIDED,
                [engine_rules(policy, facts) for policy, facts in zip(self.policies, self.facts, strict=True)],
            )
            self.fingerprints = {}
        # Runs that need nothing around them: no per-run resources, no refresh afterwards.
        self.plain = not self.resourceful and not refreshes

    def fingerprint(self, index: int) -> str:
        fingerprint = self.fingerprints.get(index)
        if fingerprint is None:
            fingerprint = tool_fingerprint(self.tools[index])
            self.fingerprints[index] = fingerprint
        return fingerprint
