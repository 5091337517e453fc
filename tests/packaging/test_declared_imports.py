"""Every third-party module that toolsched imports comes from a package that pyproject.toml declares.

A module imported unconditionally when its file is imported must come from a
core dependency; one imported lazily (in a function, or under an
``except ImportError`` that names the extra to install) from a core dependency or
an extra. Which package provides a module is read from this environment's
installed distributions, which hold every extra (the ``dev`` extra).
"""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPOSITORY = Path(__file__).resolve().parents[2]
PACKAGE = REPOSITORY / "python" / "toolsched"
# Extras that install tools for working on toolsched, not features of it.
NOT_FEATURES = {"dev", "compare"}
# Modules imported only where they are already in use: trio, while a trio event loop runs.
IN_USE = {"trio"}
# Files imported only by a module that checked first that their extra is installed (the Agents SDK's
# private names by integrations/agents.py), or by no module of the package (the scripted Agents SDK model
# of the tests and benchmarks, which needs the agents extra).
BEHIND_A_CHECK = {"integrations/_langgraph_state.py", "integrations/_agents_sdk.py", "testing/_agents_model.py"}


def declared() -> tuple[set[str], set[str]]:
    """The distributions of the core dependencies, and those of every feature extra."""
    project = tomllib.loads((REPOSITORY / "pyproject.toml").read_text(encoding="utf-8"))["project"]

    def names(requirements: list[str]) -> set[str]:
        return {canonicalize_name(Requirement(requirement).name) for requirement in requirements}

    extras = project["optional-dependencies"]
    optional = set().union(*(names(reqs) for extra, reqs in extras.items() if extra not in NOT_FEATURES))
    return names(project["dependencies"]), optional


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def catches_import_error(node: ast.Try) -> bool:
    caught = [handler.type for handler in node.handlers if handler.type is not None]
    named = [name for kind in caught for name in (kind.elts if isinstance(kind, ast.Tuple) else [kind])]
    return any(isinstance(name, ast.Name) and name.id in {"ImportError", "ModuleNotFoundError"} for name in named)


def imports(tree: ast.AST, lazy: bool = False) -> list[tuple[str, int, bool]]:
    """``(top-level module, line, lazy)`` of every absolute import that runs (those for type checkers left out)."""
    found: list[tuple[str, int, bool]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], node.lineno, lazy) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module.split(".")[0], node.lineno, lazy))
        elif isinstance(node, ast.If) and is_type_checking(node.test):
            found += [entry for child in node.orelse for entry in imports(child, lazy)]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            found += imports(node, True)
        elif isinstance(node, ast.Try) and catches_import_error(node):
            for child in node.body:
                found += imports(ast.Module(body=[child], type_ignores=[]), True)
            for part in [*node.handlers, *node.orelse, *node.finalbody]:
                found += imports(part, lazy)
        else:
            found += imports(node, lazy)
    return found


def test_every_imported_package_is_declared() -> None:
    core, optional = declared()
    providers = packages_distributions()
    undeclared = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        for module, line, lazy in imports(ast.parse(path.read_text(encoding="utf-8"))):
            if module in sys.stdlib_module_names or module == "toolsched" or module in IN_USE:
                continue
            distributions = {canonicalize_name(name) for name in providers.get(module, [])}
            assert distributions, f"{relative}:{line}: no installed distribution provides `{module}`"
            allowed = core | optional if lazy or relative in BEHIND_A_CHECK else core
            if not distributions & allowed:
                kind = "an extra" if lazy else "the core dependencies"
                undeclared.append(
                    f"{relative}:{line}: `{module}` ({', '.join(sorted(distributions))}) is not in {kind}"
                )
    assert not undeclared, "\n".join(undeclared)
