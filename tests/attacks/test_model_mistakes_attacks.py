"""Attacks on what docs/concepts/argument-repair.md and model-mistakes.md promise about the model's mistakes: a
repair function of your own that is plain (not async) and slow, or that returns what it should not; repaired
calls meeting the repeat guard; arguments of other types than documented (subclasses of str and dict, bools for
integers, numbers past 64 bits); option values of the wrong type for the budgets."""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio


@ts.tool(timeout=0.5)
async def pick(n: int) -> int:
    """Picks a number."""
    return n


@ts.tool(read_only=True, concurrency_safe=True)
async def search(query: str) -> str:
    """Searches."""
    return f"found {query}"


class Text(str):
    """A str subclass (what some SDKs hand out)."""


class Args(dict[str, Any]):
    """A dict subclass."""


class View(Mapping[str, Any]):
    """A read-only mapping that is no dict."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


# -- a repair function of your own ---------------------------------------------------------------------


async def test_a_plain_repair_function_is_bounded_by_the_tools_timeout(anyio_backend: str) -> None:
    """Promise: "A function that ... gives no answer within the tool's timeout leaves the call answered as it
    was", for a function "plain or async". A plain function that blocks past the 0.5 s timeout (a model asked
    synchronously) answered long after it, and its arguments were taken as if it had been on time."""
    release = threading.Event()

    def slow(call: ts.ToolCall, error: ts.ToolResult) -> dict[str, Any]:
        release.wait(30)
        return {"n": 1}

    executor = ts.Executor([pick], repair_arguments=slow)
    try:
        result = (await executor.run([ts.ToolCall("a", "pick", "one, please")])).results[0]
    finally:
        release.set()
    assert (result.error_kind, result.repaired, result.output) == ("invalid_input", False, None)
    assert "no answer within the 0.5 s timeout of `pick`" in (result.error or "")


async def test_the_calls_of_a_turn_are_repaired_concurrently_by_a_plain_function(anyio_backend: str) -> None:
    """Promise: "The calls of one turn that need it are repaired concurrently". Each call's plain repair function
    waits until the other's has started: called one after the other, the first waited alone until its barrier
    broke and both calls stayed unrepaired."""
    both = threading.Barrier(2)

    def meet(call: ts.ToolCall, error: ts.ToolResult) -> dict[str, Any]:
        both.wait(10)
        return {"query": str(call.args)}

    executor = ts.Executor([search], repair_arguments=meet)
    outcome = await executor.run([ts.ToolCall("a", "search", "rust?"), ts.ToolCall("b", "search", "go?")])
    assert [(result.output, result.repaired) for result in outcome.results] == [
        ("found rust?", True),
        ("found go?", True),
    ]


async def test_a_plain_repair_function_sees_the_call_and_its_error_and_may_return_a_coroutine(
    anyio_backend: str,
) -> None:
    """A plain callable that hands back an awaitable (a lambda around an async function) still repairs."""

    async def ask(call: ts.ToolCall) -> dict[str, Any]:
        return {"n": len(str(call.args))}

    seen: list[str] = []

    def hand_off(call: ts.ToolCall, error: ts.ToolResult) -> Any:
        seen.append(error.error_kind or "")
        return ask(call)

    executor = ts.Executor([pick], repair_arguments=hand_off)
    result = (await executor.run([ts.ToolCall("a", "pick", "seven")])).results[0]
    assert (result.output, result.repaired, seen) == (5, True, ["invalid_input"])


@pytest.mark.parametrize(
    ("given", "note"),
    [
        ([1], "returned a list"),
        (b'{"n": 3}', "returned a bytes"),
        ({"n": float("nan")}, "NaN"),
        ({1: 2}, "keys must be strings"),
        ({"n": 10**30}, "64-bit"),
        ({"n": {1}}, "`set`"),
        ({"n": True}, "not of type"),
    ],
    ids=["list", "bytes", "nan", "int-key", "huge", "set", "bool"],
)
async def test_what_a_repair_function_must_not_return_leaves_the_call_answered(
    anyio_backend: str, given: Any, note: str
) -> None:
    """Promise: a function that "returns anything else" leaves the call answered as it was, and arguments that
    still fail the schema answer it `invalid_input`: the call is never lost, never a crash."""

    async def fix(call: ts.ToolCall, error: ts.ToolResult) -> Any:
        return given

    executor = ts.Executor([pick], repair_arguments=fix)
    result = (await executor.run([ts.ToolCall("a", "pick", "garbage")])).results[0]
    assert (result.error_kind, result.repaired) == ("invalid_input", False)
    assert note in (result.error or "")


@pytest.mark.parametrize("given", [Text('{"n": 3}'), Args(n=3), View({"n": 3})], ids=["str-sub", "dict-sub", "view"])
async def test_a_repair_function_may_return_subclasses_of_str_and_dict(anyio_backend: str, given: Any) -> None:
    """Promise: returned text is read as the model's own, a returned dict is validated as it is: a subclass of
    either (or any mapping) is one."""

    async def fix(call: ts.ToolCall, error: ts.ToolResult) -> Any:
        return given

    executor = ts.Executor([pick], repair_arguments=fix)
    result = (await executor.run([ts.ToolCall("a", "pick", "garbage")])).results[0]
    assert (result.output, result.repaired) == (3, True)


# -- repaired calls and the repeat guard ---------------------------------------------------------------


async def test_a_repaired_call_is_a_repeat_of_the_same_valid_call(anyio_backend: str) -> None:
    """Promise: the same call is the tool and its canonical arguments, "the spelling of the JSON does not
    matter": text that needed repair is the same call as the valid one it repairs to."""
    executor = ts.Executor([search], repair_arguments=True)
    limits = ts.Limits(max_repeats=1)
    first = await executor.run([ts.ToolCall("a", "search", {"query": "rust"})], limits=limits)
    again = await executor.run([ts.ToolCall("b", "search", "```json\n{'query': 'rust',}\n```")], limits=limits)
    assert first.results[0].output == "found rust"
    assert (again.results[0].error_kind, again.results[0].repaired) == ("limit_exceeded", True)
    assert (again.results[0].error or "").endswith("it returned: found rust")


@pytest.mark.parametrize(
    "args",
    [Args(query="x"), {Text("query"): Text("x")}, View({"query": "x"})],
    ids=["dict-sub", "str-sub", "mapping"],
)
async def test_arguments_of_subclassed_types_are_the_same_call_for_the_repeat_guard(
    anyio_backend: str, args: Any
) -> None:
    executor = ts.Executor([search])
    limits = ts.Limits(max_repeats=1)
    first = await executor.run([ts.ToolCall("a", "search", args)], limits=limits)
    again = await executor.run([ts.ToolCall("b", "search", {"query": "x"})], limits=limits)
    assert first.results[0].output == "found x"
    assert again.results[0].error_kind == "limit_exceeded"


# -- types other than documented -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "output"),
    [
        ({"n": True}, None),
        ('{"n": "true"}', None),
        ('{"n": "-7"}', -7),
        ('{"n": "18446744073709551615"}', 18446744073709551615),
        ('{"n": "18446744073709551616"}', None),
        ('{"n": "1e400"}', None),
        ('{"n": 1e400}', None),
        ({"n": 10**400}, None),
        ('{"n": "NaN"}', None),
    ],
    ids=["bool", "bool-text", "negative-text", "u64-text", "past-u64-text", "inf-text", "inf-json", "huge", "nan"],
)
async def test_numbers_at_the_edges_are_repaired_only_to_what_the_schema_takes(
    anyio_backend: str, args: Any, output: int | None
) -> None:
    """Promise: a number sent as a string is repaired where the schema wants an integer; a bool is no integer,
    and what no 64-bit integer holds is refused readably (`invalid_input`), never a crash."""
    executor = ts.Executor([pick], repair_arguments=True)
    result = (await executor.run([ts.ToolCall("a", "pick", args)])).results[0]
    assert result.output == output, result.error
    if output is None:
        assert result.error_kind == "invalid_input" and result.error


class Two(enum.IntEnum):
    TWO = 2


@pytest.mark.parametrize("value", [True, 2.0, -1, "3", float("inf"), 10**30])
def test_budgets_of_the_wrong_type_are_refused(value: Any) -> None:
    """Promise: each cap is None or a whole number of at least 0; anything else raises OptionError (a bool is
    no whole number), and a tool's max_model_retries likewise raises ToolDefinitionError."""
    with pytest.raises(ts.OptionError):
        ts.Limits(max_model_retries=value)
    with pytest.raises(ts.OptionError):
        ts.Limits(max_calls_per_tool={"search": value})

    def body(n: int) -> int:
        """Picks."""
        return n

    with pytest.raises(ts.ToolDefinitionError):
        ts.Executor([ts.tool(name="budgeted", max_model_retries=value)(body)])


async def test_an_int_enum_is_a_whole_number_budget(anyio_backend: str) -> None:
    limits = ts.Limits(max_calls=Two.TWO)
    executor = ts.Executor([search])
    outcome = await executor.run([ts.ToolCall(f"c{i}", "search", {"query": str(i)}) for i in range(3)], limits=limits)
    assert [result.error_kind for result in outcome.results] == [None, None, "limit_exceeded"]


@pytest.mark.timeout(60)
def test_a_turn_cancelled_while_a_plain_repair_function_runs_ends(anyio_backend: str) -> None:
    """A plain repair function still running when its turn is cancelled is abandoned: the turn ends at once
    (it does not wait for the function, which here returns only once the test is over)."""
    import anyio

    started, release = threading.Event(), threading.Event()

    def stuck(call: ts.ToolCall, error: ts.ToolResult) -> dict[str, Any]:
        started.set()
        release.wait()
        return {"query": "late"}

    @ts.tool
    async def open_ended(query: str) -> str:
        """No timeout: only the caller's cancellation ends the repair."""
        return query

    executor = ts.Executor([open_ended], repair_arguments=stuck)

    async def main() -> bool:
        with anyio.move_on_after(0.3) as scope:
            await executor.run([ts.ToolCall("a", "open_ended", "late?")])
        return scope.cancelled_caught

    try:
        assert anyio.run(main, backend=anyio_backend)
        assert started.is_set()
    finally:
        release.set()


@pytest.mark.parametrize(
    ("first", "again"),
    [
        ({"n": 1}, {"n": 1.0}),
        ({"n": 1}, '{"n": 1.0}'),
        ({"n": 100}, '{"n": 1e2}'),
        ('{"n": 0}', '{"n": -0.0}'),
        ({"n": 7, "tags": [1, 2]}, '{"tags": [1.0, 2e0], "n": 7}'),
    ],
    ids=["float", "float-text", "exponent", "negative-zero", "nested"],
)
async def test_a_number_spelled_another_way_is_the_same_call_for_the_repeat_guard(
    anyio_backend: str, first: Any, again: Any
) -> None:
    """Promise: "the same call (tool and canonical arguments: key order and the spelling of the JSON do not
    matter)". The tool ran twice with the very same integer, the second call spelling it 1.0 or 1e2: the
    model stepped past max_repeats by respelling a number."""
    ran: list[Any] = []

    @ts.tool
    async def page(n: int, tags: list[int] | None = None) -> str:
        """Reads a page."""
        ran.append((n, tags))
        return f"page {n}"

    executor = ts.Executor([page])
    limits = ts.Limits(max_repeats=1)
    made = await executor.run([ts.ToolCall("a", "page", first)], limits=limits)
    repeat = await executor.run([ts.ToolCall("b", "page", again)], limits=limits)
    assert made.results[0].output is not None, made.results[0].error
    assert repeat.results[0].error_kind == "limit_exceeded"
    assert len(ran) == 1


@pytest.mark.parametrize(
    ("first", "again"),
    [({"n": 1}, {"n": True}), ({"n": 1}, {"n": 1.5}), ({"n": 1}, {"n": "1"})],
    ids=["bool", "fraction", "string"],
)
async def test_values_that_differ_are_not_repeats(anyio_backend: str, first: Any, again: Any) -> None:
    """The other side: a bool, another number, or a string is another value, not a repeat (whatever the tool
    then makes of it)."""

    @ts.tool
    async def any_value(n: Any) -> str:
        """Takes anything."""
        return repr(n)

    executor = ts.Executor([any_value])
    limits = ts.Limits(max_repeats=1)
    await executor.run([ts.ToolCall("a", "any_value", first)], limits=limits)
    other = await executor.run([ts.ToolCall("b", "any_value", again)], limits=limits)
    assert other.results[0].error_kind is None, other.results[0].error
