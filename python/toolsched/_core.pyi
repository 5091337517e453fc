"""Type stubs for the Rust engine (checked by ``python -m mypy.stubtest toolsched._core``)."""

from collections.abc import Callable, Coroutine, Generator, Iterable, Sequence
from contextvars import Context
from typing import Any, ClassVar, final

__all__ = [
    "ConflictPlanner",
    "Limits",
    "Resume",
    "RuleTable",
    "SlotBuilder",
    "ToolTable",
    "assemble",
    "call_init",
    "detached",
    "normalize_key",
    "plan_batches",
    "plan_conflicts",
    "start",
    "truncate",
    "turn_jobs",
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
        repairs: list[tuple[int, tuple[str, ...]]] | None = None,
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
    MAX_INPUT_DEPTH: ClassVar[int]
    def __new__(
        cls, max_input_bytes: int, max_input_depth: int, max_errors: int, *, repair: bool = False
    ) -> Limits: ...
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
def start(
    coroutine: Coroutine[Any, Any, Any] | Generator[Any, Any, Any], base: Context | None = None
) -> Resume | None: ...

@final
class Resume:
    def __await__(self) -> Generator[Any, Any, Any]: ...
    def __iter__(self) -> Resume: ...
    def __next__(self) -> Any: ...
    def send(self, value: Any) -> Any: ...
    def throw(self, *args: Any) -> Any: ...
    def close(self) -> None: ...

@final
class SlotBuilder:
    def __new__(cls, cls_: type[Any], names: Sequence[str], defaults: tuple[Any, ...] | None = None) -> SlotBuilder: ...
    def __call__(self, *values: Any) -> Any: ...
    def function(self) -> Callable[..., Any]: ...

def call_init(cls: type[Any], python_init: Callable[..., None]) -> Callable[..., None]: ...
def turn_jobs(
    builder: SlotBuilder,
    calls: list[Any],
    tools: tuple[Any, ...],
    facts: tuple[Any, ...],
    tool_rows: list[int],
    arg_rows: list[Any],
    rulings: list[Any],
) -> list[Any]: ...
def assemble(count: int, slots: Sequence[int], results: list[Any]) -> list[Any]: ...
def truncate(
    text: str, max_chars: int, *, max_lines: int | None = None, cut: str = "tail"
) -> tuple[str, int] | None: ...
