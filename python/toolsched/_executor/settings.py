"""What an executor was built with: its options, checked once, shared by every room of every run."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any, Literal

from toolsched import _core
from toolsched._backends.backends import Backend, Invoker, assign_backends
from toolsched._executor.emitter import Emitter, is_async_callable
from toolsched._executor.strategies import Batched, Parallel, Partitioned, ResourceAware, Sequential, Strategy
from toolsched._policy.coordination import RedisCoordination
from toolsched._policy.guardrails import Guardrail, Guardrails
from toolsched._policy.hooks import Hook, Hooks
from toolsched._policy.permissions import Mode, Permissions
from toolsched._policy.runstate import Approver
from toolsched._tools.registry import ToolRegistry
from toolsched._tools.tools import Tool
from toolsched._values.calls import ToolCall
from toolsched._values.events import Event, ToolProgress
from toolsched._values.exception_text import described
from toolsched._values.numeric_options import numeric_fault, shown
from toolsched.errors import OptionError
from toolsched.journal import Journal

__all__ = ["ErrorFormatter", "EventCallback", "RepairFunction", "Settings", "Steering", "format_error"]

# The deepest nesting ``max_input_depth`` may allow: the engine's walks of a value recurse once per level.
MAX_INPUT_DEPTH = _core.Limits.MAX_INPUT_DEPTH

logger = logging.getLogger("toolsched")

Steering = Callable[[], Sequence[Any] | Awaitable[Sequence[Any] | None] | None]
EventCallback = Callable[[Event], Any]
ErrorFormatter = Callable[[BaseException, ToolCall], str]
# ``repair_arguments=`` as a callable: ``(call, error) -> str | dict | None``, plain or async; ``error`` is the
# ``ToolResult`` the call would be answered with.
RepairFunction = Callable[[ToolCall, Any], Any]


def format_error(exc: BaseException, call: ToolCall) -> str:
    """The default message for a tool that raised: the exception's type and text."""
    return described(exc)


class Settings:
    """An executor's options after checking (internal; fixed once the executor is built).

    Every room of a run reads what it needs from here: the strategy and error
    policy for scheduling and calls, the control plane (permissions, hooks,
    approver, guardrails) for admission, the backends for invocation.
    """

    __slots__ = (
        "abort_siblings_on_error",
        "approver",
        "backends",
        "coordination",
        "default_backend",
        "error_formatter",
        "hooks",
        "input_guardrails",
        "interactive",
        "journal",
        "limits",
        "mode",
        "offload_dir",
        "on_error",
        "on_event",
        "on_progress",
        "output_guardrails",
        "permissions",
        "post_batch",
        "pre_batch",
        "remote",
        "repair_function",
        "repairs",
        "strategy",
        "unknown_tool",
    )

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        strategy: Strategy | None,
        on_event: EventCallback | Sequence[EventCallback] | None,
        on_progress: EventCallback | None,
        on_error: Literal["result", "raise"],
        abort_siblings_on_error: bool,
        unknown_tool: Literal["result", "raise"],
        max_input_bytes: int,
        max_input_depth: int,
        max_schema_errors: int,
        repair_arguments: bool | RepairFunction,
        interactive: bool,
        offload_dir: str | Path | None,
        error_formatter: ErrorFormatter,
        permissions: Permissions | None,
        hooks: Hooks | None,
        approver: Approver | None,
        input_guardrails: Iterable[Guardrail],
        output_guardrails: Iterable[Guardrail],
        backends: Mapping[str, Backend] | None,
        default_backend: str | None,
        journal: Journal | None,
        coordination: RedisCoordination | None = None,
    ) -> None:
        if coordination is not None and not isinstance(coordination, RedisCoordination):
            raise OptionError(f"coordination must be a toolsched.RedisCoordination, got {coordination!r}")
        self.coordination = coordination
        if journal is not None and not isinstance(journal, Journal):
            raise OptionError(f"journal must be a toolsched.Journal (SqliteJournal, PostgresJournal), got {journal!r}")
        self.journal = journal
        self.strategy: Strategy = Partitioned() if strategy is None else strategy
        if not isinstance(self.strategy, (Sequential, Parallel, Batched, Partitioned, ResourceAware)):
            # A strategy class given without its parentheses (``ts.Parallel``) included: it has a ``kind`` too.
            raise OptionError(
                "strategy must be a toolsched strategy (ts.Sequential(), ts.Parallel(), ts.Batched(size), "
                f"ts.Partitioned(), ts.ResourceAware()), got {self.strategy!r}"
            )
        # Plain text: a subclass's own equality could make "result" equal to "raise".
        if isinstance(on_error, str):
            on_error = str.__str__(on_error)  # type: ignore[assignment]
        if isinstance(unknown_tool, str):
            unknown_tool = str.__str__(unknown_tool)  # type: ignore[assignment]
        if on_error not in ("result", "raise"):
            raise OptionError(f"on_error must be 'result' or 'raise', got {on_error!r}")
        if unknown_tool not in ("result", "raise"):
            raise OptionError(f"unknown_tool must be 'result' or 'raise', got {unknown_tool!r}")
        if not isinstance(abort_siblings_on_error, bool):
            raise OptionError(f"abort_siblings_on_error must be True or False, got {abort_siblings_on_error!r}")
        if not isinstance(interactive, bool):
            raise OptionError(f"interactive must be True or False, got {interactive!r}")
        if on_progress is not None and not callable(on_progress):
            raise OptionError(f"on_progress must be a callable, got {on_progress!r}")
        if offload_dir is not None and not isinstance(offload_dir, (str, PathLike)):
            raise OptionError(f"offload_dir must be a path (str or os.PathLike), got {offload_dir!r}")
        if not callable(error_formatter):
            raise OptionError(f"error_formatter must be a callable (exception, call) -> str, got {error_formatter!r}")
        # The engine walks arguments level by level (its stack bounded by the limit).
        for label, value, most in (
            ("max_input_bytes", max_input_bytes, None),
            ("max_input_depth", max_input_depth, MAX_INPUT_DEPTH),
            ("max_schema_errors", max_schema_errors, None),
        ):
            fault = numeric_fault(value, integer=True, most=most)
            if fault is not None:
                raise OptionError(f"{label} must be {fault}, got {shown(value)}")
        if isinstance(on_event, (list, tuple)):
            on_event = tuple(on_event)
            if not all(callable(sink) for sink in on_event):
                raise OptionError(f"on_event must be a callable or a list of callables, got {on_event!r}")
        elif on_event is not None and not callable(on_event):
            raise OptionError(f"on_event must be a callable or a list of callables, got {on_event!r}")
        self.on_event: EventCallback | tuple[EventCallback, ...] | None = on_event
        self.on_progress = on_progress
        self.on_error = on_error
        self.abort_siblings_on_error = abort_siblings_on_error
        self.unknown_tool = unknown_tool
        self.interactive = interactive
        self.error_formatter = error_formatter
        self.offload_dir = Path(offload_dir) if offload_dir is not None else Path(tempfile.gettempdir()) / "toolsched"
        # The user's repair, tried after the built-in one (which a callable turns on).
        self.repair_function: RepairFunction | None = None
        if callable(repair_arguments) and not isinstance(repair_arguments, bool):
            self.repair_function = repair_arguments
            repair_arguments = True
        elif not isinstance(repair_arguments, bool):
            raise OptionError(
                "repair_arguments must be True, False or an async callable (call, error) -> str | dict | None, "
                f"got {repair_arguments!r}"
            )
        self.repairs: bool = repair_arguments
        self.limits = _core.Limits(max_input_bytes, max_input_depth, max_schema_errors, repair=repair_arguments)
        # The invoker of each tool whose body runs on a backend other than this process;
        # extended whenever a refreshed tool set brings new tools (see ``View``).
        self.backends = backends
        self.default_backend = default_backend
        self.remote: dict[Tool, Invoker] = assign_backends(tuple(registry), backends, default_backend)
        if permissions is not None and not isinstance(permissions, Permissions):
            raise OptionError(f"permissions must be a toolsched.Permissions, got {permissions!r}")
        if hooks is not None and not isinstance(hooks, Hooks):
            raise OptionError(f"hooks must be a toolsched.Hooks, got {hooks!r}")
        if approver is not None and not callable(approver):
            raise OptionError(f"approver must be an async callable of an ApprovalRequest, got {approver!r}")
        self.permissions = permissions
        self.hooks = hooks
        self.approver = approver
        checks_in, checks_out = Guardrails("input", input_guardrails), Guardrails("output", output_guardrails)
        self.input_guardrails: Guardrails | None = checks_in if checks_in else None
        self.output_guardrails: Guardrails | None = checks_out if checks_out else None
        self.mode: Mode = permissions.mode if permissions is not None else "default"
        self.pre_batch: tuple[Hook, ...] = hooks.batch_hooks("pre_batch") if hooks is not None else ()
        self.post_batch: tuple[Hook, ...] = hooks.batch_hooks("post_batch") if hooks is not None else ()

    def bind_backends(self, tools: Sequence[Tool]) -> None:
        """Binds the tools of a new tool set to the backends they name (nothing to do without backends)."""
        if self.backends is not None or self.default_backend is not None:
            self.remote.update(assign_backends(tools, self.backends, self.default_backend))

    def describe_failure(self, exc: Exception, call: ToolCall) -> str:
        """The message of an ``execution_error``: the formatter's, or the default if it fails."""
        try:
            message = self.error_formatter(exc, call)
            if not isinstance(message, str):
                raise TypeError(f"error_formatter returned {type(message).__name__}, not str")
        except Exception:
            logger.exception("error_formatter %r failed for call %s", self.error_formatter, call.id)
            return format_error(exc, call)
        return message

    def emitter(self, extra: Callable[[Event], Any] | None, parent: str | None = None) -> Emitter | None:
        """The event delivery of one run: the executor's callbacks plus ``extra``; None when nobody listens."""
        if extra is None and self.on_event is None and self.on_progress is None:
            return None
        sinks: list[Callable[[Event], Any]] = []
        if isinstance(self.on_event, tuple):
            sinks.extend(self.on_event)
        elif self.on_event is not None:
            sinks.append(self.on_event)
        if self.on_progress is not None:
            on_progress = self.on_progress
            if is_async_callable(on_progress):

                async def progress_only_async(event: Event) -> None:
                    if isinstance(event, ToolProgress):
                        await on_progress(event)

                sinks.append(progress_only_async)
            else:

                def progress_only(event: Event) -> Any:
                    # What it hands back too: an awaitable is awaited by the emitter.
                    return on_progress(event) if isinstance(event, ToolProgress) else None

                sinks.append(progress_only)
        if extra is not None:
            sinks.append(extra)
        return Emitter(sinks, parent) if sinks else None
