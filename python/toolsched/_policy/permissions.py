"""Permission rules, modes and decisions: which calls run, which must ask, which never run.

A rule is a string: ``read_file`` names every call of a tool (or of one of its
aliases; ``*`` in a name is a wildcard), ``edit_file(src/**)`` names the calls
whose rule-subject argument matches the pattern. Precedence is deny > ask >
allow, whatever the order of the lists.

Patterns against a path subject (the argument's schema has ``"format": "path"``
— a ``pathlib.Path`` parameter; ``file-path`` and ``directory-path``, pydantic's ``FilePath`` and
``DirectoryPath``, too — or the argument is named ``path``, ``file``,
``dir``, ``*_path`` ...) are compared after lexical normalisation of both sides:
relative paths are joined to ``root``, and ``.``, ``..`` and repeated slashes are
folded, so no spelling of a path slips past a rule. ``~`` means the home
directory in a pattern; in a subject it is ambiguous (``open()`` and ``pathlib``
take it literally, a shell expands it), so a subject starting with ``~`` is
matched both ways: deny and ask rules match if either reading matches, allow
rules only if both do. A subject the rules cannot read (anything but a string
or a list of strings: a number, an object, a nested list, a list holding
``None``) is refused whenever a deny or ask rule with a pattern names the tool. ``*``
matches within one path segment, ``**`` (a whole segment) any number of
segments; a pattern that starts with ``**`` matches anywhere. ``dir/**`` covers
the directory itself and everything below it. Other subjects are matched as
text, where ``*`` matches anything.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from toolsched._values.decisions import Behavior, Decision
from toolsched.errors import OptionError, RuleError

if TYPE_CHECKING:
    from toolsched._tools.tools import Tool

__all__ = ["Decision", "Mode", "Permissions", "resolve_permission"]

Mode = Literal["default", "ask", "accept_reads", "plan", "bypass"]
MODES: tuple[str, ...] = ("default", "ask", "accept_reads", "plan", "bypass")

_NAME = re.compile(r"[A-Za-z0-9_.\-*]+")
_PATH_NAMES = frozenset(
    {
        "path",
        "paths",
        "pathname",
        "path_name",
        "file",
        "files",
        "filename",
        "file_name",
        "fname",
        "filepath",
        "dir",
        "dirs",
        "dirname",
        "dir_name",
        "directory",
        "folder",
        "cwd",
    }
)
# ``pathlib.Path``'s format, and pydantic's ``FilePath``, ``DirectoryPath`` and ``NewPath``.
_PATH_FORMATS = frozenset({"path", "file-path", "directory-path"})
_PATH_SUFFIXES = ("_path", "_paths", "_file", "_files", "_dir", "_dirs", "_directory", "_folder")


@dataclass(frozen=True, slots=True)
class _Rule:
    """One parsed rule: a tool-name glob and an optional subject pattern."""

    text: str
    name: re.Pattern[str]
    pattern: str | None
    wildcard: bool

    def names_any(self, names: Iterable[str]) -> bool:
        return any(self.name.fullmatch(name) for name in names)


def _parse_rule(text: Any, where: str) -> _Rule:
    if not isinstance(text, str):
        raise RuleError(f"{where}: a rule is a string such as `read_file` or `edit_file(src/**)`, got {text!r}")
    stripped = text.strip()
    if not stripped:
        raise RuleError(f"{where}: empty rule")
    opening = stripped.find("(")
    pattern: str | None
    if opening == -1:
        name, pattern = stripped, None
    else:
        if not stripped.endswith(")"):
            raise RuleError(f"{where}: rule `{text}` opens `(` but does not end with `)`")
        name, pattern = stripped[:opening], stripped[opening + 1 : -1]
        if not pattern.strip():
            raise RuleError(f"{where}: rule `{text}` has an empty pattern; write `{name}` to name every call")
    if not _NAME.fullmatch(name):
        raise RuleError(
            f"{where}: rule `{text}`: the tool name `{name}` may hold only letters, digits, `_`, `-`, `.` "
            "and the wildcard `*`"
        )
    if pattern is not None:
        _check_pattern(pattern, text, where)
    name_regex = re.compile(".*".join(re.escape(piece) for piece in name.split("*")))
    return _Rule(text, name_regex, pattern, "*" in name)


def _check_pattern(pattern: str, text: str, where: str) -> None:
    if "\x00" in pattern:
        raise RuleError(f"{where}: rule `{text!r}` holds a NUL character")
    if pattern != pattern.strip():
        # No subject a tool is given looks so: the rule would never match (a deny would never deny).
        raise RuleError(f"{where}: rule `{text}`: the pattern starts or ends with a space")
    if "***" in pattern:
        raise RuleError(f"{where}: rule `{text}`: `***` is not a wildcard; use `*` (one segment) or `**` (any depth)")
    for found in re.finditer(r"\*\*", pattern):
        start, end = found.span()
        if (start > 0 and pattern[start - 1] != "/") or (end < len(pattern) and pattern[end] != "/"):
            raise RuleError(f"{where}: rule `{text}`: `**` must be a whole path segment, as in `src/**/*.py`")
    segments = pattern.split("/")
    for before, segment in itertools.pairwise(segments):
        if segment == ".." and ("*" in before or "?" in before):
            raise RuleError(f"{where}: rule `{text}`: `..` cannot follow a wildcard segment")


def _glob_segment(segment: str) -> str:
    out = []
    for char in segment:
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        else:
            out.append(re.escape(char))
    return "".join(out)


# A compiled subject pattern: called with a subject value, truthy when the value matches.
Matcher = Callable[[str], object]


def _has_wildcard(text: str) -> bool:
    return "*" in text or "?" in text


def _text_matcher(pattern: str) -> Matcher:
    """Matches text subjects; a literal or ``literal*`` pattern needs no regex."""
    if not _has_wildcard(pattern):
        return pattern.__eq__
    if pattern.endswith("*") and not _has_wildcard(pattern[:-1]):
        prefix = pattern[:-1]
        return lambda value: value.startswith(prefix)
    return _glob_text(pattern).fullmatch


def _path_matcher(pattern: str, root: str) -> Matcher:
    """Matches normalised path subjects; a literal path or ``dir/**`` needs no regex.

    A normalised subject has no empty segment and no trailing slash, so
    ``dir/**`` (``dir`` itself and everything below it) is an equality or a
    prefix test.
    """
    parts = _path_parts(pattern, root)
    if not any(_has_wildcard(part) for part in parts):
        return "".join("/" + part for part in parts).__eq__
    if parts[-1] == "**" and not any(_has_wildcard(part) for part in parts[:-1]):
        directory = "".join("/" + part for part in parts[:-1])
        below = directory + "/"
        return lambda value: value == directory or value.startswith(below)
    return _glob_path(pattern, root).fullmatch


def _simple_text(pattern: str) -> tuple[str | None, str | None]:
    """A text pattern as (the value it equals, the prefix it matches), or (None, None) when it needs its regex."""
    if not _has_wildcard(pattern):
        return pattern, None
    if pattern.endswith("*") and not _has_wildcard(pattern[:-1]):
        return None, pattern[:-1]
    return None, None


def _simple_path(pattern: str, root: str) -> tuple[str | None, str | None]:
    """A path pattern as (the path it equals, the prefix it matches), or (None, None) when it needs its regex;
    ``dir/**`` equals ``dir`` and matches the prefix ``dir/``."""
    parts = _path_parts(pattern, root)
    if not any(_has_wildcard(part) for part in parts):
        return "".join("/" + part for part in parts), None
    if parts[-1] == "**" and not any(_has_wildcard(part) for part in parts[:-1]):
        directory = "".join("/" + part for part in parts[:-1])
        return directory, directory + "/"
    return None, None


def _glob_text(pattern: str) -> re.Pattern[str]:
    out = []
    for char in pattern:
        if char == "*":
            out.append(".*")
        elif char == "?":
            out.append(".")
        else:
            out.append(re.escape(char))
    return re.compile("".join(out), re.DOTALL)


def _fold(path: str, base: list[str]) -> list[str]:
    """Lexically folds ``path`` onto ``base``: drops ``.`` and empty segments, applies ``..``."""
    parts = base
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if parts:
                parts.pop()
            continue
        parts.append(segment)
    return parts


def normalize_path(path: str, root: str) -> str:
    """The lexical absolute form of ``path`` (relative paths are joined to ``root``); ``""`` is ``/``.

    ``root`` is itself normalised (``""`` for the filesystem root). Nothing is
    expanded: ``~`` is a directory name here, as it is to ``open()``.
    """
    if path and path[0] not in "/.~" and path[-1] != "/" and "//" not in path and "/." not in path:
        # Already clean and relative: nothing to fold.
        return f"{root}/{path}"
    base = [] if path.startswith("/") else _fold(root, [])
    return "".join("/" + part for part in _fold(path, base))


def _path_parts(pattern: str, root: str) -> list[str]:
    """The segments of a path pattern, folded onto ``root`` as subjects are."""
    if pattern.startswith("~"):
        pattern = os.path.expanduser(pattern)
    if pattern.startswith("/") or pattern.split("/", 1)[0] == "**":
        return _fold(pattern, [])
    return _fold(pattern, _fold(root, []))


def _glob_path(pattern: str, root: str) -> re.Pattern[str]:
    parts = _path_parts(pattern, root)
    pieces = ["(?:/[^/]+)*" if part == "**" else "/" + _glob_segment(part) for part in parts]
    return re.compile("".join(pieces), re.DOTALL)


def _is_utf8(text: str) -> bool:
    """Whether ``text`` can be encoded as UTF-8 (it holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def subject_is_path(name: str, schema: Mapping[str, Any]) -> bool:
    """Whether a tool's rule subject holds a path: by its schema's ``format`` or by its name."""
    properties = schema.get("properties")
    spec = properties.get(name) if isinstance(properties, Mapping) else None
    if isinstance(spec, Mapping):
        items = spec.get("items")
        if spec.get("format") in _PATH_FORMATS or (isinstance(items, Mapping) and items.get("format") in _PATH_FORMATS):
            return True
    lowered = name.lower()
    return lowered in _PATH_NAMES or lowered.endswith(_PATH_SUFFIXES)


_MISSING: Any = object()

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
        rules: Mapping[str, list[_Rule]],
        subject: str | None,
        is_path: bool,
        default: Any,
        root: str,
        read: Callable[[Any], Any] | None = None,
    ) -> None:
        self.subject = subject
        self.is_path = is_path
        self.default = default
        # The subject's value as the tool's body will receive it, where a model stands between (``_model_reader``):
        # then only ``_subjects`` reads it, never the plain argument.
        self.read = read
        self.root = "".join("/" + part for part in _fold(root, []))

        def everything(kind: str) -> str | None:
            return next((rule.text for rule in rules[kind] if rule.pattern is None), None)

        def patterns(kind: str) -> tuple[tuple[str, Matcher], ...]:
            compile_one = (lambda p: _path_matcher(p, root)) if is_path else _text_matcher
            return tuple((rule.text, compile_one(rule.pattern)) for rule in rules[kind] if rule.pattern is not None)

        self.deny_all, self.ask_all, self.allow_all = everything("deny"), everything("ask"), everything("allow")
        self.deny, self.ask, self.allow = patterns("deny"), patterns("ask"), patterns("allow")

        def literal_or_prefix(kind: str) -> list[tuple[str, str | None, str | None]] | None:
            """Each pattern of ``kind``, in the order given, as (its rule's text, the value it equals, the prefix it
            matches); None when one of them needs its regex."""
            forms = []
            for rule in rules[kind]:
                if rule.pattern is not None:
                    equal, prefix = _simple_path(rule.pattern, root) if is_path else _simple_text(rule.pattern)
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
            if all(_is_utf8(text) for text in texts):
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
            value = args.get(self.subject, _MISSING) if type(args) is dict or isinstance(args, Mapping) else _MISSING
        if value is _MISSING:
            value = self.default
        if isinstance(value, os.PathLike):
            # A model's path field (``pathlib.Path``, pydantic's ``FilePath``): the path it names.
            value = os.fspath(value)
        if value is _MISSING or value is None:
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


class Permissions:
    """Rules and a mode that decide, per call, whether it runs, asks or is refused.

    ``allow``, ``ask`` and ``deny`` are lists of rules (see the module docs);
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
        if mode not in MODES:
            raise OptionError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
        self.mode: Mode = mode
        self._rules: dict[str, list[_Rule]] = {}
        for label, rules in (("allow", allow), ("ask", ask), ("deny", deny)):
            if isinstance(rules, str):
                raise TypeError(f"Permissions({label}=...) takes a list of rules, not a single string")
            self._rules[label] = [_parse_rule(rule, f"{label}[{i}]") for i, rule in enumerate(rules)]
        self.allow = tuple(rule.text for rule in self._rules["allow"])
        self.ask = tuple(rule.text for rule in self._rules["ask"])
        self.deny = tuple(rule.text for rule in self._rules["deny"])
        # ``~`` in the root is the home directory, as in a pattern.
        folded = _fold(os.path.abspath(os.path.expanduser(os.fspath(root if root is not None else os.getcwd()))), [])
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
            return ToolRules(matching, None, False, _MISSING, self.root)
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
        default = spec.get("default", _MISSING) if isinstance(spec, Mapping) else _MISSING
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
        return ToolRules(matching, subject, is_path, default, self.root, _model_reader(tool, subject))


def _model_reader(tool: Tool, subject: str) -> Callable[[Any], Any] | None:
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
            return _MISSING
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
