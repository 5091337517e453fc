"""The engine's batches against a plain-Python reference of each strategy."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import toolsched as ts
from toolsched import _core
from toolsched._executor.schedule import partitioned_batches


def reference_partition(safe: list[bool], cap: int) -> list[tuple[int, int, int]]:
    """Consecutive safe calls share a batch; each unsafe call runs alone."""
    batches: list[tuple[int, int, int]] = []
    group_start = None
    for index, is_safe in enumerate(safe):
        if is_safe:
            if group_start is None:
                group_start = index
            continue
        if group_start is not None:
            batches.append((group_start, index, min(cap, index - group_start)))
            group_start = None
        batches.append((index, index + 1, 1))
    if group_start is not None:
        batches.append((group_start, len(safe), min(cap, len(safe) - group_start)))
    return batches


def reference_batched(count: int, size: int, cap: int) -> list[tuple[int, int, int]]:
    return [(start, min(start + size, count), min(size, cap, count - start)) for start in range(0, count, size)]


@given(safe=st.lists(st.booleans(), max_size=60), cap=st.integers(1, 12))
def test_partitioned_matches_the_reference(safe: list[bool], cap: int) -> None:
    assert _core.plan_batches("partitioned", safe, max_concurrency=cap) == reference_partition(safe, cap)


@given(
    safe=st.one_of(st.lists(st.booleans(), max_size=60), st.lists(st.just(True), max_size=60)),
    cap=st.integers(1, 12),
)
def test_the_executors_partitioned_batches_are_the_engines(safe: list[bool], cap: int) -> None:
    """The executor answers a turn of only safe calls itself: with the engine's answer."""
    assert partitioned_batches(safe, cap) == _core.plan_batches("partitioned", safe, max_concurrency=cap)


@given(count=st.integers(0, 60), size=st.integers(1, 9), cap=st.integers(1, 12))
def test_batched_matches_the_reference(count: int, size: int, cap: int) -> None:
    assert _core.plan_batches("batched", [False] * count, max_concurrency=cap, size=size) == reference_batched(
        count, size, cap
    )


@given(count=st.integers(0, 40), cap=st.integers(1, 12))
def test_sequential_and_parallel_match_the_reference(count: int, cap: int) -> None:
    flags = [True] * count
    assert _core.plan_batches("sequential", flags, max_concurrency=cap) == [(i, i + 1, 1) for i in range(count)]
    expected = [(0, count, min(cap, count))] if count else []
    assert _core.plan_batches("parallel", flags, max_concurrency=cap) == expected


@given(safe=st.lists(st.booleans(), max_size=60))
def test_every_call_is_in_exactly_one_batch_in_order(safe: list[bool]) -> None:
    batches = _core.plan_batches("partitioned", safe, max_concurrency=4)
    covered = [i for start, end, _ in batches for i in range(start, end)]
    assert covered == list(range(len(safe)))


def test_bad_strategy_options_are_refused() -> None:
    with pytest.raises(ts.OptionError, match="unknown strategy"):
        _core.plan_batches("random", [True], max_concurrency=1)
    with pytest.raises(ts.OptionError, match="max_concurrency"):
        _core.plan_batches("partitioned", [True], max_concurrency=0)


@given(order=st.permutations(list(range(12))))
def test_assembly_restores_model_order(order: list[int]) -> None:
    results = [f"r{slot}" for slot in order]
    assert _core.assemble(12, order, results) == [f"r{i}" for i in range(12)]


def test_assembly_refuses_lost_or_doubled_results() -> None:
    with pytest.raises(ts.AssemblyError, match="no result for slot 1"):
        _core.assemble(2, [0], ["a"])
    with pytest.raises(ts.AssemblyError, match="two results"):
        _core.assemble(2, [0, 0], ["a", "b"])
