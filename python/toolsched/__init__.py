"""toolsched: find, validate, schedule and run the tool calls a language model emits.

One result per call, in the model's order, with a Rust engine on the hot path.
"""

from toolsched.approvals import ApprovalRequest, RunState
from toolsched.context import ToolContext
from toolsched.errors import (
    ApprovalError,
    AssemblyError,
    GuardrailTripped,
    McpConnectionError,
    McpToolError,
    MissingResultError,
    OptionError,
    RefreshError,
    ResourceError,
    ResponseFormatError,
    RuleError,
    SchemaError,
    SemanticError,
    StateError,
    ToolCallFailed,
    ToolDefinitionError,
    ToolNameError,
    ToolschedError,
    ToolTimeoutError,
    UnknownToolError,
    WorkerProcessError,
    WorkloadError,
)
from toolsched.events import (
    BatchFinished,
    BatchStarted,
    Event,
    RunFinished,
    ToolFinished,
    ToolProgress,
    ToolsChanged,
    ToolsRefreshFailed,
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
from toolsched.nested import AgentTool, ChildRun, agent_tool
from toolsched.outcome import Outcome
from toolsched.permissions import Decision, Permissions
from toolsched.registry import ToolRegistry
from toolsched.resources import RunScope
from toolsched.results import Duplicate, ErrorKind, ToolCall, ToolResult
from toolsched.strategies import Batched, Parallel, Partitioned, ResourceAware, Sequential, Strategy
from toolsched.tools import Access, FunctionTool, Tool, tool

__version__ = "0.1.0"

__all__ = [
    "Access",
    "AgentTool",
    "ApprovalError",
    "ApprovalRequest",
    "AssemblyError",
    "BatchEvent",
    "BatchFinished",
    "BatchStarted",
    "Batched",
    "ChildRun",
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
    "McpConnectionError",
    "McpToolError",
    "MissingResultError",
    "OptionError",
    "Outcome",
    "Parallel",
    "Partitioned",
    "Permissions",
    "PostgresJournal",
    "RefreshError",
    "Reject",
    "ResourceAware",
    "ResourceError",
    "ResponseFormatError",
    "Rewrite",
    "RuleError",
    "RunClaimedError",
    "RunExistsError",
    "RunFinished",
    "RunRecord",
    "RunScope",
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
    "ToolTimeoutError",
    "ToolUpdated",
    "ToolsChanged",
    "ToolsRefreshFailed",
    "ToolschedError",
    "UnknownRunError",
    "UnknownToolError",
    "WorkerProcessError",
    "WorkloadError",
    "__version__",
    "agent_tool",
    "tool",
]
