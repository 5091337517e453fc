"""What the check before each full collection costs with many stepped calls waiting (``_core.abandon_closed``).

    python benches/abandon_closed.py                 # 100,000 steppers in 10,000 batches on one open loop
    python benches/abandon_closed.py --steppers 10000

Makes the steppers as the executor does (one per waiting call, its batch and its event loop), then times
``abandon_closed()`` while the loop is open (what every full collection pays: the loops with live steppers asked
whether they are closed) and once it is closed (the steppers gone through, each let go of).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from toolsched._core import abandon_closed, stepper


class Batch:
    """A batch as a stepper holds it (never stepped here)."""


class Loop:
    """An event loop as ``abandon_closed`` asks it."""

    def __init__(self) -> None:
        self.closed = False

    def is_closed(self) -> bool:
        return self.closed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steppers", type=int, default=100_000, help="steppers alive (default 100,000)")
    parser.add_argument("--per-batch", type=int, default=10, help="steppers per batch (default 10)")
    args = parser.parse_args()
    loop = Loop()
    batches = [Batch() for _ in range(max(1, args.steppers // args.per_batch))]
    alive: list[Any] = [stepper(batches[i // args.per_batch % len(batches)], i, loop) for i in range(args.steppers)]
    best = float("inf")
    for _ in range(20):
        started = time.perf_counter()
        abandon_closed()
        best = min(best, time.perf_counter() - started)
    print(f"{args.steppers:,} steppers waiting on an open loop: {best * 1e6:.1f} us per check (best of 20)")
    loop.closed = True
    started = time.perf_counter()
    let_go = abandon_closed()
    took = time.perf_counter() - started
    print(f"the loop closed: {let_go:,} steppers let go of what they held in {took * 1e3:.1f} ms")
    del alive


if __name__ == "__main__":
    main()
