"""A process-isolated tool whose module starts a program as it is imported (a version probe, say), as every
worker process that runs the tool imports it again."""

from __future__ import annotations

import subprocess
import sys

import toolsched as ts

# The program's output goes to this process's standard output, not captured.
subprocess.run([sys.executable, "-c", "print('version 1.2.3')"], check=True)


@ts.tool(isolation="process")
def ping() -> str:
    """Answers pong."""
    return "pong"
