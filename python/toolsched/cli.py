"""The ``toolsched`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="toolsched", description="Run and compare tool-call schedules.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="run one realistic turn under each strategy and show the schedule")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from toolsched.demo import run_demo

        print(run_demo())
        return 0
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
