"""The wheel, built once per session, and fresh virtualenvs that each hold it with one extra at most.

The wheel is built by ``maturin build --release`` into the same cargo target
directory that ``make build`` compiles into, so it only links what is already
built. Each virtualenv gets the wheel alone (``toolsched`` or ``toolsched[EXTRA]``)
from pip and its package index; the installs of all the selected tests start
together when the first of them asks for its virtualenv.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
EXAMPLES = REPOSITORY / "examples"
CHECKS = Path(__file__).with_name("checks")
SUPPORT = REPOSITORY / "tests" / "support"
# pip's network waits and unpacking overlap well; more at once only contend for the same cores.
PARALLEL_INSTALLS = 4
# The longest install starts first, so that it is done by the time its test comes.
INSTALL_FIRST = ("ray",)


# Where the virtualenvs' processes keep the bytecode of what they import (set by ``Venvs``, outside the
# repository): installs skip compiling (--no-compile), and each module is compiled once, by the first
# process that imports it, instead of by every process (the command-line test alone starts eight, and a
# Ray cluster starts several that all import ray).
_bytecode: Path | None = None


def clean_environment() -> dict[str, str]:
    """The environment for a virtualenv's processes: no PYTHONPATH (the installed package is the one imported)."""
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"}
    env = {key: value for key, value in os.environ.items() if key not in drop}
    if _bytecode is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        # Bytecode goes to the session's directory, never beside the sources (the repository's included).
        env["PYTHONPYCACHEPREFIX"] = str(_bytecode)
    return env


def run(command: list[str | Path], *, timeout: float, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Runs ``command``; returns its output, or fails the test with everything it printed."""
    done = subprocess.run(
        [str(part) for part in command],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env if env is not None else clean_environment(),
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        pytest.fail(
            f"`{' '.join(map(str, command))}` exited {done.returncode}\n"
            f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}",
            pytrace=False,
        )
    return done.stdout


def build_wheel(out: Path) -> Path:
    """``maturin build --release`` for this interpreter; the path of the wheel."""
    maturin = Path(sys.executable).with_name("maturin")
    command: list[str | Path] = [maturin if maturin.exists() else shutil.which("maturin") or "maturin"]
    command += ["build", "--release", "--interpreter", sys.executable, "--out", out]
    env = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"}
    run(command, timeout=900, cwd=REPOSITORY, env=env)
    wheels = list(out.glob("toolsched-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def install(python: Path, requirements: list[str], cwd: Path) -> None:
    """pip of this environment installs ``requirements`` into ``python``'s: a new virtualenv needs no pip of its own."""
    command: list[str | Path] = [sys.executable, "-m", "pip", "--python", python, "install", "--no-compile"]
    run([*command, "--quiet", "--no-input", *requirements], timeout=900, cwd=cwd)


@dataclass
class Venv:
    """A virtualenv holding the wheel (with ``extra`` when not empty)."""

    extra: str
    root: Path
    install_seconds: float

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def pip_install(self, *requirements: str) -> None:
        install(self.python, list(requirements), self.root.parent)

    def run(self, *arguments: str | Path, timeout: float = 120, env: dict[str, str] | None = None) -> str:
        """Runs this virtualenv's python with ``arguments`` (a script's path first) outside the repository."""
        return run([self.python, *arguments], timeout=timeout, cwd=self.root.parent, env=env)

    def check(self, name: str, *arguments: str, timeout: float = 120) -> str:
        """Runs ``checks/check_{name}.py`` here, with the repository's path first; its output.

        The scripts import the test support modules (recorded answers, the examples' loader), which
        import nothing that the extra under test does not bring.
        """
        env = {**clean_environment(), "PYTHONPATH": str(SUPPORT)}
        return self.run(CHECKS / f"check_{name}.py", str(REPOSITORY), *arguments, timeout=timeout, env=env)


def make_venv(root: Path, wheel: Path, extra: str) -> Venv:
    started = time.monotonic()
    run([sys.executable, "-m", "venv", "--without-pip", root], timeout=120, cwd=root.parent)
    install(root / "bin" / "python", [f"{wheel}[{extra}]" if extra else str(wheel)], root.parent)
    venv = Venv(extra, root, time.monotonic() - started)
    # What the tests import is the installed wheel, never the repository's source tree.
    where = venv.run("-c", "import toolsched; print(toolsched.__file__)").strip()
    assert Path(where).resolve().is_relative_to(root.resolve()), where
    return venv


class Venvs:
    """The virtualenvs of the selected extras, all installed in parallel from the first request on."""

    def __init__(self, base: Path, selected: list[str]) -> None:
        global _bytecode
        self.base = base
        _bytecode = base / "bytecode"
        self.selected = selected
        self._wheel: Future[Path] | None = None
        self._pool = ThreadPoolExecutor(max_workers=PARALLEL_INSTALLS, thread_name_prefix="venv")
        self._installs: dict[str, Future[Venv]] = {}

    def wheel(self) -> Path:
        """The wheel, built on the first call (a failed build fails every test that needs it, with its output)."""
        if self._wheel is None:
            self._wheel = Future()
            try:
                self._wheel.set_result(build_wheel(self.base / "wheel"))
            except BaseException as exc:
                self._wheel.set_exception(exc)
        return self._wheel.result()

    def get(self, extra: str) -> Venv:
        wheel = self.wheel()
        first = [name for name in INSTALL_FIRST if name in self.selected]
        for name in [extra, *first, *self.selected]:
            if name not in self._installs:
                root = self.base / f"venv-{name or 'core'}"
                self._installs[name] = self._pool.submit(make_venv, root, wheel, name)
        return self._installs[extra].result()

    def close(self) -> None:
        global _bytecode
        self._pool.shutdown(wait=True, cancel_futures=True)
        _bytecode = None
