"""The ``toolsched`` command line."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TextIO, TypeVar

if TYPE_CHECKING:
    from toolsched._backends.backends import RayBackend

__all__ = ["main"]

_BENCH_EPILOG = """\
workloads:
  synthetic (the default): --mix, --latency, --conflict-rate, --calls and --seed shape it.
  recorded: --workload FILE.jsonl, one turn per line:
    {"turn": "t1", "calls": [{"id": "c1", "name": "read_file", "args": {"path": "a.py"},
                              "latency_ms": 30, "reads": ["a.py"]}, ...]}
  a call has id, name and latency_ms; optionally args, reads, writes (resource keys:
  a call with neither conflicts with every call) and concurrency_safe.

Sequential always runs: it is the baseline for the speed-up and for "same results".

backends:
  --backend ray runs the simulated tool bodies as Ray tasks (a local cluster unless
  --ray-address names one, e.g. ray://head-node:10001); planning, scheduling and the
  workspace stay in this process. Needs: pip install 'toolsched[ray]'.
"""

# Options that shape a synthetic workload; they make no sense with --workload.
_SYNTHETIC_OPTIONS = ("mix", "latency", "conflict_rate", "calls", "seed")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number between 0 and 1, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {value}")
    return value


def _cpus(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of CPUs, got {text!r}") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number more than 0, got {value:g}")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


class _ProgressBar:
    """Progress on standard error, never standard output: a bar on a terminal, else a line per strategy."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.live = stream.isatty()
        self.current = ""

    def __call__(self, done: int, total: int, name: str) -> None:
        if self.live:
            width = 30
            filled = width * done // total
            self.stream.write(f"\r{name:<15} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} turns")
            if done == total:
                self.stream.write("\n")
        else:
            if self.current and name != self.current:
                self.stream.write(f"bench: {self.current} done ({done - 1}/{total} turns)\n")
            if done == total:
                self.stream.write(f"bench: {name} done ({done}/{total} turns)\n")
        self.current = name
        self.stream.flush()


def _bench_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    bench = commands.add_parser(
        "bench",
        help="compare scheduling strategies on a synthetic or recorded workload",
        description="Run a workload under each scheduling strategy and report makespan, throughput,\n"
        "p50/p99 call latency and speed-up over Sequential. Tool latencies are simulated\n"
        "with sleeps, so the comparison measures scheduling, not the tools.",
        epilog=_BENCH_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument("--workload", metavar="FILE.jsonl", help="a recorded workload instead of a synthetic one")
    bench.add_argument(
        "--mix",
        help="share of each kind of call: reads, search, writes, shell (default reads=0.7,writes=0.2,shell=0.1)",
    )
    bench.add_argument(
        "--latency",
        help="simulated latency in ms: one number for every kind, or KIND=MS pairs "
        "(default reads=10,search=20,writes=15,shell=40); each call varies by +-50%%",
    )
    bench.add_argument(
        "--conflict-rate",
        type=_rate,
        help="chance that a call touches a path an earlier call of its turn touched (default 0.2)",
    )
    bench.add_argument(
        "--turns",
        type=_positive_int,
        help="number of turns (default 5; with --workload, the first N turns of the file)",
    )
    bench.add_argument("--calls", type=_positive_int, help="calls per turn (default 20)")
    bench.add_argument("--seed", type=_integer, help="seed of the synthetic workload (default 0)")
    bench.add_argument(
        "--strategies",
        default=",".join(("sequential", "parallel", "batched", "partitioned", "resource_aware")),
        help="which strategies to run, separated by commas: sequential, parallel, batched, "
        "partitioned, resource_aware (default: all)",
    )
    bench.add_argument(
        "--max-concurrency", type=_positive_int, default=10, help="the cap of every strategy (default 10)"
    )
    bench.add_argument("--batch-size", type=_positive_int, default=4, help="size of Batched's chunks (default 4)")
    bench.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="where the simulated tool bodies run (default local: this process)",
    )
    bench.add_argument(
        "--ray-address",
        help="with --backend ray: the cluster to join, 'host:port' or "
        "'ray://host:port' (default: start a local cluster)",
    )
    bench.add_argument(
        "--ray-cpus",
        type=_cpus,
        help="with --backend ray: CPUs each simulated call asks Ray for (default 1, as Ray's tasks)",
    )
    bench.add_argument("--json", action="store_true", help="print the report as JSON on standard output, nothing else")
    bench.add_argument("--plot", metavar="FILE.png", help="also draw makespan per strategy and a timeline of one turn")
    return bench


def _run_bench(args: argparse.Namespace, parser: argparse.ArgumentParser, stdout: TextIO, stderr: TextIO) -> int:
    import anyio

    from toolsched._backends.backends import BackendError
    from toolsched._cli import bench
    from toolsched.errors import OptionError, WorkloadError

    if args.workload is not None:
        clashing = [f"--{name.replace('_', '-')}" for name in _SYNTHETIC_OPTIONS if getattr(args, name) is not None]
        if clashing:
            verb = "shapes" if len(clashing) == 1 else "shape"
            parser.error(f"{', '.join(clashing)} {verb} a synthetic workload and cannot be combined with --workload")
    if args.backend != "ray" and (args.ray_address is not None or args.ray_cpus is not None):
        parser.error("--ray-address and --ray-cpus go with --backend ray")
    if args.plot is not None and not args.plot.lower().endswith(".png"):
        parser.error(f"--plot must name a .png file, got {args.plot!r}")
    if args.plot is not None:
        # Checked before the benchmark runs, not after it.
        folder = os.path.dirname(os.path.abspath(args.plot))
        if not os.path.isdir(folder):
            parser.error(f"--plot: the directory {folder!r} does not exist")
        if not os.access(folder, os.W_OK):
            parser.error(f"--plot: the directory {folder!r} is not writable")
        if os.path.isdir(args.plot):
            parser.error(f"--plot: {args.plot!r} is a directory, not a file")
    try:
        strategies = bench.parse_strategies(
            args.strategies, max_concurrency=args.max_concurrency, batch_size=args.batch_size
        )
        if args.workload is not None:
            workload = bench.load_workload(args.workload, turns=args.turns)
        else:
            mix = bench.DEFAULT_MIX if args.mix is None else bench.parse_mix(args.mix)
            if args.mix is not None and not args.json:
                given = sum(bench.parse_mix_weights(args.mix).values())
                if abs(given - 1.0) > 1e-9:
                    shares = ", ".join(f"{kind}={share:.2f}" for kind, share in mix.items())
                    stderr.write(f"--mix: the shares add up to {given:g}, so they are scaled to {shares}\n")
            workload = bench.synthetic_workload(
                mix=mix,
                latency_ms=bench.DEFAULT_LATENCY_MS if args.latency is None else bench.parse_latency(args.latency),
                conflict_rate=0.2 if args.conflict_rate is None else args.conflict_rate,
                turns=5 if args.turns is None else args.turns,
                calls=20 if args.calls is None else args.calls,
                seed=0 if args.seed is None else args.seed,
            )
        if args.plot is not None:
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                raise OptionError("--plot needs matplotlib: pip install 'toolsched[plot]'") from None
        backend = _ray_backend(args) if args.backend == "ray" else None
    except (OptionError, WorkloadError, BackendError) as exc:
        # A value that cannot be used: one line saying which and why (the usage adds nothing here).
        stderr.write(f"{parser.prog}: error: {exc}\n")
        raise SystemExit(2) from None

    progress = _ProgressBar(stderr)
    report = anyio.run(
        _interruptible,
        lambda: bench.run_bench(
            workload,
            strategies,
            max_concurrency=args.max_concurrency,
            progress=progress,
            backend=backend,
            num_cpus=None if backend is None else args.ray_cpus or 1.0,
        ),
    )
    if args.json:
        text = json.dumps(report.to_json(), indent=2) + "\n"
    else:
        text = f"workload: {bench.describe_workload(report.workload)}\n"
        if backend is not None:
            text += f"backend: {report.backend}, {args.ray_cpus or 1.0:g} CPU per call\n"
        text += f"\n{bench.format_table(report)}\n"
    _show(stdout, text)
    if args.plot is not None:
        bench.plot_report(report, args.plot)
        stderr.write(f"plot written to {args.plot}\n")
    return 0


_T = TypeVar("_T")


async def _interruptible(work: Callable[[], Awaitable[_T]]) -> _T:
    """``work()``, stopped by Ctrl-C (``KeyboardInterrupt`` once it has stopped): the interrupt cancels a scope
    ``work`` runs in, which stays cancelled until it has ended. A process started with SIGINT ignored (a
    background job of a shell without job control, ``nohup``) goes on ignoring it."""
    import anyio

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return await work()
    interrupted = False
    with anyio.open_signal_receiver(signal.SIGINT) as signals:
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                nonlocal interrupted
                async for _ in signals:
                    interrupted = True
                    group.cancel_scope.cancel()
                    return

            group.start_soon(watch)
            outcome = await work()
            group.cancel_scope.cancel()
    if interrupted:
        raise KeyboardInterrupt
    return outcome


def _ray_backend(args: argparse.Namespace) -> RayBackend:
    """The Ray backend of ``bench --backend ray``, connected (a local cluster is started here)."""
    import logging

    from toolsched._backends.backends import RayBackend

    if args.ray_address is None:
        options = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
        backend = RayBackend(init_options=options)
    else:
        backend = RayBackend(address=args.ray_address)
    backend.connect()
    return backend


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="toolsched", description="Run and compare tool-call schedules.")
    parser.add_argument("--version", action="version", version=f"toolsched {_version()}")
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("demo", help="run one realistic turn under each strategy and show the schedule")
    bench = _bench_parser(commands)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if sys.stdout is None and args.command in ("demo", "bench"):
        # Started with its standard output closed (`>&-`): what it prints would have nowhere to go.
        if sys.stderr is not None:
            sys.stderr.write(f"toolsched {args.command}: error: standard output is closed; nothing would be shown\n")
        return 2
    try:
        if args.command == "demo":
            from toolsched._cli.demo import run_demo

            _show(sys.stdout, run_demo() + "\n")
            return 0
        if args.command == "bench":
            return _run_bench(args, bench, sys.stdout, sys.stderr)
    except KeyboardInterrupt:
        # Ctrl-C: the run was stopped on purpose; one line, no traceback, the shell's status for SIGINT.
        if sys.stderr is not None:
            sys.stderr.write(f"toolsched {args.command}: interrupted\n")
        return 130
    except _Unshown as failure:
        # Standard output is a full disk, a closed pipe, ...: one line on standard error, no traceback, and
        # nothing left in the buffer for the interpreter to fail on again as it exits.
        if sys.stderr is not None:
            sys.stderr.write(f"toolsched {args.command}: error: cannot write the output: {failure.cause}\n")
        _drop_standard_output()
        return 1
    parser.error(f"unknown command {args.command}")
    return 2


class _Unshown(Exception):
    """Writing to standard output failed (internal): ``cause`` is the ``OSError``."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _show(stream: TextIO, text: str) -> None:
    """Writes ``text`` to standard output and flushes it; ``_Unshown`` if the system refuses."""
    try:
        stream.write(text)
        stream.flush()
    except OSError as exc:
        raise _Unshown(exc) from exc


def _drop_standard_output() -> None:
    """Points standard output at the null device, so that what its buffer still holds goes nowhere at exit."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("toolsched")
    except PackageNotFoundError:
        return "(not installed)"


if __name__ == "__main__":
    sys.exit(main())
