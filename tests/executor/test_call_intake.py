"""A turn's calls are read once, when the executor takes them: what a call says afterwards changes nothing.

The attacks: ``ToolCall`` subclasses whose ``id``, ``name`` or ``args`` answer differently on every read,
change after the call was handed over, raise, or are not text. Every entry path is attacked: ``run`` of
a list, ``run`` of an async iterable, ``stream`` and ``turn().submit``. The promise under attack: one
result per call, in model order, under the call's own ID (the one read when the call was taken), or,
for a call that cannot be read at all, a ``MalformedCallError`` (a ``TypeError``) naming its position;
never a crash of another kind, a lost result or a hang.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio

FIELDS = ("id", "name", "args")


class ShiftingCall(ts.ToolCall):
    """A call whose fields answer from a list of values, the next one on every read (then the last again)."""

    def __init__(self, ids: Sequence[Any], names: Sequence[Any], args: Sequence[Any]) -> None:
        super().__init__("unused", "unused")
        object.__setattr__(self, "values", {"id": list(ids), "name": list(names), "args": list(args)})
        object.__setattr__(self, "reads", dict.fromkeys(FIELDS, 0))

    def _next(self, field: str) -> Any:
        self.reads[field] += 1
        values = self.values[field]
        value = values.pop(0) if len(values) > 1 else values[0]
        if isinstance(value, Exception):
            raise value
        return value

    @property  # type: ignore[override]
    def id(self) -> Any:
        return self._next("id")

    @property  # type: ignore[override]
    def name(self) -> Any:
        return self._next("name")

    @property  # type: ignore[override]
    def args(self) -> Any:
        return self._next("args")


class BoxedCall(ts.ToolCall):
    """A call whose fields live in a mutable box that anyone holding it may change."""

    def __init__(self, box: dict[str, Any]) -> None:
        super().__init__("unused", "unused")
        object.__setattr__(self, "box", box)

    @property  # type: ignore[override]
    def id(self) -> Any:
        return self.box["id"]

    @property  # type: ignore[override]
    def name(self) -> Any:
        return self.box["name"]

    @property  # type: ignore[override]
    def args(self) -> Any:
        return self.box["args"]


def _echo(ran: list[str]) -> ts.Tool:
    @ts.tool
    async def echo(text: str) -> str:
        ran.append(text)
        return text

    return echo


async def _calls(calls: Sequence[ts.ToolCall]) -> AsyncIterator[ts.ToolCall]:
    for call in calls:
        yield call


async def _run_list(executor: ts.Executor, calls: Sequence[ts.ToolCall]) -> ts.Outcome:
    return await executor.run(list(calls))


async def _run_iterable(executor: ts.Executor, calls: Sequence[ts.ToolCall]) -> ts.Outcome:
    return await executor.run(_calls(calls))


async def _stream(executor: ts.Executor, calls: Sequence[ts.ToolCall]) -> ts.Outcome:
    last: Any = None
    async for event in executor.stream(list(calls)):
        last = event
    assert isinstance(last, ts.RunFinished)
    return last.outcome


async def _submit(executor: ts.Executor, calls: Sequence[ts.ToolCall]) -> ts.Outcome:
    async with executor.turn() as turn:
        for call in calls:
            turn.submit(call)
        turn.close()
        return await turn.outcome()


ENTRIES: dict[str, Callable[[ts.Executor, Sequence[ts.ToolCall]], Any]] = {
    "run_list": _run_list,
    "run_iterable": _run_iterable,
    "stream": _stream,
    "submit": _submit,
}


@pytest.mark.parametrize("entry", ENTRIES)
async def test_a_call_whose_fields_change_on_every_read_is_answered_as_first_read(entry: str) -> None:
    """Its second read of ``id`` is the next call's ID: a second look would answer the next call twice."""
    ran: list[str] = []
    shifting = ShiftingCall(["a", "b"], ["echo", "missing"], [{"text": "first"}, {"text": 7}])
    calls = [shifting, ts.ToolCall("b", "echo", {"text": "second"})]
    outcome = await ENTRIES[entry](ts.Executor([_echo(ran)]), calls)
    assert [(r.call_id, r.tool_name, r.output, r.error_kind) for r in outcome.results] == [
        ("a", "echo", "first", None),
        ("b", "echo", "second", None),
    ]
    assert outcome.duplicates == []
    assert ran == ["first", "second"]
    assert shifting.reads == dict.fromkeys(FIELDS, 1)


@pytest.mark.parametrize("entry", ["run_list", "submit"])
async def test_a_call_held_for_approval_is_recorded_as_first_read(entry: str) -> None:
    """The state to resume from holds the call as it was taken, and resuming answers it under that ID."""
    ran: list[str] = []
    shifting = ShiftingCall(["a", "b"], ["echo"], [{"text": "first"}, {"text": "other"}])
    executor = ts.Executor([_echo(ran)], permissions=ts.Permissions(ask=["echo"]))
    outcome = await ENTRIES[entry](executor, [shifting])
    assert outcome.interrupted
    assert [(request.call_id, request.args) for request in outcome.pending] == [("a", {"text": "first"})]
    state = outcome.state
    assert state is not None
    state.approve("a")
    resumed = await executor.resume(state)
    assert [(r.call_id, r.output) for r in resumed.results] == [("a", "first")]
    assert ran == ["first"]


@pytest.mark.parametrize("entry", ENTRIES)
async def test_a_call_changed_by_an_earlier_call_keeps_the_fields_it_was_taken_with(entry: str) -> None:
    """The first call's tool rewrites the second call's ID, name and arguments while the turn runs."""
    box: dict[str, Any] = {"id": "b", "name": "echo", "args": {"text": "second"}}
    ran: list[str] = []

    @ts.tool
    async def tamper() -> str:
        box.update(id="a", name="tamper", args="{}")
        return "tampered"

    executor = ts.Executor([_echo(ran), tamper], strategy=ts.Sequential())
    outcome = await ENTRIES[entry](executor, [ts.ToolCall("a", "tamper"), BoxedCall(box)])
    assert [(r.call_id, r.tool_name, r.output) for r in outcome.results] == [
        ("a", "tamper", "tampered"),
        ("b", "echo", "second"),
    ]
    assert ran == ["second"]


BAD_FIELDS = [
    pytest.param(
        "id",
        RuntimeError("id unavailable"),
        r"reading ShiftingCall\.id raised RuntimeError: id unavailable",
        id="id-raises",
    ),
    pytest.param("id", 5, r"ToolCall\.id must be a non-empty string, got 5", id="id-int"),
    pytest.param("id", "", r"ToolCall\.id must be a non-empty string, got ''", id="id-empty"),
    pytest.param("name", KeyError("name"), r"reading ShiftingCall\.name raised KeyError: 'name'", id="name-raises"),
    pytest.param("name", b"echo", r"ToolCall\.name must be a string, got bytes", id="name-bytes"),
    pytest.param(
        "args", ValueError("no args"), r"reading ShiftingCall\.args raised ValueError: no args", id="args-raises"
    ),
    pytest.param("args", ["text"], r"ToolCall\.args must be a mapping or JSON text, got list", id="args-list"),
]


def _bad_call(field: str, bad: Any) -> ShiftingCall:
    fields: dict[str, list[Any]] = {"id": ["c1"], "name": ["echo"], "args": [{"text": "bad"}]}
    fields[field] = [bad]
    return ShiftingCall(fields["id"], fields["name"], fields["args"])


@pytest.mark.parametrize(("field", "bad", "message"), BAD_FIELDS)
@pytest.mark.parametrize("entry", ["run_list", "stream"])
async def test_a_call_that_cannot_be_read_stops_the_turn_naming_its_position(
    entry: str, field: str, bad: Any, message: str
) -> None:
    """As a call that is no ToolCall at all: the turn is refused before any of its calls runs."""
    ran: list[str] = []
    calls = [ts.ToolCall("c0", "echo", {"text": "fine"}), _bad_call(field, bad)]
    with pytest.raises(ts.MalformedCallError, match=r"^calls\[1\]: " + message + "$"):
        await ENTRIES[entry](ts.Executor([_echo(ran)]), calls)
    assert ran == []


@pytest.mark.parametrize(("field", "bad", "message"), BAD_FIELDS)
async def test_a_streamed_call_that_cannot_be_read_breaks_the_stream_at_its_position(
    field: str, bad: Any, message: str
) -> None:
    """The calls before it are answered (``StreamFailed.outcome``); the error names the call's position."""
    ran: list[str] = []
    calls = [ts.ToolCall("c0", "echo", {"text": "fine"}), _bad_call(field, bad)]
    with pytest.raises(ts.StreamFailed) as raised:
        await _run_iterable(ts.Executor([_echo(ran)]), calls)
    assert isinstance(raised.value.__cause__, ts.MalformedCallError)
    assert re.match(r"^calls\[1\]: " + message + "$", str(raised.value.__cause__))
    assert [result.call_id for result in raised.value.outcome.results] == ["c0"]


@pytest.mark.parametrize(("field", "bad", "message"), BAD_FIELDS)
async def test_submitting_a_call_that_cannot_be_read_is_refused_and_the_turn_goes_on(
    field: str, bad: Any, message: str
) -> None:
    ran: list[str] = []
    async with ts.Executor([_echo(ran)]).turn() as turn:
        turn.submit(ts.ToolCall("c0", "echo", {"text": "fine"}))
        with pytest.raises(ts.MalformedCallError, match=r"^calls\[1\]: " + message + "$"):
            turn.submit(_bad_call(field, bad))
        turn.submit(ts.ToolCall("c1", "echo", {"text": "later"}))
        turn.close()
        outcome = await turn.outcome()
    assert [(r.call_id, r.output) for r in outcome.results] == [("c0", "fine"), ("c1", "later")]
    assert ran == ["fine", "later"]


class _IdentityText(str):
    """Text equal only to itself: a dict keyed by it cannot find an equal ID."""

    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:
        return self is other


@pytest.mark.parametrize("entry", ENTRIES)
async def test_a_repeated_id_in_a_text_subclass_is_a_duplicate_on_every_path(entry: str) -> None:
    ran: list[str] = []
    calls = [
        ts.ToolCall(_IdentityText("a"), "echo", {"text": "first"}),
        ts.ToolCall(_IdentityText("a"), "echo", {"text": "again"}),
    ]
    outcome = await ENTRIES[entry](ts.Executor([_echo(ran)]), calls)
    assert [(r.call_id, r.output) for r in outcome.results] == [("a", "first")]
    assert [(d.call_id, d.index, d.first_index) for d in outcome.duplicates] == [("a", 1, 0)]
    assert all(type(r.call_id) is str for r in outcome.results)
    assert ran == ["first"]


async def test_a_journaled_turn_journals_and_answers_each_call_as_first_read(tmp_path: Any) -> None:
    # The journal is written before the engine plans: it too holds the call as it was first read.
    ran: list[str] = []
    shifting = ShiftingCall(["a", "b", "c", "d", "e", "f"], ["echo"], [{"text": "first"}, {"text": "later"}])
    async with ts.SqliteJournal(tmp_path / "runs.db") as journal:
        executor = ts.Executor([_echo(ran)], journal=journal)
        outcome = await executor.run([shifting, ts.ToolCall("b", "echo", {"text": "second"})], run_id="r1")
        assert [(result.call_id, result.output) for result in outcome.results] == [("a", "first"), ("b", "second")]
        assert ran == ["first", "second"]
        again = await executor.recover("r1")
        assert [(result.call_id, result.output) for result in again.results] == [("a", "first"), ("b", "second")]
    assert ran == ["first", "second"]
