"""Attacks on ``ts.Limits``: external calls answered on a later resume or recover, one ``Limits`` shared by runs
in two threads (each with its own event loop), and repeat guards fed what JSON cannot hold."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from journal_child import Store, store_in

import toolsched as ts

pytestmark = pytest.mark.anyio


@ts.tool(external=True)
def confirm(order: str) -> str:
    """Asks the customer to confirm an order (answered from outside)."""


@ts.tool(read_only=True, concurrency_safe=True)
async def search(query: str) -> str:
    """Searches."""
    return f"found {query}"


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_in(request.param, tmp_path, "limits_attacks")


async def test_a_repeat_of_an_external_call_names_the_answer_it_got_on_resume() -> None:
    executor = ts.Executor([confirm])
    limits = ts.Limits(max_repeats=1)
    outcome = await executor.run([ts.ToolCall("c1", "confirm", {"order": "A-1"})], limits=limits)
    state = outcome.state
    assert state is not None
    state.complete("c1", output="confirmed by the customer")
    await executor.resume(state, limits=limits)
    again = await executor.run([ts.ToolCall("c2", "confirm", {"order": "A-1"})], limits=limits)
    assert again.results[0].error_kind == "limit_exceeded"
    assert (again.results[0].error or "").endswith("it returned: confirmed by the customer")
    assert limits.calls == 1


async def test_a_repeat_of_an_external_call_answered_through_the_journal_names_that_answer(store: Store) -> None:
    limits = ts.Limits(max_repeats=1)
    async with store.open() as journal:
        executor = ts.Executor([confirm], journal=journal)
        await executor.run([ts.ToolCall("c1", "confirm", {"order": "A-1"})], run_id="first", limits=limits)
        await executor.complete("first", "c1", output="confirmed through the webhook")
        recovered = await executor.recover("first", limits=limits)
        assert recovered.results[0].output == "confirmed through the webhook"
        again = await executor.run([ts.ToolCall("c2", "confirm", {"order": "A-1"})], run_id="second", limits=limits)
    assert again.results[0].error_kind == "limit_exceeded"
    assert (again.results[0].error or "").endswith("it returned: confirmed through the webhook")
    assert limits.calls == 1


def test_one_limits_shared_by_runs_on_two_threads_never_goes_past_its_cap(anyio_backend: str) -> None:
    # Two agents, each on its own thread and event loop, share one budget: every call is counted once,
    # under the Limits' lock, and no more than max_calls run in all.
    limits = ts.Limits(max_calls=7)
    executor = ts.Executor([search])
    kinds: list[str | None] = []
    start = threading.Barrier(2)
    lock = threading.Lock()

    def agent(name: str) -> None:
        async def turns() -> None:
            for turn in range(3):
                calls = [ts.ToolCall(f"{name}-{turn}-{i}", "search", {"query": f"{name} {turn} {i}"}) for i in range(2)]
                outcome = await executor.run(calls, limits=limits)
                with lock:
                    kinds.extend(result.error_kind for result in outcome.results)

        start.wait(30)
        anyio.run(turns, backend=anyio_backend)

    threads = [threading.Thread(target=agent, args=(name,)) for name in ("one", "two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(kinds) == 12
    assert kinds.count(None) == 7 and kinds.count("limit_exceeded") == 5
    assert limits.calls == 7


@pytest.mark.parametrize(
    "args",
    [
        {"query": float("nan")},
        {"query": {1, 2}},
        {"query": "x", "extra": object()},
        '{"query": NaN}',
        '{"query": "' + "x" * 1_000_000 + '"}',
    ],
    ids=["nan", "set", "object", "nan-text", "megabyte"],
)
async def test_the_repeat_guard_takes_any_arguments_without_crashing(args: Any) -> None:
    executor = ts.Executor([search])
    limits = ts.Limits(max_repeats=1, max_model_retries=10)
    first = await executor.run([ts.ToolCall("a", "search", args)], limits=limits)
    second = await executor.run([ts.ToolCall("b", "search", args)], limits=limits)
    for outcome in (first, second):
        assert len(outcome.results) == 1
    if first.results[0].is_error:
        # Refused as input: never made, so it is not a repeat; the model is told what to fix each time.
        assert first.results[0].error_kind == second.results[0].error_kind == "invalid_input"
    else:
        assert second.results[0].error_kind == "limit_exceeded"
        assert len(second.results[0].error or "") < 1000  # what it returned is previewed, not repeated whole


async def test_recover_counts_the_calls_it_runs_again_and_the_calls_handed_out(store: Store) -> None:
    # A crashed run left f1 and f2 started (idempotent: recover runs them again), e1 handed out, and f3 never
    # admitted. The calls recover runs again and the call handed out were made in this run: with max_calls=3
    # they use up the budget, and f3 is answered limit_exceeded instead of being a fourth call.
    ran: list[int] = []

    @ts.tool(idempotent=True)
    async def fetch(page: int) -> str:
        """Fetches a page."""
        ran.append(page)
        return f"page {page}"

    calls = [
        ts.ToolCall("f1", "fetch", {"page": 1}),
        ts.ToolCall("e1", "confirm", {"order": "A-1"}),
        ts.ToolCall("f2", "fetch", {"page": 2}),
        ts.ToolCall("f3", "fetch", {"page": 3}),
    ]
    async with store.open() as journal:
        executor = ts.Executor([fetch, confirm], strategy=ts.Sequential(), journal=journal)
        outcome = await executor.run(calls[:2], run_id="handed")
        assert [p.call_id for p in outcome.pending] == ["e1"]
        handed_out = (await journal.load("handed")).call("e1").run_with
    async with store.open(owner="crashed") as crashed:
        await crashed.begin_run("limited", calls)
        await crashed.record("limited", "f1", "started", {"args": {"page": 1}})
        await crashed.record("limited", "e1", "started", handed_out)
        await crashed.record("limited", "f2", "started", {"args": {"page": 2}})
    ran.clear()
    limits = ts.Limits(max_calls=3)
    async with store.open() as journal:
        executor = ts.Executor([fetch, confirm], strategy=ts.Sequential(), journal=journal)
        recovered = await executor.recover("limited", force=True, limits=limits)
    assert [(r.call_id, r.error_kind) for r in recovered.results] == [
        ("f1", None),
        ("f2", None),
        ("f3", "limit_exceeded"),
    ]
    assert [p.call_id for p in recovered.pending] == ["e1"]
    assert ran == [1, 2] and limits.calls == 3


async def test_runs_sharing_a_limits_with_the_same_call_ids_are_each_told_their_own_answer() -> None:
    # Two conversations share one budget and both name their first call "call_0" (as some servers do): each
    # run's answer is taken as its own, and a later repeat is told what that very call returned.
    inside: list[str] = []
    both = anyio.Event()

    @ts.tool(read_only=True, concurrency_safe=True)
    async def lookup(query: str) -> str:
        """Looks a word up."""
        inside.append(query)
        if len(inside) == 2:
            both.set()
        await both.wait()
        return f"{query} is a language"

    executor = ts.Executor([lookup])
    limits = ts.Limits(max_repeats=1)

    async def conversation(query: str) -> None:
        await executor.run([ts.ToolCall("call_0", "lookup", {"query": query})], limits=limits)

    async with anyio.create_task_group() as group:
        for query in ("rust", "go"):
            group.start_soon(conversation, query)
    for query in ("rust", "go"):
        again = await executor.run([ts.ToolCall("call_1", "lookup", {"query": query})], limits=limits)
        assert again.results[0].error_kind == "limit_exceeded"
        assert (again.results[0].error or "").endswith(f"it returned: {query} is a language")
    assert limits.calls == 2


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


class _Unshowable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


OUTPUTS: dict[str, Any] = {
    "huge-int": 10**5000,
    "nested": _nested(5000),
}


@pytest.mark.parametrize("kind", list(OUTPUTS))
async def test_a_repeat_of_a_call_whose_output_repr_cannot_show_is_answered(kind: str) -> None:
    # A calculator's factorial(2000) has 5,736 digits, past what Python turns into text: with a Limits, the
    # run raised ValueError (RecursionError for a deeply nested value) while noting what the call returned, and
    # every result of the turn was lost. The output is the tool's; the repeat is told its type.
    @ts.tool
    async def compute(what: str) -> Any:
        """Computes."""
        return OUTPUTS[what]

    executor = ts.Executor([compute])
    limits = ts.Limits(max_repeats=1)
    first = await executor.run([ts.ToolCall("a", "compute", {"what": kind})], limits=limits)
    again = await executor.run([ts.ToolCall("b", "compute", {"what": kind})], limits=limits)
    assert first.results[0].output is OUTPUTS[kind]
    assert again.results[0].error_kind == "limit_exceeded"
    assert "that cannot be shown" in (again.results[0].error or "")


@pytest.mark.parametrize("output", [10**5000, _nested(5000), _Unshowable()], ids=["huge-int", "nested", "repr-raises"])
async def test_an_external_answer_repr_cannot_show_resumes(output: Any) -> None:
    # The same, for an external call answered on the state: resume raised instead of delivering the answer.
    executor = ts.Executor([confirm])
    outcome = await executor.run([ts.ToolCall("c1", "confirm", {"order": "A-1"})])
    state = outcome.state
    assert state is not None
    state.complete("c1", output=output)
    resumed = await executor.resume(state)
    (result,) = resumed.results
    if isinstance(output, _Unshowable):
        # Shaped as a tool body's output would be: its text cannot be made.
        assert result.error_kind == "execution_error" and "could not be shaped" in (result.error or "")
    else:
        assert result.output is output


def test_approved_arguments_nested_past_the_recursion_limit_are_refused_readably() -> None:
    # approve(args=...) raises OptionError for arguments that are not JSON; nested past the recursion limit
    # they raised RecursionError.
    @ts.tool(needs_approval=True)
    async def deploy(target: Any) -> str:
        """Deploys."""
        return "deployed"

    async def main() -> ts.RunState:
        outcome = await ts.Executor([deploy]).run([ts.ToolCall("c1", "deploy", {"target": "prod"})])
        assert outcome.state is not None
        return outcome.state

    state = anyio.run(main)
    with pytest.raises(ts.OptionError, match="must be JSON"):
        state.approve("c1", args={"target": _nested(5000)})
    state.approve("c1", args={"target": "staging"})
