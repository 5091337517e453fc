"""The rules that name one tool, compiled for its rule subject: ``ToolRules`` (and the engine's form of them)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from toolsched._policy.rule_syntax import (
    Matcher,
    Rule,
    fold_path,
    is_utf8,
    normalize_path,
    path_matcher,
    simple_path,
    simple_text,
    text_matcher,
)
from toolsched._values.decisions import Behavior

if TYPE_CHECKING:
    from toolsched._tools.tools import Tool

__all__ = ["MISSING", "UNDECIDED", "EngineRules", "ToolRules", "Verdict", "model_reader"]

MISSING: Any = object()

# What the rules say of a call: (behavior, the rule's text, the reason when it is not the rule's plain match).
Verdict = tuple[Behavior, str, str | None]


class _Undecided:
    """The verdict the engine leaves to ``ToolRules.evaluate`` (see ``ToolRules.engine``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNDECIDED"


UNDECIDED: Any = _Undecided()

# A tool's rules as the engine judges them (``_core.RuleTable``): None when no rule names the tool, False
# when only ``evaluate`` can judge them, ``(verdict,)`` when every call gets the same verdict, or
# ``(subject, is_path, root, deny, ask_all, ask, allow_all, allow)`` with each kind's patterns as
# ``(equal, prefix, verdict)`` in the order given.
EngineRules = tuple[Any, ...] | Literal[False] | None


class _Unreadable(Exception):
    """A rule subject that patterns cannot be matched against (internal)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if value is None:
        return "null"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return f"a {type(value).__name__}"


# One kind's patterns (deny, ask or allow) when each is a literal or a prefix: the values they equal, the
# prefixes, and the rule's text when the kind has one pattern (else None: the first that matches is looked for).
_Simple = tuple[frozenset[str], tuple[str, ...], str | None]


class ToolRules:
    """The rules that name one tool, compiled for its rule subject (internal)."""

    __slots__ = (
        "allow",
        "allow_all",
        "ask",
        "ask_all",
        "default",
        "deny",
        "deny_all",
        "engine",
        "is_path",
        "read",
        "root",
        "simple",
        "subject",
    )

    def __init__(
        self,
        rules: Mapping[str, list[Rule]],
        subject: str | None,
        is_path: bool,
        default: Any,
        root: str,
        read: Callable[[Any], Any] | None = None,
    ) -> None:
        self.subject = subject
        self.is_path = is_path
        self.default = default
        # The subject's value as the tool's body will receive it, where a model stands between (``model_reader``):
        # then only ``_subjects`` reads it, never the plain argument.
        self.read = read
        self.root = "".join("/" + part for part in fold_path(root, []))

        def everything(kind: str) -> str | None:
            return next((rule.text for rule in rules[kind] if rule.pattern is None), None)

        def patterns(kind: str) -> tuple[tuple[str, Matcher], ...]:
            compile_one = (lambda p: path_matcher(p, root)) if is_path else text_matcher
            return tuple((rule.text, compile_one(rule.pattern)) for rule in rules[kind] if rule.pattern is not None)

        self.deny_all, self.ask_all, self.allow_all = everything("deny"), everything("ask"), everything("allow")
        self.deny, self.ask, self.allow = patterns("deny"), patterns("ask"), patterns("allow")

        def literal_or_prefix(kind: str) -> list[tuple[str, str | None, str | None]] | None:
            """Each pattern of ``kind``, in the order given, as (its rule's text, the value it equals, the prefix it
            matches); None when one of them needs its regex."""
            forms = []
            for rule in rules[kind]:
                if rule.pattern is not None:
                    equal, prefix = simple_path(rule.pattern, root) if is_path else simple_text(rule.pattern)
                    if equal is None and prefix is None:
                        return None
                    forms.append((rule.text, equal, prefix))
            return forms

        def simple(forms: list[tuple[str, str | None, str | None]]) -> _Simple:
            equals = frozenset(equal for _, equal, _ in forms if equal is not None)
            prefixes = tuple(prefix for _, _, prefix in forms if prefix is not None)
            return equals, prefixes, forms[0][0] if len(forms) == 1 else None

        def engine_patterns(
            kind: Behavior, forms: list[tuple[str, str | None, str | None]]
        ) -> list[tuple[str | None, str | None, Verdict]]:
            return [(equal, prefix, (kind, text, None)) for text, equal, prefix in forms]

        # Every pattern a literal or a prefix, and no rule denying every call: one plain subject is decided by
        # set and prefix tests (``evaluate``), and by the engine while it plans a turn (``engine``).
        deny, ask, allow = literal_or_prefix("deny"), literal_or_prefix("ask"), literal_or_prefix("allow")
        self.simple: tuple[_Simple, _Simple, _Simple] | None = None
        # A subject read through a model is judged by ``evaluate`` alone, on the model's value.
        if read is not None:
            deny = ask = allow = None
        if self.deny_all is None and subject is not None and deny is not None and ask is not None and allow is not None:
            self.simple = (simple(deny), simple(ask), simple(allow))

        # The same verdicts, for the engine to give while it plans a turn (``engine_rules``).
        self.engine: EngineRules = False
        if self.deny_all is not None:
            self.engine = (("deny", self.deny_all, None),)
        elif subject is None:
            # No patterns (``Permissions.for_tool`` refuses them): a rule naming every call decides, if any does.
            if self.ask_all is not None:
                self.engine = (("ask", self.ask_all, None),)
            elif self.allow_all is not None:
                self.engine = (("allow", self.allow_all, None),)
            else:
                self.engine = None
        elif deny is not None and ask is not None and allow is not None:
            texts = [
                subject,
                self.root,
                *(text for forms in (deny, ask, allow) for form in forms for text in form[1:] if text),
            ]
            # The engine reads text as UTF-8: a rule or root holding a lone surrogate is judged here only.
            if all(is_utf8(text) for text in texts):
                self.engine = (
                    subject,
                    is_path,
                    self.root,
                    engine_patterns("deny", deny),
                    ("ask", self.ask_all, None) if self.ask_all is not None else None,
                    engine_patterns("ask", ask),
                    ("allow", self.allow_all, None) if self.allow_all is not None else None,
                    engine_patterns("allow", allow),
                )

    def _subjects(self, args: Any) -> tuple[str, ...]:
        """The subject values the patterns are matched against; raises ``_Unreadable`` for a value they
        cannot read. A path starting with ``~`` counts twice: as written and expanded."""
        if self.subject is None:
            return ()
        if self.read is not None:
            value = self.read(args)
        else:
            value = args.get(self.subject, MISSING) if type(args) is dict or isinstance(args, Mapping) else MISSING
        if value is MISSING:
            value = self.default
        if isinstance(value, os.PathLike):
            # A model's path field (``pathlib.Path``, pydantic's ``FilePath``): the path it names.
            value = os.fspath(value)
        if value is MISSING or value is None:
            # No target given: the rules have nothing to match.
            return ()
        if type(value) is str:
            if not self.is_path:
                return (value,)
            if value[:1] != "~":
                # One plain path, the usual case: no list to build.
                return (normalize_path(value, self.root),)
        if isinstance(value, str):
            items: tuple[str, ...] = (str(value),)
        elif isinstance(value, list | tuple):
            value = [os.fspath(item) if isinstance(item, os.PathLike) else item for item in value]
            for position, item in enumerate(value):
                if not isinstance(item, str):
                    raise _Unreadable(f"its `{self.subject}` argument holds {_kind(item)} at position {position}")
            items = tuple(str(item) for item in value)
        else:
            raise _Unreadable(f"its `{self.subject}` argument is {_kind(value)}, not text")
        if not self.is_path:
            return items
        subjects = []
        for item in items:
            subjects.append(normalize_path(item, self.root))
            if item.startswith("~"):
                # A tool that expands ``~`` touches the home directory instead: both readings are matched.
                subjects.append(normalize_path(os.path.expanduser(item), self.root))
        return tuple(subjects)

    def evaluate(self, args: Any) -> Verdict | None:
        """The strongest rule that names this call, as (behavior, rule text, why when not plain), or None.

        Deny and ask rules match when any subject value matches; an allow rule
        only when every value does. A subject the rules cannot read is denied
        when a deny or ask pattern could apply (the text then says why).
        """
        simple = self.simple
        if simple is not None and type(args) is dict:
            # The usual case, decided with set and prefix tests: one plain text or a clean relative path
            # (``normalize_path`` would only join it to the root), and patterns that are literals or prefixes.
            value = args.get(self.subject)
            if type(value) is str and (
                not self.is_path
                or (value and value[0] not in "/.~" and value[-1] != "/" and "//" not in value and "/." not in value)
            ):
                subject = f"{self.root}/{value}" if self.is_path else value
                (deny_equal, deny_prefix, deny_only), ask, allow = simple
                if subject in deny_equal or subject.startswith(deny_prefix):
                    return "deny", deny_only or _first_match(self.deny, subject), None
                if self.ask_all is not None:
                    return "ask", self.ask_all, None
                if subject in ask[0] or subject.startswith(ask[1]):
                    return "ask", ask[2] or _first_match(self.ask, subject), None
                if self.allow_all is not None:
                    return "allow", self.allow_all, None
                if subject in allow[0] or subject.startswith(allow[1]):
                    return "allow", allow[2] or _first_match(self.allow, subject), None
                return None
        return self._evaluate_values(args)

    def _evaluate_values(self, args: Any) -> Verdict | None:
        """``evaluate`` for any subject: each of its values normalised, then matched by each pattern in turn."""
        if self.deny_all is not None:
            return "deny", self.deny_all, None
        try:
            values = self._subjects(args) if (self.deny or self.ask or self.allow) else ()
        except _Unreadable as exc:
            if self.deny or self.ask:
                guarded = (self.deny or self.ask)[0][0]
                return "deny", guarded, f"the rule `{guarded}` cannot check this call: {exc.reason}; it is refused"
            values = ()
        for text, matches in self.deny:
            for value in values:
                if matches(value):
                    return "deny", text, None
        if self.ask_all is not None:
            return "ask", self.ask_all, None
        for text, matches in self.ask:
            for value in values:
                if matches(value):
                    return "ask", text, None
        if self.allow_all is not None:
            return "allow", self.allow_all, None
        if len(values) == 1:
            (value,) = values
            for text, matches in self.allow:
                if matches(value):
                    return "allow", text, None
        elif values:
            for text, matches in self.allow:
                if all(matches(value) for value in values):
                    return "allow", text, None
        return None


def _first_match(patterns: tuple[tuple[str, Matcher], ...], subject: str) -> str:
    """The text of the first of ``patterns`` that matches ``subject`` (one of them does)."""
    for text, matches in patterns:
        if matches(subject):
            return text
    raise AssertionError(f"no pattern matches {subject!r}")  # the set and prefix tests said one does


def model_reader(tool: Tool, subject: str) -> Callable[[Any], Any] | None:
    """How to read a tool's rule subject as its body receives it, when a pydantic model stands between the
    call's arguments and the body (None when none does): the model may take the value under another name
    (an alias, or the field's own name beside its alias) and may change it (strip it, unquote it, make it a
    path). The rules then judge the model's value, not the argument as written."""
    function_model = getattr(tool, "argument_model", None)
    model = function_model if function_model is not None else getattr(tool, "input_model", None)
    if model is None:
        return None
    field = _model_field(model, subject)
    if field is None:
        return None
    # A function tool is called with the arguments the call gives (the model checks and converts those), a class
    # tool with the whole model: a subject the call leaves out is the function's own default, or the model's.
    given_only = function_model is not None

    def read(args: Any) -> Any:
        if not isinstance(args, Mapping) or (given_only and subject not in args and field not in args):
            return MISSING
        try:
            parsed = model.model_validate(args)
        except Exception as exc:
            raise _Unreadable(f"its arguments do not validate against {model.__name__} ({type(exc).__name__})") from exc
        return getattr(parsed, field)

    return read


def _model_field(model: Any, subject: str) -> str | None:
    """The name of the model's field that the schema's argument ``subject`` fills (by name or by alias)."""
    fields = getattr(model, "model_fields", None)
    if not isinstance(fields, Mapping):
        return None
    for name, info in fields.items():
        aliases = {name, getattr(info, "alias", None)}
        validation = getattr(info, "validation_alias", None)
        if isinstance(validation, str):
            aliases.add(validation)
        else:
            aliases.update(choice for choice in getattr(validation, "choices", ()) if isinstance(choice, str))
        if subject in aliases:
            return str(name)
    return None
