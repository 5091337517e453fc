"""toolsched: find, validate, schedule and run the tool calls a language model emits.

One result per call, in the model's order, with a Rust engine on the hot path.
"""

from toolsched.context import ToolContext
from toolsched.errors import (
    AssemblyError,
    OptionError,
    SchemaError,
    SemanticError,
    ToolCallFailed,
    ToolDefinitionError,
    ToolNameError,
    ToolschedError,
    ToolTimeoutError,
    UnknownToolError,
    WorkerProcessError,
)
from toolsched.events import (
    BatchFinished,
    BatchStarted,
    Event,
    RunFinished,
    ToolFinished,
    ToolProgress,
    ToolStarted,
    ToolUpdated,
)
from toolsched.executor import Executor
from toolsched.outcome import Outcome
from toolsched.registry import ToolRegistry
from toolsched.results import Duplicate, ErrorKind, ToolCall, ToolResult
from toolsched.strategies import Batched, Parallel, Partitioned, Sequential, Strategy
from toolsched.tools import Access, FunctionTool, Tool, tool

__version__ = "0.1.0"

__all__ = [
    "Access",
    "AssemblyError",
    "BatchFinished",
    "BatchStarted",
    "Batched",
    "Duplicate",
    "ErrorKind",
    "Event",
    "Executor",
    "FunctionTool",
    "OptionError",
    "Outcome",
    "Parallel",
    "Partitioned",
    "RunFinished",
    "SchemaError",
    "SemanticError",
    "Sequential",
    "Strategy",
    "Tool",
    "ToolCall",
    "ToolCallFailed",
    "ToolContext",
    "ToolDefinitionError",
    "ToolFinished",
    "ToolNameError",
    "ToolProgress",
    "ToolRegistry",
    "ToolResult",
    "ToolStarted",
    "ToolTimeoutError",
    "ToolUpdated",
    "ToolschedError",
    "UnknownToolError",
    "WorkerProcessError",
    "__version__",
    "tool",
]
