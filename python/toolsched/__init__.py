"""toolsched: find, validate, schedule and run the tool calls a language model emits.

One result per call, in the model's order, with a Rust engine on the hot path.
"""

from toolsched.approvals import ApprovalRequest, RunState
from toolsched.backends import (
    Backend,
    BackendError,
    BackendUnavailableError,
    LocalBackend,
    RayBackend,
    ResultTooLargeError,
    WorkerLostError,
)
from toolsched.context import ToolContext
from toolsched.errors import (
    ApprovalError,
    AssemblyError,
    GuardrailTripped,
    McpConnectionError,
    McpToolError,
    MissingResultError,
    OptionError,
    ResponseFormatError,
    RuleError,
    SchemaError,
    SemanticError,
    StateError,
    ToolCallFailed,
    ToolDefinitionError,
    ToolNameError,
    ToolschedError,
    UnknownToolError,
    WorkloadError,
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
from toolsched.guardrails import GuardrailEvent, Reject
from toolsched.hooks import BatchEvent, HookEvent, Hooks, Rewrite
from toolsched.journal import (
    Journal,
    JournalCorruptError,
    JournaledCall,
    JournalError,
    JournalVersionError,
    PostgresJournal,
    RunClaimedError,
    RunExistsError,
    RunRecord,
    SqliteJournal,
    UnknownRunError,
)
from toolsched.outcome import Outcome
from toolsched.permissions import Decision, Permissions
from toolsched.registry import ToolRegistry
from toolsched.results import Duplicate, ErrorKind, ToolCall, ToolResult
from toolsched.strategies import Batched, Parallel, Partitioned, ResourceAware, Sequential, Strategy
from toolsched.tools import Access, FunctionTool, Tool, tool

__version__ = "0.1.0"

__all__ = [
    "Access",
    "ApprovalError",
    "ApprovalRequest",
    "AssemblyError",
    "Backend",
    "BackendError",
    "BackendUnavailableError",
    "BatchEvent",
    "BatchFinished",
    "BatchStarted",
    "Batched",
    "Decision",
    "Duplicate",
    "ErrorKind",
    "Event",
    "Executor",
    "FunctionTool",
    "GuardrailEvent",
    "GuardrailTripped",
    "HookEvent",
    "Hooks",
    "Journal",
    "JournalCorruptError",
    "JournalError",
    "JournalVersionError",
    "JournaledCall",
    "LocalBackend",
    "McpConnectionError",
    "McpToolError",
    "MissingResultError",
    "OptionError",
    "Outcome",
    "Parallel",
    "Partitioned",
    "Permissions",
    "PostgresJournal",
    "RayBackend",
    "Reject",
    "ResourceAware",
    "ResponseFormatError",
    "ResultTooLargeError",
    "Rewrite",
    "RuleError",
    "RunClaimedError",
    "RunExistsError",
    "RunFinished",
    "RunRecord",
    "RunState",
    "SchemaError",
    "SemanticError",
    "Sequential",
    "SqliteJournal",
    "StateError",
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
    "ToolUpdated",
    "ToolschedError",
    "UnknownRunError",
    "UnknownToolError",
    "WorkerLostError",
    "WorkloadError",
    "__version__",
    "tool",
]
