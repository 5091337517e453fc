"""Every numeric option follows one rule (toolsched/_values/numeric_options.py): a value out of its range is refused
with the library's own error naming the option, never an ``OverflowError`` or a formatting failure.

Huge integers (past a float, past 4,300 digits, past a machine word), NaN, infinities, zero, negatives
and bools, for the resilience policies, tool metadata, the executor and its strategies, hooks, journals
and the Ray backend; and the extremes the rule lets through work when a run uses them.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import pickle
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

import toolsched as ts

HUGE = [
    pytest.param(10**400, id="past-a-float"),
    pytest.param(10**5000, id="past-4300-digits"),
    pytest.param(-(10**400), id="hugely-negative"),
]


class BigInt(int):
    """An int subclass."""


class Seconds(float):
    """A float subclass."""


def a_tool(**options: Any) -> Any:
    @ts.tool(**options)
    async def probe() -> None:
        return None

    return ts.ToolRegistry([probe])


def a_journal(**options: Any) -> Callable[[], Any]:
    return lambda: ts.SqliteJournal("unused.db", **options)


# (name, make(value), error type, the text the error names the option by, whether it takes a float)
OPTIONS: list[tuple[str, Callable[[Any], Any], type[Exception], str, bool]] = [
    ("RateLimit.calls", lambda v: ts.RateLimit(v), ts.OptionError, "RateLimit(calls=...)", False),
    ("RateLimit.per", lambda v: ts.RateLimit(5, per=v), ts.OptionError, "RateLimit(per=...)", True),
    ("RateLimit.burst", lambda v: ts.RateLimit(5, burst=v), ts.OptionError, "RateLimit(burst=...)", False),
    ("Retry.attempts", lambda v: ts.Retry(attempts=v), ts.OptionError, "Retry(attempts=...)", False),
    ("Retry.backoff", lambda v: ts.Retry(backoff=v), ts.OptionError, "Retry(backoff=...)", True),
    ("Retry.max_backoff", lambda v: ts.Retry(max_backoff=v), ts.OptionError, "Retry(max_backoff=...)", True),
    ("Retry.budget", lambda v: ts.Retry(budget=v), ts.OptionError, "Retry(budget=...)", True),
    ("CircuitBreaker.failures", lambda v: ts.CircuitBreaker(failures=v), ts.OptionError, "failures=", False),
    ("CircuitBreaker.cooldown", lambda v: ts.CircuitBreaker(cooldown=v), ts.OptionError, "cooldown=", True),
    ("Transient.retry_after", lambda v: ts.Transient("x", retry_after=v), ts.OptionError, "retry_after=", True),
    ("tool.timeout", lambda v: a_tool(timeout=v), ts.ToolDefinitionError, "timeout must", True),
    ("tool.max_concurrency", lambda v: a_tool(max_concurrency=v), ts.ToolDefinitionError, "max_concurrency", False),
    ("tool.max_result_chars", lambda v: a_tool(max_result_chars=v), ts.ToolDefinitionError, "max_result_chars", False),
    ("tool.max_result_lines", lambda v: a_tool(max_result_lines=v), ts.ToolDefinitionError, "max_result_lines", False),
    ("tool.num_cpus", lambda v: a_tool(num_cpus=v), ts.ToolDefinitionError, "num_cpus", True),
    ("tool.memory", lambda v: a_tool(memory=v), ts.ToolDefinitionError, "memory", False),
    (
        "tool.max_retries",
        lambda v: a_tool(max_retries=v, idempotent=True),
        ts.ToolDefinitionError,
        "max_retries",
        False,
    ),
    (
        "Executor.max_input_bytes",
        lambda v: ts.Executor([], max_input_bytes=v),
        ts.OptionError,
        "max_input_bytes",
        False,
    ),
    (
        "Executor.max_input_depth",
        lambda v: ts.Executor([], max_input_depth=v),
        ts.OptionError,
        "max_input_depth",
        False,
    ),
    (
        "Executor.max_schema_errors",
        lambda v: ts.Executor([], max_schema_errors=v),
        ts.OptionError,
        "schema_errors",
        False,
    ),
    ("Parallel", lambda v: ts.Parallel(max_concurrency=v), ts.OptionError, "Parallel(max_concurrency", False),
    ("Partitioned", lambda v: ts.Partitioned(max_concurrency=v), ts.OptionError, "Partitioned(max_concurrency", False),
    ("Batched", lambda v: ts.Batched(v), ts.OptionError, "Batched(size", False),
    ("ResourceAware", lambda v: ts.ResourceAware(max_concurrency=v), ts.OptionError, "ResourceAware(max_conc", False),
    ("Hooks.timeout", lambda v: ts.Hooks(timeout=v), ts.OptionError, "hook timeout", True),
    ("hook.timeout", lambda v: ts.Hooks().pre_tool_use("*", lambda e: None, timeout=v), ts.OptionError, "hook", True),
    ("SqliteJournal.lease", lambda v: a_journal(lease=v)(), ts.JournalError, "lease", True),
    ("SqliteJournal.busy_timeout", lambda v: a_journal(busy_timeout=v)(), ts.JournalError, "busy_timeout", True),
    (
        "PostgresJournal.connect_timeout",
        lambda v: ts.PostgresJournal("host=127.0.0.1", connect_timeout=v),
        ts.JournalError,
        "connect_timeout",
        True,
    ),
    ("RayBackend.connect_timeout", lambda v: ts.RayBackend(connect_timeout=v), ts.OptionError, "connect_timeout", True),
    ("RayBackend.max_result_bytes", lambda v: ts.RayBackend(max_result_bytes=v), ts.OptionError, "max_result", False),
    ("RayBackend.actor_pool", lambda v: ts.RayBackend(actor_pool={"t": v}), ts.OptionError, "actor_pool", False),
]

OPTION_PARAMS = [
    pytest.param(make, error, named, takes_float, id=name) for name, make, error, named, takes_float in OPTIONS
]


@pytest.mark.parametrize(("make", "error", "named", "takes_float"), OPTION_PARAMS)
@pytest.mark.parametrize("value", HUGE)
def test_a_huge_integer_is_refused_naming_the_option(
    make: Callable[[Any], Any], error: type[Exception], named: str, takes_float: bool, value: int
) -> None:
    with pytest.raises(error, match=re.escape(named)) as caught:
        make(value)
    assert not isinstance(caught.value, OverflowError)
    # The message describes an integer too long to print rather than failing to print it.
    if value.bit_length() > 256:
        assert "an integer of" in str(caught.value)


@pytest.mark.parametrize(("make", "error", "named", "takes_float"), OPTION_PARAMS)
@pytest.mark.parametrize(
    "value",
    [
        pytest.param(math.nan, id="nan"),
        pytest.param(-math.inf, id="minus-inf"),
        pytest.param(0 - 1, id="minus-one"),
        pytest.param(True, id="true"),
        pytest.param("3", id="text"),
        pytest.param(BigInt(10**400), id="huge-int-subclass"),
    ],
)
def test_a_value_out_of_every_range_is_refused_naming_the_option(
    make: Callable[[Any], Any], error: type[Exception], named: str, takes_float: bool, value: Any
) -> None:
    with pytest.raises(error, match=re.escape(named)):
        make(value)


@pytest.mark.parametrize(("make", "error", "named", "takes_float"), OPTION_PARAMS)
def test_a_number_option_takes_a_float_and_a_whole_number_option_none(
    make: Callable[[Any], Any], error: type[Exception], named: str, takes_float: bool
) -> None:
    if takes_float:
        make(Seconds(1.5))
    else:
        with pytest.raises(error, match=re.escape(named)):
            make(2.0)


@pytest.mark.parametrize(
    ("make", "error", "named"),
    [
        pytest.param(lambda v: a_journal(lease=v)(), ts.JournalError, "lease", id="SqliteJournal.lease"),
        pytest.param(lambda v: a_journal(busy_timeout=v)(), ts.JournalError, "busy_timeout", id="busy_timeout"),
        pytest.param(
            lambda v: ts.PostgresJournal("host=127.0.0.1", connect_timeout=v),
            ts.JournalError,
            "connect_timeout",
            id="PostgresJournal.connect_timeout",
        ),
        pytest.param(
            lambda v: ts.RayBackend(connect_timeout=v), ts.OptionError, "connect_timeout", id="RayBackend.connect"
        ),
    ],
)
@pytest.mark.parametrize("value", [sys.float_info.max, math.inf, 10**20])
def test_a_number_past_what_its_consumer_holds_is_refused(
    make: Callable[[Any], Any], error: type[Exception], named: str, value: Any
) -> None:
    with pytest.raises(error, match=f"{named}.* must be ") as caught:
        make(value)
    if not math.isinf(value):
        assert "at most" in str(caught.value)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: ts.RateLimit(sys.maxsize, burst=sys.maxsize), id="RateLimit"),
        pytest.param(lambda: ts.Retry(attempts=sys.maxsize), id="Retry.attempts"),
        pytest.param(lambda: ts.CircuitBreaker(failures=sys.maxsize), id="CircuitBreaker.failures"),
        pytest.param(lambda: a_tool(max_result_chars=sys.maxsize, max_result_lines=BigInt(sys.maxsize)), id="tool"),
        pytest.param(lambda: ts.Executor([], max_input_bytes=sys.maxsize, max_schema_errors=sys.maxsize), id="exec"),
        pytest.param(lambda: ts.Retry(backoff=sys.float_info.max, max_backoff=sys.float_info.max), id="Retry.backoff"),
        pytest.param(lambda: ts.CircuitBreaker(cooldown=sys.float_info.max), id="CircuitBreaker.cooldown"),
        # A share of a machine is finite (num_cpus=inf is refused): the largest one taken is the largest float.
        pytest.param(lambda: a_tool(timeout=math.inf, num_cpus=sys.float_info.max), id="tool.inf"),
        pytest.param(lambda: ts.Hooks(timeout=math.inf), id="Hooks.inf"),
        pytest.param(lambda: ts.RayBackend(connect_timeout=threading.TIMEOUT_MAX), id="RayBackend"),
    ],
)
def test_the_largest_values_the_rule_lets_through_are_taken(make: Callable[[], Any]) -> None:
    make()


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        (ts.Retry(), "attempts"),
        (ts.Retry(), "backoff"),
        (ts.RateLimit(5), "calls"),
        (ts.RateLimit(5), "per"),
        (ts.CircuitBreaker(), "failures"),
        (ts.CircuitBreaker(), "cooldown"),
    ],
)
def test_a_policy_copied_with_a_huge_value_is_refused(policy: Any, field: str) -> None:
    with pytest.raises(ts.OptionError, match=f"{field}="):
        dataclasses.replace(policy, **{field: 10**400})


@pytest.mark.parametrize(
    "policy",
    [ts.Retry(attempts=sys.maxsize, on=(KeyError,)), ts.RateLimit(sys.maxsize, per=0.5), ts.CircuitBreaker(7, 1e300)],
)
def test_policies_survive_copies_and_pickling(policy: Any) -> None:
    for copied in (copy.copy(policy), copy.deepcopy(policy), pickle.loads(pickle.dumps(policy))):
        assert copied == policy and hash(copied) == hash(policy)


@pytest.mark.anyio
async def test_extreme_policies_run() -> None:
    runs: list[int] = []

    @ts.tool(
        idempotent=True,
        retry=ts.Retry(attempts=sys.maxsize, backoff=0.0, budget=sys.float_info.max),
        rate_limit=ts.RateLimit(sys.maxsize, per=sys.float_info.max),
        circuit=ts.CircuitBreaker(failures=sys.maxsize, cooldown=sys.float_info.max),
        max_result_chars=sys.maxsize,
        timeout=sys.float_info.max,
    )
    async def fetch(key: str) -> str:
        runs.append(1)
        if len(runs) < 4:
            raise ts.Transient("busy")
        return key

    with anyio.fail_after(10):
        outcome = await ts.Executor([fetch]).run([ts.ToolCall("c", "fetch", {"key": "a"})])
    assert (outcome.results[0].output, outcome.results[0].attempts) == ("a", 4)


@pytest.mark.anyio
async def test_a_rate_limit_over_the_longest_period_waits_until_an_interrupt() -> None:
    # calls / per is below the smallest normal float: the wait for the next token is infinite.
    @ts.tool(concurrency_safe=True, rate_limit=ts.RateLimit(1, per=sys.float_info.max))
    async def send(key: str) -> str:
        return key

    started = anyio.Event()

    def on_event(event: ts.Event) -> None:
        if isinstance(event, ts.ToolStarted) and event.call_id == "b":
            started.set()

    executor = ts.Executor([send], on_event=on_event)

    async def interrupt() -> None:
        await started.wait()
        await anyio.sleep(0.02)
        executor.interrupt()

    async with anyio.create_task_group() as group:
        group.start_soon(interrupt)
        outcome = await executor.run([ts.ToolCall("a", "send", {"key": "a"}), ts.ToolCall("b", "send", {"key": "b"})])
    assert [(r.output, r.error_kind, r.attempts) for r in outcome.results] == [("a", None, 1), (None, "skipped", 0)]


def test_a_sqlite_busy_timeout_sqlite_cannot_hold_is_refused(tmp_path: Path) -> None:
    # SQLite holds it as a C int of milliseconds: Python's sqlite3 made a longer one no wait at all.
    ts.SqliteJournal(tmp_path / "j.db", busy_timeout=(2**31 - 1) / 1000)
    with pytest.raises(ts.JournalError, match="busy_timeout must be seconds to wait, at most"):
        ts.SqliteJournal(tmp_path / "j.db", busy_timeout=3_000_000)
