"""Running and loading the scripts of examples/, as the tests of every area do."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import toolsched as ts

REPOSITORY = Path(__file__).resolve().parents[2]
EXAMPLES = REPOSITORY / "examples"
PACKAGE_ROOT = str(Path(ts.__file__).resolve().parent.parent)


def run_example(name: str, *args: str) -> str:
    """Runs ``examples/{name}`` in its own process, as a user would; returns what it printed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([PACKAGE_ROOT, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def load_example(name: str) -> ModuleType:
    """Imports ``examples/{name}.py`` as a module (its top level runs nothing)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
