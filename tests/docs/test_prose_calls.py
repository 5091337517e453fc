"""A call written in the prose of README.md and docs/ (inline code such as ``ts.Retry(attempts=3)``,
``executor.recover(run_id)`` or ``approve(call_id, *, args=None)``) names toolsched callables that exist
and passes arguments their signatures accept: a renamed or removed parameter, too many positional
arguments, or a method that is no longer there fails here. Arguments may be left out (the prose often
shows one keyword); none may be misnamed or extra."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from public_api import public_modules

import toolsched

REPOSITORY = Path(__file__).resolve().parents[2]
PAGES = [REPOSITORY / "README.md", *sorted((REPOSITORY / "docs").rglob("*.md"))]
FENCED = re.compile(r"^ *```.*?^ *```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`([^`\n]+)`")
CALL = re.compile(r"^(?:await )?[A-Za-z_][\w.]*(?:\(\))?(?:\.\w+)*\(.*\)$")

# The names the pages give toolsched's objects and modules in running text.
MODULES = {
    "ts": "toolsched",
    "toolsched": "toolsched",
    "ts_mcp": "toolsched.mcp",
    "ts_anthropic": "toolsched.providers.anthropic",
}
VARIABLES = {
    "executor": "Executor",
    "registry": "ToolRegistry",
    "state": "RunState",
    "turn": "StreamingTurn",
    "ctx": "ToolContext",
    "outcome": "Outcome",
    "journal": "Journal",
    "child": "ChildRun",
}


def exported() -> dict[str, list[Any]]:
    """Every public name, and every public method of a public class, by its last part."""
    by_name: dict[str, list[Any]] = {}
    for module in public_modules():
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            by_name.setdefault(name, []).append(value)
            if isinstance(value, type) and value.__module__.startswith("toolsched"):
                for member in dir(value):
                    if not member.startswith("_"):
                        by_name.setdefault(member, []).append(Candidate(value, member))
    return by_name


@dataclass(frozen=True)
class Candidate:
    """``owner.name`` looked up on a class: a method called on an instance."""

    owner: type
    name: str


EXPORTED = exported()


class Foreign(Exception):
    """The callee is not toolsched's (another library, a variable of an example)."""


def candidates(node: ast.expr, *, owner: bool = False) -> list[Any]:
    """What a call's function expression may name: modules, classes, functions, methods of a class.

    A bare name is a method or function (`turn()`) unless something is looked up on it (`turn.cancel()`).
    """
    if isinstance(node, ast.Name):
        if node.id in MODULES:
            return [importlib.import_module(MODULES[node.id])]
        if owner and node.id in VARIABLES:
            return [Candidate(getattr(toolsched, VARIABLES[node.id]), "")]
        if node.id in EXPORTED:
            return EXPORTED[node.id]
        raise Foreign
    if isinstance(node, ast.Call):  # ``ts.Hooks().pre_tool_use``: what the call makes
        return [Candidate(made, "") for made in candidates(node.func) if isinstance(made, type)] or _foreign()
    if isinstance(node, ast.Attribute):
        found = []
        for owner in candidates(node.value, owner=True):
            if isinstance(owner, ModuleType):
                try:
                    found.append(importlib.import_module(f"{owner.__name__}.{node.attr}"))
                    continue
                except ImportError:
                    pass
                if hasattr(owner, node.attr):
                    found.append(getattr(owner, node.attr))
            elif isinstance(owner, Candidate):
                if owner.name == "" and hasattr(owner.owner, node.attr):
                    found.append(Candidate(owner.owner, node.attr))
            elif isinstance(owner, type) and hasattr(owner, node.attr):
                static = inspect.getattr_static(owner, node.attr)
                bound = isinstance(static, (staticmethod, classmethod)) or not inspect.isfunction(static)
                found.append(getattr(owner, node.attr) if bound else Candidate(owner, node.attr))
        root = node.value
        if not found and isinstance(root, ast.Name) and root.id not in MODULES and root.id not in VARIABLES:
            raise Foreign  # ``copy.copy``: a module of the same name as a method
        assert found, f"`{ast.unparse(node)}` names nothing toolsched has"
        return found
    raise Foreign


def _foreign() -> list[Any]:
    raise Foreign


def fits(target: Any, positional: int, keywords: list[str]) -> bool:
    if isinstance(target, Candidate):
        member = inspect.getattr_static(target.owner, target.name) if target.name else None
        if member is None or isinstance(member, property) or not callable(getattr(target.owner, target.name)):
            return False
        function = getattr(target.owner, target.name)
        extra = 0 if isinstance(member, (staticmethod, classmethod)) else 1
    else:
        function, extra = target, 0
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return False
    try:
        signature.bind_partial(*([None] * (positional + extra)), **dict.fromkeys(keywords))
    except TypeError:
        return False
    return True


def written_as_signature(node: ast.Call, target: Any) -> bool:
    """Whether the prose shows a signature, ``f(a, b=None)``: names, then keywords at their defaults."""
    function = getattr(target.owner, target.name) if isinstance(target, Candidate) else target
    parameters = inspect.signature(function).parameters
    if not node.keywords or not all(isinstance(a, ast.Name) for a in node.args):
        return False
    for keyword in node.keywords:
        parameter = parameters.get(keyword.arg or "")
        value = keyword.value
        if parameter is None or not isinstance(value, ast.Constant) or value.value is Ellipsis:
            return False
        if parameter.default is inspect.Parameter.empty or parameter.default != value.value:
            return False
    return True


def keyword_only_shown_positional(code: str, node: ast.Call, target: Any) -> list[str]:
    """The keyword-only parameters a signature in the prose shows before any ``*``: a reader would pass them
    by position."""
    function = getattr(target.owner, target.name) if isinstance(target, Candidate) else target
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return []
    star = code.find("*")
    wrong = []
    for keyword in node.keywords:
        parameter = parameters.get(keyword.arg or "")
        shown_at = code.find(f"{keyword.arg}=")
        if parameter is not None and parameter.kind is inspect.Parameter.KEYWORD_ONLY and (star < 0 or shown_at < star):
            wrong.append(str(keyword.arg))
    return wrong


def as_call(code: str) -> ast.Call | None:
    """The call a piece of prose writes, signature shapes included (``f(a, *, b=None)``, ``f(a, b=)``)."""
    code = code.removeprefix("await ")
    code = re.sub(r"\(\*, ", "(", re.sub(r", \*(?=[,)])", "", code))
    code = re.sub(r"=(?=[,)])", "=None", code)
    code = re.sub(r"\(self(, |(?=\)))", "(", code)  # a method's signature, ``call(self, args, ctx)``
    try:
        node = ast.parse(code, mode="eval").body
    except SyntaxError:
        return None
    return node if isinstance(node, ast.Call) else None


def prose_calls() -> list[tuple[str, str, ast.Call, list[Any]]]:
    found = []
    for page in PAGES:
        text = FENCED.sub("", page.read_text(encoding="utf-8"))
        for match in INLINE.finditer(text):
            code = match.group(1)
            node = as_call(code) if CALL.match(code) else None
            if node is None or any(isinstance(a, ast.Starred) for a in node.args):
                continue
            try:
                targets = candidates(node.func)
            except Foreign:
                continue
            found.append((f"{page.relative_to(REPOSITORY)}: {code}", code, node, targets))
    return found


CALLS = prose_calls()


def test_the_pages_write_toolsched_calls_in_prose() -> None:
    assert len(CALLS) >= 60


@pytest.mark.parametrize(("code", "node", "targets"), [c[1:] for c in CALLS], ids=[c[0] for c in CALLS])
def test_a_call_in_prose_fits_its_signature(code: str, node: ast.Call, targets: list[Any]) -> None:
    keywords = [keyword.arg for keyword in node.keywords if keyword.arg is not None]
    fitting = [target for target in targets if fits(target, len(node.args), keywords)]
    assert fitting, f"`{ast.unparse(node)}` fits no signature of {targets}"
    # ``approve(call_id, args=None)`` shown for ``approve(call_id, *, args=None)`` reads as if ``args``
    # could be passed second.
    signatures = [target for target in fitting if written_as_signature(node, target)]
    assert all(keyword_only_shown_positional(code, node, target) == [] for target in signatures), (
        f"`{code}` shows keyword-only parameters without the `*` before them"
    )
