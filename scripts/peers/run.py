"""Runs the host frameworks' own test suites, stock and with toolsched switched in.

A drop-in is a drop-in when the host's own tests pass with it. For each host this fetches the
sdist of the pinned version (and of the newest release, when PyPI has a newer one) into a cache
outside the repository, unpacks it, and runs its ``tests/`` twice with this Python:

- stock: as upstream runs them;
- switched: with a plugin from this directory loaded (``-p switch_agents``: every ``Agent`` the
  tests build is ``scheduled(agent)``; ``-p switch_langgraph``: every ``ToolNode`` is toolsched's).

The code under test is the sdist's own (its source is first on ``PYTHONPATH``), so the tests and
the package are always the same version; upstream files are never copied into the repository.
Each run's outcomes go to ``<cache>/results/<dist>-<version>/{stock,switched}.json`` with the
pytest log beside them; the switched run's failing IDs (with the stock outcome of each and the
first line of its failure) go to ``switched-failures.txt`` there.

::

    make peer-tests                                   # both hosts, both runs (installs the test deps)
    python scripts/peers/run.py --host agents --mode switched -- -x tests/test_function_tool.py
    python scripts/peers/run.py --host langgraph --no-newest
    python scripts/peers/run.py --host agents --no-newest --files tests/test_agent_runner.py
    python scripts/peers/run.py --host agents --all         # the whole suite

Which tests: for the Agents SDK by default its tool-execution tests (``AGENTS_TOOL_EXECUTION``: the
files whose tests build agents with function tools and run them; both runs take a few minutes), for
LangGraph its whole ``tests/``. ``--files`` names others, ``--all`` runs the host's whole ``tests/``
(the Agents SDK's: some 11,400 tests, about 15 minutes a run on two cores). Arguments after ``--`` go
to pytest (test paths there are relative to the unpacked sdist and replace the file list). The test
dependencies are installed by ``make peer-deps``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
NOT_PASSING = ("failed", "error")


@dataclasses.dataclass(frozen=True)
class Host:
    key: str
    dist: str  # the PyPI name
    pinned: str
    source: str  # the directory, inside the sdist, that holds the importable package
    module: str  # the package the tests exercise
    plugin: str  # the switch plugin in this directory
    files: tuple[str, ...] = ()  # the default test files (relative to the sdist); empty: all of tests/


# The Agents SDK's tool-execution tests: the files whose tests build agents with function tools and
# run them (a Runner or the run steps). Its whole tests/ is --all.
AGENTS_TOOL_EXECUTION = tuple(
    f"tests/{name}.py"
    for name in (
        "test_agent_as_tool",
        "test_agent_as_tool_output_guardrails",
        "test_agent_runner",
        "test_agent_runner_streamed",
        "test_agent_scoped_approvals",
        "test_cancel_streaming",
        "test_default_tool_error_redaction",
        "test_function_tool_approval_arguments",
        "test_hitl_error_scenarios",
        "test_native_tool_failure_history",
        "test_resume_tool_use_behavior",
        "test_run_impl_resume_paths",
        "test_run_step_execution",
        "test_soft_cancel",
        "test_start_hook_tool_concurrency",
        "test_start_hook_tools",
        "test_tool_approval_call_id_reuse",
        "test_tool_batch_failure_history",
        "test_tool_custom_data",
        "test_tool_exception_formatter",
        "test_tool_failure_boundaries",
        "test_tool_guardrails",
        "test_tool_name_collision_policy",
        "test_tool_origin",
        "test_tool_use_behavior",
    )
)

HOSTS = {
    "agents": Host("agents", "openai-agents", "0.24.0", "src", "agents", "switch_agents", AGENTS_TOOL_EXECUTION),
    "langgraph": Host("langgraph", "langgraph-prebuilt", "1.1.3", ".", "langgraph.prebuilt", "switch_langgraph"),
}


def _pip(python: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True, timeout=600, check=False)


def newest_version(python: str, dist: str) -> str | None:
    """The newest release on PyPI (``pip index versions``), or None when PyPI cannot be asked."""
    done = _pip(python, "index", "versions", dist)
    first = done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else ""
    if "(" not in first:
        print(f"  (could not ask PyPI for the newest {dist}: {done.stderr.strip()[:200]})")
        return None
    return first.split("(", 1)[1].split(")", 1)[0].strip()


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else -1 for part in version.split("."))


def unpacked(python: str, dist: str, version: str, cache: Path) -> Path:
    """The sdist of ``dist==version`` unpacked under the cache (downloaded once)."""
    sdists = cache / "sdists"
    sdists.mkdir(parents=True, exist_ok=True)
    stem = f"{dist.replace('-', '_')}-{version}"
    archive = sdists / f"{stem}.tar.gz"
    if not archive.exists():
        done = _pip(python, "download", "--no-deps", "--no-binary", ":all:", f"{dist}=={version}", "-d", str(sdists))
        if done.returncode != 0 or not archive.exists():
            raise SystemExit(f"could not download the sdist of {dist}=={version}:\n{done.stdout}{done.stderr}")
    target = cache / "src" / stem
    if not (target / "tests").is_dir():
        (cache / "src").mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            tar.extractall(cache / "src", filter="data")
    if not (target / "tests").is_dir():
        raise SystemExit(f"{archive} holds no {stem}/tests directory")
    return target


def _env(source: Path, results: Path) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(source), str(HERE)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["TOOLSCHED_PEER_RESULTS"] = str(results)
    return env


def code_under_test(python: str, host: Host, source: Path) -> str:
    env = _env(source, Path(os.devnull))
    probe = f"import {host.module} as m, toolsched; print(m.__file__, '|', toolsched.__file__)"
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, env=env, cwd=source, check=False)
    return done.stdout.strip() or done.stderr.strip().splitlines()[-1]


def run_suite(
    python: str, host: Host, root: Path, mode: str, out: Path, pytest_args: list[str], timeout: int, files: list[str]
) -> dict[str, dict[str, str]]:
    """Runs ``files`` (all of ``tests/`` when empty, or the paths in ``pytest_args`` when it names any)
    once; returns test ID -> {"outcome", "message"}."""
    results = out / f"{mode}.json"
    log = out / f"{mode}.log"
    results.unlink(missing_ok=True)
    has_paths = any(not arg.startswith("-") and (root / arg.split("::")[0]).exists() for arg in pytest_args)
    command = [
        python,
        "-m",
        "pytest",
        "-c",
        str(root / "pyproject.toml"),
        "--rootdir",
        str(root),
        "-p",
        "peer_results",
        "-p",
        "no:cacheprovider",
        "--continue-on-collection-errors",
        f"--timeout={timeout}",
        "-q",
        *(["-p", host.plugin] if mode == "switched" else []),
        *pytest_args,
        *([] if has_paths else files or ["tests"]),
    ]
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as sink:
        sink.write(" ".join(command) + "\n\n")
        sink.flush()
        subprocess.run(command, cwd=root, env=_env(root / host.source, results), stdout=sink, stderr=subprocess.STDOUT)
    if not results.exists():
        raise SystemExit(f"the {mode} run of {host.dist} wrote no results; see {log}")
    outcomes: dict[str, dict[str, str]] = json.loads(results.read_text(encoding="utf-8"))
    print(f"  {mode:<8} {_counts(outcomes)}   ({time.monotonic() - started:.0f} s, log {log})")
    return outcomes


def _counts(outcomes: dict[str, dict[str, str]]) -> str:
    tally = Counter(entry["outcome"] for entry in outcomes.values())
    shown = ", ".join(f"{tally[name]} {name if name != 'error' else 'errors'}" for name in OUTCOMES if tally[name])
    return f"{tally['passed']} passed, {tally['failed']} failed, {tally['error']} errors of {len(outcomes)} ({shown})"


def write_failures(out: Path, switched: dict[str, dict[str, str]], stock: dict[str, dict[str, str]] | None) -> None:
    """The switched run's failing IDs; those that pass stock first."""
    failing = [nodeid for nodeid, entry in switched.items() if entry["outcome"] in NOT_PASSING]

    def stock_outcome(nodeid: str) -> str:
        return stock.get(nodeid, {}).get("outcome", "not run") if stock is not None else "not run"

    failing.sort(key=lambda nodeid: (stock_outcome(nodeid) in NOT_PASSING, nodeid))
    regressions = sum(stock_outcome(nodeid) == "passed" for nodeid in failing)
    path = out / "switched-failures.txt"
    with path.open("w", encoding="utf-8") as sink:
        for nodeid in failing:
            entry = switched[nodeid]
            sink.write(f"{nodeid}\t{entry['outcome']}\tstock: {stock_outcome(nodeid)}\t{entry['message']}\n")
    if stock is not None:
        print(f"  pass stock, fail switched: {regressions}; the switched run's {len(failing)} failing IDs: {path}")
    else:
        print(f"  the switched run's {len(failing)} failing IDs: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", action="append", choices=sorted(HOSTS), help="agents, langgraph (default: both)")
    parser.add_argument("--version", help="this version only (with one --host)")
    parser.add_argument("--no-newest", action="store_true", help="the pinned version only; PyPI is not asked")
    parser.add_argument("--mode", choices=("both", "stock", "switched"), default="both")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "toolsched-peers")
    parser.add_argument("--python", default=sys.executable, help="the Python whose environment runs the tests")
    parser.add_argument("--timeout", type=int, default=20, help="seconds a single test may take")
    parser.add_argument("--files", nargs="+", metavar="PATH", help="these test files (relative to the sdist)")
    parser.add_argument("--all", action="store_true", help="the host's whole tests/ (default: its file list)")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    options = parser.parse_args()
    hosts = [HOSTS[key] for key in options.host or sorted(HOSTS)]
    if options.version and len(hosts) != 1:
        parser.error("--version needs exactly one --host")
    if options.files and options.all:
        parser.error("--files and --all exclude each other")
    cache = options.cache.expanduser().resolve()
    for host in hosts:
        versions = [options.version or host.pinned]
        if not options.version and not options.no_newest:
            newest = newest_version(options.python, host.dist)
            if newest is not None and _version_key(newest) > _version_key(host.pinned):
                versions.append(newest)
            elif newest is not None:
                print(f"{host.dist}: the newest release on PyPI is {newest}, the pinned one")
        for version in versions:
            root = unpacked(options.python, host.dist, version, cache)
            out = cache / "results" / f"{host.dist}-{version}"
            out.mkdir(parents=True, exist_ok=True)
            print(f"{host.dist} {version}: {root}/tests")
            print(f"  code under test | toolsched: {code_under_test(options.python, host, root / host.source)}")
            files = [] if options.all else list(options.files or host.files)
            print(f"  tests: {' '.join(files) if files else 'tests/ (all)'}")
            stock = switched = None
            if options.mode in ("both", "stock"):
                stock = run_suite(options.python, host, root, "stock", out, options.pytest_args, options.timeout, files)
            elif (out / "stock.json").exists():
                stock = json.loads((out / "stock.json").read_text(encoding="utf-8"))
                print(f"  stock    {_counts(stock)}   (the last stock run, {out / 'stock.json'})")
            if options.mode in ("both", "switched"):
                switched = run_suite(
                    options.python, host, root, "switched", out, options.pytest_args, options.timeout, files
                )
                write_failures(out, switched, stock)


if __name__ == "__main__":
    main()
