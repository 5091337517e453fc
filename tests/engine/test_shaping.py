"""Result shaping: every output within its tool's budget, cut where the tool says."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolsched as ts
from toolsched import _core
from toolsched._executor.shaping import shape_output

pytestmark = pytest.mark.anyio


def make(output: Any, **options: Any) -> ts.Tool:
    @ts.tool(**options)
    async def produce() -> Any:
        return output

    return produce


async def run_one(tool: ts.Tool, tmp_path: Path) -> ts.ToolResult:
    outcome = await ts.Executor([tool], offload_dir=tmp_path).run([ts.ToolCall("c1", "produce")])
    return outcome.results[0]


async def test_outputs_within_budget_are_untouched(tmp_path: Path) -> None:
    for value in [42, 3.5, True, None, "short", {"a": [1, 2]}]:
        result = await run_one(make(value, max_result_chars=100), tmp_path)
        assert result.output == value
        assert result.truncated is False


@pytest.mark.parametrize("cut", ["head", "tail", "middle"])
async def test_oversized_text_is_cut_to_the_budget(cut: str, tmp_path: Path) -> None:
    text = "".join(f"line {i}\n" for i in range(1000))
    result = await run_one(make(text, max_result_chars=500, truncate=cut), tmp_path)
    assert result.truncated
    assert len(result.output) <= 500
    assert "truncated" in result.output
    if cut == "tail":
        assert result.output.startswith("line 0\n")
    if cut == "head":
        assert result.output.endswith("line 999\n")
    if cut == "middle":
        assert result.output.startswith("line 0\n") and result.output.endswith("line 999\n")


async def test_structured_outputs_are_measured_as_json(tmp_path: Path) -> None:
    result = await run_one(make({"rows": list(range(1000))}, max_result_chars=200), tmp_path)
    assert result.truncated
    assert isinstance(result.output, str) and len(result.output) <= 200
    assert result.output.startswith('{"rows": [0, 1, 2')


async def test_line_budgets_apply(tmp_path: Path) -> None:
    text = "".join(f"{i}\n" for i in range(50))
    result = await run_one(make(text, max_result_lines=5), tmp_path)
    assert result.truncated
    assert result.output.startswith("0\n1\n2\n3\n4\n")


async def test_offload_writes_the_whole_output_and_returns_a_preview(tmp_path: Path) -> None:
    text = "x" * 10_000
    result = await run_one(make(text, max_result_chars=300, truncate="offload"), tmp_path)
    assert result.truncated
    assert result.offload_path is not None
    assert await anyio.Path(result.offload_path).read_text() == text
    assert result.offload_path in result.output
    assert len(result.output) <= 300


@given(
    text=st.text(max_size=400),
    max_chars=st.integers(0, 300),
    max_lines=st.one_of(st.none(), st.integers(0, 20)),
    cut=st.sampled_from(["head", "tail", "middle"]),
)
def test_truncation_never_exceeds_the_budget(text: str, max_chars: int, max_lines: int | None, cut: str) -> None:
    shaped = _core.truncate(text, max_chars, max_lines=max_lines, cut=cut)
    if shaped is None:
        assert len(text) <= max_chars
        # Lines are separated by "\n" only (str.splitlines also splits on \x1c-\x1e, \u2028, ...).
        lines = text.removesuffix("\n").count("\n") + 1
        assert max_lines is None or lines <= max_lines or len(text) <= max_lines
    else:
        output, omitted = shaped
        assert len(output) <= max_chars
        assert 0 < omitted <= len(text)


def test_unknown_cut_is_refused() -> None:
    with pytest.raises(ts.OptionError, match="unknown cut"):
        _core.truncate("abc", 1, cut="sideways")


async def test_offloaded_outputs_never_overwrite_each_other(tmp_path: Path) -> None:
    # Call IDs repeat across runs, and "a/b" and "a_b" read alike once made safe for a file name:
    # each offloaded output keeps a file of its own, holding what its result says.
    @ts.tool(max_result_chars=200, truncate="offload")
    async def produce(marker: str) -> str:
        return marker * 5_000

    executor = ts.Executor([produce], offload_dir=tmp_path)
    first = await executor.run([ts.ToolCall("c1", "produce", {"marker": "a"})])
    second = await executor.run([ts.ToolCall("c1", "produce", {"marker": "b"})])
    alike = await executor.run(
        [ts.ToolCall("x/y", "produce", {"marker": "c"}), ts.ToolCall("x_y", "produce", {"marker": "d"})]
    )
    results = [*first.results, *second.results, *alike.results]
    paths = [result.offload_path for result in results]
    assert None not in paths and len(set(paths)) == 4
    for result, marker in zip(results, "abcd", strict=True):
        assert result.offload_path is not None
        assert await anyio.Path(result.offload_path).read_text() == marker * 5_000


# What os.listdir / os.fsdecode give for a file name that is not UTF-8: text with a lone surrogate.
UNDECODABLE_NAME = os.fsdecode(b"caf\xe9.txt")


@pytest.mark.parametrize("cut", ["head", "tail", "middle"])
async def test_text_with_lone_surrogates_is_cut_like_any_other(cut: str, tmp_path: Path) -> None:
    text = "\n".join([UNDECODABLE_NAME] * 100)
    result = await run_one(make(text, max_result_chars=200, truncate=cut), tmp_path)
    assert not result.is_error and result.truncated
    assert len(result.output) <= 200 and "caf\ufffd.txt" in result.output


async def test_text_with_lone_surrogates_within_budget_is_left_as_returned(tmp_path: Path) -> None:
    result = await run_one(make(UNDECODABLE_NAME, max_result_lines=3), tmp_path)
    assert (result.output, result.truncated, result.is_error) == (UNDECODABLE_NAME, False, False)


async def test_text_with_lone_surrogates_is_offloaded(tmp_path: Path) -> None:
    text = "\n".join([UNDECODABLE_NAME] * 100)
    result = await run_one(make(text, max_result_chars=200, truncate="offload"), tmp_path)
    assert not result.is_error and result.offload_path is not None
    # One replacement character per lone surrogate: the note's count is the output's length.
    assert await anyio.Path(result.offload_path).read_text() == text.replace("\udce9", "\ufffd")
    assert result.output.startswith("caf\ufffd.txt\n") and f"{len(text)} characters" in result.output


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "output",
    [{"n": 10**5000}, _nested(100_000), {(1, 2): "x" * 500}],
    ids=["huge_int_inside", "too_deep", "tuple_keys"],
)
async def test_outputs_json_cannot_hold_are_measured_as_text_not_failed(output: Any, tmp_path: Path) -> None:
    result = await run_one(make(output, max_result_chars=100), tmp_path)
    assert not result.is_error
    assert result.output is output or (result.truncated and len(result.output) <= 100)


def _lines(text: str) -> int:
    return text.removesuffix("\n").count("\n") + 1


@settings(deadline=None)
@given(
    text=st.text(st.sampled_from("ab\n"), min_size=1, max_size=600),
    max_chars=st.integers(0, 300),
    max_lines=st.one_of(st.none(), st.integers(1, 12)),
)
def test_an_offloaded_preview_and_its_note_keep_to_the_budget(
    text: str, max_chars: int, max_lines: int | None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tool = make(text, max_result_chars=max_chars, max_result_lines=max_lines, truncate="offload")
    directory = tmp_path_factory.mktemp("offload")
    output, truncated, path = anyio.run(shape_output, text, tool, "c1", directory)
    if not truncated:
        assert output is text
        return
    assert path is not None
    note = f"[full output of {len(text)} characters saved to {path}]"
    # The note names the file: it is never cut, the preview before it gives way first.
    assert output.endswith(note)
    assert text.startswith(output.removesuffix(note).removesuffix("\n"))
    if len(note) <= max_chars:
        assert len(output) <= max_chars
    else:
        assert output == note
    assert max_lines is None or _lines(output) <= max_lines


async def test_an_offload_note_longer_than_the_budget_is_kept_whole(tmp_path: Path) -> None:
    result = await run_one(make("row\n" * 1000, max_result_chars=60, truncate="offload"), tmp_path)
    assert result.offload_path is not None
    assert result.output == f"[full output of 4000 characters saved to {result.offload_path}]"
