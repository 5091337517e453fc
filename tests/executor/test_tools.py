"""The tool definition: schemas from hints, models and raw JSON Schema; fail-closed defaults."""

from __future__ import annotations

import sys
from typing import Annotated, Any, Literal

import anyio
import pydantic
import pytest

import toolsched as ts


def test_decorator_builds_schema_and_description_from_the_function() -> None:
    @ts.tool
    async def read_file(path: str, limit: int = 100, mode: Literal["text", "bytes"] = "text") -> str:
        """Read a text file."""
        return path

    facts = read_file.facts
    assert read_file.name == "read_file"
    assert read_file.description == "Read a text file."
    schema = facts.input_schema
    assert schema["type"] == "object"
    assert schema["required"] == ["path"]
    assert schema["properties"]["path"] == {"type": "string"}
    assert schema["properties"]["limit"]["type"] == "integer"
    assert schema["properties"]["mode"]["enum"] == ["text", "bytes"]
    assert schema["additionalProperties"] is False
    assert "title" not in schema


def test_field_descriptions_reach_the_schema() -> None:
    @ts.tool
    def grep(pattern: Annotated[str, pydantic.Field(description="a regular expression")]) -> list[str]:
        return []

    assert grep.facts.input_schema["properties"]["pattern"]["description"] == "a regular expression"


def test_defaults_are_fail_closed() -> None:
    @ts.tool
    async def anything(x: int) -> int:
        return x

    args = {"x": 1}
    assert anything.is_read_only(args) is False
    assert anything.is_concurrency_safe(args) is False
    assert anything.is_destructive(args) is False
    assert anything.requires_approval(args) is False
    assert anything.resources(args) is None
    assert anything.requires_user_interaction is False
    assert anything.isolation == "none"
    assert anything.interrupt_behavior == "block"
    assert anything.timeout is None
    assert anything.max_result_chars == 100_000
    assert anything.truncate == "tail"
    assert anything.max_concurrency is None
    assert anything.is_enabled() is True
    assert anything.should_defer is False and anything.always_load is False
    assert anything.abort_siblings_on_error is False


def test_flags_may_be_judged_per_call() -> None:
    @ts.tool(concurrency_safe=lambda args: args["path"].startswith("/tmp"), read_only=True)
    async def touch(path: str) -> None:
        return None

    assert touch.is_concurrency_safe({"path": "/tmp/x"}) is True
    assert touch.is_concurrency_safe({"path": "/etc/x"}) is False
    assert touch.is_read_only({"path": "/etc/x"}) is True
    assert touch.facts.static_safe is None


def test_decorated_function_stays_callable() -> None:
    @ts.tool(name="adder", aliases=["add"])
    def add(a: int, b: int) -> int:
        return a + b

    assert add(2, 3) == 5
    assert add.name == "adder"
    assert add.aliases == ("add",)


class EditArgs(pydantic.BaseModel):
    path: str
    old: str
    new: str


class EditFile(ts.Tool):
    name = "edit_file"
    description = "Replace text in a file."
    input_model = EditArgs
    rule_subject = "path"

    async def call(self, args: EditArgs, ctx: ts.ToolContext) -> str:
        return f"{args.path}: {args.old}->{args.new} ({ctx.call_id})"


def test_class_form_with_input_model() -> None:
    facts = EditFile().facts
    assert facts.input_schema["required"] == ["path", "old", "new"]


def test_class_form_with_raw_schema_and_overrides() -> None:
    class Shell(ts.Tool):
        name = "shell"
        input_schema = {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}

        def is_concurrency_safe(self, args: Any) -> bool:
            return str(args["cmd"]).startswith("ls")

        def call(self, args: Any, ctx: ts.ToolContext) -> str:
            return str(args["cmd"])

    shell = Shell()
    assert shell.facts.static_safe is None
    assert shell.is_concurrency_safe({"cmd": "ls -l"})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"truncate": "sideways"}, "truncate must be one of"),
        ({"isolation": "vm"}, "isolation must be one of"),
        ({"timeout": 0}, "timeout must be a positive number"),
        ({"max_result_chars": -1}, "max_result_chars must be a positive integer"),
        ({"max_concurrency": 0}, "max_concurrency must be a positive integer"),
    ],
)
def test_bad_metadata_is_refused_with_the_field_named(options: dict[str, Any], message: str) -> None:
    @ts.tool(**options)
    async def broken(x: int) -> int:
        return x

    with pytest.raises(ts.ToolDefinitionError, match=message):
        ts.ToolRegistry([broken])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"idempotent": "no", "retry": ts.Retry(attempts=3, backoff=0)}, "idempotent must be True or False"),
        ({"idempotent": 1}, "idempotent must be True or False"),
        ({"abort_siblings_on_error": "yes"}, "abort_siblings_on_error must be True or False"),
        ({"should_defer": 0}, "should_defer must be True or False"),
        ({"always_load": "true"}, "always_load must be True or False"),
        ({"requires_user_interaction": "false"}, "requires_user_interaction must be True or False"),
        ({"read_only": "no"}, "read_only must be True, False or a callable"),
        ({"concurrency_safe": 1}, "concurrency_safe must be True, False or a callable"),
        ({"destructive": "no"}, "destructive must be True, False or a callable"),
        ({"needs_approval": "never"}, "needs_approval must be True, False or a callable"),
        ({"enabled": "off"}, "enabled must be True, False or a callable"),
    ],
)
def test_boolean_options_must_be_bools(options: dict[str, Any], message: str) -> None:
    @ts.tool(**options)
    async def broken() -> str:
        return "ran"

    with pytest.raises(ts.ToolDefinitionError, match=message):
        ts.ToolRegistry([broken])


def test_boolean_options_take_bools_and_callables() -> None:
    @ts.tool(
        read_only=lambda args: True,
        concurrency_safe=True,
        destructive=False,
        needs_approval=lambda args: False,
        enabled=lambda: True,
        idempotent=True,
        abort_siblings_on_error=True,
        should_defer=False,
        always_load=True,
        requires_user_interaction=False,
    )
    async def fine() -> str:
        return "ran"

    assert ts.ToolRegistry([fine]).get("fine") is fine


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_result_lines": 10**20}, "max_result_lines must be at most"),
        ({"max_result_chars": 2**64}, "max_result_chars must be at most"),
        ({"max_concurrency": 10**12}, "max_concurrency must be at most"),
        ({"memory": 10**30}, "memory must be at most"),
        ({"max_retries": 10**30, "idempotent": True}, "max_retries must be at most"),
        ({"max_result_chars": True}, "max_result_chars must be a positive integer"),
        ({"max_result_lines": False}, "max_result_lines must be a positive integer"),
        ({"max_concurrency": True}, "max_concurrency must be a positive integer"),
        ({"max_result_chars": 10.0}, "max_result_chars must be a positive integer"),
        ({"max_result_lines": 10**5000}, "max_result_lines must be at most .*; got an integer of 16,610 bits"),
        ({"max_result_chars": -(10**5000)}, "max_result_chars must be a positive integer; got an integer of"),
        ({"timeout": 10**400}, "timeout must be at most 1.79"),
        ({"timeout": float("nan")}, "timeout must be a positive number"),
        ({"num_cpus": float("nan")}, "num_cpus must be a finite number of at least 0"),
        # No scheduler places a call that asks for infinitely many (it was taken, and sent to Ray as it was).
        ({"num_cpus": float("inf")}, "num_cpus must be a finite number of at least 0"),
        ({"num_gpus": float("inf")}, "num_gpus must be a finite number of at least 0"),
    ],
)
def test_numeric_options_are_held_to_what_the_engine_takes(options: dict[str, Any], message: str) -> None:
    ran: list[str] = []

    @ts.tool(**options)
    def broken() -> str:
        ran.append("ran")
        return "a\nb"

    with pytest.raises(ts.ToolDefinitionError, match=message):
        ts.ToolRegistry([broken])
    assert ran == []


def test_the_largest_result_budget_is_taken_and_shapes_nothing() -> None:
    @ts.tool(max_result_chars=sys.maxsize, max_result_lines=sys.maxsize, max_concurrency=1_000_000)
    def lines() -> str:
        return "a\nb"

    executor = ts.Executor([lines])
    outcome = anyio.run(executor.run, [ts.ToolCall("a", "lines", {})])
    assert (outcome.results[0].output, outcome.results[0].truncated) == ("a\nb", False)


def test_unknown_decorator_options_are_refused() -> None:
    with pytest.raises(ts.ToolDefinitionError, match="unknown option\\(s\\): readonly") as raised:

        @ts.tool(readonly=True)  # type: ignore[call-overload]
        async def typo(x: int) -> int:
            return x

    # Still a TypeError, as Python's own unexpected keyword is, for code that catches that.
    assert isinstance(raised.value, TypeError)


def _nested_schema(levels: int) -> dict[str, Any]:
    """An object schema whose ``not`` chain makes it ``levels`` levels deep (itself level 1)."""
    schema: dict[str, Any] = {"type": "object"}
    node = schema
    for _ in range(levels - 1):
        node["not"] = node = {}
    return schema


@pytest.mark.parametrize("levels", [257, 1_000, 100_000])
def test_a_raw_schema_nested_past_the_engines_limit_is_a_schema_error_at_any_depth(levels: int) -> None:
    # Past a thousand levels, walking it recursively overflowed (RecursionError) before the engine could refuse it.
    class Deep(ts.Tool):
        name = "deep"
        input_schema = _nested_schema(levels)

        async def call(self, args: Any, ctx: Any) -> None:
            return None

    with pytest.raises(ts.SchemaError, match="tool `deep` has an invalid input schema: it nests deeper than the limit"):
        ts.ToolRegistry([Deep()])


def test_a_raw_schema_at_the_engines_limit_is_taken() -> None:
    class Deepest(ts.Tool):
        name = "deepest"
        input_schema = _nested_schema(256)

        async def call(self, args: Any, ctx: Any) -> None:
            return None

    assert ts.ToolRegistry([Deepest()]).get("deepest") is not None


def test_class_without_schema_or_call_is_refused() -> None:
    class NoSchema(ts.Tool):
        name = "no_schema"

        async def call(self, args: Any, ctx: Any) -> None:
            return None

    with pytest.raises(ts.ToolDefinitionError, match="input_model or input_schema"):
        ts.ToolRegistry([NoSchema()])

    class NoCall(ts.Tool):
        name = "no_call"
        input_schema = {"type": "object"}

    with pytest.raises(ts.ToolDefinitionError, match="must define call"):
        ts.ToolRegistry([NoCall()])


def test_access_wants_collections_of_keys() -> None:
    assert ts.Access(reads=["a"], writes=("b",)) == ts.Access(reads=("a",), writes=("b",))
    with pytest.raises(TypeError):
        ts.Access(reads="abc")


class _TreeNode(pydantic.BaseModel):
    """A recursive model: a node holds nodes."""

    name: str
    children: list[_TreeNode] = []


def test_a_recursive_argument_model_is_refused_with_a_schema_error() -> None:
    """docs/limits.md: a recursive pydantic model cannot be a tool's arguments (every ``$ref`` is inlined),
    whether it is one argument's type or a class tool's ``input_model``; the error names the definition."""
    message = "schema definition `_TreeNode` is recursive and cannot be inlined"
    with pytest.raises(ts.SchemaError, match=message):

        @ts.tool
        async def walk(tree: _TreeNode) -> int:
            return 1

    class Walk(ts.Tool):
        name = "walk"
        input_model = _TreeNode

        async def call(self, args: Any, ctx: Any) -> int:
            return 1

    with pytest.raises(ts.SchemaError, match=message):
        ts.ToolRegistry([Walk()])

    class RawWalk(ts.Tool):
        name = "raw_walk"
        input_schema = {
            "type": "object",
            "properties": {"tree": {"$ref": "#/$defs/Node"}},
            "$defs": {
                "Node": {
                    "type": "object",
                    "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
                }
            },
        }

        async def call(self, args: Any, ctx: Any) -> int:
            return 1

    with pytest.raises(ts.SchemaError, match="schema definition `Node` is recursive and cannot be inlined"):
        ts.ToolRegistry([RawWalk()])


def test_the_documented_workaround_for_a_recursive_model_takes_the_tree() -> None:
    """docs/limits.md's workaround: the argument as a mapping, validated with the model in the body."""

    @ts.tool
    async def count_nodes(tree: dict[str, Any]) -> int:
        """Counts the nodes of a tree ({"name": ..., "children": [...]})."""
        root = _TreeNode.model_validate(tree)
        stack, count = [root], 0
        while stack:
            count += 1
            stack.extend(stack.pop().children)
        return count

    tree = {"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}, {"name": "d"}]}
    outcome = anyio.run(ts.Executor([count_nodes]).run, [ts.ToolCall("c1", "count_nodes", {"tree": tree})])
    assert outcome.results[0].output == 4
