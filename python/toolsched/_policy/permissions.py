"""Permission rules, modes and decisions: which calls run, which must ask, which never run.

The rule syntax and its globbing live in ``rule_syntax``, a tool's compiled rules in ``tool_rules``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from toolsched._policy.rule_syntax import Rule, fold_path, parse_rule, subject_is_path
from toolsched._policy.tool_rules import MISSING, ToolRules, model_reader
from toolsched._values.decisions import Behavior, Decision
from toolsched.errors import OptionError, RuleError

if TYPE_CHECKING:
    from toolsched._tools.tools import Tool

__all__ = ["MODES", "Decision", "Mode", "Permissions", "allow_rule_matches", "resolve_permission"]

Mode = Literal["default", "ask", "accept_reads", "plan", "bypass"]
MODES: tuple[str, ...] = ("default", "ask", "accept_reads", "plan", "bypass")


class Permissions:
    """Rules and a mode that decide, per call, whether it runs, asks or is refused.

    ``allow``, ``ask`` and ``deny`` are lists of rules (their syntax: the permissions guide);
    ``mode`` is one of:

    - ``"default"``: a call runs unless a rule or the tool asks or denies; an
      allow rule (or a hook's allow) waives the tool's own ``needs_approval``;
    - ``"ask"``: every call asks unless an allow rule or a hook allows it;
    - ``"accept_reads"``: like ``"ask"``, but read-only calls run;
    - ``"plan"``: only read-only calls may run; the rest are denied;
    - ``"bypass"``: everything runs except what a deny (rule, hook, tool) refuses.

    ``root`` is the directory relative path subjects and patterns are resolved
    against (default: the working directory when the ``Permissions`` is built).
    A rule that does not parse raises ``RuleError`` here.
    """

    __slots__ = ("_rules", "allow", "ask", "deny", "mode", "root")

    def __init__(
        self,
        allow: Iterable[str] = (),
        ask: Iterable[str] = (),
        deny: Iterable[str] = (),
        mode: Mode = "default",
        *,
        root: str | os.PathLike[str] | None = None,
    ) -> None:
        if isinstance(mode, str):
            # Plain text: a subclass's own equality could make one mode every mode.
            mode = str.__str__(mode)  # type: ignore[assignment]
        if mode not in MODES:
            raise OptionError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
        self.mode: Mode = mode
        self._rules: dict[str, list[Rule]] = {}
        for label, rules in (("allow", allow), ("ask", ask), ("deny", deny)):
            if isinstance(rules, str):
                raise TypeError(f"Permissions({label}=...) takes a list of rules, not a single string")
            self._rules[label] = [parse_rule(rule, f"{label}[{i}]") for i, rule in enumerate(rules)]
        self.allow = tuple(rule.text for rule in self._rules["allow"])
        self.ask = tuple(rule.text for rule in self._rules["ask"])
        self.deny = tuple(rule.text for rule in self._rules["deny"])
        # ``~`` in the root is the home directory, as in a pattern.
        given = os.fspath(root if root is not None else os.getcwd())
        folded = fold_path(os.path.abspath(os.path.expanduser(given)), [])
        self.root = "/" + "/".join(folded)

    def __repr__(self) -> str:
        rules = f"allow={list(self.allow)!r}, ask={list(self.ask)!r}, deny={list(self.deny)!r}"
        return f"Permissions({rules}, mode={self.mode!r}, root={self.root!r})"

    def denies_outright(self, tool: Tool) -> bool:
        """Whether no call of ``tool`` can ever run: a deny rule without a pattern, or plan mode and a writer.

        Such tools are left out of the tool lists sent to the model.
        """
        names = (tool.name, *tool.aliases)
        if any(rule.pattern is None and rule.names_any(names) for rule in self._rules["deny"]):
            return True
        return self.mode == "plan" and tool.facts.static_read_only is False

    def for_tool(self, tool: Tool) -> ToolRules | None:
        """The rules naming ``tool`` (by name or alias), compiled; None when no rule names it.

        A rule with a pattern that names a tool declaring no ``rule_subject``
        could never match, so it is an error (``RuleError``) rather than a
        silent gap; a wildcard rule (``*(secret/**)``) applies to the tools
        that have a subject.
        """
        names = (tool.name, *tool.aliases)
        subject = tool.rule_subject
        matching = {
            kind: [
                rule
                for rule in rules
                if rule.names_any(names) and not (subject is None and rule.wildcard and rule.pattern is not None)
            ]
            for kind, rules in self._rules.items()
        }
        if not any(matching.values()):
            return None
        schema = tool.facts.input_schema
        if subject is None:
            with_pattern = [rule.text for rules in matching.values() for rule in rules if rule.pattern is not None]
            if with_pattern:
                raise RuleError(
                    f"rule `{with_pattern[0]}` has a pattern, but tool `{tool.name}` declares no rule_subject "
                    "(the argument patterns are matched against)"
                )
            return ToolRules(matching, None, False, MISSING, self.root)
        properties = schema.get("properties")
        if isinstance(properties, Mapping) and subject not in properties:
            with_pattern = [rule.text for rules in matching.values() for rule in rules if rule.pattern is not None]
            if with_pattern:
                # No call would carry it: every pattern would fail to match, and a deny rule would never deny.
                known = ", ".join(f"`{name}`" for name in properties) or "none"
                raise RuleError(
                    f"rule `{with_pattern[0]}` is matched against `{subject}`, the rule_subject of tool "
                    f"`{tool.name}`, which is not one of its arguments ({known})"
                )
        spec = properties.get(subject) if isinstance(properties, Mapping) else None
        default = spec.get("default", MISSING) if isinstance(spec, Mapping) else MISSING
        is_path = subject_is_path(subject, schema)
        for rules in matching.values():
            for rule in rules:
                if is_path and rule.pattern is not None and len(rule.pattern) > 1 and rule.pattern.endswith("/"):
                    # A path normalised names the directory alone: the rule would let everything in it through.
                    directory = rule.pattern.rstrip("/")
                    raise RuleError(
                        f"rule `{rule.text}`: a path pattern ending in `/` names the directory alone; write "
                        f"`{directory}/**` for it and everything below it, or `{directory}` for the directory"
                    )
        return ToolRules(matching, subject, is_path, default, self.root, model_reader(tool, subject))


def resolve_permission(
    tool_name: str,
    *,
    mode: Mode,
    rule: tuple[Behavior, str] | None,
    hook_ask: str | None,
    hook_allowed: bool,
    tool_decision: Decision | None,
    is_read_only: Callable[[], bool],
    needs_approval: Callable[[], bool],
) -> tuple[Behavior, str | None]:
    """The merge of a call's permission decisions: deny > ask > allow, and the reason.

    ``rule`` is the rules' verdict on the final input (``(behavior, rule text)``);
    ``hook_ask`` / ``hook_allowed`` what the ``pre_tool_use`` hooks said;
    ``tool_decision`` the tool's ``check_permissions``. The tool's own facts are
    asked only when the merge needs them (``is_read_only`` in ``accept_reads``
    mode, ``needs_approval`` otherwise): an allow rule or a hook's allow waives
    them, never an ask rule, a hook's ask or the tool's ask. ``bypass`` allows
    whatever only asks.
    """
    if tool_decision is not None and tool_decision.behavior == "deny":
        return "deny", tool_decision.reason or f"`{tool_name}` refused this call"
    tool_ask: str | None = None
    if tool_decision is not None and tool_decision.behavior == "ask":
        tool_ask = tool_decision.reason or f"`{tool_name}` asks for approval of this call"
    waived = hook_allowed or (rule is not None and rule[0] == "allow")
    reason: str | None = None
    if rule is not None and rule[0] == "ask":
        reason = f"matches the ask rule `{rule[1]}`"
    elif hook_ask is not None:
        reason = hook_ask
    elif tool_ask is not None:
        reason = tool_ask
    elif not waived:
        if mode == "ask":
            reason = "every call needs approval in ask mode"
        elif mode == "accept_reads" and not is_read_only():
            reason = f"`{tool_name}` may change state; accept_reads mode asks first"
        elif needs_approval():
            reason = f"`{tool_name}` needs approval before it runs"
    if reason is None or mode == "bypass":
        return "allow", None
    return "ask", reason


# A standing approval's allow rule compiled per (rule, root): the ``Permissions`` holding that one rule.
_COMPILED: dict[tuple[str, str | None], Permissions] = {}


def allow_rule_matches(rule: str, tool: Tool, args: Any, root: str | os.PathLike[str] | None) -> bool:
    """Whether the allow rule ``rule`` matches a call of ``tool`` with ``args`` (paths resolved against
    ``root``, the executor's permissions' root); a rule with a pattern never matches a tool without a
    rule subject."""
    key = (rule, None if root is None else os.fspath(root))
    permissions = _COMPILED.get(key)
    if permissions is None:
        if len(_COMPILED) > 256:
            _COMPILED.clear()
        permissions = _COMPILED[key] = Permissions(allow=[rule], root=root)
    try:
        rules = permissions.for_tool(tool)
    except RuleError:
        return False
    if rules is None:
        return False
    verdict = rules.evaluate(args)
    return verdict is not None and verdict[0] == "allow"
