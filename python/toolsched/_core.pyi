"""Type stubs for the Rust engine (checked by ``python -m mypy.stubtest toolsched._core``)."""

from collections.abc import Iterable, Sequence
from typing import Any, final

__all__ = [
    "ConflictPlanner",
    "Limits",
    "Returned",
    "RuleTable",
    "ToolTable",
    "assemble",
    "detached",
    "normalize_key",
    "plan_batches",
    "plan_conflicts",
    "send",
    "start",
    "truncate",
]

@final
class ToolTable:
    def __new__(cls, tools: Sequence[tuple[str, Sequence[str], Any]]) -> ToolTable: ...
    def __len__(self) -> int: ...
    def prepare(
        self,
        calls: Iterable[Any],
        disabled: Sequence[bool],
        limits: Limits,
        rules: RuleTable | None = None,
        call_type: type | None = None,
    ) -> tuple[
        list[int],
        list[Any],
        list[tuple[int, str, str]],
        list[int] | None,
        list[tuple[int, int, bool]],
        list[Any] | None,
    ]: ...
    def has_direct_path(self, tool: int) -> bool: ...
    def check(self, tool: int, args: Any, limits: Limits) -> tuple[Any, str | None]: ...

@final
class Limits:
    def __new__(cls, max_input_bytes: int, max_input_depth: int, max_errors: int) -> Limits: ...
    @property
    def max_input_bytes(self) -> int: ...
    @property
    def max_input_depth(self) -> int: ...
    @property
    def max_errors(self) -> int: ...

@final
class RuleTable:
    def __new__(cls, undecided: Any, tools: Sequence[Any]) -> RuleTable: ...
    def __len__(self) -> int: ...
    def judge(self, tool: int, args: Any) -> Any: ...

def plan_batches(
    strategy_name: str, safe: Sequence[bool], *, max_concurrency: int, size: int = 1
) -> list[tuple[int, int, int]]: ...
def plan_conflicts(
    accesses: Sequence[tuple[Sequence[str], Sequence[str]] | None],
) -> tuple[list[int], list[int], list[int], list[int]]: ...

@final
class ConflictPlanner:
    def __new__(cls) -> ConflictPlanner: ...
    def insert(self, access: tuple[Sequence[str], Sequence[str]] | None) -> list[int]: ...
    def __len__(self) -> int: ...

def normalize_key(key: str) -> str: ...
def detached(args: Any) -> Any: ...
def start(coroutine: Any, base: Any, finished: Any) -> Any: ...
def send(context: Any, coroutine: Any, value: Any) -> Any: ...

@final
class Returned:
    @property
    def value(self) -> Any: ...

def assemble(count: int, slots: Sequence[int], results: list[Any]) -> list[Any]: ...
def truncate(
    text: str, max_chars: int, *, max_lines: int | None = None, cut: str = "tail"
) -> tuple[str, int] | None: ...
