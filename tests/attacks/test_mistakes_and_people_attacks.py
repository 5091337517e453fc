"""Attacks on what docs/concepts/model-mistakes.md, argument-repair.md and permissions.md promise when the model
gets it wrong and a person decides: a model's mistake (`ts.ModelRetry`) under a retry policy whose `on=` is
broad, user callbacks that change the arguments they are shown (a repair function, `needs_approval`, a tool's
`check_permissions` and `validate_input`), caps of the wrong type set after a `Limits` is made, a cap of 0 on
repeats, and a person's arguments whose keys are not text."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import pytest

import toolsched as ts

pytestmark = pytest.mark.anyio


# -- a model's mistake is not a downstream's failure ----------------------------------------------------


async def test_a_model_retry_is_neither_retried_nor_counted_by_the_circuit_under_a_broad_on(anyio_backend: str) -> None:
    """Promise: retries are for transient failures, the circuit counts transient failures, and `ts.ModelRetry`
    tells the model what to fix. A retry policy whose `on=` takes every exception must not run the body again
    for a mistake only the model can fix, nor let the model's mistakes open the tool's circuit for every run."""
    ran: list[str] = []

    @ts.tool(
        idempotent=True,
        retry=ts.Retry(attempts=3, backoff=0.001, on=(Exception,)),
        circuit=ts.CircuitBreaker(failures=2, cooldown=60),
    )
    async def find_user(handle: str) -> str:
        """Looks a user up."""
        ran.append(handle)
        if handle != "ada":
            raise ts.ModelRetry(f"no user {handle!r}; known: ada")
        return "Ada Lovelace"

    executor = ts.Executor([find_user])
    limits = ts.Limits()
    answers = []
    for turn, handle in enumerate(["ad", "adda", "ada"]):
        outcome = await executor.run([ts.ToolCall(f"c{turn}", "find_user", {"handle": handle})], limits=limits)
        answers.append((outcome.results[0].error_kind, outcome.results[0].attempts))
    assert answers == [("model_retry", 1), ("model_retry", 1), (None, 1)]
    assert ran == ["ad", "adda", "ada"]


class NoSuchUser(ts.ModelRetry):
    """A tool's own `ModelRetry`, made from other arguments than the message (pickle rebuilds it from the message
    alone, and fails)."""

    def __init__(self, handle: str, known: list[str]) -> None:
        super().__init__(f"no user {handle!r}; known: {', '.join(known)}")
        self.known = known


class Busy(ts.Transient):
    """A tool's own `Transient`, made from other arguments than the message."""

    def __init__(self, status: int, wait: float) -> None:
        super().__init__(f"the downstream answered {status}", retry_after=wait)


@ts.tool(isolation="process")
def find_in_a_worker(handle: str) -> str:
    """Looks a user up in a worker process."""
    raise NoSuchUser(handle, ["ada", "alan"])


BUSY_ONCE = "TOOLSCHED_TEST_BUSY_ONCE"


@ts.tool(isolation="process", idempotent=True, retry=ts.Retry(attempts=2, backoff=0.001))
def fetch_in_a_worker(marker: str) -> str:
    """Busy the first time (a file marks it), then answers."""
    import os

    if not os.path.exists(marker):
        with open(marker, "w"):
            pass
        raise Busy(503, 0.001)
    return "fetched"


async def test_a_model_retry_or_transient_of_its_own_kind_crosses_from_a_worker_process(
    anyio_backend: str, tmp_path: Any
) -> None:
    """Promise (model-mistakes.md, resilience.md): a tool that raises `ModelRetry` has its call answered
    `model_retry` with the message; a `Transient` is retried. From an `isolation="process"` tool, a subclass whose
    `__init__` takes other arguments could not be rebuilt in the caller: the model was told
    `execution_error` "TypeError: ... missing 1 required positional argument", and a transient failure was not
    retried."""
    executor = ts.Executor([find_in_a_worker, fetch_in_a_worker])
    outcome = await executor.run(
        [
            ts.ToolCall("a", "find_in_a_worker", {"handle": "ad"}),
            ts.ToolCall("b", "fetch_in_a_worker", {"marker": str(tmp_path / "busy")}),
        ]
    )
    found, fetched = outcome.results
    assert (found.error_kind, found.error) == ("model_retry", "no user 'ad'; known: ada, alan")
    assert (fetched.output, fetched.attempts) == ("fetched", 2)


# -- callbacks are shown the arguments, never handed them ----------------------------------------------


def _transfer(where: str) -> ts.Tool:
    """A tool whose `where` callback takes `dry_run` out of the arguments it is shown (as `args.pop` does), and
    answers as if the call were harmless."""

    def looks(args: dict[str, Any]) -> bool:
        return bool(args.pop("dry_run", False))

    class Transfer(ts.Tool):
        name = "transfer"
        description = "Sends money, or only simulates it."
        input_schema = {
            "type": "object",
            "properties": {"amount": {"type": "integer"}, "dry_run": {"type": "boolean"}},
            "required": ["amount"],
        }

        def requires_approval(self, args: dict[str, Any]) -> bool:
            if where == "needs_approval":
                return not looks(args)
            return False

        def is_concurrency_safe(self, args: dict[str, Any]) -> bool:
            return looks(args) if where == "is_concurrency_safe" else False

        def resources(self, args: dict[str, Any]) -> ts.Access | None:
            if where == "resources":
                looks(args)
            return None

        async def validate_input(self, args: dict[str, Any], ctx: ts.ToolContext) -> None:
            if where == "validate_input":
                looks(args)

        async def check_permissions(self, args: dict[str, Any], ctx: ts.ToolContext) -> ts.Decision:
            if where == "check_permissions":
                looks(args)
            return ts.Decision.allow()

        async def call(self, args: dict[str, Any], ctx: ts.ToolContext) -> str:
            return f"simulated {args['amount']}" if args.get("dry_run") else f"sent {args['amount']}"

    return Transfer()


@pytest.mark.parametrize(
    "where", ["needs_approval", "check_permissions", "validate_input", "is_concurrency_safe", "resources"]
)
async def test_a_callback_that_changes_the_arguments_it_is_shown_never_changes_what_runs(
    anyio_backend: str, where: str
) -> None:
    """Promise (DESIGN §4, permissions.md): the call runs with the input that was validated and judged, and a
    person's approval is bound to it. A tool's own judgement of a call (`needs_approval`, `check_permissions`,
    `validate_input`, `is_concurrency_safe`, `resources`) that takes a key out of the arguments must not turn a
    dry run into a real one."""
    # The default strategy asks `is_concurrency_safe`; `resources` is asked by ResourceAware.
    strategy = ts.ResourceAware() if where == "resources" else None
    executor = ts.Executor([_transfer(where)], strategy=strategy)
    calls = [
        ts.ToolCall("t1", "transfer", {"amount": 500, "dry_run": True}),
        ts.ToolCall("t2", "transfer", {"amount": 7, "dry_run": True}),
    ]
    outcome = await executor.run(calls)
    assert [result.output for result in outcome.results] == ["simulated 500", "simulated 7"]
    assert calls[0].args == {"amount": 500, "dry_run": True}


async def test_an_approval_holds_when_needs_approval_changes_the_arguments_it_is_shown(anyio_backend: str) -> None:
    """Promise: `resume` runs the approved call. A `needs_approval` that takes a key out of the arguments it is
    shown made the approval never match the call again: each resume asked the person again, for ever."""
    executor = ts.Executor([_transfer("needs_approval")])
    outcome = await executor.run([ts.ToolCall("t1", "transfer", {"amount": 500, "dry_run": False})])
    (request,) = outcome.pending
    assert isinstance(request, ts.ApprovalRequest)
    assert dict(request.args) == {"amount": 500, "dry_run": False}
    state = outcome.state
    assert state is not None
    state.approve("t1")
    resumed = await executor.resume(state)
    assert (resumed.pending, [result.output for result in resumed.results]) == ([], ["sent 500"])


async def test_a_repair_function_that_changes_the_call_it_is_shown_changes_nothing_else(anyio_backend: str) -> None:
    """Promise (argument-repair.md): the model's text stays what the turn and its state hold; the call held for
    approval runs, once approved, with the arguments the function returned. A function that wrote into the
    call's arguments changed the caller's `ToolCall` and the state's copy of the model's call, so the resume
    asked the person again, about arguments neither the model nor the function gave."""

    def fix(call: ts.ToolCall, error: ts.ToolResult) -> dict[str, Any]:
        assert isinstance(call.args, dict)
        call.args["amount"] = 5
        return {"amount": 7}

    executor = ts.Executor([_transfer("needs_approval")], repair_arguments=fix)
    calls = [ts.ToolCall("t1", "transfer", {"amount": "seven"})]
    outcome = await executor.run(calls)
    assert calls[0].args == {"amount": "seven"}
    (request,) = outcome.pending
    assert dict(request.args) == {"amount": 7}
    state = outcome.state
    assert state is not None
    state.approve("t1")
    resumed = await executor.resume(state)
    assert [(result.output, result.repaired) for result in resumed.results] == [("sent 7", True)]


# -- a person's arguments -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [{1: 5, "amount": 7}, {"amount": 7, "dry_run": {True: 1}}, {"amount": 7, "note": [{None: "x"}]}],
    ids=["int-key", "nested-bool-key", "key-in-a-list"],
)
async def test_approved_arguments_with_a_key_that_is_not_text_are_refused(anyio_backend: str, args: Any) -> None:
    """Promise (permissions.md): `approve` refuses at once what no tool could take (not a JSON object:
    `ts.OptionError`), and decides nothing. JSON writes a key that is not text as text, so `{1: 5, "1": 6}`
    would have become one key with one of the values lost, silently."""
    executor = ts.Executor([_transfer("needs_approval")])
    outcome = await executor.run([ts.ToolCall("t1", "transfer", {"amount": 500})])
    state = outcome.state
    assert state is not None
    with pytest.raises(ts.OptionError, match="keys must be text"):
        state.approve("t1", args=args)
    assert state.decisions == {"t1": "pending"}


# -- caps at their edges -------------------------------------------------------------------------------


async def test_a_cap_of_zero_repeats_lets_no_call_run_as_the_other_caps_of_zero_do(anyio_backend: str) -> None:
    """Promise (model-mistakes.md): `max_repeats` is how many times the same call may be made, and a call made
    more than `max_repeats` times is answered `limit_exceeded`; a cap is a whole number of at least 0. With 0,
    the first call ran, as with 1 (where `max_calls=0` and `max_calls_per_tool=0` let none run)."""
    ran: list[int] = []

    @ts.tool
    async def pick(n: int) -> int:
        """Picks a number."""
        ran.append(n)
        return n

    executor = ts.Executor([pick])
    outcome = await executor.run([ts.ToolCall("a", "pick", {"n": 1})], limits=ts.Limits(max_repeats=0))
    (result,) = outcome.results
    assert result.error_kind == "limit_exceeded"
    assert "limit of 0 calls with the same arguments" in (result.error or "")
    assert ran == []


@pytest.mark.parametrize(
    ("cap", "value"),
    [
        ("max_calls", "2"),
        ("max_calls", -1),
        ("max_calls", True),
        ("max_calls", float("nan")),
        ("max_calls_per_tool", 2.5),
        ("max_calls_per_tool", {"pick": None}),
        ("max_model_retries", 10**30),
        ("max_repeats", 1.0),
    ],
    ids=["text", "negative", "bool", "nan", "float", "none-in-dict", "huge", "float-whole"],
)
async def test_a_cap_set_after_the_limits_are_made_is_checked_as_one_given_to_them(
    anyio_backend: str, cap: str, value: Any
) -> None:
    """Promise (model-mistakes.md): each cap is None or a whole number of at least 0, "anything else raises
    `ts.OptionError`". A cap set on the object between turns was taken as it was, and the next call crashed the
    run with a bare `TypeError` from inside the executor."""

    @ts.tool
    async def pick(n: int) -> int:
        """Picks a number."""
        return n

    limits = ts.Limits(max_calls=5)
    with pytest.raises(ts.OptionError, match=cap):
        setattr(limits, cap, value)
    outcome = await ts.Executor([pick]).run([ts.ToolCall("a", "pick", {"n": 1})], limits=limits)
    assert [result.output for result in outcome.results] == [1]
    limits.max_calls = 1
    again = await ts.Executor([pick]).run([ts.ToolCall("b", "pick", {"n": 2})], limits=limits)
    assert [result.error_kind for result in again.results] == ["limit_exceeded"]


def test_the_caps_per_tool_are_changed_whole_never_in_place() -> None:
    """The mapping of caps per tool a `Limits` shows cannot be written into (a cap written so would have escaped
    the check); it is set whole, and checked then."""
    limits = ts.Limits(max_calls_per_tool={"pick": 2})
    shown = limits.max_calls_per_tool
    assert isinstance(shown, Mapping)
    with pytest.raises(TypeError):
        shown["pick"] = "3"  # type: ignore[index]
    limits.max_calls_per_tool = {"pick": 3, "search": 1}
    assert dict(limits.max_calls_per_tool) == {"pick": 3, "search": 1}  # type: ignore[arg-type]


@pytest.mark.parametrize("again", ["reject", "approve-without-always", "approve-with-edits"])
@pytest.mark.parametrize("scope", ["tool", "call", "transfer(*)"])
async def test_a_standing_approval_is_not_left_behind_when_its_call_is_decided_again(
    anyio_backend: str, scope: str, again: str
) -> None:
    """Promise (permissions.md): `always=` approves more than the call, and a call still waiting may be decided
    again before the resume. A person who approved `t1` for the whole tool and then changed their mind (rejected
    `t1`) left the standing approval in force: `t2`, a call they never approved themselves, ran. The second
    decision is refused now (`ts.ApprovalError`), the first kept whole; the same decision given twice is one."""
    executor = ts.Executor([_transfer("needs_approval")])
    calls = [ts.ToolCall("t1", "transfer", {"amount": 5}), ts.ToolCall("t2", "transfer", {"amount": 5})]
    outcome = await executor.run(calls)
    state = outcome.state
    assert state is not None
    state.approve("t1", always=scope)
    state.approve("t1", always=scope)  # the same decision again
    decided = state.decisions
    with pytest.raises(ts.ApprovalError, match="always="):
        if again == "reject":
            state.reject("t1", "not this one after all")
        elif again == "approve-without-always":
            state.approve("t1")
        else:
            state.approve("t1", args={"amount": 1}, always=scope)
    assert state.decisions == decided
    fresh = outcome.state
    assert fresh is not None
    fresh.reject("t1", "not this one after all")
    resumed = await executor.resume(fresh)
    assert [result.error_kind for result in resumed.results] == ["permission_denied"]
    assert [request.call_id for request in resumed.pending] == ["t2"]


async def test_calls_to_a_tool_that_does_not_exist_count_toward_the_run_s_caps(anyio_backend: str) -> None:
    """Promise (model-mistakes.md): toolsched "bounds how long an agent run may go on" calling a tool that does
    not exist, and `max_calls` caps "the calls of the run". Such calls were never counted (while a recovered
    run's journal counted them): a model that kept calling one went on until the loop's `max_turns`, and the
    repeat guard never saw them. They count now, in model order with the turn's other calls."""
    ran: list[int] = []

    @ts.tool
    async def pick(n: int) -> int:
        """Picks a number."""
        ran.append(n)
        return n

    executor = ts.Executor([pick])
    limits = ts.Limits(max_calls=3, max_repeats=1)
    first = await executor.run([ts.ToolCall("a", "pick", {"n": 1}), ts.ToolCall("b", "pik", {"n": 1})], limits=limits)
    assert [result.error_kind for result in first.results] == [None, "unknown_tool"]
    again = await executor.run([ts.ToolCall("c", "pik", {"n": 1})], limits=limits)
    (repeat,) = again.results
    assert repeat.error_kind == "limit_exceeded"
    assert "unknown tool `pik`" in (repeat.error or "")  # what it returned before
    last = await executor.run([ts.ToolCall("d", "pik", {"n": 2}), ts.ToolCall("e", "pick", {"n": 3})], limits=limits)
    assert [result.error_kind for result in last.results] == ["unknown_tool", "limit_exceeded"]
    assert (ran, limits.calls) == ([1], 3)


async def test_a_streamed_call_to_a_tool_that_does_not_exist_counts_toward_the_caps(anyio_backend: str) -> None:
    """The same in a turn whose calls stream in (an async iterable of calls): the call to a tool that does not
    exist past `max_calls` is answered `limit_exceeded`, and it takes the last call the cap allows."""

    @ts.tool
    async def pick(n: int) -> int:
        """Picks a number."""
        return n

    async def calls() -> AsyncIterator[ts.ToolCall]:
        yield ts.ToolCall("a", "pik", {"n": 1})
        yield ts.ToolCall("b", "pick", {"n": 1})
        yield ts.ToolCall("c", "pik", {"n": 2})

    limits = ts.Limits(max_calls=1)
    finished = [
        event async for event in ts.Executor([pick]).stream(calls(), limits=limits) if isinstance(event, ts.RunFinished)
    ]
    assert [result.error_kind for result in finished[0].outcome.results] == [
        "unknown_tool",
        "limit_exceeded",
        "limit_exceeded",
    ]


async def test_a_mistake_answered_before_an_approval_counts_once_across_the_resume(anyio_backend: str) -> None:
    """Promise (model-mistakes.md): a tool's `max_model_retries` counts its mistakes in the run, and a resumed
    call is counted once. A call whose arguments the engine refused, in a turn that also held a call for
    approval, was counted again when the resume carried its answer: one mistake became two, and with a budget
    of 1 the model's corrected call was refused `retries_exhausted`."""

    @ts.tool(max_model_retries=1)
    async def pick(n: int) -> int:
        """Picks a number."""
        return n

    executor = ts.Executor([pick, _transfer("needs_approval")])
    limits = ts.Limits()
    outcome = await executor.run(
        [ts.ToolCall("a", "pick", {"n": "one"}), ts.ToolCall("t1", "transfer", {"amount": 5})], limits=limits
    )
    assert [result.error_kind for result in outcome.results] == ["invalid_input"]
    counts = (limits.calls, limits.retries_of("pick"))
    state = outcome.state
    assert state is not None
    state.approve("t1")
    resumed = await executor.resume(state, limits=limits)
    assert [result.output for result in resumed.results] == [None, "sent 5"]
    # The held call was counted when it was admitted, the mistake when it was answered: neither again.
    assert (limits.calls, limits.retries_of("pick")) == counts == (1, 1)
    fixed = await executor.run([ts.ToolCall("b", "pick", {"n": 1})], limits=limits)
    assert [(result.error_kind, result.output) for result in fixed.results] == [(None, 1)]


async def test_a_nested_call_approved_with_always_and_decided_again_is_refused_by_its_own_id(
    anyio_backend: str,
) -> None:
    """The same for a call of a nested run, decided under its prefixed ID: the refusal names that ID and why
    (it read "this run has no such call", of a call listed as waiting)."""
    child = ts.Executor([_transfer("needs_approval")])

    @ts.agent_tool(child, description="Pays through its own tools.")
    async def treasurer(amount: int, child: ts.ChildRun) -> str:
        paid = await child.run([ts.ToolCall("t1", "transfer", {"amount": amount})])
        return str(paid.results[0].output)

    executor = ts.Executor([treasurer])
    outcome = await executor.run([ts.ToolCall("p1", "treasurer", {"amount": 5})])
    assert [request.call_id for request in outcome.pending] == ["p1/t1"]
    state = outcome.state
    assert state is not None
    state.approve("p1/t1", always="tool")
    with pytest.raises(ts.ApprovalError, match=r"'p1/t1' otherwise: it was approved with always='tool'"):
        state.reject("p1/t1")
    resumed = await executor.resume(state)
    assert [result.output for result in resumed.results] == ["sent 5"]


# -- external answers ------------------------------------------------------------------------------------


def test_threads_answering_one_external_call_of_a_state_at_once_give_it_one_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Promise (effects.md): "an external call is answered once: a second `complete` or `fail` of the same call
    ... raises `ts.StateError`". Two threads of a web server answering the same call on one state both passed the
    check before either recorded its answer: both were told it was taken, and the first answer was lost. Here
    the first answer is held right after the check until the second thread has got as far (or 2 s have gone)."""
    import threading

    import anyio

    from toolsched._policy import runstate

    @ts.tool(external=True)
    def confirm(order: str) -> str:
        """Asks the customer to confirm."""

    outcome = anyio.run(ts.Executor([confirm]).run, [ts.ToolCall("c1", "confirm", {"order": "A-7"})])
    state = outcome.state
    assert state is not None
    made = runstate.new_result
    second_in = threading.Event()
    entered: list[int] = []

    def held(*args: Any) -> Any:
        entered.append(1)
        if len(entered) == 1:
            second_in.wait(2)
        else:
            second_in.set()
        return made(*args)

    monkeypatch.setattr(runstate, "new_result", held)
    taken: list[str] = []
    refused: list[str] = []

    def answer(text: str) -> None:
        try:
            state.complete("c1", output=text)
            taken.append(text)
        except ts.StateError:
            refused.append(text)

    threads = [threading.Thread(target=answer, args=(text,)) for text in ("yes", "no")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (len(taken), len(refused)) == (1, 1)
    monkeypatch.undo()
    resumed = anyio.run(ts.Executor([confirm]).resume, state)
    assert [result.output for result in resumed.results] == taken


# -- cancelled while the arguments are repaired ----------------------------------------------------------


@pytest.mark.parametrize("how", ["cancel", "interrupt"])
async def test_a_call_cancelled_or_a_run_interrupted_while_a_repair_function_works_never_runs(
    anyio_backend: str, how: str
) -> None:
    """Promise (failures.md): `executor.cancel(call_id)` never starts a waiting call, and after an interrupt the
    calls not started are `skipped`. While a repair function worked (it may ask a model, for seconds), the run
    was not among the runs in progress: `cancel` reached nothing (False), `interrupt` no run (0), and both
    calls ran once the repair answered. Now the repair ends, and neither call runs."""
    ran: list[int] = []
    started = anyio.Event()
    asked_again: list[str] = []

    @ts.tool
    async def pick(n: int) -> int:
        """Picks a number."""
        ran.append(n)
        return n

    async def fix(call: ts.ToolCall, error: ts.ToolResult) -> dict[str, Any]:
        started.set()
        await anyio.sleep_forever()
        asked_again.append(call.id)  # never reached: the repair is stopped
        return {"n": 5}

    executor = ts.Executor([pick], repair_arguments=fix)
    outcomes: list[ts.Outcome] = []

    async def run() -> None:
        calls = [ts.ToolCall("a", "pick", "five, please"), ts.ToolCall("b", "pick", {"n": 1})]
        outcomes.append(await executor.run(calls, run_id="r1"))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await started.wait()
            reached = (
                executor.cancel("a", "not needed", run_id="r1") if how == "cancel" else executor.interrupt(run_id="r1")
            )
    kinds = [(result.call_id, result.error_kind) for result in outcomes[0].results]
    if how == "cancel":
        assert reached is True
        assert kinds == [("a", "cancelled"), ("b", None)]
        assert "cancelled by the caller: not needed" in (outcomes[0].results[0].error or "")
        assert ran == [1]
    else:
        assert reached == 1
        assert kinds == [("a", "skipped"), ("b", "skipped")]
        assert ran == []
    assert asked_again == []
