"""Scheduling strategies. Each keeps results in model order; they differ in what overlaps."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from toolsched._values.numeric_options import numeric_fault, shown
from toolsched.errors import OptionError

__all__ = [
    "DEFAULT_MAX_CONCURRENCY",
    "Batched",
    "Parallel",
    "Partitioned",
    "ResourceAware",
    "Sequential",
    "Strategy",
    "resolve_cap",
]

DEFAULT_MAX_CONCURRENCY = 10
ENVIRONMENT_VARIABLE = "TOOLSCHED_MAX_CONCURRENCY"


# The largest concurrency cap or chunk size taken: more calls than this never run at once in one
# process, and the engine keeps sizes in machine words.
MAX_SIZE = 1_000_000


def _check_size(label: str, value: int | None) -> None:
    if value is None:
        return
    fault = numeric_fault(value, integer=True, most=MAX_SIZE)
    if fault is not None:
        raise OptionError(f"{label} must be {fault}, got {shown(value)}")


@dataclass(frozen=True, slots=True)
class Sequential:
    """One call at a time; steering is checked between calls."""

    kind = "sequential"


@dataclass(frozen=True, slots=True)
class Parallel:
    """Every call at once, at most ``max_concurrency`` in flight."""

    max_concurrency: int | None = None
    kind = "parallel"

    def __post_init__(self) -> None:
        _check_size("Parallel(max_concurrency=...)", self.max_concurrency)


@dataclass(frozen=True, slots=True)
class Batched:
    """Chunks of ``size`` calls run in parallel, chunk after chunk; steering between chunks."""

    size: int
    max_concurrency: int | None = None
    kind = "batched"

    def __post_init__(self) -> None:
        _check_size("Batched(size=...)", self.size)
        _check_size("Batched(max_concurrency=...)", self.max_concurrency)


@dataclass(frozen=True, slots=True)
class Partitioned:
    """The default: consecutive concurrency-safe calls run together; every other call runs alone."""

    max_concurrency: int | None = None
    kind = "partitioned"

    def __post_init__(self) -> None:
        _check_size("Partitioned(max_concurrency=...)", self.max_concurrency)


@dataclass(frozen=True, slots=True)
class ResourceAware:
    """Calls overlap unless they conflict over what they read and write.

    Each call's ``resources(args)`` declares its keys (``Access(reads=...,
    writes=...)``, with a directory key covering what is below it). A call
    waits for every earlier call it conflicts with — one writes a key the other
    reads or writes — and for nothing else; a call whose resources are unknown
    conflicts with every call. At most ``max_concurrency`` calls are in flight,
    earlier calls first. The final state is the same as running the calls one
    by one in model order, given honest declarations.
    """

    max_concurrency: int | None = None
    kind = "resource_aware"

    def __post_init__(self) -> None:
        _check_size("ResourceAware(max_concurrency=...)", self.max_concurrency)


Strategy = Sequential | Parallel | Batched | Partitioned | ResourceAware


def _environment_reader() -> Callable[[], str | None]:
    """Reads the variable as ``os.environ`` holds it now, whoever set it.

    ``os.environ.get`` encodes the name and decodes the value on each read,
    paid by every run; where ``os.environ`` keeps its encoded
    mapping (``_data``, with ``encodekey``/``decodevalue``) the name is
    encoded once and only a value that is set is decoded.
    """
    environ: Any = os.environ
    data = getattr(environ, "_data", None)
    encodekey = getattr(environ, "encodekey", None)
    decodevalue = getattr(environ, "decodevalue", None)
    if not isinstance(data, dict) or encodekey is None or decodevalue is None:
        return lambda: os.environ.get(ENVIRONMENT_VARIABLE)
    key = encodekey(ENVIRONMENT_VARIABLE)

    def read() -> str | None:
        if os.environ is not environ:
            # Replaced wholesale (as test helpers may do): read what is there now.
            return os.environ.get(ENVIRONMENT_VARIABLE)
        raw = data.get(key)
        return None if raw is None else str(decodevalue(raw))

    return read


_read_environment = _environment_reader()


def resolve_cap(strategy: Strategy) -> int:
    """The concurrency cap for a run: the strategy's argument, else the environment, else 10.

    The environment variable is read when a run starts, so it can change between runs.
    """
    explicit = getattr(strategy, "max_concurrency", None)
    if explicit is not None:
        return int(explicit)
    raw = _read_environment()
    if raw is None or not raw.strip():
        return DEFAULT_MAX_CONCURRENCY
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise OptionError(f"{ENVIRONMENT_VARIABLE} must be a positive integer, got {raw!r}")
    if value > MAX_SIZE:
        # As for the argument: past a machine word the engine could not even take it.
        raise OptionError(f"{ENVIRONMENT_VARIABLE} must be at most {MAX_SIZE:,}, got {raw!r}")
    return value
