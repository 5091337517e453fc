"""Standing decisions: what a person decided once for the rest of a run (``RunState.approve(..., always=...)``).

A standing approval has a scope: ``"call"`` (the same tool, unchanged, with the
same canonical arguments), ``"tool"`` (every call of the tool, unchanged), or a
permission rule (every call the rule matches, in the rule syntax of
``Permissions``). A standing rejection (``reject(..., always=True)``) covers
every call of its tool. They answer a call that asks, and only that: a deny
(a rule, a hook, the tool's own check, the mode) is reached before any ask, so
it still wins. A standing decision about a tool holds while the tool is the
same (its fingerprint: name, description, schema, implementation).

A run's standing decisions travel in its ``RunState`` (and its JSON form), and
a tool loop holds them in force for the turns after a resume
(``standing_in_force``), so that every later interruption's state carries them on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from toolsched._policy.rule_syntax import parse_rule
from toolsched.errors import OptionError, RuleError, StateError

if TYPE_CHECKING:
    pass

__all__ = ["Scope", "Standing", "in_force", "parse_scope", "standing_in_force"]

#: A standing approval's scope as ``approve(always=...)`` takes it: None (this call only), ``"call"``,
#: ``"tool"`` or a permission rule's text.
Scope = str | None

#: What a standing decision settles a call to, with the message of a rejection.
Settled = tuple[Literal["approved", "rejected"], str | None]


def parse_scope(always: Any) -> Scope:
    """``approve(always=...)`` read: None (no standing approval), ``"call"``, ``"tool"`` (``True`` too) or a
    permission rule's text (checked with the rule syntax: ``RuleError`` naming it); ``OptionError`` otherwise."""
    if always is None or always is False:
        return None
    if always is True:
        return "tool"
    if not isinstance(always, str):
        raise OptionError(
            f'approve(always=...) takes "call", "tool", a permission rule such as "bash(npm test *)", True or '
            f"None; got {type(always).__name__} {always!r}"
        )
    if always in ("call", "tool"):
        return always
    if not always.strip():
        raise OptionError('approve(always=...) got an empty string; give "call", "tool" or a permission rule')
    try:
        parse_rule(always, "approve(always=...)")
    except RuleError as exc:
        raise RuleError(f"approve(always={always!r}): not a permission rule: {exc}") from None
    return always


@dataclass(slots=True)
class Standing:
    """A run's standing decisions (internal, mutable while a state is decided).

    ``allow`` and ``reject`` by tool name (with the tool's fingerprint, and a
    rejection's message); ``calls`` as (tool, fingerprint, argument digest);
    ``rules`` as the rules' texts, in the order given.
    """

    allow: dict[str, str] = field(default_factory=dict)
    reject: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    calls: set[tuple[str, str, str]] = field(default_factory=set)
    rules: list[str] = field(default_factory=list)

    def copy(self) -> Standing:
        return Standing(dict(self.allow), dict(self.reject), set(self.calls), list(self.rules))

    def merged(self, later: Standing) -> Standing:
        """These decisions with ``later``'s given after them (a later decision about a tool replaces one before)."""
        merged = self.copy()
        for tool, fingerprint in later.allow.items():
            merged.allow[tool] = fingerprint
            merged.reject.pop(tool, None)
        for tool, rejected in later.reject.items():
            merged.reject[tool] = rejected
            merged.allow.pop(tool, None)
        merged.calls |= later.calls
        merged.rules.extend(rule for rule in later.rules if rule not in merged.rules)
        return merged

    def __bool__(self) -> bool:
        return bool(self.allow or self.reject or self.calls or self.rules)

    def decide(self, tool: str, fingerprint: str, digest: str, matches: Callable[[str], bool]) -> Settled | None:
        """The standing decision for a call that asks, if one covers it: a rejection of its tool first, then an
        approval of its tool, of its very arguments, or by a rule ``matches`` says matches the call."""
        rejected = self.reject.get(tool)
        if rejected is not None and rejected[0] == fingerprint:
            return "rejected", rejected[1]
        if self.allow.get(tool) == fingerprint or (tool, fingerprint, digest) in self.calls:
            return "approved", None
        for rule in self.rules:
            if matches(rule):
                return "approved", None
        return None

    # -- the JSON form (a run state's) ----------------------------------------------

    def to_json(self, body: dict[str, Any]) -> None:
        """Writes the decisions into a state's JSON ``body`` (the scoped ones only when there are some)."""
        body["always_allow"] = dict(self.allow)
        body["always_reject"] = {tool: [fp, message] for tool, (fp, message) in self.reject.items()}
        if self.calls:
            body["always_calls"] = sorted([list(call) for call in self.calls])
        if self.rules:
            body["always_rules"] = list(self.rules)

    @classmethod
    def from_json(cls, body: Mapping[str, Any], where: str) -> Standing:
        """The decisions of a state's JSON ``body``; a state saved before scopes existed has none but by tool."""
        allow = body.get("always_allow")
        reject = body.get("always_reject")
        if not (isinstance(allow, dict) and all(isinstance(v, str) for v in allow.values())):
            raise StateError(f"{where}.always_allow is malformed")
        if not (
            isinstance(reject, dict)
            and all(
                isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) and isinstance(v[1], str | None)
                for v in reject.values()
            )
        ):
            raise StateError(f"{where}.always_reject is malformed")
        calls = body.get("always_calls", [])
        if not (
            isinstance(calls, list)
            and all(isinstance(c, list) and len(c) == 3 and all(isinstance(p, str) for p in c) for c in calls)
        ):
            raise StateError(f"{where}.always_calls must list calls as [tool, fingerprint, digest]")
        rules = body.get("always_rules", [])
        if not (isinstance(rules, list) and all(isinstance(rule, str) for rule in rules)):
            raise StateError(f"{where}.always_rules must list permission rules")
        for rule in rules:
            try:
                parse_rule(rule, f"{where}.always_rules")
            except RuleError as exc:
                raise StateError(str(exc)) from None
        return cls(
            dict(allow),
            {tool: (v[0], v[1]) for tool, v in reject.items()},
            {(c[0], c[1], c[2]) for c in calls},
            list(rules),
        )


# The standing decisions a tool loop holds in force for the turns after a resume (None: none).
_IN_FORCE: ContextVar[Standing | None] = ContextVar("toolsched_standing", default=None)


def in_force() -> Standing | None:
    """The standing decisions in force in this context (a tool loop's, after a resume), if any."""
    return _IN_FORCE.get()


@contextlib.contextmanager
def standing_in_force(standing: Standing) -> Iterator[None]:
    """Holds ``standing`` in force for the runs made inside the block (with any in force already)."""
    current = _IN_FORCE.get()
    token = _IN_FORCE.set(standing if current is None else current.merged(standing))
    try:
        yield
    finally:
        _IN_FORCE.reset(token)
