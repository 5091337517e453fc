"""Attacks on idempotency keys: a process killed inside a nested run's call and recovered in another process,
copies of a paused state, two executors with runs of the same call IDs. A key is the same for every attempt
of one call, wherever it runs, and different for every other call."""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from attacks_child import CHILD, executor, keys
from journal_child import Store, store_in
from test_external_attacks import child_env

import toolsched as ts

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from store_in(request.param, tmp_path, "idempotency_attacks")


async def killed_inside(store: Store, backend: str, run_id: str, world: Path, point: str) -> None:
    command = [sys.executable, str(CHILD), store.spec(), backend, "nested", run_id, str(world), point]
    process = await anyio.open_process(command, env=child_env(), stderr=None)
    try:
        assert process.stdout is not None
        lines = BufferedByteReceiveStream(process.stdout)
        with anyio.fail_after(60):
            while (line := (await lines.receive_until(b"\n", 65536)).decode()) != point:
                assert not line.startswith("done"), f"finished before {point!r}"
        process.kill()
        with anyio.fail_after(30):
            await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()
        await process.aclose()


@pytest.mark.parametrize("point", ["inside k0", "inside k1", "inside k2"])
async def test_a_nested_call_killed_and_recovered_elsewhere_sends_the_key_it_sent_before(
    store: Store, anyio_backend: str, tmp_path: Path, point: str
) -> None:
    # The parent call is idempotent: recover runs it again, in this process, and its nested run makes its
    # calls again. Each sends the key it sent in the killed process, so the downstream drops the repeats.
    world = tmp_path / "world"
    world.mkdir()
    await killed_inside(store, anyio_backend, "nested-keys", world, point)
    before = dict(keys(world))
    killed = point.split()[1]
    assert killed in before
    async with store.open() as journal:
        recovered = await executor(journal).recover("nested-keys", context=str(world), force=True)
    assert [(r.call_id, r.output) for r in recovered.results] == [("p1", "charged 10, charged 20, charged 30")]
    sent = keys(world)
    assert {call_id for call_id, _ in sent} == {"k0", "k1", "k2"}
    by_call: dict[str, set[str]] = {}
    for call_id, key in sent:
        by_call.setdefault(call_id, set()).add(key)
    # One key per nested call, the same in both processes; three calls, three keys.
    assert all(len(sent_keys) == 1 for sent_keys in by_call.values()), sent
    assert {call_id: next(iter(k)) for call_id, k in by_call.items() if call_id in before} == before
    assert len({next(iter(k)) for k in by_call.values()}) == 3


@ts.tool(external=True)
def confirm(order: str) -> str:
    """Asks the customer to confirm an order (answered from outside)."""


async def test_copies_of_a_paused_state_keep_its_keys_and_other_runs_get_others() -> None:
    executor_one, executor_two = ts.Executor([confirm]), ts.Executor([confirm])
    calls = [ts.ToolCall("c1", "confirm", {"order": "A"}), ts.ToolCall("c2", "confirm", {"order": "A"})]
    outcome = await executor_one.run(calls)
    state = outcome.state
    assert state is not None
    handed = {p.call_id: p.idempotency_key for p in outcome.pending if isinstance(p, ts.ExternalCall)}
    copies = [state.copy(), copy.copy(state), copy.deepcopy(state), ts.RunState.from_json(state.to_json())]
    for twin in copies:
        assert {p.call_id: p.idempotency_key for p in twin.pending if isinstance(p, ts.ExternalCall)} == handed
    # The same calls, by the same IDs, in another run (another executor or the same one): other keys.
    for other in (await executor_two.run(calls), await executor_one.run(calls)):
        assert not {p.idempotency_key for p in other.pending if isinstance(p, ts.ExternalCall)} & set(handed.values())
    assert len(set(handed.values())) == 2
