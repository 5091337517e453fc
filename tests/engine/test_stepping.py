"""``run_until_suspended``: a call's coroutine stepped by hand as a task would step it."""

from __future__ import annotations

import asyncio
import contextvars
import types
from collections.abc import Generator
from typing import Any

import pytest

from toolsched import _core
from toolsched.fastpath import run_until_suspended

seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="unset")


async def sets_and_returns(value: str) -> str:
    seen.set(value)
    return value


@types.coroutine
def pause(value: Any = None) -> Generator[Any, Any, Any]:
    return (yield value)


async def sets_then_waits(value: str) -> str:
    seen.set(value)
    received = await pause("yielded")
    return f"{value}:{received}:{seen.get()}"


async def raises(error: BaseException) -> None:
    seen.set("raised")
    raise error


def test_a_coroutine_that_finishes_in_one_step_gives_none_and_keeps_its_context_changes() -> None:
    seen.set("caller")
    coroutine = sets_and_returns("call")
    assert run_until_suspended(coroutine) is None
    assert seen.get() == "caller"
    with pytest.raises(RuntimeError, match="cannot reuse already awaited coroutine"):
        coroutine.send(None)


def test_a_coroutine_that_waits_is_resumed_in_its_own_copy_of_the_context() -> None:
    seen.set("caller")
    coroutine = sets_then_waits("call")
    suspended = run_until_suspended(coroutine)
    assert suspended is not None
    assert seen.get() == "caller"

    async def finish() -> Any:
        return await suspended

    # The rest runs as an awaitable of the caller's: what was yielded goes to the event loop,
    # and the coroutine sees its own value of the variable when it resumes.
    driver = finish()
    assert driver.send(None) == "yielded"
    with pytest.raises(StopIteration) as finished:
        driver.send("sent")
    assert finished.value.value == "call:sent:call"
    assert seen.get() == "caller"


@pytest.mark.parametrize("error", [ValueError("bad"), KeyboardInterrupt(), asyncio.CancelledError(), StopIteration()])
def test_what_a_coroutine_raises_comes_out_and_leaves_no_context_entered(error: BaseException) -> None:
    seen.set("caller")
    base = contextvars.copy_context()
    expected = RuntimeError if isinstance(error, StopIteration) else type(error)  # PEP 479
    with pytest.raises(expected):
        run_until_suspended(raises(error), base)
    assert seen.get() == "caller"
    # Neither context is left entered: both can be entered again.
    base.run(seen.set, "again")
    assert base.run(seen.get) == "again"
    assert run_until_suspended(sets_and_returns("next")) is None


def test_a_base_context_is_copied_not_entered() -> None:
    base = contextvars.copy_context()
    base.run(seen.set, "base")
    coroutine = sets_then_waits("call")
    suspended = run_until_suspended(coroutine, base)
    assert suspended is not None
    assert base.run(seen.get) == "base"
    coroutine.close()


def test_steps_nest_and_the_engine_refuses_what_is_not_a_context() -> None:
    async def outer() -> str:
        inner = run_until_suspended(sets_and_returns("inner"))
        assert inner is None
        return seen.get()

    assert run_until_suspended(outer()) is None
    finished = object()
    unstarted = sets_and_returns("x")
    with pytest.raises(TypeError, match=r"contextvars\.Context"):
        _core.start(unstarted, {"not": "a context"}, finished)
    unstarted.close()
    # A plain generator steps as a coroutine does.
    assert _core.start(iter([1, 2]), None, finished)[0] == 1
    assert _core.start(iter([]), None, finished) is finished


def test_a_returned_value_is_made_only_by_the_engine_and_a_context_is_required() -> None:
    with pytest.raises(TypeError):
        _core.Returned()  # type: ignore[call-arg]
    coroutine = sets_then_waits("call")
    yielded, context = _core.start(coroutine, contextvars.Context(), object())
    assert yielded == "yielded"
    with pytest.raises(TypeError, match=r"contextvars\.Context"):
        _core.send(None, coroutine, "sent")
    # Sent on in the copy it started in, the coroutine sees its own value.
    returned = _core.send(context, coroutine, "sent")
    assert type(returned) is _core.Returned
    assert returned.value == "call:sent:call"
