"""The documentation site builds with ``mkdocs build --strict``: every page in the nav, every link and
anchor resolved, the API reference collected from the docstrings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]


def test_the_site_builds_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
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
    # The reference is generated from the docstrings, not written by hand.
    reference = (site / "reference" / "toolsched" / "index.html").read_text(encoding="utf-8")
    assert 'id="toolsched.Executor.run"' in reference
    testing = (site / "reference" / "testing" / "index.html").read_text(encoding="utf-8")
    assert 'id="toolsched.testing.ScriptedProvider"' in testing
    # Known limits and the changelog are pages of the site.
    assert (site / "limits" / "index.html").exists()
    assert "Keep a Changelog" in (site / "changelog" / "index.html").read_text(encoding="utf-8")
