"""Result shaping: every output within its tool's budget, cut where the tool says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

import toolsched as ts
from toolsched import _core

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
