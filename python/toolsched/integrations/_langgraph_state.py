"""What the tools of a LangGraph ``ToolNode`` are given: injected state, store and runtime, and the
state a node run by ``Send`` with bare tool calls reads (``toolsched.integrations.langgraph``)."""

from __future__ import annotations

import logging
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_args, get_origin

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ensure_config
from langchain_core.tools import BaseTool
from langchain_core.tools.base import get_all_basemodel_annotations
from langgraph.prebuilt import InjectedState, InjectedStore, ToolRuntime
from langgraph.runtime import get_runtime

from toolsched.integrations.langchain import LangChainTool

__all__ = ["GraphTurn", "Injections", "current_runtime", "injections_of_tool", "sent_state", "tool_runtime"]

logger = logging.getLogger("toolsched.integrations.langgraph")

# Where LangGraph puts a node's runtime and its state readers in its config (its own constants, not
# part of its public API).
CONFIG_KEY_RUNTIME = "__pregel_runtime"
CONFIG_KEY_READ_STATE = "__pregel_read_state"
CONFIG_KEY_READ = "__pregel_read"


@dataclass(frozen=True, slots=True)
class Injections:
    """Where a LangChain tool's injected arguments come from (internal)."""

    state: Mapping[str, str | None]
    optional_state: frozenset[str]
    store: str | None
    runtime: str | None

    @property
    def empty(self) -> bool:
        return not self.state and self.store is None and self.runtime is None


def _marker(annotation: Any, kind: type) -> Any:
    """The ``kind`` marker in an annotation (an instance, or the class itself), looking through Annotated/Union."""
    if isinstance(annotation, kind) or (isinstance(annotation, type) and issubclass(annotation, kind)):
        return annotation
    origin = get_origin(annotation)
    if isinstance(origin, type) and issubclass(origin, kind):
        return origin
    if origin is not None:
        for argument in get_args(annotation):
            found = _marker(argument, kind)
            if found is not None:
                return found
    return None


def injections_of_tool(tool: BaseTool) -> Injections:
    schema = tool.get_input_schema()
    annotations: dict[str, Any] = {}
    function = getattr(tool, "func", None) or getattr(tool, "coroutine", None)
    if function is not None:
        try:
            annotations.update(typing.get_type_hints(function, include_extras=True))
        except Exception:
            logger.debug("could not read the type hints of %s", tool.name, exc_info=True)
    annotations.update(get_all_basemodel_annotations(schema))
    fields = getattr(schema, "model_fields", {})
    state: dict[str, str | None] = {}
    optional: set[str] = set()
    store: str | None = None
    runtime: str | None = None
    for name, annotation in annotations.items():
        if name == "return":
            continue
        marker = _marker(annotation, InjectedState)
        if marker is not None:
            state[name] = marker.field if isinstance(marker, InjectedState) else None
            info = fields.get(name)
            if info is not None and not info.is_required():
                optional.add(name)
        if _marker(annotation, InjectedStore) is not None:
            store = name
        if _marker(annotation, ToolRuntime) is not None:
            runtime = name
    return Injections(state, frozenset(optional), store, runtime)


@dataclass(slots=True)
class GraphTurn:
    """One invocation of the node: what injected arguments are made of, and what the tools answered (internal)."""

    # The node's messages key, where a tool's injections come from, and its LangChain tools.
    messages_key: str
    injections_of: Callable[[LangChainTool], Injections | None]
    tools: list[Any]
    state: Any
    config: RunnableConfig | None
    runtime: Any
    responses: dict[str, Any] = field(default_factory=dict)
    raised: dict[str, BaseException] = field(default_factory=dict)
    # Calls whose injected arguments could not be made: the error leaves the node.
    uninjectable: dict[str, BaseException] = field(default_factory=dict)

    def invocation(self, tool: LangChainTool, call_id: str) -> tuple[dict[str, Any], Any]:
        injections = self.injections_of(tool)
        if injections is None or injections.empty:
            return {}, self.config
        try:
            return self._injected(tool.name, injections, call_id), self.config
        except Exception as exc:
            # As from LangGraph's node: what cannot be injected leaves the graph, whatever the error handling.
            self.uninjectable[call_id] = exc
            raise

    def _injected(self, name: str, injections: Injections, call_id: str) -> dict[str, Any]:
        injected: dict[str, Any] = {}
        if injections.state:
            state = self.state
            if isinstance(state, list):
                fields = list(injections.state.values())
                if fields[0] is None or fields == [self.messages_key]:
                    state = {self.messages_key: state}
                else:
                    needed = ", ".join(field for field in fields if field)
                    raise ValueError(
                        f"Invalid input to ToolNode. Tool {name} requires graph state dict as input."
                        + (f" State should contain fields {needed}." if needed else "")
                    )
            for argument, field_name in injections.state.items():
                if field_name is None:
                    injected[argument] = state
                elif isinstance(state, Mapping):
                    if field_name in state:
                        injected[argument] = state[field_name]
                    elif argument not in injections.optional_state:
                        raise KeyError(field_name)
                elif hasattr(state, field_name):
                    injected[argument] = getattr(state, field_name)
                elif argument not in injections.optional_state:
                    raise AttributeError(field_name)
        runtime = self.runtime
        if injections.store is not None:
            store = getattr(runtime, "store", None)
            if store is None:
                raise ValueError(
                    "Cannot inject store into tools with InjectedStore annotations - "
                    "please compile your graph with a store."
                )
            injected[injections.store] = store
        if injections.runtime is not None:
            injected[injections.runtime] = tool_runtime(self.state, self.config, runtime, call_id, self.tools)
        return injected

    def keep(self, call_id: str, response: Any, error: BaseException | None) -> None:
        if error is not None:
            self.raised[call_id] = error
        else:
            self.responses[call_id] = response


def tool_runtime(state: Any, config: Any, runtime: Any, call_id: Any, tools: list[Any]) -> ToolRuntime:
    """LangGraph's ``ToolRuntime`` for one call, from the graph's runtime (None outside a graph) and config."""
    return ToolRuntime(
        state=state,
        context=getattr(runtime, "context", None),
        config=config or RunnableConfig(),
        stream_writer=getattr(runtime, "stream_writer", None) or _discard,
        tool_call_id=call_id,
        store=getattr(runtime, "store", None),
        tools=list(tools),
        execution_info=getattr(runtime, "execution_info", None),
        server_info=getattr(runtime, "server_info", None),
    )


def _discard(chunk: Any) -> None:
    """A stream writer for runs outside a graph: writes go nowhere."""


def sent_state(config: Any) -> Any:
    """The state a node run by ``Send`` with bare tool calls gets: what an edge would give it, read as
    LangGraph's node reads it (the graph's state reader in the config; its channels on older
    langgraph; nothing outside a graph). Without a config, that of the node the call is made from."""
    if config is None:
        config = ensure_config()
    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    if not isinstance(configurable, Mapping):
        return {}
    read_state = configurable.get(CONFIG_KEY_READ_STATE)
    if read_state is not None:
        return read_state()
    read = configurable.get(CONFIG_KEY_READ)
    # LangGraph's reader is ``partial(local_read, scratchpad, channels, managed, task)``: its channels alone.
    arguments: tuple[Any, ...] = tuple(getattr(read, "args", ()))
    if read is None or len(arguments) < 2:
        return {}
    return read(list(arguments[1]), True)


def current_runtime(config: Any = None) -> Any:
    """The LangGraph runtime of the node being run: the graph's, else the one the config carries (as
    LangGraph hands it to a node invoked on its own), else None."""
    try:
        return get_runtime()
    except Exception:
        pass
    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    if isinstance(configurable, Mapping):
        return configurable.get(CONFIG_KEY_RUNTIME)
    return None
