"""Attacks on ``ts.MalformedCallError``: a call whose fields cannot be what a ToolCall holds is refused with the
typed error naming the field and the rule, whether it is made directly or handed to the executor; never a bare
exception of the caller's objects."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

import toolsched as ts


class Unreadable(Mapping[str, Any]):
    """A mapping whose items cannot be read (one key it fails to give)."""

    def __init__(self, fails_in: str) -> None:
        self.fails_in = fails_in

    def __getitem__(self, key: str) -> Any:
        if self.fails_in == "getitem":
            raise RuntimeError("the store is gone")
        return 1

    def __iter__(self) -> Iterator[str]:
        if self.fails_in == "iter":
            raise RuntimeError("the store is gone")
        return iter(["a"])

    def __len__(self) -> int:
        return 1


@pytest.mark.parametrize("fails_in", ["getitem", "iter"])
def test_arguments_that_cannot_be_read_are_a_malformed_call(fails_in: str) -> None:
    """A mapping of another kind is copied into the dict the engine reads: one whose reading raised left the
    ToolCall as that bare RuntimeError, though ``MalformedCallError`` is the error of an unusable field."""
    with pytest.raises(
        ts.MalformedCallError, match=r"ToolCall\.args .*Unreadable raised RuntimeError: the store is gone"
    ):
        ts.ToolCall("c1", "read", Unreadable(fails_in))
    # Still caught by either built-in, as every MalformedCallError is.
    with pytest.raises(ValueError):
        ts.ToolCall("c1", "read", Unreadable(fails_in))


@pytest.mark.anyio
@pytest.mark.parametrize("fails_in", ["getitem", "iter"])
async def test_a_call_whose_arguments_cannot_be_read_is_refused_by_position(fails_in: str) -> None:
    """A ToolCall subclass handing over such arguments: the run is refused with the call's position named."""

    class Lazy(ts.ToolCall):
        __slots__ = ()

        @property
        def args(self) -> Any:
            return Unreadable(fails_in)

    @ts.tool(name="read")
    async def read(a: int = 0) -> str:
        return "read"

    calls = [ts.ToolCall("c0", "read", {}), Lazy("c1", "read", {})]
    with pytest.raises(ts.MalformedCallError, match=r"^calls\[1\]: ToolCall\.args .*RuntimeError: the store is gone"):
        await ts.Executor([read]).run(calls)


class Truthy(str):
    """Text that claims to be non-empty whatever it holds."""

    def __bool__(self) -> bool:
        return True

    def __len__(self) -> int:
        return 1


def test_an_empty_id_that_claims_to_be_text_is_refused() -> None:
    """An ID is kept as the plain text it holds; the empty-ID rule asked the subclass (``not id``), which said it was
    not empty: the call was made with the ID "" and answered under it."""
    with pytest.raises(ts.MalformedCallError, match=r"ToolCall\.id must be a non-empty string"):
        ts.ToolCall(Truthy(""), "read", {})
    assert ts.ToolCall(Truthy("c1"), "read", {}).id == "c1"


@pytest.mark.anyio
async def test_a_subclass_handing_over_such_an_id_is_refused_by_position() -> None:
    class Claimed(ts.ToolCall):
        __slots__ = ()

        @property
        def id(self) -> Any:
            return Truthy("")

    @ts.tool(name="read")
    async def read() -> str:
        return "read"

    with pytest.raises(ts.MalformedCallError, match=r"^calls\[0\]: ToolCall\.id must be a non-empty string"):
        await ts.Executor([read]).run([Claimed("c0", "read", {})])
