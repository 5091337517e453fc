"""The built extension module: what loading it asks of the process."""

from __future__ import annotations

import subprocess

from toolsched import _core


def test_the_module_needs_no_static_thread_local_storage() -> None:
    # A module flagged STATIC_TLS fails to load ("cannot allocate memory in static TLS block")
    # once other native libraries of the process have used up glibc's small static TLS reserve.
    dynamic = subprocess.run(["readelf", "--dynamic", _core.__file__], capture_output=True, text=True, check=True)
    flags = [line for line in dynamic.stdout.splitlines() if "FLAGS" in line]
    assert flags, dynamic.stdout
    assert not any("STATIC_TLS" in line for line in flags), flags
