"""Bad input gets a clear answer, never a crash: lone surrogates, integers past 64 bits,
floats for integers, and huge values quoted back as short previews."""

from __future__ import annotations

import datetime
import functools
import json
from typing import Annotated, Any, Literal
from unittest import mock

import anyio
import pydantic
import pytest

import toolsched as ts
from toolsched.providers import openai_chat

pytestmark = pytest.mark.anyio


@ts.tool
async def count(n: int) -> str:
    return f"{type(n).__name__}:{n}"


@ts.tool
async def total(ns: list[int]) -> str:
    return ",".join(f"{type(n).__name__}:{n}" for n in ns)


@ts.tool
async def echo(text: str) -> str:
    return text


@ts.tool
async def measure(x: float) -> str:
    return f"{type(x).__name__}:{x}"


@ts.tool
async def span(start: int, stop: int, step: int = 1, scale: float = 1.0) -> str:
    return ",".join(f"{type(value).__name__}:{value}" for value in (start, stop, step, scale))


@ts.tool
async def mixed(n: int, ns: list[int]) -> str:
    return ",".join(f"{type(value).__name__}:{value}" for value in (n, *ns))


EXECUTOR = ts.Executor([count, total, echo, measure, span, mixed])


async def one(name: str, args: Any, call_id: str = "1") -> ts.ToolResult:
    return (await EXECUTOR.run([ts.ToolCall(call_id, name, args)])).results[0]


async def test_a_lone_surrogate_in_a_tool_name_is_an_unknown_tool() -> None:
    result = await one("co\ud800unt", {"n": 1})
    assert result.error_kind == "unknown_tool"


@pytest.mark.parametrize("args", ['{"text": "a\ud800"}', {"text": "a\ud800"}, {"a\udfff": "x"}])
async def test_a_lone_surrogate_in_the_arguments_is_invalid_input(args: Any) -> None:
    result = await one("echo", args)
    assert result.error_kind == "invalid_input"
    assert "lone surrogate" in (result.error or "")


async def test_surrogate_call_ids_are_answered_and_kept_apart() -> None:
    outcome = await EXECUTOR.run(
        [ts.ToolCall("a\ud800", "echo", {"text": "x"}), ts.ToolCall("a\ud801", "echo", {"text": "y"})]
    )
    assert [r.output for r in outcome.results] == ["x", "y"]
    assert outcome.duplicates == []


async def test_a_lone_surrogate_from_the_openai_chat_wire_is_that_call_s_error() -> None:
    # What json.loads makes of "\\ud800" on the wire: a str holding a lone surrogate.
    message = json.loads(
        '{"role": "assistant", "content": null, "tool_calls": ['
        '{"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{\\"text\\": \\"\\\\ud800\\"}"}},'
        '{"id": "c2", "type": "function", "function": {"name": "ech\\ud800", "arguments": "{}"}},'
        '{"id": "c3", "type": "function", "function": {"name": "echo", "arguments": "{\\"text\\": \\"fine\\"}"}}]}'
    )
    calls = openai_chat.calls_from(message)
    outcome = await EXECUTOR.run(calls)
    kinds = [r.error_kind for r in outcome.results]
    assert kinds == ["invalid_input", "unknown_tool", None]


@pytest.mark.parametrize("text", ['{"n": 123456789012345678901234567890}', '{"n": -9223372036854775809}'])
async def test_an_integer_past_64_bits_is_refused_as_text_as_it_is_as_an_object(text: str) -> None:
    as_text = await one("count", text)
    as_object = await one("count", json.loads(text))
    assert as_text.error_kind == as_object.error_kind == "invalid_input"
    assert "64-bit" in (as_text.error or "")


async def test_integers_in_range_arrive_exact() -> None:
    assert (await one("count", '{"n": 18446744073709551615}')).output == "int:18446744073709551615"
    assert (await one("count", '{"n": -9223372036854775808}')).output == "int:-9223372036854775808"


@pytest.mark.parametrize("args", ['{"n": 1.0}', {"n": 1.0}, '{"n": 3e2}'])
async def test_an_int_parameter_receives_an_int(args: Any) -> None:
    result = await one("count", args)
    assert result.output in ("int:1", "int:300")


@pytest.mark.parametrize(
    "args",
    ['{"start": 1.0, "stop": 2.0, "step": 3.0, "scale": 4.0}', {"start": 1.0, "stop": 2.0, "step": 3.0, "scale": 4.0}],
)
async def test_every_int_parameter_of_a_tool_receives_an_int(args: Any) -> None:
    assert (await one("span", args)).output == "int:1,int:2,int:3,float:4.0"
    assert (await one("span", '{"start": 1, "stop": 2.0}')).output == "int:1,int:2,int:1,float:1.0"


async def test_int_and_list_of_int_parameters_together_receive_ints() -> None:
    assert (await one("mixed", '{"n": 1.0, "ns": [2.0, 3]}')).output == "int:1,int:2,int:3"


async def test_a_list_of_int_parameter_receives_ints() -> None:
    assert (await one("total", '{"ns": [1.0, 2, 3.0]}')).output == "int:1,int:2,int:3"


async def test_a_fraction_for_an_int_parameter_is_still_refused() -> None:
    assert (await one("count", '{"n": 1.5}')).error_kind == "invalid_input"


async def test_a_float_parameter_keeps_its_float() -> None:
    assert (await one("measure", '{"x": 1.0}')).output == "float:1.0"


async def test_a_huge_bad_value_is_quoted_as_a_short_preview() -> None:
    result = await one("count", {"n": "x" * 10_000_000})
    assert result.error_kind == "invalid_input"
    assert len(result.error or "") < 1_000
    assert "a string of 10000000 characters" in (result.error or "")


async def test_a_huge_unknown_tool_name_is_quoted_as_a_short_preview() -> None:
    result = await one("y" * 1_000_000, {})
    assert result.error_kind == "unknown_tool"
    assert len(result.error or "") < 1_000


# -- the arguments a body is handed are the ones that were checked ------------------------------------------


async def test_each_attempt_gets_the_checked_arguments_whatever_the_last_one_did_to_its_own() -> None:
    """A body that changes the arguments it is handed, then fails transiently: the retry ran on the changed
    ones (never checked: a number in a list of strings), and the post hooks and output guardrails were shown
    them as the call's input."""
    runs: list[list[Any]] = []

    @ts.tool(idempotent=True, retry=ts.Retry(attempts=3, backoff=0, jitter=False))
    async def send(to: list[str]) -> str:
        runs.append(list(to))
        to.pop()
        to.append(12345)  # type: ignore[arg-type]
        if len(runs) < 2:
            raise ts.Transient("flaky")
        return "sent"

    @ts.tool
    async def edit(options: dict[str, str]) -> str:
        options["path"] = "/etc/shadow"
        return "edited"

    shown: list[tuple[str, Any]] = []
    hooks = ts.Hooks()
    hooks.post_tool_use("*", lambda event: shown.append(("post", event.tool_name, event.args)))
    guardrails = [lambda event: shown.append(("guardrail", event.tool_name, event.args))]
    executor = ts.Executor([send, edit], hooks=hooks, output_guardrails=guardrails)
    calls = [
        ts.ToolCall("s", "send", {"to": ["alice", "bob"]}),
        ts.ToolCall("e", "edit", '{"options": {"path": "a.txt"}}'),
    ]
    outcome = await executor.run(calls)
    assert [result.output for result in outcome.results] == ["sent", "edited"]
    assert runs == [["alice", "bob"], ["alice", "bob"]]
    assert sorted(shown, key=repr) == sorted(
        [
            ("guardrail", "send", {"to": ["alice", "bob"]}),
            ("post", "send", {"to": ["alice", "bob"]}),
            ("guardrail", "edit", {"options": {"path": "a.txt"}}),
            ("post", "edit", {"options": {"path": "a.txt"}}),
        ],
        key=repr,
    )


class Lying(dict):  # type: ignore[type-arg]
    """A dict whose own reads say another path than what it holds."""

    def keys(self) -> Any:
        return ["path"]

    def __getitem__(self, key: Any) -> Any:
        return "/etc/shadow" if key == "path" else super().__getitem__(key)

    def __iter__(self) -> Any:
        return iter(["path"])


async def test_a_rewrite_runs_with_what_was_checked_not_what_its_mapping_says() -> None:
    seen: list[tuple[str, str]] = []

    @ts.tool
    async def read(path: str) -> str:
        seen.append(("body", path))
        return path

    hooks = ts.Hooks()
    hooks.pre_tool_use("read", lambda event: ts.Rewrite(Lying(path="safe.txt")))
    hooks.post_tool_use(
        "read", lambda event: seen.append(("post", type(event.args).__name__ + ":" + event.args["path"]))
    )
    outcome = await ts.Executor([read], hooks=hooks).run([ts.ToolCall("1", "read", {"path": "a"})])
    assert outcome.results[0].output == "safe.txt"
    assert seen == [("body", "safe.txt"), ("post", "dict:safe.txt")]


def test_max_input_depth_is_at_most_what_the_engine_walks() -> None:
    """A limit past it let a deep dict of arguments overflow the engine's stack (a crash, at 20,000 levels)."""
    with pytest.raises(ts.OptionError, match="max_input_depth must be at most 128, got 1000000"):
        ts.Executor([count], max_input_depth=1_000_000)
    ts.Executor([count], max_input_depth=128)


async def test_integral_floats_reach_int_parameters_as_ints_however_deep() -> None:
    """JSON Schema's ``integer`` takes ``1.0``; a tool typed ``int`` anywhere in its parameters gets ``1``
    (nested in an optional list, a union, a mapping, a list of lists, a literal: each got the float); where
    a float may stand as itself (``int | float``, ``list[float]``) it stays a float."""

    def kinds(value: Any) -> Any:
        if isinstance(value, list):
            return [kinds(item) for item in value]
        if isinstance(value, dict):
            return {key: kinds(item) for key, item in value.items()}
        return type(value).__name__

    @ts.tool
    async def shapes(
        optional_list: list[int] | None = None,
        either: int | str = "x",
        mapping: dict[str, int] | None = None,
        grid: list[list[int]] | None = None,
        literal: Literal[1, "a"] = "a",
        number: int | float = 0,
        floats: list[float] | None = None,
    ) -> Any:
        return kinds(
            {
                "optional_list": optional_list,
                "either": either,
                "mapping": mapping,
                "grid": grid,
                "literal": literal,
                "number": number,
                "floats": floats,
            }
        )

    text = (
        '{"optional_list": [1.0, 2], "either": 3.0, "mapping": {"a": 4.0}, "grid": [[5.0]], "literal": 1.0, '
        '"number": 6.0, "floats": [7.0]}'
    )
    outcome = await ts.Executor([shapes]).run(
        [ts.ToolCall("t", "shapes", text), ts.ToolCall("d", "shapes", json.loads(text))]
    )
    expected = {
        "optional_list": ["int", "int"],
        "either": "int",
        "mapping": {"a": "int"},
        "grid": [["int"]],
        "literal": "int",
        "number": "float",
        "floats": ["float"],
    }
    assert [result.output for result in outcome.results] == [expected, expected]


@pytest.mark.parametrize("options", [{"on_error": "raise"}, {"abort_siblings_on_error": True}])
async def test_arguments_the_tools_own_model_refuses_are_invalid_input_not_a_failure(options: dict[str, Any]) -> None:
    """A value the schema lets through that the parameters' model refuses (the schema's ``format: date`` only
    describes): answered as a schema refusal is, so it neither raises out of the run nor cancels the
    siblings (it was the tool failing: `ToolCallFailed`, or the batch cancelled)."""

    class Window(pydantic.BaseModel):
        days: int

        @pydantic.field_validator("days")
        @classmethod
        def short(cls, value: int) -> int:
            if value > 30:
                raise ValueError("at most 30 days")
            return value

    class Report(ts.Tool):
        name = "report"
        input_model = Window

        async def call(self, args: Window, ctx: Any) -> str:
            return f"{args.days} days"

    @ts.tool
    async def when(at: datetime.date) -> str:
        return at.isoformat()

    @ts.tool
    async def slow() -> str:
        await anyio.sleep(0.05)
        return "slow done"

    executor = ts.Executor([when, Report(), slow], strategy=ts.Parallel(), **options)
    calls = [
        ts.ToolCall("date", "when", '{"at": "2024-13-45"}'),
        ts.ToolCall("model", "report", {"days": 90}),
        ts.ToolCall("sibling", "slow", {}),
        ts.ToolCall("fine", "report", {"days": 7}),
    ]
    outcome = await executor.run(calls)
    kinds = [(result.error_kind, result.output) for result in outcome.results]
    assert kinds == [("invalid_input", None), ("invalid_input", None), (None, "slow done"), (None, "7 days")]
    assert "arguments for `when` refused by its parameters: `at`" in (outcome.results[0].error or "")
    assert "`days`: Value error, at most 30 days" in (outcome.results[1].error or "")


@pytest.mark.parametrize("text", ["\u00a0", "\u3000", "\u2028", "\u0085"])
async def test_text_of_spaces_json_does_not_know_is_refused_not_read_as_no_arguments(text: str) -> None:
    @ts.tool
    async def listing(path: str = ".") -> str:
        raise AssertionError("never runs")

    outcome = await ts.Executor([listing]).run([ts.ToolCall("1", "listing", text)])
    assert outcome.results[0].error_kind == "invalid_input"
    assert "not valid JSON" in (outcome.results[0].error or "")


async def test_arguments_keep_their_keys_in_the_order_given_whichever_path_read_them() -> None:
    """A mapping, or text for a schema the one-pass reader does not take, came back sorted by key."""

    @ts.tool
    async def plan(steps: dict[str, str]) -> str:
        return ",".join(steps)

    @ts.tool
    async def free(**options: Any) -> str:
        return ",".join(options)

    calls = [
        ts.ToolCall("1", "plan", '{"steps": {"zeta": "1", "alpha": "2"}}'),
        ts.ToolCall("2", "plan", {"steps": {"zeta": "1", "alpha": "2"}}),
        ts.ToolCall("3", "free", '{"zeta": 1, "alpha": 2}'),
        ts.ToolCall("4", "free", {"zeta": 1, "alpha": 2}),
    ]
    outcome = await ts.Executor([plan, free]).run(calls)
    assert [result.output for result in outcome.results] == ["zeta,alpha"] * 4


async def test_a_parameter_under_an_alias_gets_its_argument() -> None:
    """The schema shows the alias; every call failed (the function was called with the alias as a keyword)."""

    @ts.tool
    async def copy(source: Annotated[str, pydantic.Field(alias="from")], day: datetime.date) -> str:
        return f"{source} {day.isoformat()}"

    @ts.tool
    async def move(source: Annotated[str, pydantic.Field(alias="from")]) -> str:
        return source

    assert "from" in copy.facts.input_schema["properties"]
    calls = [
        ts.ToolCall("1", "copy", '{"from": "a.txt", "day": "2024-01-02"}'),
        ts.ToolCall("2", "move", {"from": "b.txt"}),
    ]
    outcome = await ts.Executor([copy, move]).run(calls)
    assert [(result.error_kind, result.output) for result in outcome.results] == [
        (None, "a.txt 2024-01-02"),
        (None, "b.txt"),
    ]


async def test_arguments_in_any_mapping_are_read_as_the_dict_it_reads_as() -> None:
    import types
    from collections.abc import Iterator, Mapping

    class Fixed(Mapping[str, Any]):
        def __getitem__(self, key: str) -> Any:
            return {"n": 3}[key]

        def __iter__(self) -> Iterator[str]:
            return iter(["n"])

        def __len__(self) -> int:
            return 1

    calls = [ts.ToolCall("1", "count", types.MappingProxyType({"n": 2})), ts.ToolCall("2", "count", Fixed())]
    assert all(type(call.args) is dict for call in calls)
    outcome = await ts.Executor([count]).run(calls)
    assert [result.output for result in outcome.results] == ["int:2", "int:3"]


async def test_a_mapping_of_arguments_is_held_to_the_byte_limit_as_its_json_text() -> None:
    """Control characters are six bytes each as JSON: a mapping counted them as one, and passed at five
    times the limit where its text was refused."""

    @ts.tool
    async def echo(text: str) -> str:
        raise AssertionError("never runs")

    args = {"text": "\x01" * 900}
    executor = ts.Executor([echo], max_input_bytes=1000)
    outcome = await executor.run([ts.ToolCall("d", "echo", args), ts.ToolCall("t", "echo", json.dumps(args))])
    assert [result.error_kind for result in outcome.results] == ["invalid_input", "invalid_input"]
    assert all("5412 bytes, over the limit of 1000" in (result.error or "") for result in outcome.results)


async def test_one_int_parameter_arrives_as_an_int_whatever_the_tools_shape() -> None:
    """The one-integer step is taken inside a plain function tool's own invoker; every other shape of tool
    (a sync body, one taking ctx, a pydantic-typed one, a class tool, an agent tool whose invoker hands its body
    more) still gets ``1`` for ``1.0``, with everything else its invoker gives it, and the caller's mapping is
    left as it was."""
    seen: dict[str, Any] = {}

    @ts.tool
    async def plain(limit: int, path: str = "p") -> str:
        seen["plain"] = (limit, path)
        return "ok"

    @ts.tool
    def in_thread(limit: int) -> str:
        seen["in_thread"] = limit
        return "ok"

    @ts.tool
    async def with_ctx(limit: int, ctx: ts.ToolContext) -> str:
        seen["with_ctx"] = (limit, ctx.call_id)
        return "ok"

    @ts.tool
    async def stamped(limit: int, when: datetime.date = datetime.date(2020, 1, 1)) -> str:
        seen["stamped"] = (limit, when)
        return "ok"

    class Counted(ts.Tool):
        name = "counted"
        input_schema = {"type": "object", "properties": {"limit": {"type": "integer"}}, "required": ["limit"]}

        async def call(self, args: dict[str, Any], ctx: ts.ToolContext | None) -> str:
            seen["counted"] = args["limit"]
            return "ok"

    async def agent(limit: int, child: ts.ChildRun) -> str:
        seen["agent"] = (limit, type(child).__name__)
        return "ok"

    nested = ts.agent_tool(ts.Executor([plain]), name="agent")(agent)
    executor = ts.Executor([plain, in_thread, with_ctx, stamped, Counted(), nested])
    mapping = {"limit": 2.0}
    outcome = await executor.run(
        [
            ts.ToolCall("a", "plain", '{"limit": 1.0}'),
            ts.ToolCall("b", "plain", mapping),
            ts.ToolCall("c", "in_thread", '{"limit": 3.0}'),
            ts.ToolCall("d", "with_ctx", '{"limit": 4.0}'),
            ts.ToolCall("e", "stamped", '{"limit": 5.0, "when": "2021-02-03"}'),
            ts.ToolCall("f", "counted", '{"limit": 6.0}'),
            ts.ToolCall("g", "agent", '{"limit": 7.0}'),
        ]
    )
    assert [result.error for result in outcome.results] == [None] * 7
    assert mapping == {"limit": 2.0} and type(mapping["limit"]) is float
    assert seen == {
        "plain": (2, "p"),
        "in_thread": 3,
        "with_ctx": (4, "d"),
        "stamped": (5, datetime.date(2021, 2, 3)),
        "counted": 6,
        "agent": (7, "ChildRun"),
    }
    for value in (seen["plain"][0], seen["in_thread"], seen["with_ctx"][0], seen["stamped"][0], seen["counted"]):
        assert type(value) is int
    assert type(seen["agent"][0]) is int


async def test_a_backend_and_a_wrapped_invoker_get_ints_for_integer_parameters() -> None:
    """A backend runs the body without the tool's own invoker (which takes the exact-integer step), and an
    invoker wrapped after the tool was made (a patch, a mock) is more than the plain call of the function: both
    still hand the body ``1`` for ``1.0``, and the wrapper is kept."""
    seen: list[Any] = []

    class Elsewhere:
        def bind(self, tools: Any) -> None:
            pass

        async def invoke(self, tool: ts.Tool, args: Any, ctx: ts.ToolContext | None) -> Any:
            seen.append(("backend", dict(args)))
            return await tool.fn(**args)  # type: ignore[attr-defined]

    @ts.tool(backend="elsewhere")
    async def remote(limit: int) -> str:
        return type(limit).__name__

    outcome = await ts.Executor([remote], backends={"elsewhere": Elsewhere()}).run(
        [ts.ToolCall("a", "remote", '{"limit": 1.0}')]
    )
    assert outcome.results[0].output == "int" and seen == [("backend", {"limit": 1})]
    assert type(seen[0][1]["limit"]) is int

    original = ts.FunctionTool._invoker

    def wrapped(self: ts.FunctionTool) -> Any:
        inner = original(self)

        async def invoke(args: Any, ctx: ts.ToolContext | None) -> str:
            return "wrapped " + str(await inner(args, ctx))

        return invoke

    ts.FunctionTool._invoker = wrapped  # type: ignore[method-assign]
    try:

        @ts.tool
        async def counted(limit: int) -> str:
            return type(limit).__name__

        # A tool's invoker is made with its facts, when an executor first takes it.
        executor = ts.Executor([counted])
    finally:
        ts.FunctionTool._invoker = original  # type: ignore[method-assign]

    outcome = await executor.run([ts.ToolCall("b", "counted", '{"limit": 2.0}')])
    assert outcome.results[0].output == "wrapped int"


async def test_a_stubbed_or_wrapped_invoker_of_a_one_int_tool_is_still_what_runs() -> None:
    """The exact-integer step takes the place of a function tool's own plain invoker only: a class tool whose
    ``call`` is a mock (which answers any attribute asked of it) and an invoker wrapped with
    ``functools.wraps`` (which copies the inner function's attributes) are each run, and get ``1`` for ``1.0``."""

    class Counter(ts.Tool):
        name = "counter"
        input_schema = {"type": "object", "properties": {"limit": {"type": "integer"}}, "required": ["limit"]}

        async def call(self, args: Any, ctx: ts.ToolContext | None) -> str:
            return "real"

    stubbed = Counter()
    stubbed.call = mock.AsyncMock(return_value="mocked")  # type: ignore[method-assign]
    outcome = await ts.Executor([stubbed]).run([ts.ToolCall("a", "counter", '{"limit": 1.0}')])
    assert outcome.results[0].output == "mocked"
    stubbed.call.assert_awaited_once()
    args = stubbed.call.await_args.args[0]
    assert args == {"limit": 1} and type(args["limit"]) is int

    ran: list[Any] = []

    class Wrapped(ts.FunctionTool):
        def _invoker(self) -> Any:
            inner = super()._invoker()

            @functools.wraps(inner)
            def invoke(args: Any, ctx: ts.ToolContext | None) -> Any:
                ran.append(dict(args))
                return inner(args, ctx)

            return invoke

    async def body(limit: int) -> str:
        return type(limit).__name__

    outcome = await ts.Executor([Wrapped(body)]).run([ts.ToolCall("b", "body", '{"limit": 2.0}')])
    assert outcome.results[0].output == "int" and ran == [{"limit": 2}]
