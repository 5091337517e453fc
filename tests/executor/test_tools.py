"""The tool definition: schemas from hints, models and raw JSON Schema; fail-closed defaults."""

from __future__ import annotations

from typing import Annotated, Any, Literal

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
        ({"max_result_chars": -1}, "max_result_chars must be a positive number"),
        ({"max_concurrency": 0}, "max_concurrency must be a positive number"),
    ],
)
def test_bad_metadata_is_refused_with_the_field_named(options: dict[str, Any], message: str) -> None:
    @ts.tool(**options)
    async def broken(x: int) -> int:
        return x

    with pytest.raises(ts.ToolDefinitionError, match=message):
        ts.ToolRegistry([broken])


def test_unknown_decorator_options_are_refused() -> None:
    with pytest.raises(TypeError, match="unknown option"):

        @ts.tool(readonly=True)  # type: ignore[call-overload]
        async def typo(x: int) -> int:
            return x


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
