"""``_core.stepper``: the coroutine of a stepped call's task, stepped by hand and by an asyncio task."""

from __future__ import annotations

import asyncio
import gc
import types
import weakref
from collections.abc import Coroutine, Generator
from typing import Any

import pytest

from toolsched._core import Stepper, stepper


@types.coroutine
def pause(value: Any = None) -> Generator[Any, Any, Any]:
    return (yield value)


class OpenLoop:
    """An event loop as a stepper asks it (``abandon_closed``): never closed."""

    def is_closed(self) -> bool:
        return False


LOOP = OpenLoop()


class Calls:
    """Records what a stepper asks and tells; ``begin`` gives ``coroutine`` (or None)."""

    def __init__(self, coroutine: Coroutine[Any, Any, Any] | None) -> None:
        self.coroutine = coroutine
        self.begun: list[Any] = []
        self.ended: list[tuple[Any, Any, Any, float]] = []

    def begin(self, job: Any) -> Coroutine[Any, Any, Any] | None:
        self.begun.append(job)
        return self.coroutine

    def end(self, job: Any, output: Any, error: Any, milliseconds: float) -> None:
        self.ended.append((job, output, error, milliseconds))


async def two_steps(closed: list[str] | None = None) -> str:
    try:
        received = await pause("first")
        return f"got {received}"
    finally:
        if closed is not None:
            closed.append("finally")


def test_the_first_step_begins_the_call_and_the_last_one_ends_it() -> None:
    calls = Calls(two_steps())
    coroutine = stepper(calls, "job", LOOP)
    assert isinstance(coroutine, Stepper) and isinstance(coroutine, Coroutine)
    assert not gc.is_tracked(coroutine)
    assert not coroutine.begun and calls.begun == []
    assert coroutine.send(None) == "first"
    assert coroutine.begun and calls.begun == ["job"] and coroutine.cr_suspended
    with pytest.raises(StopIteration) as stop:
        coroutine.send("a value")
    assert stop.value.value is None
    [(job, output, error, milliseconds)] = calls.ended
    assert (job, output, error) == ("job", "got a value", None)
    assert milliseconds >= 0
    # Ended: it holds nothing, and cannot be stepped again.
    assert coroutine.cr_frame is None
    with pytest.raises(RuntimeError, match="cannot reuse"):
        coroutine.send(None)


def test_what_the_tool_raises_is_handed_to_end_and_the_task_ends_well() -> None:
    async def fails() -> None:
        await pause()
        raise ValueError("broken")

    calls = Calls(fails())
    coroutine = stepper(calls, "job", LOOP)
    coroutine.send(None)
    with pytest.raises(StopIteration):
        coroutine.send(None)
    [(_, output, error, _)] = calls.ended
    assert output is None and type(error) is ValueError and str(error) == "broken"


def test_an_exception_thrown_in_goes_to_the_tool_whose_end_is_handed_on() -> None:
    calls = Calls(two_steps())
    coroutine = stepper(calls, "job", LOOP)
    coroutine.send(None)
    with pytest.raises(StopIteration):
        coroutine.throw(asyncio.CancelledError("stop"))
    [(_, output, error, _)] = calls.ended
    assert output is None and type(error) is asyncio.CancelledError


def test_thrown_in_before_the_first_step_the_call_never_begins() -> None:
    tool = two_steps()
    calls = Calls(tool)
    coroutine = stepper(calls, "job", LOOP)
    with pytest.raises(asyncio.CancelledError):
        coroutine.throw(asyncio.CancelledError())
    assert calls.begun == [] and calls.ended == []
    assert coroutine.begun
    tool.close()


def test_a_call_that_does_not_run_ends_the_task_at_its_first_step() -> None:
    calls = Calls(None)
    coroutine = stepper(calls, "job", LOOP)
    with pytest.raises(StopIteration):
        coroutine.send(None)
    assert calls.begun == ["job"] and calls.ended == []


def test_closed_after_it_began_the_tool_is_closed_and_the_call_ends_with_generator_exit() -> None:
    closed: list[str] = []
    calls = Calls(two_steps(closed))
    coroutine = stepper(calls, "job", LOOP)
    coroutine.send(None)
    coroutine.close()
    assert closed == ["finally"]
    [(_, output, error, _)] = calls.ended
    assert output is None and type(error) is GeneratorExit
    coroutine.close()  # twice: nothing more
    assert len(calls.ended) == 1


def test_closed_before_it_began_nothing_is_asked_or_told() -> None:
    tool = two_steps()
    calls = Calls(tool)
    coroutine = stepper(calls, "job", LOOP)
    coroutine.close()
    assert calls.begun == [] and calls.ended == []
    tool.close()


def test_a_failing_begin_raises_from_the_step() -> None:
    class Failing(Calls):
        def begin(self, job: Any) -> None:
            raise KeyError("begin")

    coroutine = stepper(Failing(None), "job", LOOP)
    with pytest.raises(KeyError):
        coroutine.send(None)


def test_throw_takes_a_type_and_a_value_as_a_coroutine_does() -> None:
    calls = Calls(two_steps())
    coroutine = stepper(calls, "job", LOOP)
    coroutine.send(None)
    with pytest.raises(StopIteration):
        coroutine.throw(ValueError, "as a value")
    [(_, _, error, _)] = calls.ended
    assert type(error) is ValueError and str(error) == "as a value"
    with pytest.raises(TypeError):
        stepper(Calls(None), "job", LOOP).throw()


def test_it_cannot_be_made_but_by_stepper() -> None:
    with pytest.raises(TypeError):
        Stepper()  # type: ignore[call-arg]


def test_as_a_task_it_ends_with_the_call_and_leaves_nothing_for_the_collector() -> None:
    class Marker:
        pass

    markers: list[weakref.ref[Marker]] = []

    async def keeps_its_task() -> str:
        marker = Marker()
        markers.append(weakref.ref(marker))
        task = asyncio.current_task()
        await asyncio.sleep(0)
        return f"{type(marker).__name__} {task is not None}"

    async def main() -> list[tuple[Any, Any, Any, float]]:
        calls = Calls(keeps_its_task())
        task = asyncio.get_running_loop().create_task(stepper(calls, "job", asyncio.get_running_loop()))  # type: ignore[arg-type]
        assert await task is None
        return calls.ended

    gc.disable()
    try:
        [(_, output, error, _)] = asyncio.run(main())
        # The tool's frame held its task, and the task holds the stepper: the stepper let go of the frame as the
        # call ended, so reference counting alone freed it, with no collection.
        assert markers[0]() is None
    finally:
        gc.enable()
    assert (output, error) == ("Marker True", None)
