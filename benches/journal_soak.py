"""Journal leases under load: concurrent journaled runs, workers killed at random, every run recovered.

    python benches/journal_soak.py                                   # SQLite, 200 runs, 2 workers, 1 s lease
    python benches/journal_soak.py --backend postgres --workers 1    # DSN from TOOLSCHED_TEST_POSTGRES_DSN
    tests/postgres_server.sh python benches/journal_soak.py --backend postgres

``--runs`` runs of 5 calls each (3 on an idempotent tool, 2 on one that is not, one after another,
each sleeping ``--call-time`` seconds) are split between ``--workers`` worker processes, each with
its own journal on the same SQLite file or PostgreSQL schema (``--lease`` seconds). Every worker
begins its share at once, then keeps looking for runs to finish: a run that is not complete and
that nobody holds (released, its lease out, or its holder dead) is recovered. Meanwhile the parent
SIGKILLs a random worker ``--kills`` times (``--kill-every`` seconds apart, at random) and starts a
new one in its place, until every run is complete.

Every tool body writes a line when it starts and when it ends, every claim a line once it returns,
and the parent the time of every kill (``time.monotonic`` is one clock for every process of the
host). Counted from them:

- ``lost leases``: runs that ended in a live worker because their lease was gone (the run raised
  ``RunClaimedError``), and warnings a worker logged about a lease;
- ``takeovers``: claims of a run while another live worker still ran one of its calls;
- ``started by a non-holder``: calls whose body started in a worker after another one claimed their
  run (and before this one held it again);
- ``twice at once``: calls whose body ran in two live workers at the same time;
- ``re-run``: idempotent calls run more than once (recovery re-runs a call a killed worker started);
- ``non-idempotent twice``: calls of the non-idempotent tool that ran more than once (must be 0);
- ``lost runs``: runs not complete in the journal at the end (must be 0).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

import toolsched as ts
from toolsched.journal._liveness import holder_is_dead

CALLS = ("idem", "once", "idem", "once", "idem")
DSN_VARIABLE = "TOOLSCHED_TEST_POSTGRES_DSN"

_SCAN_SQLITE = """
SELECT r.run_id, r.owner, r.owner IS NULL OR r.lease_until IS NULL OR r.lease_until <= ?,
    (SELECT COUNT(DISTINCT c.call_id) FROM toolsched_calls c WHERE c.run_id = r.run_id),
    (SELECT COUNT(DISTINCT t.call_id) FROM toolsched_transitions t WHERE t.run_id = r.run_id AND t.kind = 'finished')
FROM toolsched_runs r
"""
_SCAN_POSTGRES = """
SELECT r.run_id, r.owner, r.owner IS NULL OR r.lease_until IS NULL OR r.lease_until <= clock_timestamp(),
    (SELECT COUNT(DISTINCT c.call_id) FROM toolsched_calls c WHERE c.run_id = r.run_id),
    (SELECT COUNT(DISTINCT t.call_id) FROM toolsched_transitions t WHERE t.run_id = r.run_id AND t.kind = 'finished')
FROM toolsched_runs r
"""


# -- the worker ------------------------------------------------------------------------------


class Log:
    """Lines appended to one file shared by every process (one ``write`` each: whole lines, never mixed)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.pid = os.getpid()

    def line(self, *words: object) -> None:
        text = " ".join(str(word) for word in (*words, self.pid, f"{time.monotonic():.6f}"))
        os.write(self.fd, (text + "\n").encode())


class LeaseWarnings(logging.Handler):
    """Logs every warning toolsched writes about a run's lease."""

    def __init__(self, log: Log) -> None:
        super().__init__(logging.WARNING)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "lease" in message:
            run = next((arg for arg in record.args or () if isinstance(arg, str)), "-")
            self.log.line("lease-warning", run)


def logged_journal(spec: dict[str, Any], log: Log, claimed: set[str]) -> ts.Journal:
    """The store's journal, logging every claim that succeeded once it returns (and adding it to ``claimed``)."""
    base: type[ts.Journal] = ts.SqliteJournal if spec["backend"] == "sqlite" else ts.PostgresJournal

    class Logged(base):  # type: ignore[valid-type,misc]
        # The claim an executor's recover makes: ``_claim_at`` (``claim`` with the moment its statement was
        # sent), or ``claim`` itself in toolsched versions without it.
        async def _claim_at(self, run_id: str, *, force: bool = False) -> tuple[ts.RunRecord, float]:
            found: tuple[ts.RunRecord, float] = await super()._claim_at(run_id, force=force)
            log.line("claim", run_id)
            claimed.add(run_id)
            return found

        async def claim(self, run_id: str, *, force: bool = False) -> ts.RunRecord:
            if hasattr(base, "_claim_at"):
                record: ts.RunRecord = await super().claim(run_id, force=force)
                return record
            record = await super().claim(run_id, force=force)
            log.line("claim", run_id)
            claimed.add(run_id)
            return record

    if spec["backend"] == "sqlite":
        return Logged(spec["path"], lease=spec["lease"])
    return Logged(spec["dsn"], schema=spec["schema"], lease=spec["lease"])


def scan(spec: dict[str, Any]) -> dict[str, tuple[str | None, bool, int, int]]:
    """Every run in the journal: ``(owner, free by its lease, calls, finished calls)``."""
    if spec["backend"] == "sqlite":
        conn = sqlite3.connect(spec["path"], timeout=30)
        try:
            rows = conn.execute(_SCAN_SQLITE, (time.time(),)).fetchall()
        finally:
            conn.close()
    else:
        import psycopg
        from psycopg import sql

        with psycopg.connect(spec["dsn"], autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(spec["schema"])))
            rows = conn.execute(_SCAN_POSTGRES).fetchall()
    return {row[0]: (row[1], bool(row[2]), int(row[3]), int(row[4])) for row in rows}


async def worker(spec: dict[str, Any], slot: int) -> None:
    log = Log(spec["log"])
    logging.getLogger("toolsched").addHandler(LeaseWarnings(log))
    low, high = spec["call_time"]
    draw = random.Random(f"{spec['seed']}:{slot}:{os.getpid()}")

    @ts.tool(idempotent=True)
    async def idem(run: str, call: str) -> str:
        log.line("start", run, call, "idem")
        try:
            await anyio.sleep(draw.uniform(low, high))
        finally:
            log.line("end", run, call, "idem")
        return "done"

    @ts.tool
    async def once(run: str, call: str) -> str:
        log.line("start", run, call, "once")
        try:
            await anyio.sleep(draw.uniform(low, high))
        finally:
            log.line("end", run, call, "once")
        return "done"

    claimed: set[str] = set()
    journal = logged_journal(spec, log, claimed)
    strategy = ts.Sequential() if spec["strategy"] == "sequential" else ts.Parallel()
    executor = ts.Executor([idem, once], journal=journal, strategy=strategy)
    mine = [f"r{index}" for index in range(spec["runs"]) if index % spec["workers"] == slot]
    busy: set[str] = set()

    async def drive(run_id: str, fresh: bool) -> None:
        outcome = "ok"
        claimed.discard(run_id)
        try:
            if fresh:
                log.line("hold", run_id, "begin")
                calls = [ts.ToolCall(f"c{i}", name, {"run": run_id, "call": f"c{i}"}) for i, name in enumerate(CALLS)]
                await executor.run(calls, run_id=run_id)
            else:
                await executor.recover(run_id)
        except ts.RunExistsError:
            outcome = "exists"
        except ts.RunClaimedError:
            # Lost mid-run, or refused by the claim of a recover (another worker got there first).
            outcome = "lost" if fresh or run_id in claimed else "refused"
        except ts.JournalError as exc:
            outcome = f"journal:{type(exc).__name__}"
        finally:
            busy.discard(run_id)
            log.line("exit", run_id, "begin" if fresh else "recover", outcome)

    async with journal, anyio.create_task_group() as group:
        log.line("ready", slot)
        while True:
            runs = await anyio.to_thread.run_sync(scan, spec)
            if len(runs) == spec["runs"] and all(done >= calls for _, _, calls, done in runs.values()):
                break
            for run_id in mine:
                if run_id not in runs and run_id not in busy:
                    busy.add(run_id)
                    group.start_soon(drive, run_id, True)
            for run_id, (owner, free, calls, done) in runs.items():
                if done < calls and run_id not in busy and (free or holder_is_dead(owner)):
                    busy.add(run_id)
                    group.start_soon(drive, run_id, False)
            await anyio.sleep(spec["scan_every"])
        group.cancel_scope.cancel()


# -- the parent ------------------------------------------------------------------------------


@dataclass
class Interval:
    pid: int
    start: float
    end: float | None = None


@dataclass
class Findings:
    starts: dict[tuple[str, str], list[Interval]] = field(default_factory=lambda: defaultdict(list))
    tools: dict[tuple[str, str], str] = field(default_factory=dict)
    claims: list[tuple[str, int, float]] = field(default_factory=list)
    holds: list[tuple[str, int, float]] = field(default_factory=list)
    exits: list[tuple[str, str, str, int]] = field(default_factory=list)
    warnings: list[tuple[str, int]] = field(default_factory=list)


def read_log(path: Path) -> Findings:
    found = Findings()
    open_calls: dict[tuple[str, str, int], Interval] = {}
    for text in path.read_text().splitlines():
        words = text.split()
        kind = words[0]
        pid, moment = int(words[-2]), float(words[-1])
        if kind == "start":
            run, call, tool = words[1], words[2], words[3]
            interval = Interval(pid, moment)
            found.starts[(run, call)].append(interval)
            found.tools[(run, call)] = tool
            open_calls[(run, call, pid)] = interval
        elif kind == "end":
            interval = open_calls.pop((words[1], words[2], pid))
            interval.end = moment
        elif kind == "claim":
            found.claims.append((words[1], pid, moment))
            found.holds.append((words[1], pid, moment))
        elif kind == "hold":
            found.holds.append((words[1], pid, moment))
        elif kind == "exit":
            found.exits.append((words[1], words[2], words[3], pid))
        elif kind == "lease-warning":
            found.warnings.append((words[1], pid))
    return found


def analyse(found: Findings, deaths: dict[int, float], finished_at: float) -> dict[str, int]:
    def end_of(interval: Interval) -> float:
        if interval.end is not None:
            return interval.end
        return deaths.get(interval.pid, finished_at)

    twice_at_once = 0
    rerun = 0
    once_twice = 0
    for key, intervals in found.starts.items():
        if len(intervals) > 1:
            if found.tools[key] == "once":
                once_twice += 1
            else:
                rerun += 1
        overlapping = any(
            a.pid != b.pid and a.start < end_of(b) and b.start < end_of(a)
            for index, a in enumerate(intervals)
            for b in intervals[index + 1 :]
        )
        twice_at_once += overlapping
    by_run: dict[str, list[Interval]] = defaultdict(list)
    for (run, _), intervals in found.starts.items():
        by_run[run].extend(intervals)
    takeovers = 0
    for run, claimer, moment in found.claims:
        running = (
            interval
            for interval in by_run.get(run, ())
            if interval.pid != claimer and interval.start < moment < end_of(interval)
        )
        takeovers += next(running, None) is not None
    # Each call must start in the run's holder: the latest to begin or claim the run before it started.
    holders: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for run, pid, moment in found.holds:
        holders[run].append((moment, pid))
    for entries in holders.values():
        entries.sort()
    started_elsewhere = 0
    for run, intervals in by_run.items():
        entries = holders[run]
        for interval in intervals:
            before = [pid for moment, pid in entries if moment <= interval.start]
            started_elsewhere += bool(before) and before[-1] != interval.pid
    lost = sum(1 for _, _, outcome, _ in found.exits if outcome == "lost")
    return {
        "lost leases": lost,
        "lease warnings": len(found.warnings),
        "takeovers": takeovers,
        "started by a non-holder": started_elsewhere,
        "twice at once": twice_at_once,
        "re-run": rerun,
        "non-idempotent twice": once_twice,
        "claims": len(found.claims),
        "journal errors": sum(1 for _, _, outcome, _ in found.exits if outcome.startswith("journal")),
    }


def start_worker(spec_text: str, slot: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, "--worker", str(slot), "--spec", spec_text])


def soak(options: argparse.Namespace) -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(prefix="journal-soak-"))
    log_path = scratch / "events.log"
    spec: dict[str, Any] = {
        "backend": options.backend,
        "runs": options.runs,
        "workers": options.workers,
        "lease": options.lease,
        "call_time": [options.call_time_min, options.call_time_max],
        "scan_every": options.lease / 4,
        "strategy": options.strategy,
        "seed": options.seed,
        "log": str(log_path),
    }
    if options.backend == "sqlite":
        spec["path"] = str(scratch / "journal.db")
    else:
        dsn = os.environ.get(DSN_VARIABLE)
        if not dsn:
            raise SystemExit(f"{DSN_VARIABLE} is not set: run under tests/postgres_server.sh")
        spec["dsn"] = dsn
        spec["schema"] = f"soak_{uuid.uuid4().hex[:12]}"
    spec_text = json.dumps(spec)
    draw = random.Random(options.seed)
    began = time.monotonic()
    workers = {slot: start_worker(spec_text, slot) for slot in range(options.workers)}
    deaths: dict[int, float] = {}
    kills = 0
    deadline = began + options.timeout
    next_kill = began + draw.uniform(*options.kill_every)
    ready: set[int] = set()
    seen = 0
    while True:
        alive = {slot: process for slot, process in workers.items() if process.poll() is None}
        if log_path.exists():
            with log_path.open() as source:
                source.seek(seen)
                fresh = source.read()
            complete = fresh[: fresh.rfind("\n") + 1]
            seen += len(complete)
            ready.update(int(line.split()[-2]) for line in complete.splitlines() if line.startswith("start "))
        # Only a worker that runs calls is killed: one killed while starting up or beginning runs holds little.
        alive = {slot: process for slot, process in alive.items() if process.pid in ready} or alive
        if not alive:
            break
        now = time.monotonic()
        if now > deadline:
            for process in alive.values():
                process.kill()
            raise SystemExit(f"the soak did not finish in {options.timeout} s (scratch: {scratch})")
        if kills < options.kills and now >= next_kill and all(p.pid in ready for p in alive.values()):
            slot = draw.choice(sorted(alive))
            victim = alive[slot]
            victim.send_signal(signal.SIGKILL)
            deaths[victim.pid] = time.monotonic()
            victim.wait()
            kills += 1
            time.sleep(draw.uniform(0, 0.2))
            workers[slot] = start_worker(spec_text, slot)
            next_kill = time.monotonic() + draw.uniform(*options.kill_every)
        time.sleep(0.02)
    finished_at = time.monotonic()
    failed = [process.returncode for process in workers.values() if process.returncode != 0]
    runs = scan(spec)
    lost_runs = options.runs - sum(1 for _, _, calls, done in runs.values() if calls == len(CALLS) == done)
    report = analyse(read_log(log_path), deaths, finished_at)
    report = {
        "backend": options.backend,
        "workers": options.workers,
        "runs": options.runs,
        "lease": options.lease,
        "strategy": options.strategy,
        "seed": options.seed,
        "kills": kills,
        "seconds": round(finished_at - began, 1),
        "lost runs": lost_runs,
        "worker failures": len(failed),
        **report,
    }
    if options.backend == "postgres":
        import psycopg
        from psycopg import sql

        with psycopg.connect(spec["dsn"], autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(spec["schema"])))
    if not options.keep:
        for path in scratch.iterdir():
            path.unlink()
        scratch.rmdir()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--workers", type=int, choices=[1, 2], default=2)
    parser.add_argument("--lease", type=float, default=1.0, help="seconds")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--kill-every", type=float, nargs=2, default=[0.5, 2.0], metavar=("MIN", "MAX"))
    parser.add_argument("--call-time-min", type=float, default=0.2)
    parser.add_argument("--call-time-max", type=float, default=1.0)
    parser.add_argument("--strategy", choices=["sequential", "parallel"], default="sequential")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (journal, event log)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker is not None:
        anyio.run(worker, json.loads(options.spec), options.worker)
        return
    report = soak(options)
    if options.json:
        print(json.dumps(report))
    else:
        print("  ".join(f"{key}: {value}" for key, value in report.items()))


if __name__ == "__main__":
    main()
