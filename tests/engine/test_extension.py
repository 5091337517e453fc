"""The built extension module: what loading it asks of the process."""

from __future__ import annotations

import subprocess

import pytest

from toolsched import _core


def test_the_module_needs_no_static_thread_local_storage() -> None:
    # A module flagged STATIC_TLS fails to load ("cannot allocate memory in static TLS block")
    # once other native libraries of the process have used up glibc's small static TLS reserve.
    dynamic = subprocess.run(["readelf", "--dynamic", _core.__file__], capture_output=True, text=True, check=True)
    flags = [line for line in dynamic.stdout.splitlines() if "FLAGS" in line]
    assert flags, dynamic.stdout
    assert not any("STATIC_TLS" in line for line in flags), flags


def test_errors_the_engine_raises_are_toolsched_errors() -> None:
    import toolsched as ts
    from toolsched import _core

    with pytest.raises(ts.ToolschedError) as schema:
        _core.ToolTable([("a", [], {"type": "nope"})])
    assert isinstance(schema.value, ts.SchemaError) and isinstance(schema.value, ValueError)
    with pytest.raises(ts.ToolNameError):
        _core.ToolTable([("a", [], {"type": "object"}), ("a", [], {"type": "object"})])
    with pytest.raises(ts.OptionError):
        _core.plan_batches("sideways", [True], max_concurrency=1, size=1)
    with pytest.raises(ts.AssemblyError):
        _core.assemble(2, [0], ["only one"])
    for name in ("SchemaError", "ToolNameError", "OptionError", "AssemblyError"):
        assert issubclass(getattr(ts, name), ts.ToolschedError)
