"""External calls after their hand-out: answered on resume or recover, timed out, or still waiting; and answered
through a journal from any process (``Executor.complete`` / ``fail``).

A call of an external tool is handed out once (``call.hand_out``, journaled
*started* with when and its deadline) and answered once: by ``RunState.complete``
/ ``fail`` delivered on resume, or by a *finished* row a completion writes to the
journal. An answer the journal holds already wins over nothing, and a second
answer is refused (``StateError``) before anything of it is written.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from toolsched._executor.call import deliver, shaped
from toolsched._executor.durable import JournalFailed, RunJournal, journaled_handout
from toolsched._executor.settings import Settings
from toolsched._executor.turn import Handout, Turn
from toolsched._executor.view import View
from toolsched._policy.runstate import CallRecord
from toolsched._values.calls import ToolCall
from toolsched._values.results import edited_result, new_result
from toolsched.errors import OptionError, StateError
from toolsched.journal import RunRecord

__all__ = ["answer_through_journal", "check_answers", "resume_external", "wait_again"]


def no_answer(tool_name: str, handed_out: float, deadline: float) -> str:
    return (
        f"`{tool_name}` got no answer within {deadline - handed_out:g} seconds of being handed out "
        "(its timeout), so the call was answered without one"
    )


def check_answers(run: RunRecord, records: Sequence[CallRecord]) -> None:
    """Refuses a resume whose state is older than its journaled run: ``StateError``, before anything is written.

    The state answers an external call the journal holds answered already (completed through the journal, or
    by another copy of the state), or decides a call (approves, rejects, or leaves it waiting) that the journal
    holds answered or started since (another copy of the state was resumed, in this process or another). A
    call of a nested run is checked where its run is claimed (``RunJournal.resuming``); an external call the
    state leaves waiting is delivered with what the journal holds.
    """
    entries = {entry.call_id: entry for entry in run.calls}
    for record in records:
        entry = entries.get(record.call_id)
        if entry is None or record.child is not None or record.status in ("done", "external"):
            continue
        if entry.result is not None:
            raise StateError(
                f"call {record.call_id!r} of run {run.run_id!r} was answered already (the journal holds its "
                "result), so this state's answer or decision is refused and nothing of the resume ran or was "
                "written: another copy of this state was resumed since; recover the run to go on from the journal"
            )
        if entry.state == "started" and record.status != "completed":
            raise StateError(
                f"call {record.call_id!r} of run {run.run_id!r} started since this state was saved (the journal "
                "has it started), so this state's decision is refused and nothing of the resume ran or was "
                "written: another copy of this state was resumed since; recover the run to go on from the journal"
            )


async def resume_external(
    turn: Turn, slot: int, call: ToolCall, record: CallRecord, journaled: RunRecord | None
) -> None:
    """An external call of a resumed state: answered with what the journal holds (answered through it), with its
    answer from the state (``completed``), ``timeout`` past its deadline, or handed on still waiting."""
    tool_name = record.tool or record.name
    tool = turn.view.toolset.by_name.get(tool_name)
    if journaled is not None:
        entry = next((entry for entry in journaled.calls if entry.call_id == call.id), None)
        if entry is not None and entry.result is not None:
            # Answered through the journal (``Executor.complete``) since the state was saved.
            turn.record(slot, entry.result)
            return
    if record.status == "completed":
        assert record.result is not None
        await deliver(turn, slot, call, tool, record.result)
        return
    assert record.handed_out is not None
    handout = Handout(
        slot, tool_name, record.fingerprint or "", record.request_args, record.handed_out, record.deadline
    )
    await wait_again(turn, slot, call, handout)


async def wait_again(turn: Turn, slot: int, call: ToolCall, handout: Handout) -> None:
    """An external call still without an answer: ``timeout`` once past its deadline, else it waits on."""
    if handout.deadline is not None and time.time() >= handout.deadline:
        message = no_answer(handout.tool_name, handout.handed_out, handout.deadline)
        await turn.answer(slot, call, handout.tool_name, "timeout", message, attempts=1)
        return
    if turn.external is None:
        turn.external = []
    turn.external.append(handout)


async def answer_through_journal(
    settings: Settings, view: View, run_id: str, call_id: str, output: Any, error: str | None, verb: str
) -> None:
    """Answers the external call ``call_id`` of the journaled run ``run_id`` (``Executor.complete`` / ``fail``):
    claims the run, writes the call's result (held to its tool's budget), lets the run go. ``StateError`` for a call
    that is unknown, not an external call waiting for its answer, or answered already; ``RunClaimedError`` while a
    process holds the run; ``OptionError`` when this executor does not have the call's tool."""
    journal = settings.journal
    if journal is None:
        raise OptionError(f"{verb}() answers through a journal: it needs an executor built with journal=")
    if not isinstance(call_id, str):
        raise TypeError(f"{verb}() takes a call ID string, got {type(call_id).__name__}")
    durable = RunJournal(journal, run_id)
    run = await durable.claim(False)
    try:
        entry = next((entry for entry in run.calls if entry.call_id == call_id), None)
        if entry is None:
            parent = next((entry for entry in run.calls if call_id.startswith(entry.call_id + "/")), None)
            if parent is not None and parent.result is None and parent.decision and "child" in parent.decision:
                # The journal keeps a nested run whole, in its parent call's entry: its calls are answered on the
                # run's state, where the nested run is resumed from.
                raise StateError(
                    f"cannot {verb} call {call_id!r} of run {run_id!r} through the journal: it is a call of the "
                    f"nested run of call {parent.call_id!r}; answer it on the run's state (state.complete or "
                    "state.fail with this ID) and resume the state"
                )
            raise StateError(f"cannot {verb} call {call_id!r}: run {run_id!r} has no such call")
        if entry.result is not None:
            raise StateError(f"cannot {verb} call {call_id!r} of run {run_id!r}: it was answered already")
        handout = journaled_handout(run_id, call_id, entry.run_with) if entry.state == "started" else None
        if handout is None:
            raise StateError(
                f"cannot {verb} call {call_id!r} of run {run_id!r}: it is not a call of an external tool waiting "
                f"for its answer (the journal has it {entry.state!r})"
            )
        tool = view.toolset.by_name.get(entry.tool_name)
        if tool is None:
            # The answer is held to its tool's budget here, once, as journaled: without the tool, it could not be.
            raise OptionError(
                f"cannot {verb} call {call_id!r} of run {run_id!r}: it is a call of `{entry.tool_name}`, a tool this "
                "executor does not have; answer it with an executor that has the tool, so that the answer is held "
                "to the tool's budget"
            )
        took = max(0.0, (time.time() - handout[0]) * 1000.0)
        failed = error is not None
        result = new_result(
            call_id,
            tool.name,
            output,
            error,
            "execution_error" if failed else None,
            failed,
            took,
            False,
            None,
            False,
            None,
            1,
        )
        if (entry.decision or {}).get("edited") is True:
            # Approved with a person's own arguments, and handed out with them.
            result = edited_result(result)
        result = await shaped(result, tool, settings)
        try:
            await durable.finished(result)
        except JournalFailed as exc:
            raise exc.error from None
    finally:
        await durable.release()
