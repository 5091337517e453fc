"""The documentation site builds with ``mkdocs build --strict``: every page in the nav, every link and
anchor resolved, the API reference collected from the docstrings; the reference has an entry for every
public name of every public module, and for nothing else."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from public_api import public_modules

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if not line.startswith("INFO")] == [], done.stderr
    return site


def test_the_site_builds_strict(site: Path) -> None:
    # The reference is generated from the docstrings, not written by hand.
    reference = (site / "reference" / "toolsched" / "index.html").read_text(encoding="utf-8")
    assert 'id="toolsched.Executor.run"' in reference
    testing = (site / "reference" / "testing" / "index.html").read_text(encoding="utf-8")
    assert 'id="toolsched.testing.ScriptedProvider"' in testing
    # Known limits and the changelog are pages of the site.
    assert (site / "limits" / "index.html").exists()
    assert "Keep a Changelog" in (site / "changelog" / "index.html").read_text(encoding="utf-8")


def public_names(module: ModuleType) -> list[str]:
    exported = getattr(module, "__all__", None)
    if exported is not None:
        return list(exported)
    # A public module without ``__all__`` must define nothing public of its own (a package's docstring only).
    own = [
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, ModuleType) and name != "annotations"
    ]
    assert own == [], f"{module.__name__} defines public names without an __all__"
    return []


def test_the_errors_module_exports_every_error() -> None:
    import toolsched.errors

    defined = [
        name
        for name, value in vars(toolsched.errors).items()
        if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == "toolsched.errors"
    ]
    assert sorted(set(defined) - set(toolsched.errors.__all__)) == []


def resolve(identifier: str) -> tuple[str, Any] | None:
    """The name and object an anchor of the reference gives a module-level entry; None for a member's anchor."""
    parts = identifier.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        if cut == len(parts):
            return None  # a module's own heading
        if cut < len(parts) - 1:
            return None  # a class's member (instance attributes have no value on the class)
        return parts[-1], getattr(module, parts[-1])
    raise AssertionError(f"the anchor {identifier} names nothing importable")


def reference_anchors(site: Path) -> list[str]:
    anchors: set[str] = set()
    for page in (site / "reference").rglob("*.html"):
        anchors.update(re.findall(r'id="(toolsched(?:\.\w+)*)"', page.read_text(encoding="utf-8")))
    return sorted(anchors)


def documented_entries(site: Path) -> dict[str, tuple[str, Any]]:
    entries = {}
    for anchor in reference_anchors(site):
        entry = resolve(anchor)
        if entry is not None:
            entries[anchor] = entry
    return entries


def test_every_public_name_has_a_reference_entry(site: Path) -> None:
    documented = {(name, id(value)) for name, value in documented_entries(site).values()}
    missing = [
        f"{module.__name__}.{name}"
        for module in public_modules()
        for name in public_names(module)
        if not name.startswith("__") and (name, id(getattr(module, name))) not in documented
    ]
    assert missing == [], "public names with no entry in docs/reference/ (a `::: ` line, and a docstring)"
    # The dunder one is named in the text.
    assert "`ts.__version__`" in (REPOSITORY / "docs" / "reference" / "toolsched.md").read_text(encoding="utf-8")


def test_the_reference_documents_no_private_name(site: Path) -> None:
    exported = {(name, id(getattr(module, name))) for module in public_modules() for name in public_names(module)}
    entries = documented_entries(site).items()
    private = [anchor for anchor, (name, value) in entries if (name, id(value)) not in exported]
    assert private == [], "the reference shows module-level names that no public module exports"
