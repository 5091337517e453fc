"""Tool bodies on a real Ray cluster started here: same answers, same schedule, same failure semantics."""

from __future__ import annotations

import contextlib
import datetime
import itertools
import json
import logging
import os
import re
import runpy
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import anyio
import anyio.lowlevel
import pydantic
import pydantic_core
import pytest
import ray
import ray.cloudpickle

import toolsched as ts
from toolsched._backends import ray_worker
from toolsched._cli.cli import main

pytestmark = pytest.mark.anyio

# Ray workers cannot import this test module: its tools travel to them by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    """A two-CPU Ray cluster on this machine (loopback only: see conftest.py), shut down after the module."""
    ray.init(
        address="local",
        num_cpus=2,
        object_store_memory=128 * 1024 * 1024,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
        namespace="toolsched-tests",
    )
    yield
    ray.shutdown()


async def append_line(path: str, line: str) -> None:
    async with await anyio.open_file(path, "a") as journal:
        await journal.write(line + "\n")


@ts.tool(
    concurrency_safe=lambda args: bool(args.get("safe", True)),
    resources=lambda args: ts.Access(writes=[args["key"]]) if args.get("key") else ts.Access(),
)
async def step(name: str, log: str, safe: bool = True, partner: str = "", key: str = "") -> str:
    """Logs its start, waits until its partner has started too (proof that they overlap), logs its end."""
    await append_line(log, f"start {name}")
    if partner:
        # The partner runs in another process: watch the shared log for it, for at most 20 seconds.
        for _ in range(2000):
            if f"start {partner}\n" in await anyio.Path(log).read_text():
                break
            await anyio.sleep(0.01)
        else:
            raise TimeoutError(f"{partner} never started while {name} was running")
    await append_line(log, f"end {name}")
    return f"{name}@{os.getpid()}"


@ts.tool(concurrency_safe=True)
def crash(marker: str) -> str:
    """Its worker process dies mid-call."""
    with open(marker, "a") as runs:
        runs.write(f"{os.getpid()}\n")
    os._exit(1)


@ts.tool(concurrency_safe=True, idempotent=True, max_retries=1)
def flaky(attempts: str) -> str:
    """Its first attempt is killed with SIGKILL; the second one answers."""
    with open(attempts, "a") as runs:
        runs.write(f"{os.getpid()}\n")
    if len(Path(attempts).read_text().splitlines()) == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return "second attempt"


@ts.tool(concurrency_safe=True)
def echo(text: str) -> str:
    return text


@ts.tool(concurrency_safe=True, timeout=3.0)
def stall(pid_file: str) -> str:
    """Records its worker's PID, then runs far past its timeout."""
    Path(pid_file).write_text(str(os.getpid()))
    time.sleep(60)
    return "finished"


@ts.tool(num_cpus=2, memory=64 * 1024 * 1024, max_retries=0)
def placed() -> dict[str, float]:
    """Reports what Ray gave the task it runs in."""
    return {key: float(value) for key, value in ray.get_runtime_context().get_assigned_resources().items()}


@ts.tool
def refuse(reason: str) -> None:
    raise PermissionError(reason)


@ts.tool(max_result_chars=1000)
def produce(size: int) -> str:
    return "x" * size


@ts.tool
def whoami(ctx: ts.ToolContext) -> str:
    ctx.report_progress(0.5, "looking")
    return f"{ctx.context['user']} in {ctx.call_id}"


class Tally(ts.Tool):
    """Counts the calls its own copy has answered: state that lives on its worker."""

    name = "tally"
    description = "Counts its calls."
    input_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def __init__(self) -> None:
        self.count = 0

    def call(self, args: dict[str, Any], ctx: ts.ToolContext) -> str:
        self.count += 1
        ctx.report_progress(1.0, f"call {self.count}")
        return f"{self.count}@{os.getpid()}"


class AsyncTally(Tally):
    name = "async_tally"

    async def call(self, args: dict[str, Any], ctx: ts.ToolContext) -> str:  # type: ignore[override]
        await anyio.lowlevel.checkpoint()
        self.count += 1
        return f"{self.count}@{os.getpid()}"


class Patient(ts.Tool):
    """Waits (watching ``ctx.cancelled``) or reports how its earlier calls on this worker ended."""

    name = "patient"
    description = "Waits, or reports."
    input_schema = {"type": "object", "properties": {"wait": {"type": "boolean"}}, "required": ["wait"]}
    timeout = 1.0

    def __init__(self) -> None:
        self.history: list[str] = []

    def call(self, args: dict[str, Any], ctx: ts.ToolContext) -> str:
        if not args["wait"]:
            return "; ".join(self.history) or "nothing yet"
        for _ in range(400):
            if ctx.cancelled:
                self.history.append("stopped when cancelled")
                return "stopped"
            time.sleep(0.05)
        self.history.append("ran to the end")
        return "finished"


def ray_executor(tools: list[Any], **options: Any) -> ts.Executor:
    return ts.Executor(tools, backends={"ray": ts.RayBackend()}, default_backend="ray", **options)


@dataclass(frozen=True)
class Schedule:
    """A turn of ``step`` calls a, b, c, d, e and what its strategy promises about them."""

    strategy: ts.Strategy
    # Each call's partner: the two must be running at the same moment.
    partners: dict[str, str]
    # Pairs (earlier, later) that must not overlap: the later starts after the earlier ended.
    apart: list[tuple[str, str]]
    unsafe: frozenset[str] = frozenset()
    keys: dict[str, str] = field(default_factory=dict)

    def calls(self, log: Path) -> list[ts.ToolCall]:
        return [
            ts.ToolCall(
                f"c-{name}",
                "step",
                {
                    "name": name,
                    "log": str(log),
                    "safe": name not in self.unsafe,
                    "partner": partner,
                    "key": self.keys.get(name, ""),
                },
            )
            for name, partner in self.partners.items()
        ]


NAMES = ["a", "b", "c", "d", "e"]
SCHEDULES = {
    "partitioned": Schedule(
        ts.Partitioned(),
        {"a": "b", "b": "a", "c": "", "d": "e", "e": "d"},
        [("a", "c"), ("b", "c"), ("c", "d"), ("c", "e")],
        unsafe=frozenset("c"),
    ),
    "parallel": Schedule(ts.Parallel(max_concurrency=2), {"a": "b", "b": "a", "c": "d", "d": "c", "e": ""}, []),
    "sequential": Schedule(ts.Sequential(), dict.fromkeys(NAMES, ""), list(itertools.pairwise(NAMES))),
    # c writes the directory a, b and d write into: it waits for a and b, and d waits for it; e conflicts with none.
    "resource_aware": Schedule(
        ts.ResourceAware(max_concurrency=2),
        {"a": "b", "b": "a", "c": "", "d": "e", "e": "d"},
        [("a", "c"), ("b", "c"), ("c", "d")],
        keys={"a": "src/a", "b": "src/b", "c": "src", "d": "src/d", "e": "docs/e"},
    ),
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
async def test_ray_runs_keep_the_order_batches_and_overlap_of_local_runs(
    cluster: None, name: str, tmp_path: Path
) -> None:
    schedule = SCHEDULES[name]
    runs: dict[str, tuple[ts.Outcome, list[ts.BatchStarted], list[str]]] = {}
    with anyio.fail_after(60):
        for where in ("local", "ray"):
            log = tmp_path / f"{where}.log"
            log.touch()
            batches: list[ts.BatchStarted] = []

            def note(event: ts.Event, batches: list[ts.BatchStarted] = batches) -> None:
                if isinstance(event, ts.BatchStarted):
                    batches.append(event)

            options: dict[str, Any] = {"strategy": schedule.strategy, "on_event": note}
            executor = ray_executor([step], **options) if where == "ray" else ts.Executor([step], **options)
            outcome = await executor.run(schedule.calls(log))
            runs[where] = (outcome, batches, (await anyio.Path(log).read_text()).splitlines())

    local, remote = runs["local"], runs["ray"]
    assert [r.error for r in remote[0].results] == [None] * len(NAMES)

    def shape(outcome: ts.Outcome) -> list[tuple[str, str, int | None, bool]]:
        return [(r.call_id, r.output.split("@")[0], r.batch, r.was_concurrent) for r in outcome.results]

    assert shape(remote[0]) == shape(local[0])
    assert [r.call_id for r in remote[0].results] == [f"c-{n}" for n in NAMES]
    assert remote[1] == local[1]
    assert {r.output.split("@")[1] for r in local[0].results} == {str(os.getpid())}
    assert str(os.getpid()) not in {r.output.split("@")[1] for r in remote[0].results}
    for log_lines in (local[2], remote[2]):
        assert sorted(log_lines) == sorted(f"{edge} {n}" for n in NAMES for edge in ("start", "end"))
        for earlier, later in schedule.apart:
            assert log_lines.index(f"end {earlier}") < log_lines.index(f"start {later}"), (earlier, later, log_lines)


async def test_a_dead_worker_fails_only_its_call_and_an_idempotent_tool_is_retried(
    cluster: None, tmp_path: Path
) -> None:
    crashes, attempts = tmp_path / "crash.runs", tmp_path / "flaky.runs"
    calls = [
        ts.ToolCall("1", "crash", {"marker": str(crashes)}),
        ts.ToolCall("2", "flaky", {"attempts": str(attempts)}),
        ts.ToolCall("3", "echo", {"text": "still here"}),
    ]
    with anyio.fail_after(60):
        outcome = await ray_executor([crash, flaky, echo]).run(calls)
    died, retried, sibling = outcome.results
    assert died.error_kind == "execution_error"
    assert died.error is not None
    assert died.error.startswith("WorkerLostError: the Ray worker running `crash` died before returning a result")
    assert "not run again" in died.error
    assert len(crashes.read_text().splitlines()) == 1
    assert (retried.output, retried.error) == ("second attempt", None)
    assert len(attempts.read_text().splitlines()) == 2
    assert (sibling.output, sibling.error) == ("still here", None)
    assert all(result.batch == 0 and result.was_concurrent for result in outcome.results)


async def test_a_timeout_answers_the_call_and_kills_its_ray_task(cluster: None, tmp_path: Path) -> None:
    pid_file = tmp_path / "stall.pid"
    calls = [ts.ToolCall("1", "stall", {"pid_file": str(pid_file)}), ts.ToolCall("2", "echo", {"text": "done"})]
    with anyio.fail_after(60):
        outcome = await ray_executor([stall, echo]).run(calls)
        assert [r.error_kind for r in outcome.results] == ["timeout", None]
        assert outcome.results[0].error == "`stall` did not finish within 3.0 seconds"
        assert outcome.results[1].output == "done"
        pid = int(pid_file.read_text())
        assert pid != os.getpid()
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            await anyio.sleep(0.05)


@ts.tool(concurrency_safe=True, num_cpus=1)
async def nap(seconds: float) -> float:
    """A whole CPU each: two run at once on the two-CPU cluster, the others wait for Ray to start them."""
    await anyio.sleep(seconds)
    return seconds


async def test_calls_waiting_on_ray_hold_no_thread_each_and_stop_waiting_when_cancelled(cluster: None) -> None:
    # The calls Ray cannot start yet wait here as the running ones do: many waiting calls, two worker processes.
    executor = ray_executor([nap], strategy=ts.Parallel(max_concurrency=200))
    await executor.run([ts.ToolCall("warm", "nap", {"seconds": 0}) for _ in range(2)])
    threads: list[int] = []

    async def watch() -> None:
        while True:
            threads.append(threading.active_count())
            await anyio.sleep(0.05)

    before = threading.active_count()
    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            outcome = await executor.run([ts.ToolCall(f"n{i}", "nap", {"seconds": 0.1}) for i in range(60)])
            group.cancel_scope.cancel()
    assert [result.output for result in outcome.results] == [0.1] * 60
    # 60 calls were waiting at once (for 3 seconds at least: two at a time run): a waiting thread each would show here.
    assert max(threads) < before + 20, (before, max(threads))
    # A run cancelled while its calls wait on Ray stops waiting at once.
    started = time.perf_counter()
    with anyio.move_on_after(0.5):
        await executor.run([ts.ToolCall(f"m{i}", "nap", {"seconds": 30.0}) for i in range(4)])
    assert time.perf_counter() - started < 5


async def test_tool_metadata_becomes_the_ray_task_resource_request(cluster: None) -> None:
    with anyio.fail_after(30):
        outcome = await ray_executor([placed]).run([ts.ToolCall("1", "placed", {})])
    assert outcome.results[0].error is None
    assert outcome.results[0].output == {"CPU": 2.0, "memory": 64.0 * 1024 * 1024}


async def test_a_tool_raising_on_ray_fails_like_it_does_locally(cluster: None) -> None:
    seen: list[BaseException] = []

    def formatter(exc: BaseException, call: ts.ToolCall) -> str:
        seen.append(exc)
        return ts.executor.format_error(exc, call)

    call = ts.ToolCall("1", "refuse", {"reason": "no access to /etc"})
    with anyio.fail_after(30):
        remote = await ray_executor([refuse], error_formatter=formatter).run([call])
        local = await ts.Executor([refuse]).run([call])
        with pytest.raises(ts.ToolCallFailed) as raised:
            await ray_executor([refuse], on_error="raise").run([call])
    assert remote.results[0].error == local.results[0].error == "PermissionError: no access to /etc"
    assert remote.results[0].error_kind == "execution_error"
    assert type(seen[0]) is PermissionError
    assert any("raised on a Ray worker" in note for note in getattr(seen[0], "__notes__", []))
    assert raised.value.result.error == "PermissionError: no access to /etc"


class NeedsArguments(Exception):
    """Pickles, but cannot be rebuilt from its pickle: its ``__init__`` takes two arguments."""

    def __init__(self, first: int, second: int) -> None:
        super().__init__(f"{first}-{second}")


class HoldsLock(Exception):
    def __init__(self) -> None:
        super().__init__("a lock inside")
        self.lock = threading.Lock()


@ts.tool(concurrency_safe=True)
def raise_needs_arguments() -> str:
    raise NeedsArguments(1, 2)


@ts.tool(concurrency_safe=True)
async def raise_needs_arguments_async() -> str:
    raise NeedsArguments(3, 4)


@ts.tool(concurrency_safe=True)
def raise_holds_lock() -> str:
    raise HoldsLock()


@ts.tool(concurrency_safe=True)
def raise_interrupt() -> str:
    raise KeyboardInterrupt


async def test_exceptions_ray_cannot_send_back_still_name_their_type_and_message(cluster: None) -> None:
    tools = [raise_needs_arguments, raise_needs_arguments_async, raise_holds_lock, raise_interrupt]
    backend = ts.RayBackend(actor_pool={"raise_needs_arguments_async": 1})
    executor = ts.Executor(tools, backends={"ray": backend}, default_backend="ray")
    with anyio.fail_after(60):
        outcome = await executor.run([ts.ToolCall(str(n), tool.name, {}) for n, tool in enumerate(tools)])
    backend.close()
    assert [result.error_kind for result in outcome.results] == ["execution_error"] * 4
    errors = [result.error or "" for result in outcome.results]
    assert errors[0].startswith("BackendError: `raise_needs_arguments` raised NeedsArguments: 1-2 (on a Ray worker;")
    assert errors[1].startswith(
        "BackendError: `raise_needs_arguments_async` raised NeedsArguments: 3-4 (on a Ray worker;"
    )
    assert errors[2].startswith("BackendError: `raise_holds_lock` raised HoldsLock: a lock inside (on a Ray worker;")
    assert "cannot pickle '_thread.lock' object" in errors[2]
    # Nothing cancelled this call: the error must not say it was.
    assert errors[3].startswith("BackendError: `raise_interrupt` was interrupted on its Ray worker, not cancelled")
    assert "KeyboardInterrupt" in errors[3]


async def test_actor_pools_keep_per_worker_state_relay_progress_and_stop_timed_out_calls(cluster: None) -> None:
    tally, async_tally, patient = Tally(), AsyncTally(), Patient()
    backend = ts.RayBackend(actor_pool={"tally": 1, "async_tally": 1, "patient": 1})
    progress: list[ts.ToolProgress] = []
    executor = ts.Executor(
        [tally, async_tally, patient],
        backends={"ray": backend},
        default_backend="ray",
        strategy=ts.Sequential(),
        on_progress=progress.append,
    )
    names = ["tally", "tally", "async_tally", "tally", "async_tally"]
    try:
        with anyio.fail_after(60):
            tallies = (await executor.run([ts.ToolCall(str(i), name, {}) for i, name in enumerate(names)])).results
            # Straight to the backend, with no timeout: waits until the patient's actor is up.
            ready = await backend.invoke(patient, {"wait": False}, None)
            # A call that outlives its timeout, then one that asks its worker how that call ended.
            waits = (
                await executor.run(
                    [ts.ToolCall(f"p{i}", "patient", {"wait": wait}) for i, wait in enumerate((True, False))]
                )
            ).results
    finally:
        backend.close()
    assert [r.error for r in tallies] == [None] * len(names)
    counts = [r.output.split("@")[0] for r in tallies]
    workers = [r.output.split("@")[1] for r in tallies]
    assert counts == ["1", "2", "1", "3", "2"]
    assert workers[0] == workers[1] == workers[3] != workers[2] == workers[4]
    assert str(os.getpid()) not in workers
    assert (tally.count, async_tally.count, patient.history) == (0, 0, [])
    assert [(p.call_id, p.message) for p in progress] == [("0", "call 1"), ("1", "call 2"), ("3", "call 3")]
    assert ready == "nothing yet"
    assert [(r.output, r.error_kind) for r in waits] == [(None, "timeout"), ("stopped when cancelled", None)]


async def test_results_and_context_cross_by_reference_or_are_refused_with_a_message(cluster: None) -> None:
    backend = ts.RayBackend(max_result_bytes=1_000_000)
    executor = ts.Executor([produce, whoami], backends={"ray": backend}, default_backend="ray")
    progress: list[ts.ToolProgress] = []
    with anyio.fail_after(60):
        sized = await executor.run(
            [ts.ToolCall("big", "produce", {"size": 300_000}), ts.ToolCall("huge", "produce", {"size": 2_000_000})]
        )
        named = await ts.Executor(
            [whoami], backends={"ray": backend}, default_backend="ray", on_progress=progress.append
        ).run([ts.ToolCall("w1", "whoami", {})], context={"user": "ada"})
        unsendable = await executor.run([ts.ToolCall("w2", "whoami", {})], context={"lock": threading.Lock()})
    big, huge = sized.results
    assert big.error is None and big.truncated
    assert len(big.output) <= 1000 and big.output.startswith("x" * 900)
    assert huge.error_kind == "execution_error"
    assert huge.error == (
        "ResultTooLargeError: the result of `produce` is 2,000,000 bytes, over the Ray backend's limit of "
        "1,000,000 (RayBackend(max_result_bytes=...)); return less, or store it and return where it is"
    )
    assert named.results[0].output == "ada in w1"
    assert [(p.call_id, p.fraction, p.message) for p in progress] == [("w1", 0.5, "looking")]
    assert unsendable.results[0].error_kind == "execution_error"
    assert unsendable.results[0].error is not None
    assert unsendable.results[0].error.startswith("BackendError: the call of `whoami` cannot be sent to Ray")


def test_backend_wiring_is_checked_when_the_executor_is_built() -> None:
    @ts.tool(backend="gpu")
    def render(scene: str) -> str:
        return scene

    with pytest.raises(ts.OptionError, match=r"tool `render` runs on backend 'gpu', which this executor does not"):
        ts.Executor([render], backends={"ray": ts.RayBackend()})
    with pytest.raises(ts.OptionError, match="default_backend='ray' names no backend"):
        ts.Executor([echo], default_backend="ray")
    with pytest.raises(ts.OptionError, match="the name 'local' is the built-in local backend"):
        ts.Executor([echo], backends={"local": ts.RayBackend()})
    with pytest.raises(ts.OptionError, match=r"backends\['ray'\] must be a backend"):
        ts.Executor([echo], backends={"ray": object()})  # type: ignore[dict-item]
    with pytest.raises(ts.OptionError, match=r"actor_pool=...\) names `tally`, which is not a tool"):
        ts.Executor([echo], backends={"ray": ts.RayBackend(actor_pool={"tally": 2})}, default_backend="ray")
    with pytest.raises(ts.ToolDefinitionError, match="max_retries=2 would run a call again"):
        ts.Executor([ts.tool(max_retries=2)(echo.fn)])
    with pytest.raises(ts.OptionError, match="must be 'host:port', 'ray://host:port', 'auto' or None"):
        ts.RayBackend(address="http://example")


async def test_tools_that_name_no_backend_or_local_stay_in_this_process(tmp_path: Path) -> None:
    step_here = ts.tool(backend="local", name="step_here", concurrency_safe=True)(step.fn)
    log = tmp_path / "here.log"
    executor = ts.Executor([step, step_here], backends={"ray": ts.RayBackend()})
    outcome = await executor.run(
        [
            ts.ToolCall("1", "step", {"name": "a", "log": str(log), "safe": True}),
            ts.ToolCall("2", "step_here", {"name": "b", "log": str(log)}),
        ]
    )
    assert [r.output for r in outcome.results] == [f"a@{os.getpid()}", f"b@{os.getpid()}"]


def test_a_body_that_cannot_be_serialised_is_refused_naming_the_tool() -> None:
    guard = threading.Lock()

    @ts.tool(backend="ray")
    def guarded(text: str) -> str:
        with guard:
            return text

    with pytest.raises(ts.ToolDefinitionError, match="tool `guarded` cannot run on Ray: its body cannot be serialised"):
        ts.Executor([guarded], backends={"ray": ts.RayBackend()})


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_an_unreachable_cluster_is_a_clear_error_not_a_hang() -> None:
    port = closed_port()
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        backend = ts.RayBackend(address=address, connect_timeout=5)
        with pytest.raises(ts.BackendUnavailableError, match=f"cannot reach the Ray cluster at '{address}'"):
            backend.connect()
        with anyio.fail_after(10):
            outcome = await ts.Executor([echo], backends={"ray": backend}, default_backend="ray").run(
                [ts.ToolCall("1", "echo", {"text": "hi"}), ts.ToolCall("2", "echo", {"text": "there"})]
            )
        for result in outcome.results:
            assert result.error_kind == "execution_error"
            assert result.error is not None
            assert result.error.startswith(f"BackendUnavailableError: cannot reach the Ray cluster at '{address}'")


@contextlib.contextmanager
def _silent_cluster() -> Iterator[str]:
    """The address of a listener that accepts connections and never speaks (Ray would wait for it for minutes)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        yield f"127.0.0.1:{silent.getsockname()[1]}"


def _python(script: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``script`` run by a Python process of its own (a Ray client's wait cannot be interrupted in this one)."""
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, check=False)


def test_an_address_that_never_answers_times_out_instead_of_hanging() -> None:
    with _silent_cluster() as address:
        script = (
            "import os, toolsched as ts\n"
            "try:\n"
            f"    ts.RayBackend(address={address!r}, connect_timeout=1).connect()\n"
            "except ts.BackendUnavailableError as exc:\n"
            "    print(exc, flush=True)\n"
            "    os._exit(0)\n"
            "os._exit(1)\n"
        )
        completed = _python(script, 60)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == (
        f"no Ray cluster answered at '{address}' within 1 seconds (RayBackend(connect_timeout=...))"
    )


def test_calls_waiting_for_a_cluster_that_never_answers_share_one_timeout() -> None:
    # Four calls at once, each needing the connection: one wait of connect_timeout answers them all
    # (one after another, they would wait 4 x 3 seconds).
    with _silent_cluster() as address:
        script = (
            "import json, os, time, anyio, toolsched as ts\n"
            "@ts.tool(concurrency_safe=True)\n"
            "def echo(text: str) -> str:\n"
            "    return text\n"
            f"backend = ts.RayBackend(address={address!r}, connect_timeout=3)\n"
            "executor = ts.Executor([echo], backends={'ray': backend}, default_backend='ray', strategy=ts.Parallel())\n"
            "started = time.monotonic()\n"
            "outcome = anyio.run(executor.run, [ts.ToolCall(str(n), 'echo', {'text': 'x'}) for n in range(4)])\n"
            "errors = [result.error for result in outcome.results]\n"
            "print(json.dumps({'seconds': time.monotonic() - started, 'errors': errors}), flush=True)\n"
            "os._exit(0)\n"
        )
        completed = _python(script, 120)
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert (
        report["errors"]
        == [
            f"BackendUnavailableError: no Ray cluster answered at '{address}' within 3 seconds "
            "(RayBackend(connect_timeout=...))"
        ]
        * 4
    )
    # Well under the 12 seconds of one wait per call, with room for a slow machine.
    assert report["seconds"] < 8, report


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_scale_out_example_runs_on_the_cluster(cluster: None, capsys: pytest.CaptureFixture[str]) -> None:
    example = runpy.run_path(str(EXAMPLES / "ray_scale_out.py"))
    with anyio.fail_after(60):
        await example["main"](ts.RayBackend(actor_pool={"glossary": 1}))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("c1 checksum ok ") and lines[0].endswith(" (on a Ray worker)")
    assert lines[1] == "c2 word_count ok 4 words (here)"
    assert lines[2] == "c3 glossary ok a framework for distributed Python (lookup 1 on this worker, on a Ray worker)"
    assert lines[3] == "c4 glossary ok a stateful Ray worker (lookup 2 on this worker, on a Ray worker)"
    assert lines[4] == "c5 checksum invalid_input invalid arguments for `checksum`:"


def test_bench_runs_its_tool_bodies_on_ray_with_the_same_results(
    cluster: None, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bench", "--turns", "2", "--calls", "8", "--latency", "1", "--conflict-rate", "0.4"]
    argv += ["--strategies", "partitioned,resource_aware", "--max-concurrency", "4"]
    assert main([*argv, "--backend", "ray", "--ray-cpus", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["backend"] == "RayBackend(address=None)"
    assert [row["name"] for row in report["strategies"]] == ["sequential", "partitioned", "resource_aware"]
    assert all(row["same_results_as_sequential"] for row in report["strategies"])
    assert main([*argv, "--backend", "ray"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "backend: RayBackend(address=None), 1 CPU per call"


def test_bench_refuses_an_unreachable_cluster_and_ray_options_without_ray(
    capsys: pytest.CaptureFixture[str],
) -> None:
    address = f"127.0.0.1:{closed_port()}"
    with pytest.raises(SystemExit) as refused:
        main(["bench", "--turns", "1", "--backend", "ray", "--ray-address", address])
    assert refused.value.code == 2
    assert f"cannot reach the Ray cluster at '{address}'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", "--turns", "1", "--ray-address", address])
    assert "--ray-address and --ray-cpus go with --backend ray" in capsys.readouterr().err


def test_without_ray_installed_the_backend_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setattr(ray_worker, "_ray_package", None)
    with pytest.raises(
        ts.BackendUnavailableError, match=r"RayBackend needs the `ray` package: pip install 'toolsched\[ray\]'"
    ):
        ts.RayBackend()


@ts.tool
def kind_of(count: int, sizes: list[int]) -> str:
    return f"{type(count).__name__} {[type(size).__name__ for size in sizes]}"


async def test_integer_parameters_get_ints_on_ray_as_they_do_locally(cluster: None) -> None:
    """JSON Schema's ``integer`` takes ``3.0``: the tool's ``int`` parameters get ``3`` on Ray too (the Ray
    invoker stands in for the tool's own, which takes that step; the body got the float before)."""
    calls = [ts.ToolCall("1", "kind_of", '{"count": 3.0, "sizes": [1.0, 2]}')]
    with anyio.fail_after(30):
        remote = await ray_executor([kind_of]).run(calls)
    local = await ts.Executor([kind_of]).run(calls)
    assert remote.results[0].error is None
    assert remote.results[0].output == local.results[0].output == "int ['int', 'int']"


@ts.tool(concurrency_safe=True, num_cpus=0.01, timeout=4.0)
def stall_light(pid_file: str) -> str:
    """Records its worker's PID, then runs far past its timeout (a sliver of a CPU: it starts beside the naps)."""
    Path(pid_file).write_text(str(os.getpid()))
    time.sleep(120)
    return "finished"


@ts.tool(concurrency_safe=True, num_cpus=0.9, timeout=60.0)
async def nap_or_fail(seconds: float, fail: bool = False) -> float:
    """Most of a CPU each: two run at once (two worker processes), the others wait for Ray to start them."""
    await anyio.sleep(seconds)
    if fail:
        raise ValueError(f"failed after {seconds}")
    return seconds


async def test_many_calls_in_flight_share_one_waiter_and_each_keeps_its_answer_error_and_timeout(
    cluster: None, tmp_path: Path
) -> None:
    """300 calls wait on Ray at once: each gets its own answer in order, one fails, one times out."""
    backend = ts.RayBackend()
    executor = ts.Executor(
        [nap_or_fail, stall_light],
        backends={"ray": backend},
        default_backend="ray",
        strategy=ts.Parallel(max_concurrency=300),
    )
    pid_file = tmp_path / "stall.pid"
    calls = [ts.ToolCall(f"n{i}", "nap_or_fail", {"seconds": (i % 7) / 400, "fail": i == 150}) for i in range(300)]
    calls.insert(40, ts.ToolCall("late", "stall_light", {"pid_file": str(pid_file)}))
    waiters_before = [t for t in threading.enumerate() if t.name == "toolsched-ray-waiter"]
    with anyio.fail_after(90):
        outcome = await executor.run(calls)
    assert [result.call_id for result in outcome.results] == [call.id for call in calls]
    by_id = {result.call_id: result for result in outcome.results}
    assert by_id["late"].error_kind == "timeout"
    assert by_id["n150"].is_error and "failed after" in (by_id["n150"].error or "")
    for i in range(300):
        if i != 150:
            assert by_id[f"n{i}"].output == (i % 7) / 400
    # One waiting thread for this backend, not one per call.
    waiters = [t for t in threading.enumerate() if t.name == "toolsched-ray-waiter" and t not in waiters_before]
    assert len(waiters) == 1
    # The timed-out call's Ray task was killed, if it had started: on a loaded machine Ray may not have started
    # its worker within the call's timeout, and a task cancelled before it ran has nothing to kill
    # (test_a_timeout_answers_the_call_and_kills_its_ray_task checks the kill of a started task on its own).
    if pid_file.exists():
        pid = int(pid_file.read_text())
        with anyio.fail_after(30):
            while True:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                await anyio.sleep(0.05)
    # Closing the backend stops its waiting thread.
    backend.close()
    waiters[0].join(timeout=10)
    assert not waiters[0].is_alive()


@ray.remote(num_cpus=0.01)
def numbered(i: int) -> int:
    if i % 7 == 3:
        raise ValueError(f"no {i}")
    return i


@ray.remote(num_cpus=0.01, max_concurrency=1)
class Gate:
    """Holds its one call slot: calls queued behind a long ``hold`` are references that are not ready."""

    def hold(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds


async def test_results_ready_together_each_reach_their_own_caller(cluster: None) -> None:
    """Hundreds of results ready at once (more than one ``ray.wait`` returns) are all answered, a failure among
    them to its own caller only."""
    from toolsched._backends.ray_waiting import RayWaiter

    references = [numbered.remote(i) for i in range(300)]
    ray.wait(references, num_returns=len(references), timeout=60)
    waiter = RayWaiter()
    answers: dict[int, object] = {}

    async def one(i: int) -> None:
        try:
            answers[i] = await waiter.result(references[i])
        except ValueError as exc:
            answers[i] = str(exc).strip().splitlines()[-1]

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            for i in range(len(references)):
                group.start_soon(one, i)
    waiter.close()
    assert [i for i in range(300) if answers[i] == i] == [i for i in range(300) if i % 7 != 3]
    for i in range(3, 300, 7):
        assert answers[i] == f"ValueError: no {i}", answers[i]  # the last line of Ray's text of the error


async def test_a_quick_result_is_not_held_back_by_many_calls_still_running(cluster: None) -> None:
    """A result ready while many calls still run is answered before any of those finish."""
    from toolsched._backends.ray_waiting import RayWaiter

    gate = Gate.remote()
    waiter = RayWaiter()
    pending = [gate.hold.remote(30.0)] + [gate.hold.remote(0.0) for _ in range(99)]
    quick = numbered.remote(1)
    try:
        results: list[int] = []
        async with anyio.create_task_group() as group:
            for reference in pending:
                group.start_soon(waiter.result, reference)
            await anyio.wait_all_tasks_blocked()  # the waiter holds the slow ones before the quick one
            results.append(await waiter.result(quick))
            ready, _ = ray.wait(pending, num_returns=1, timeout=0)
            assert results == [1]
            assert ready == [], "the quick result waited for the slow ones"
            group.cancel_scope.cancel()
    finally:
        ray.kill(gate)
        waiter.close()


async def test_the_cpu_bench_splits_both_turns_by_thread_and_profiles_the_waiting_thread(
    cluster: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from toolsched._backends.ray_waiting import RayWaiter

    bench = runpy.run_path(str(EXAMPLES.parent / "benches" / "ray_cpu.py"))
    run = RayWaiter._run
    options = {"calls": 40, "concurrency": 10, "cpus": 2, "repeat": 1, "profile": True}
    with anyio.fail_after(120):
        await bench["measure"](bench["argparse"].Namespace(**options))
    assert RayWaiter._run is run  # the profiling wrapper is taken out again
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "40 calls per turn, 10 in flight; CPU of this process in us per call, by thread"
    rows = [line for line in out.splitlines() if line.startswith(("raw get ", "backend "))]
    assert [row.split()[0] for row in rows] == ["raw", "backend"]
    # Per thread in clock ticks (10 ms here): a thread that ran less than one in a turn this short is left out.
    assert all(re.match(r"(raw get|backend) +[\d,]+ calls/s  cpu +\d+:", row) for row in rows), rows
    assert "the event loop's thread, last RayBackend turn:" in out
    waiting = out.split("the waiting thread, every RayBackend turn (and the warm-up):")[1]
    assert "ray_waiting.py" in waiting and "(_ready)" in waiting


@ts.tool(concurrency_safe=True, num_cpus=0.01)
def carry(item: Any) -> str:
    return f"carried {item!r}"


async def test_a_call_cancelled_before_its_loop_sends_it_never_reaches_ray(
    cluster: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calls go to Ray once the event loop's ready tasks have run: one cancelled before that is never sent,
    while a call started beside it is sent and answered."""
    from toolsched._backends import backends

    sent: list[dict[str, Any]] = []
    submit = backends._Placement.submit

    def counted(self: Any, prepared: Any, ctx: Any) -> Any:
        sent.append(dict(prepared[1]))
        return submit(self, prepared, ctx)

    monkeypatch.setattr(backends._Placement, "submit", counted)
    backend = ts.RayBackend()
    backend.bind([carry])
    backend.connect()
    answers: list[object] = []

    async def kept() -> None:
        answers.append(await backend.invoke(carry, {"item": "kept"}, None))

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(kept)
            with anyio.CancelScope() as scope:
                scope.cancel()
                await backend.invoke(carry, {"item": "dropped"}, None)
    assert sent == [{"item": "kept"}]
    assert answers == ["carried 'kept'"]
    backend.close()


async def test_a_call_that_cannot_be_sent_fails_alone_among_the_calls_sent_with_it(cluster: None) -> None:
    """Calls started together are sent together: one whose context cannot be serialised fails with a
    BackendError naming its tool, the others sent with it (their tool takes no context) are answered."""
    executor = ray_executor([carry, whoami], strategy=ts.Parallel(max_concurrency=10))
    calls = [ts.ToolCall(f"c{i}", "carry", {"item": i}) for i in range(6)]
    calls.insert(3, ts.ToolCall("w", "whoami", {}))
    with anyio.fail_after(60):
        outcome = await executor.run(calls, context={"lock": threading.Lock()})
    by_id = {result.call_id: result for result in outcome.results}
    assert [by_id[f"c{i}"].output for i in range(6)] == [f"carried {i!r}" for i in range(6)]
    failed = by_id["w"]
    assert failed.error_kind == "execution_error"
    assert failed.error is not None
    assert failed.error.startswith("BackendError: the call of `whoami` cannot be sent to Ray"), failed.error


def note_run(log: str, name: str) -> None:
    """Notes in ``log`` that the body of ``name`` ran."""
    with open(log, "a", encoding="utf-8") as runs:
        runs.write(name + "\n")


@ts.tool(concurrency_safe=True)
def booked(day: datetime.date, log: str) -> str:
    note_run(log, "booked")
    return day.isoformat()


@ts.tool(concurrency_safe=True)
def relabel(source: Annotated[str, pydantic.Field(alias="from")], day: datetime.date, log: str) -> str:
    note_run(log, "relabel")
    return f"{source} {day.isoformat()}"


class Entry(pydantic.BaseModel):
    days: int
    log: str

    @pydantic.field_validator("days")
    @classmethod
    def short(cls, value: int) -> int:
        if value > 30:
            raise ValueError("at most 30 days \u2014 \u00abrefus\u00e9\u00bb")
        if value < 0:
            # pydantic cannot carry a lone surrogate in a message: validating raises UnicodeEncodeError.
            raise ValueError("no days before today \udc80")
        return value


class Ledger(ts.Tool):
    """Counts the entries its own copy took: state that lives on its actor."""

    name = "ledger"
    description = "Takes an entry of days."
    input_model = Entry

    def __init__(self) -> None:
        self.count = 0

    def call(self, args: Entry, ctx: ts.ToolContext) -> str:
        note_run(args.log, "ledger")
        self.count += 1
        return f"{self.count}@{os.getpid()}"


class Unsendable:
    """A detail of a refusal that cannot be pickled."""

    def __reduce__(self) -> Any:
        raise TypeError("an Unsendable cannot be pickled")

    def __str__(self) -> str:
        return "somewhere unsendable"


class Route(pydantic.BaseModel):
    to: str
    log: str

    @pydantic.field_validator("to")
    @classmethod
    def known(cls, value: str) -> str:
        if value != "home":
            raise pydantic_core.PydanticCustomError("unknown_place", "no route to {place}", {"place": Unsendable()})
        return value


class Router(ts.Tool):
    name = "router"
    description = "Routes somewhere known."
    input_model = Route

    def call(self, args: Route, ctx: ts.ToolContext) -> str:
        note_run(args.log, "router")
        return f"to {args.to}"


class ArgumentsRefused(Exception):
    """A tool's own exception that has the name of toolsched's refusal of arguments."""


@ts.tool(concurrency_safe=True)
def strict(text: str, log: str) -> str:
    note_run(log, "strict")
    raise ArgumentsRefused(f"the body refuses {text!r}")


async def test_arguments_a_tools_model_refuses_end_invalid_input_on_ray_as_locally_and_nothing_is_sent(
    cluster: None, tmp_path: Path
) -> None:
    """The tool's model checks a call's arguments in this process, as a local tool's does, before anything
    goes to Ray: a refusal (a date that is no date, a validator's refusal in text that is not ASCII, one
    whose detail cannot be pickled) is ``invalid_input`` with the local message, on a task and on an actor,
    the body never runs and the actor goes on answering; arguments under an alias reach the body as locally
    (each was a ``BackendError``, the call not sent). A body that raises its own ``ArgumentsRefused`` failed."""
    log = str(tmp_path / "runs.log")
    calls = [
        ts.ToolCall("first", "ledger", {"days": 1, "log": log}),
        ts.ToolCall("date", "booked", {"day": "2024-13-45", "log": log}),
        ts.ToolCall("model", "ledger", {"days": 90, "log": log}),
        ts.ToolCall("unsendable", "router", {"to": "work", "log": log}),
        ts.ToolCall("surrogate", "ledger", {"days": -1, "log": log}),
        ts.ToolCall("aliased", "relabel", {"from": "a", "day": "2024-13-45", "log": log}),
        ts.ToolCall("body", "strict", {"text": "x", "log": log}),
        ts.ToolCall("then", "ledger", {"days": 2, "log": log}),
        ts.ToolCall("fine-date", "booked", {"day": "2024-12-25", "log": log}),
        ts.ToolCall("fine-alias", "relabel", {"from": "a", "day": "2024-12-25", "log": log}),
        ts.ToolCall("fine-route", "router", {"to": "home", "log": log}),
    ]
    backend = ts.RayBackend(actor_pool={"ledger": 1})
    tools: list[ts.Tool] = [Ledger(), booked, Router(), relabel, strict]
    executor = ts.Executor(tools, backends={"ray": backend}, default_backend="ray", strategy=ts.Sequential())
    try:
        with anyio.fail_after(90):
            outcome = await executor.run(calls)
    finally:
        backend.close()
    answers = [(result.error_kind, result.error, result.output) for result in outcome.results]
    first, then = answers.pop(0), answers.pop(6)
    assert answers[:3] == [
        (
            "invalid_input",
            "arguments for `booked` refused by its parameters: `day`: "
            "Input should be a valid date or datetime, month value is outside expected range of 1-12",
            None,
        ),
        (
            "invalid_input",
            "arguments for `ledger` refused by its parameters: `days`: "
            "Value error, at most 30 days \u2014 \u00abrefus\u00e9\u00bb",
            None,
        ),
        (
            "invalid_input",
            "arguments for `router` refused by its parameters: `to`: no route to somewhere unsendable",
            None,
        ),
    ]
    # The model's check failed before it could refuse: as locally, that is the tool failing.
    surrogate = answers[3]
    assert surrogate[0] == "execution_error"
    assert str(surrogate[1]).startswith("UnicodeEncodeError: 'utf-8' codec can't encode character '\\udc80'")
    assert answers[4:] == [
        (
            "invalid_input",
            "arguments for `relabel` refused by its parameters: `day`: "
            "Input should be a valid date or datetime, month value is outside expected range of 1-12",
            None,
        ),
        ("execution_error", "ArgumentsRefused: the body refuses 'x'", None),
        (None, None, "2024-12-25"),
        (None, None, "a 2024-12-25"),
        (None, None, "to home"),
    ]
    # The refusals reached no worker: the actor counts two calls, answered by the same process.
    count, worker = str(first[2]).split("@")
    assert (first[:2], then[:2], count, then[2]) == ((None, None), (None, None), "1", f"2@{worker}")
    assert worker != str(os.getpid())
    ran = (await anyio.Path(log).read_text(encoding="utf-8")).split()
    assert ran == ["ledger", "strict", "ledger", "booked", "relabel", "router"]
    local = await ts.Executor([Ledger(), booked, Router(), relabel, strict], strategy=ts.Sequential()).run(calls)
    kept = [(result.error_kind, result.error, result.output) for result in local.results]
    del kept[7], kept[0]
    assert kept == answers


async def test_arguments_refused_for_a_ray_tool_are_answered_without_reaching_for_the_cluster(tmp_path: Path) -> None:
    """A refusal is the call's own: it needs no cluster (it was the cluster's ``BackendUnavailableError``)."""
    backend = ts.RayBackend(address=f"127.0.0.1:{closed_port()}", connect_timeout=5)
    executor = ts.Executor([booked], backends={"ray": backend}, default_backend="ray")
    log = str(tmp_path / "runs.log")
    with anyio.fail_after(30):
        outcome = await executor.run(
            [
                ts.ToolCall("refused", "booked", {"day": "2024-13-45", "log": log}),
                ts.ToolCall("sent", "booked", {"day": "2024-12-25", "log": log}),
            ]
        )
    refused, sent = outcome.results
    assert (refused.error_kind, refused.error) == (
        "invalid_input",
        "arguments for `booked` refused by its parameters: `day`: "
        "Input should be a valid date or datetime, month value is outside expected range of 1-12",
    )
    assert sent.error_kind == "execution_error"
    assert str(sent.error).startswith("BackendUnavailableError: cannot reach the Ray cluster")
