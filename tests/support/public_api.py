"""The package's public modules, as the docs' tests read them."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import toolsched


def public_modules() -> list[ModuleType]:
    """``toolsched`` and every module under it with no ``_``-prefixed part in its name."""
    names = [
        found.name
        for found in pkgutil.walk_packages(toolsched.__path__, "toolsched.")
        if not any(part.startswith("_") for part in found.name.split("."))
    ]
    return [toolsched, *(importlib.import_module(name) for name in sorted(names))]
