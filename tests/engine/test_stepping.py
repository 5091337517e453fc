"""``run_until_suspended``: a call's coroutine stepped by hand as a task would step it."""

from __future__ import annotations

import asyncio
import contextvars
import types
from collections.abc import Generator
from typing import Any

import pytest

from toolsched import _core
from toolsched._values.fastpath import run_until_suspended

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
    unstarted = sets_and_returns("x")
    with pytest.raises(TypeError, match=r"contextvars\.Context"):
        _core.start(unstarted, {"not": "a context"})  # type: ignore[arg-type]
    unstarted.close()
    # A plain generator steps as a coroutine does.
    suspended = _core.start(iter([1, 2]))  # type: ignore[arg-type]
    assert suspended is not None and list(suspended) == [1, 2]
    assert _core.start(iter([])) is None  # type: ignore[arg-type]


def test_a_resume_is_made_only_by_the_engine() -> None:
    with pytest.raises(TypeError):
        _core.Resume()


def drive(awaitable: Any) -> Generator[Any, Any, Any]:
    """A coroutine of the caller's awaiting ``awaitable``: what the event loop would drive."""

    async def awaiting() -> Any:
        return await awaitable

    return awaiting().__await__()


def test_values_sent_in_reach_the_coroutine_and_its_return_value_ends_the_await() -> None:
    # trio sends values into a task's coroutine (asyncio only ever None): each reaches the coroutine.
    async def echoes() -> list[Any]:
        got = [await pause("first")]
        got.append(await pause("second"))
        return got

    suspended = run_until_suspended(echoes())
    driver = drive(suspended)
    assert driver.send(None) == "first"
    assert driver.send("a") == "second"
    with pytest.raises(StopIteration) as finished:
        driver.send(("b", "tuple"))
    assert finished.value.value == ["a", ("b", "tuple")]


@pytest.mark.parametrize("returned", [None, 0, (1, 2), StopIteration("inner")])
def test_whatever_the_coroutine_returns_is_what_the_await_gives(returned: Any) -> None:
    async def gives() -> Any:
        await pause()
        return returned

    for step in ("next", "send"):
        suspended = run_until_suspended(gives())
        assert suspended is not None
        assert next(suspended) is None  # the first yield, handed on
        with pytest.raises(StopIteration) as finished:
            next(suspended) if step == "next" else suspended.send(None)
        assert finished.value.value is returned


def test_a_throw_reaches_the_coroutine_in_its_own_context() -> None:
    seen.set("caller")

    async def catches() -> str:
        seen.set("call")
        try:
            await pause("waiting")
        except ValueError as error:
            await pause(f"caught {error} in {seen.get()}")
            return "handled"
        return "not thrown"

    suspended = run_until_suspended(catches())
    driver = drive(suspended)
    assert driver.send(None) == "waiting"
    assert driver.throw(ValueError("bad")) == "caught bad in call"
    assert seen.get() == "caller"
    with pytest.raises(StopIteration) as finished:
        driver.send(None)
    assert finished.value.value == "handled"
    # A throw the coroutine does not catch comes out of the await, the context left as it was.
    suspended = run_until_suspended(sets_then_waits("again"))
    driver = drive(suspended)
    driver.send(None)
    with pytest.raises(KeyError):
        driver.throw(KeyError("out"))
    assert seen.get() == "caller"


def test_closing_the_awaiting_coroutine_closes_the_call_in_its_context() -> None:
    seen.set("caller")
    closed: list[str] = []

    async def cleans_up() -> None:
        seen.set("call")
        try:
            await pause("waiting")
        finally:
            closed.append(seen.get())

    suspended = run_until_suspended(cleans_up())
    driver = drive(suspended)
    assert driver.send(None) == "waiting"
    driver.close()
    assert closed == ["call"]
    assert seen.get() == "caller"
    # Closed, the call runs no more: stepping it again says so, as the coroutine itself would.
    with pytest.raises(RuntimeError, match="cannot reuse already awaited coroutine"):
        next(suspended)  # type: ignore[arg-type]


def test_a_resume_stepped_from_inside_its_own_step_is_refused() -> None:
    # The coroutine is running (its context entered): a second step from inside is an error, not a re-entry.
    holder: list[Any] = []

    async def steps_itself() -> None:
        await pause("waiting")
        with pytest.raises(RuntimeError):
            next(holder[0])

    suspended = run_until_suspended(steps_itself())
    holder.append(suspended)
    assert next(suspended) == "waiting"  # type: ignore[arg-type]
    with pytest.raises(StopIteration):
        next(suspended)  # type: ignore[arg-type]


def test_a_cycle_through_a_resume_is_collected() -> None:
    import gc
    import weakref

    class Box:
        resume: Any = None

    async def holds(box: Box) -> None:
        await pause("waiting")

    box = Box()
    coroutine = holds(box)
    box.resume = run_until_suspended(coroutine)
    next(box.resume)
    alive = weakref.ref(box)
    del box, coroutine
    gc.collect()
    assert alive() is None


def test_a_resume_is_awaited_once() -> None:
    """A second awaiter is refused, as a coroutine refuses one, before it steps anything (it stepped the
    coroutine too: on trio that broke the run's cancel scopes)."""
    steps: list[int] = []

    async def counts() -> str:
        for step in range(3):
            await asyncio.sleep(0)
            steps.append(step)
        return "done"

    async def awaits(resume: Any) -> Any:
        return await resume

    async def main() -> tuple[Any, Any]:
        resume = run_until_suspended(counts())
        first = asyncio.ensure_future(awaits(resume))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(awaits(resume))
        with pytest.raises(RuntimeError, match="awaited already"):
            await second
        return await first, list(steps)

    assert asyncio.run(main()) == ("done", [0, 1, 2])


def test_a_resume_answers_sends_as_a_coroutine_does() -> None:
    resume = run_until_suspended(sets_then_waits("v"))
    assert resume is not None
    # Its awaiter's first step sends None; anything else is refused and changes nothing.
    with pytest.raises(TypeError, match="just-started coroutine"):
        resume.send("early")
    assert resume.send(None) == "yielded"
    with pytest.raises(StopIteration) as ended:
        resume.send("late")
    assert ended.value.value == "v:late:v"

    async def nothing() -> None:
        await pause()

    quiet = run_until_suspended(nothing())
    assert quiet is not None and quiet.send(None) is None
    with pytest.raises(StopIteration) as returned:
        quiet.send(None)
    assert returned.value.args == () and returned.value.value is None


def test_a_coroutine_the_engine_cannot_run_is_closed() -> None:
    import warnings

    async def never() -> None:
        raise AssertionError("never runs")

    coroutine = never()
    with pytest.raises(TypeError, match=r"base must be a contextvars\.Context"):
        run_until_suspended(coroutine, {})  # type: ignore[arg-type]
    assert coroutine.cr_frame is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        del coroutine
        import gc

        gc.collect()
