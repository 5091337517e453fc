"""Resilience for shared downstreams: retries, rate limits and circuit breakers, per tool.

The executor is shared by every run, so it can pace, retry and cut off the calls of a tool
across all runs at once, which no single tool can:

- ``Retry``: an ``idempotent=True`` tool's transient failures (``TimeoutError``, the ``on=``
  exception types, and ``Transient`` raised by the tool) are run again, with exponential
  backoff and full jitter, a ``Retry-After`` the downstream gave honoured, every attempt
  inside the call's ``timeout``, and never more retries than the tool's retry budget allows
  (by default a fifth of its first attempts over the last minute), so that retries cannot
  multiply the load of a storm.
- ``RateLimit``: a token bucket per tool shared by every run on the event loop; a call waits
  for a token (its timeout counts), in the order the calls asked, and never fails for want
  of one.
- ``CircuitBreaker``: after that many consecutive transient failures, the tool's calls are
  answered at once with ``error_kind="unavailable"`` for the cooldown, retries included; then
  one probe call decides whether the circuit closes again.

The policies are values (frozen, checked when made); ``Resilience`` is the state one tool
keeps on one event loop (internal).
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.lowlevel

from toolsched._policy.limits import ModelRetry
from toolsched._values.numeric_options import numeric_fault, shown
from toolsched._values.results import ErrorKind
from toolsched.errors import OptionError

__all__ = [
    "PROBE_HOLD",
    "RETRY_FLOOR",
    "CircuitBreaker",
    "CircuitOpen",
    "NotRun",
    "Outcome",
    "RateLimit",
    "Resilience",
    "Retry",
    "RunHalted",
    "Transient",
    "is_transient",
    "retry_after_of",
]


# Retries a tool may always make in a minute, whatever its budget: a quiet tool can still retry.
RETRY_FLOOR = 10

# The least time a probe whose body still runs in its thread holds the next probe back, in seconds
# (``Resilience._hold_probe``; the circuit's cooldown when that is longer).
PROBE_HOLD = 1.0

# Doublings of the backoff past this many retries change nothing (2.0 ** 1024 overflows a float).
_MAX_DOUBLINGS = 1023

# What one attempt of a call came to, for the circuit: a success, a transient failure (a timeout
# included), or another failure (the call's own fault, such as a bad request).
Outcome = Literal["success", "transient", "other"]


class Transient(Exception):
    """Raised by a tool: this failure may pass if the call is made again.

    ``retry_after`` is how long the downstream asked to wait (its ``Retry-After``), in seconds: a
    finite number ≥ 0, or None. Anything else (a header's text, NaN, a negative) is refused here
    with ``OptionError``, so that the mistake shows where it is made.
    """

    def __init__(self, message: str = "", *, retry_after: float | None = None) -> None:
        super().__init__(message)
        if retry_after is not None:
            fault = numeric_fault(retry_after, integer=False, above=False)
            if fault is not None:
                raise OptionError(
                    f"Transient(retry_after=...) must be None or seconds to wait, {fault}, got {shown(retry_after)}"
                )
        self.retry_after = None if retry_after is None else float(retry_after)


def retry_after_of(error: BaseException) -> float | None:
    """The wait a failure asked for before the call is made again (its ``retry_after``, in seconds), or None.

    Read from any exception, a ``Transient`` or one of a policy's ``on=`` types, whose ``retry_after``
    may be anything: only a finite number ≥ 0 (``numeric_fault``'s rule) is a wait; anything else
    (text such as an HTTP date, None, NaN, infinity, a negative, an integer past any float, a bool,
    an attribute that raises) is ignored, and the backoff alone applies.
    """
    try:
        value = getattr(error, "retry_after", None)
        if value is None or numeric_fault(value, integer=False, above=False) is not None:
            return None
        return float(value)
    except Exception:
        # An attribute that raises, or a number of a subclass whose comparison or conversion raises.
        return None


def _number(owner: str, name: str, value: Any, *, minimum: float, strict: bool, integer: bool = False) -> None:
    """Checks one numeric option of a policy by ``numeric_fault``'s rule: ``OptionError`` naming it if it fails."""
    fault = numeric_fault(value, integer=integer, least=minimum, above=strict)
    if fault is not None:
        raise OptionError(f"{owner}({name}=...) must be {fault}, got {shown(value)}")


@dataclass(frozen=True, slots=True)
class Retry:
    """Run an idempotent tool's call again when it failed transiently.

    ``attempts`` counts every run of the call, the first included. The wait before retry
    ``n`` is drawn from ``[0, min(max_backoff, backoff * 2 ** (n - 1))]`` (full jitter) or is
    that bound without ``jitter``; a ``Transient(retry_after=...)`` waits at least that long.
    ``on`` adds exception types that count as transient. ``budget`` is the most retries, as a
    fraction of the tool's first attempts over the last minute, on top of a floor of
    ``RETRY_FLOOR`` retries a minute (so a quiet tool can still retry).
    """

    attempts: int = 3
    backoff: float = 0.2
    max_backoff: float = 10.0
    jitter: bool = True
    on: tuple[type[BaseException], ...] = ()
    budget: float = 0.2

    def __post_init__(self) -> None:
        _number("Retry", "attempts", self.attempts, minimum=1, strict=False, integer=True)
        _number("Retry", "backoff", self.backoff, minimum=0, strict=False)
        _number("Retry", "max_backoff", self.max_backoff, minimum=0, strict=False)
        _number("Retry", "budget", self.budget, minimum=0, strict=False)
        if not isinstance(self.jitter, bool):
            raise OptionError(f"Retry(jitter=...) must be True or False, got {self.jitter!r}")
        on = self.on
        if isinstance(on, type):
            on = (on,)
        if not isinstance(on, (tuple, list)) or not all(
            isinstance(kind, type) and issubclass(kind, BaseException) for kind in on
        ):
            raise OptionError(f"Retry(on=...) must be exception types, got {self.on!r}")
        object.__setattr__(self, "on", tuple(on))

    def delay(self, retry: int, retry_after: float | None, draw: Callable[[float, float], float]) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first retry)."""
        bound = min(self.max_backoff, self.backoff * 2.0 ** min(retry - 1, _MAX_DOUBLINGS))
        wait = draw(0.0, bound) if self.jitter else bound
        if retry_after is not None:
            wait = max(wait, retry_after)
        return wait


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``calls`` calls of a tool started per ``per`` seconds, across every run.

    ``burst`` is how many may start at once after a quiet spell (the bucket's size;
    ``calls`` unless given).
    """

    calls: int
    per: float = 1.0
    burst: int | None = None

    def __post_init__(self) -> None:
        _number("RateLimit", "calls", self.calls, minimum=0, strict=True, integer=True)
        _number("RateLimit", "per", self.per, minimum=0, strict=True)
        if self.burst is not None:
            _number("RateLimit", "burst", self.burst, minimum=0, strict=True, integer=True)

    @property
    def size(self) -> int:
        return self.calls if self.burst is None else self.burst


@dataclass(frozen=True, slots=True)
class CircuitBreaker:
    """After ``failures`` consecutive transient failures, refuse the tool's calls for ``cooldown`` seconds.

    Every attempt is admitted by the circuit, a retry's included. Once the cooldown is over, one
    probe call runs: a success closes the circuit, a transient failure (a timeout included) opens
    it again, and a failure of another kind (a bad request: it says nothing of the downstream)
    settles nothing, so the next call probes. Outcomes of calls admitted before the circuit opened
    never close it.
    """

    failures: int = 5
    cooldown: float = 30.0

    def __post_init__(self) -> None:
        _number("CircuitBreaker", "failures", self.failures, minimum=0, strict=True, integer=True)
        _number("CircuitBreaker", "cooldown", self.cooldown, minimum=0, strict=False)


def is_transient(error: BaseException, retry: Retry | None) -> bool:
    """Whether a failure may pass: a timeout, ``Transient``, or one of the policy's ``on`` types (one whose
    ``isinstance`` check raises does not count). A ``ModelRetry`` never is, whatever ``on`` lists: it is the
    model's mistake, for the model to fix, so running the body again cannot pass it and it says nothing of the
    downstream (the circuit does not count it)."""
    if isinstance(error, ModelRetry):
        return False
    if isinstance(error, (Transient, TimeoutError)):
        return True
    if retry is None or not retry.on:
        return False
    try:
        return isinstance(error, retry.on)
    except Exception:
        return False


class NotRun(Exception):
    """A call answered without running its tool (internal): ``kind`` is the result's error kind."""

    kind: ErrorKind = "unavailable"


class CircuitOpen(NotRun):
    """A call refused at once because the tool's circuit is open (internal: answered ``unavailable``)."""


class RunHalted(NotRun):
    """The run was interrupted while the call waited to run its tool for the first time (internal)."""

    kind: ErrorKind = "skipped"


@dataclass(slots=True)
class _Bucket:
    limit: RateLimit
    tokens: float
    updated: float
    # Calls wait their turn on this lock, first come first served.
    turn: anyio.Lock = field(default_factory=anyio.Lock)

    def _refill(self) -> float:
        """Tops the bucket up for the time that passed; returns the rate (tokens a second)."""
        now = time.monotonic()
        rate = self.limit.calls / self.limit.per
        self.tokens = min(float(self.limit.size), self.tokens + (now - self.updated) * rate)
        self.updated = now
        return rate

    def try_take(self) -> bool:
        """Takes a token now if one is there and nobody waits for one before this call."""
        if self.turn.locked() or self.turn.statistics().tasks_waiting:
            return False
        self._refill()
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    async def take(self) -> None:
        async with self.turn:
            while True:
                rate = self._refill()
                if self.tokens >= 1.0:
                    self.tokens -= 1.0
                    return
                await anyio.sleep((1.0 - self.tokens) / rate)


class Resilience:
    """A tool's retries, rate limit and circuit on one event loop (internal: kept with the tool's facts)."""

    __slots__ = (
        "_bucket",
        "_clock",
        "_failures",
        "_firsts",
        "_open_until",
        "_probe_hold",
        "_probe_left",
        "_probing",
        "_retries",
        "circuit",
        "draw",
        "rate_limit",
        "retry",
    )

    def __init__(
        self,
        retry: Retry | None,
        rate_limit: RateLimit | None,
        circuit: CircuitBreaker | None,
        draw: Callable[[float, float], float] = random.uniform,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.retry = retry
        self.rate_limit = rate_limit
        self.circuit = circuit
        self.draw = draw
        # The circuit's clock (a test can give its own).
        self._clock = clock
        self._bucket = None if rate_limit is None else _Bucket(rate_limit, float(rate_limit.size), time.monotonic())
        self._failures = 0
        self._open_until = -math.inf
        self._probing = False
        # Times of first attempts and of retries over the last minute (the retry budget).
        self._firsts: deque[float] = deque()
        self._retries: deque[float] = deque()
        # The body of a probe that timed out in its thread and still runs there (set when it returns):
        # no other probe starts before it ends, so one probe at a time reaches the downstream.
        self._probe_left: threading.Event | None = None
        # ... but not for ever: a body that never returns holds the probe until this time at most.
        self._probe_hold = -math.inf

    # -- the circuit ----------------------------------------------------------------

    def admit(self) -> bool | None:
        """Whether an attempt may start now: None while the circuit is open (or its one probe runs),
        True when the attempt is the probe that decides whether the circuit closes, else False.

        A probe must be settled: ``record`` its outcome, or ``release_probe``.
        """
        circuit = self.circuit
        if circuit is None or self._failures < circuit.failures:
            return False
        if self._probing or self._clock() < self._open_until or self._probe_running():
            return None
        self._probing = True
        return True

    def _probe_running(self) -> bool:
        """Whether the body of an earlier probe still runs in its thread (its call timed out)."""
        left = self._probe_left
        if left is None:
            return False
        if left.is_set() or self._clock() >= self._probe_hold:
            self._probe_left = None
            return False
        return True

    def _hold_probe(self, left_running: threading.Event | None, circuit: CircuitBreaker) -> None:
        """The probe's body goes on in its thread after its call ended: no probe starts before that body
        returns, or at most one more cooldown (at least ``PROBE_HOLD`` seconds) after the circuit would
        have let one through (a body that never returns must not shut the tool out for good)."""
        if left_running is None or left_running.is_set():
            return
        self._probe_left = left_running
        self._probe_hold = max(self._open_until, self._clock()) + max(circuit.cooldown, PROBE_HOLD)

    def refuses(self) -> bool:
        """Whether an attempt would be refused now (``admit`` without taking the probe)."""
        circuit = self.circuit
        return (
            circuit is not None
            and self._failures >= circuit.failures
            and (self._probing or self._clock() < self._open_until or self._probe_running())
        )

    def record(self, outcome: Outcome, probe: bool = False, left_running: threading.Event | None = None) -> None:
        """The outcome of one attempt the circuit admitted (``probe``: the attempt was the probe).

        A transient failure counts toward opening the circuit, and opens it again once it has opened.
        While it is closed, any other outcome breaks the streak. Once it has opened, only the probe
        closes it, by a success; a probe that failed for another reason settles nothing (the next
        call probes).
        """
        circuit = self.circuit
        if circuit is None:
            return
        if outcome == "transient":
            self._failures += 1
            if self._failures >= circuit.failures:
                self._open_until = self._clock() + circuit.cooldown
        elif self._failures < circuit.failures or (probe and outcome == "success"):
            self._failures = 0
            self._open_until = -math.inf
        if probe:
            self._probing = False
            self._hold_probe(left_running, circuit)

    def release_probe(self, left_running: threading.Event | None = None) -> None:
        """The probe call ended without an outcome (cancelled): the next call may probe, once the probe's
        body is over if it still runs in its thread (``left_running`` is set when it ends)."""
        self._probing = False
        if self.circuit is not None:
            self._hold_probe(left_running, self.circuit)

    def open_for(self) -> float:
        """Seconds until the open circuit lets a probe through (0 when it would now)."""
        until = max(self._open_until, self._probe_hold) if self._probe_running() else self._open_until
        return max(0.0, until - self._clock())

    # -- the rate limit --------------------------------------------------------------

    def paced(self) -> bool:
        """Whether a call may start now as far as the rate limit goes (taking its token if so)."""
        return self._bucket is None or self._bucket.try_take()

    async def pace(self) -> None:
        """Waits for a token of the tool's rate limit, if it has one."""
        if self._bucket is not None:
            await self._bucket.take()

    # -- the retry budget ------------------------------------------------------------

    def first_attempt(self) -> None:
        if self.retry is not None:
            self._firsts.append(time.monotonic())

    def may_retry(self) -> bool:
        """Whether the budget allows one more retry now (and counts it when it does)."""
        retry = self.retry
        if retry is None:
            return False
        now = time.monotonic()
        for times in (self._firsts, self._retries):
            while times and now - times[0] > 60.0:
                times.popleft()
        if len(self._retries) >= RETRY_FLOOR + retry.budget * len(self._firsts):
            return False
        self._retries.append(now)
        return True
