"""The command line: `toolsched bench` and `toolsched demo` (private)."""
