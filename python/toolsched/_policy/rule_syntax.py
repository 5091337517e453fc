"""The rule syntax and its globbing: how a rule names a tool and matches its subject.

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
from typing import Any

from toolsched.errors import RuleError

__all__ = [
    "Matcher",
    "Rule",
    "fold_path",
    "glob_path",
    "glob_text",
    "is_utf8",
    "normalize_path",
    "parse_rule",
    "path_matcher",
    "simple_path",
    "simple_text",
    "subject_is_path",
    "text_matcher",
]

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
class Rule:
    """One parsed rule: a tool-name glob and an optional subject pattern."""

    text: str
    name: re.Pattern[str]
    pattern: str | None
    wildcard: bool

    def names_any(self, names: Iterable[str]) -> bool:
        return any(self.name.fullmatch(name) for name in names)


def parse_rule(text: Any, where: str) -> Rule:
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
    return Rule(text, name_regex, pattern, "*" in name)


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


def text_matcher(pattern: str) -> Matcher:
    """Matches text subjects; a literal or ``literal*`` pattern needs no regex."""
    if not _has_wildcard(pattern):
        return pattern.__eq__
    if pattern.endswith("*") and not _has_wildcard(pattern[:-1]):
        prefix = pattern[:-1]
        return lambda value: value.startswith(prefix)
    return glob_text(pattern).fullmatch


def path_matcher(pattern: str, root: str) -> Matcher:
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
    return glob_path(pattern, root).fullmatch


def simple_text(pattern: str) -> tuple[str | None, str | None]:
    """A text pattern as (the value it equals, the prefix it matches), or (None, None) when it needs its regex."""
    if not _has_wildcard(pattern):
        return pattern, None
    if pattern.endswith("*") and not _has_wildcard(pattern[:-1]):
        return None, pattern[:-1]
    return None, None


def simple_path(pattern: str, root: str) -> tuple[str | None, str | None]:
    """A path pattern as (the path it equals, the prefix it matches), or (None, None) when it needs its regex;
    ``dir/**`` equals ``dir`` and matches the prefix ``dir/``."""
    parts = _path_parts(pattern, root)
    if not any(_has_wildcard(part) for part in parts):
        return "".join("/" + part for part in parts), None
    if parts[-1] == "**" and not any(_has_wildcard(part) for part in parts[:-1]):
        directory = "".join("/" + part for part in parts[:-1])
        return directory, directory + "/"
    return None, None


def glob_text(pattern: str) -> re.Pattern[str]:
    out = []
    for char in pattern:
        if char == "*":
            out.append(".*")
        elif char == "?":
            out.append(".")
        else:
            out.append(re.escape(char))
    return re.compile("".join(out), re.DOTALL)


def fold_path(path: str, base: list[str]) -> list[str]:
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
    base = [] if path.startswith("/") else fold_path(root, [])
    return "".join("/" + part for part in fold_path(path, base))


def _path_parts(pattern: str, root: str) -> list[str]:
    """The segments of a path pattern, folded onto ``root`` as subjects are."""
    if pattern.startswith("~"):
        pattern = os.path.expanduser(pattern)
    if pattern.startswith("/") or pattern.split("/", 1)[0] == "**":
        return fold_path(pattern, [])
    return fold_path(pattern, fold_path(root, []))


def glob_path(pattern: str, root: str) -> re.Pattern[str]:
    parts = _path_parts(pattern, root)
    pieces = ["(?:/[^/]+)*" if part == "**" else "/" + _glob_segment(part) for part in parts]
    return re.compile("".join(pieces), re.DOTALL)


def is_utf8(text: str) -> bool:
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
