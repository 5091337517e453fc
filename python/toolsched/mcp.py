"""The MCP bridge: the tools of a Model Context Protocol server as toolsched tools.

::

    from toolsched import mcp as ts_mcp

    async with ts_mcp.connect_stdio("python", ["server.py"]) as server:
        executor = ts.Executor([*local_tools, *await server.tools()])
        ...                                   # turns of a tool loop
        executor = ts.Executor([*local_tools, *await server.refresh_tools()])

A connection stays open for as long as its ``async with`` block, across any
number of turns. Each server tool becomes an ``McpTool``: its input schema is
validated by the engine before anything is sent, and every call passes the
full pipeline (hooks, permissions, timeouts, shaping). The server's
annotations map to the tool's flags:

- ``readOnlyHint`` true: read-only and concurrency-safe;
- ``destructiveHint``: destructive unless the server says false (the MCP
  default is true) or the tool is read-only;
- ``idempotentHint`` true: ``idempotent``;
- ``openWorldHint``: recorded as ``open_world`` (None when not given).

Tool names are made acceptable to every provider (``local_name``: letters,
digits, ``_`` and ``-``, at most 64) while calls use the server's own name; a
tool whose input schema the engine cannot compile is left out of the list
with a warning on the ``toolsched.mcp`` logger, so one bad tool does not cost
the others. Through ``connect_stdio`` and ``connect_http`` the same holds for
a ``tools/list`` entry that is not an MCP tool (a name that is not text, no
``inputSchema``) or that nests deeper than a tool's schema may (256 levels):
each entry is checked alone, and the warning names it (its name, else its
index in its page) and says why; a list with no valid entry lists no tools.
An answer that is not a list of entries is an ``McpConnectionError``. A
tool listed twice is listed once (its first entry); a list whose cursor
comes back, or that goes on past ``MAX_TOOL_PAGES`` pages, ends there: each
with a warning.

A successful call's output is its text (several text blocks joined by
newlines), else its content blocks as dicts (images, resources), else its
structured content.

Annotations are hints from the server; with ``trust_hints=False`` they are
ignored and every tool is treated as writing, destructive and unsafe to run
alongside others. A tool the server reports as failed, a protocol error, a
result that is not MCP (``McpToolError`` naming the fields), one that breaks
the output schema its tool declared (``McpToolError``) or a dropped
connection becomes that call's ``execution_error`` result (``McpToolError`` /
``McpConnectionError`` as the message); a request the server does not answer
within ``read_timeout`` (300 seconds by default) or the tool's ``timeout``,
or does not read within ``read_timeout`` (a stdio server that stopped
reading its input), is the call's ``timeout``, saying so: never a crash or a
hang of the run.
Once the connection is known to be gone (a stdio server's output ended, a
request found it closed), every later call fails at once with a message
saying it was called after that and not sent. One ``async with`` at a time
holds a connection: entering it while open is an ``McpConnectionError``. A
``prefix`` that is not text or a ``read_timeout`` that is not a positive
number of seconds (or None) is an ``OptionError`` when the connection is
made. The ``mcp`` package is imported only when a connection is made
(``pip install 'toolsched[mcp]'``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import sys
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import anyio.abc

from toolsched._executor.timed_out import CallTimedOut
from toolsched._tools.context import ToolContext
from toolsched._tools.mcp_listing import (
    entry_label,
    holds_cut,
    reply_in_body,
    shown_errors,
    too_deep_line,
)
from toolsched._tools.mcp_stderr import stderr_into
from toolsched._tools.registry import ToolRegistry
from toolsched._tools.schema import SCHEMA_DEPTH
from toolsched._tools.tools import Tool
from toolsched._values.numeric_options import numeric_fault, shown
from toolsched.errors import McpConnectionError, McpToolError, OptionError, SchemaError, ToolDefinitionError

if TYPE_CHECKING:
    import mcp
    import mcp_types

__all__ = ["DEFAULT_READ_TIMEOUT", "McpConnection", "McpTool", "connect", "connect_http", "connect_stdio", "local_name"]

logger = logging.getLogger("toolsched.mcp")

# Provider APIs accept tool names of letters, digits, `_` and `-`, at most 64 of them.
_NAME_LIMIT = 64
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_-]")

MAX_TOOL_PAGES = 100
"""Bound on the pages of one ``tools/list`` walk, so a server that never stops paging cannot hang a refresh: the
tools of the first ``MAX_TOOL_PAGES`` pages are kept, with a warning."""

DEFAULT_READ_TIMEOUT = 300.0
"""Seconds a request waits for its answer unless ``read_timeout`` says otherwise: a reply that never comes
(the server hangs, or sends a line that is not a reply to it) fails that call instead of hanging it."""


def local_name(prefix: str, remote_name: str, taken: set[str]) -> str:
    """The toolsched name of a server tool: ``prefix + remote_name``, made acceptable to every provider.

    Characters other than letters, digits, ``_`` and ``-`` become ``_``; a name
    over 64 characters is cut and ends with a short digest of the full name;
    a name already taken on the connection gets ``_2``, ``_3``, ... The server
    is always called by its own name (``McpTool.remote_name``).
    """
    name = _UNSAFE_NAME.sub("_", prefix + remote_name) or "_"
    if len(name) > _NAME_LIMIT:
        digest = hashlib.sha256(remote_name.encode()).hexdigest()[:8]
        name = f"{name[: _NAME_LIMIT - 9]}_{digest}"
    candidate, number = name, 1
    while candidate in taken:
        number += 1
        suffix = f"_{number}"
        candidate = name[: _NAME_LIMIT - len(suffix)] + suffix
    return candidate


def _check_options(prefix: Any, read_timeout: Any = None) -> None:
    """``OptionError`` for a ``prefix`` that is not text or a ``read_timeout`` that is not a positive number of
    seconds (``inf`` and None: no bound), raised when the connection is made rather than at its first request."""
    if not isinstance(prefix, str):
        raise OptionError(f"prefix must be text, got {shown(prefix)}")
    fault = None if read_timeout is None else numeric_fault(read_timeout, integer=False, infinite=True)
    if fault is not None:
        raise OptionError(f"read_timeout must be {fault} of seconds (or None), got {shown(read_timeout)}")


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise ImportError("toolsched.mcp needs the `mcp` package: pip install 'toolsched[mcp]'") from exc


class McpTool(Tool):
    """One tool of an MCP server, called through its ``McpConnection``.

    ``remote_name`` is the server's name for it (``name`` may carry the
    connection's prefix); ``open_world`` and ``title`` are the server's hints.
    """

    input_schema: dict[str, Any]

    def __init__(self, connection: McpConnection, spec: mcp_types.Tool, *, name: str, trust_hints: bool) -> None:
        self.connection = connection
        self.spec = spec
        self.remote_name = spec.name
        self.name = name
        self.description = spec.description or spec.title or ""
        self.input_schema = dict(spec.input_schema)
        hints = spec.annotations if trust_hints else None
        self.title = spec.title or (hints.title if hints is not None else None)
        read_only = hints is not None and hints.read_only_hint is True
        self.read_only = read_only
        self.concurrency_safe = read_only
        self.destructive = not read_only and (hints is None or hints.destructive_hint is not False)
        self.idempotent = hints is not None and hints.idempotent_hint is True
        self.open_world: bool | None = None if hints is None else hints.open_world_hint

    async def call(self, args: Mapping[str, Any], ctx: ToolContext | None) -> Any:
        """Sends the call to the server; its text (or content blocks) is the output."""
        return await self.connection.call_tool(self.remote_name, args, ctx, tool_timeout=self.timeout)


def _first_cause(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__


def _content_output(result: mcp_types.CallToolResult) -> Any:
    """What a successful call returns: its text, else its content blocks, else its structured content."""
    blocks = result.content
    if not blocks:
        return result.structured_content
    texts = [getattr(block, "text", None) for block in blocks if getattr(block, "type", None) == "text"]
    if len(texts) == len(blocks):
        return "\n".join(text for text in texts if isinstance(text, str))
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in blocks]


def _not_mcp(exc: Exception) -> str:
    """What a reply that is not the protocol's got wrong: the first fields the ``mcp`` package refused."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    return shown_errors(errors(include_url=False))


def _error_message(result: mcp_types.CallToolResult) -> str:
    texts = [getattr(block, "text", "") for block in result.content if getattr(block, "type", None) == "text"]
    return "\n".join(text for text in texts if text) or "the tool reported an error without a message"


class _Unanswered(McpConnectionError, CallTimedOut):
    """A request the server did not answer within its read timeout: an ``McpConnectionError`` (and a
    ``TimeoutError``) to a caller, and to the executor the call's ``timeout``."""


class _WatchedReadStream:
    """A transport's read stream that tells its connection when the server's side of it ends.

    It forwards the ``ReadStream`` protocol of the ``mcp`` package unchanged.
    """

    def __init__(self, stream: Any, on_end: Any, on_item: Any) -> None:
        self._stream = stream
        self._on_end = on_end
        self._on_item = on_item

    @property
    def last_context(self) -> Any:
        return getattr(self._stream, "last_context", None)

    async def receive(self) -> Any:
        try:
            item = await self._stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise
        return self._on_item(item)

    async def aclose(self) -> None:
        await self._stream.aclose()

    def __aiter__(self) -> _WatchedReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _WatchedReadStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _WatchedWriteStream:
    """A transport's write stream that shows its connection each message before it is sent, and bounds how long
    a request waits to be taken by the transport (``within`` seconds; None: no bound).

    It forwards the ``WriteStream`` protocol of the ``mcp`` package unchanged. A request the transport does not
    take in time (a stdio server that stopped reading its input, its pipe full) raises ``not_taken(item)``: the
    client's own read timeout starts only once a request is written, so it would wait for ever.
    """

    def __init__(self, stream: Any, on_item: Any, *, within: float | None, not_taken: Any) -> None:
        self._stream = stream
        self._on_item = on_item
        self._within = within
        self._not_taken = not_taken

    async def send(self, item: Any) -> None:
        self._on_item(item)
        message = getattr(item, "message", None)
        if self._within is None or getattr(message, "method", None) is None or getattr(message, "id", None) is None:
            await self._stream.send(item)
            return
        with anyio.move_on_after(self._within) as waited:
            await self._stream.send(item)
        if waited.cancelled_caught:
            raise self._not_taken(message)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> _WatchedWriteStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class McpConnection:
    """An open connection to one MCP server (use it as ``async with``).

    ``tools()`` lists the server's tools once and then returns the same
    ``McpTool`` objects; ``refresh_tools()`` lists them again (between
    turns), keeping the objects of tools that did not change. A
    ``notifications/tools/list_changed`` from the server marks the list
    stale (``tools_changed``), so the next ``tools()`` lists again.
    """

    def __init__(
        self,
        client_factory: Any,
        *,
        label: str,
        prefix: str = "",
        trust_hints: bool = True,
        read_timeout: float | None = None,
    ) -> None:
        self.label = label
        self.prefix = prefix
        self.trust_hints = trust_hints
        # The client's bound on each request's wait (None: no bound), for the message of a request it ends.
        self.read_timeout = read_timeout
        self._client_factory = client_factory
        self._client: mcp.Client | None = None
        self._tools: list[McpTool] | None = None
        self._changed = False
        # The task that holds the transport open, in a task group of the connection's own: a transport
        # that fails (the server dies, the socket drops) ends that task, never the caller's.
        self._stack: AsyncExitStack | None = None
        self._closing: anyio.Event | None = None
        # Why the transport is gone, once it is: later calls fail at once with it.
        self._lost: str | None = None
        # The cancel scopes of the calls waiting for the server: a lost transport cancels them.
        self._waiting: set[anyio.CancelScope] = set()
        # The `tools/list` requests sent and not answered yet, by request ID: the cursor each asked for.
        self._listings: dict[Any, Any] = {}
        # Over HTTP, the bodies of the answers to those requests (content type, bytes), kept as the transport
        # reads them: one its JSON parser cannot read is read again from here.
        self._listing_bodies: dict[Any, tuple[str, bytearray]] = {}
        # Whether an `async with` holds the connection (from its start to its end): a second one is refused.
        self._entered = False

    async def __aenter__(self) -> McpConnection:
        if self._entered:
            raise McpConnectionError(
                f"the connection to MCP server {self.label} is open already: one `async with` at a time holds it "
                "(use the open connection, or make another)"
            )
        _require_mcp()
        self._entered = True
        try:
            return await self._open()
        except BaseException:
            self._entered = False
            raise

    async def _open(self) -> McpConnection:
        """Starts the transport and the client's handshake in a task of the connection's own."""
        client = self._client_factory(self)
        self._lost = None
        self._listings = {}
        self._listing_bodies = {}
        self._closing = anyio.Event()
        stack = AsyncExitStack()
        group = await stack.enter_async_context(anyio.create_task_group())
        try:
            failure = await group.start(self._hold_open, client)
        except BaseException:
            await stack.aclose()
            raise
        if failure is not None:
            await stack.aclose()
            # Whatever stops the handshake (a process that exits, a refused socket, a protocol
            # mismatch) arrives wrapped in the transport's task groups: report the first cause.
            raise McpConnectionError(f"could not connect to MCP server {self.label}: {_first_cause(failure)}") from (
                failure
            )
        self._stack = stack
        return self

    async def _hold_open(self, client: Any, *, task_status: anyio.abc.TaskStatus[Exception | None]) -> None:
        """Enters the client in this task and keeps it open until the connection closes or the transport fails."""
        started = False
        closing = anyio.CancelScope()
        try:
            with closing:
                async with client:
                    self._client = client
                    started = True
                    task_status.started(None)
                    assert self._closing is not None
                    await self._closing.wait()
                    # Leaving the client ends the session (over HTTP, a DELETE the server is to answer): a request
                    # like any other, bounded by read_timeout, so that a server that never answers it cannot hold
                    # the end of the `async with` block (the transport's own bound is minutes).
                    if self.read_timeout is not None:
                        closing.deadline = anyio.current_time() + self.read_timeout
        except Exception as exc:
            if not started:
                task_status.started(exc)
                return
            self._lose(f"the connection to MCP server {self.label} was lost: {_first_cause(exc)}")
        finally:
            self._client = None
        if started and self._lost is None and self._closing is not None and not self._closing.is_set():
            self._lose(f"MCP server {self.label} closed the connection")

    @asynccontextmanager
    async def _watch(self, transport: Any) -> AsyncIterator[Any]:
        """``transport`` (an ``mcp`` transport: a context manager of a read and a write stream) with its streams
        watched: when the read stream ends while the connection is open, the server closed the connection,
        and every later call fails at once, saying so; the answers to `tools/list` requests are read entry by
        entry before the client reads them (``_received``)."""
        async with transport as (read_stream, write_stream):
            yield (
                _WatchedReadStream(read_stream, self._server_closed, self._received),
                _WatchedWriteStream(write_stream, self._sending, within=self.read_timeout, not_taken=self._not_taken),
            )

    def _sending(self, item: Any) -> None:
        """Notes each `tools/list` request sent, so that its answer is read entry by entry (``_received``)."""
        message = getattr(item, "message", None)
        request_id = getattr(message, "id", None)
        if getattr(message, "method", None) == "tools/list" and isinstance(request_id, str | int):
            params = getattr(message, "params", None)
            self._listings[request_id] = params.get("cursor") if isinstance(params, dict) else None

    def _received(self, item: Any) -> Any:
        """What the client is handed for ``item`` from the server: a `tools/list` answer with only its entries
        that are MCP tools (``_listed``), or ``item`` itself.

        A `tools/list` answer nesting deeper than the ``mcp`` package's JSON parser reads reaches here as the
        parser's error (over stdio) or as a parse error answering the request (over HTTP): it is read again
        from its text with each part deeper than a tool's schema may nest cut out, so that only the entries
        holding one are left out.
        """
        if not self._listings:
            return item
        from mcp_types import PARSE_ERROR, JSONRPCError, JSONRPCResponse

        if isinstance(item, Exception):
            raw = too_deep_line(item)
            request_id = None if raw is None else raw.get("id")
            if raw is None or not isinstance(request_id, str | int) or request_id not in self._listings:
                return item
            return self._reread(raw, request_id, item)
        message = getattr(item, "message", None)
        if isinstance(message, JSONRPCResponse | JSONRPCError) and message.id in self._listings:
            body = self._listing_bodies.pop(message.id, None)
            if isinstance(message, JSONRPCResponse):
                message.result = self._listed(message.result, self._listings.pop(message.id))
            elif message.error.code == PARSE_ERROR and body is not None:
                raw = reply_in_body(body[0], body[1].decode("utf-8", "replace"), message.id)
                if raw is not None:
                    return self._reread(raw, message.id, item)
                del self._listings[message.id]
            else:
                del self._listings[message.id]
        return item

    def _reread(self, raw: dict[str, Any], request_id: Any, item: Any) -> Any:
        """The client's message for the `tools/list` answer ``raw`` read again from its text (``item`` when it
        is not a JSON-RPC answer)."""
        from mcp.shared.message import SessionMessage
        from mcp_types import jsonrpc_message_adapter
        from pydantic import ValidationError

        raw["result"] = self._listed(raw.get("result"), self._listings.pop(request_id))
        try:
            return SessionMessage(jsonrpc_message_adapter.validate_python(raw, by_name=False))
        except ValidationError:
            return item

    async def _keep_listing_body(self, response: Any) -> None:
        """An HTTP response hook: the body of the answer to a `tools/list` request is kept as the transport reads
        it, for a second reading (``_received``); an encoded body (gzip) is not."""
        if not self._listings:
            # No listing waits for its answer: nothing to keep (and no request body read again).
            return
        import httpx2

        try:
            sent = json.loads(response.request.content)
        except (ValueError, AttributeError, TypeError):
            return
        request_id = sent.get("id") if isinstance(sent, dict) else None
        if not (isinstance(request_id, str | int) and sent.get("method") == "tools/list"):
            return
        if request_id not in self._listings or response.headers.get("content-encoding", "identity") != "identity":
            return
        kept = bytearray()
        content_type = response.headers.get("content-type", "").lower()
        self._listing_bodies[request_id] = (content_type, kept)
        stream = response.stream

        class Kept(httpx2.AsyncByteStream):
            """The response's bytes, a copy of each kept as it passes."""

            async def __aiter__(self) -> AsyncIterator[bytes]:
                async for chunk in stream:
                    kept.extend(chunk)
                    yield chunk

            async def aclose(self) -> None:
                await stream.aclose()

        response.stream = Kept()

    def _listed(self, result: Any, cursor: Any) -> Any:
        """A `tools/list` result with each entry that is not an MCP tool left out, with a warning naming it
        and saying why. A result that is not a list of entries is left as it is, for the client to refuse."""
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list):
            return result
        kept: list[Any] = []
        for index, entry in enumerate(tools):
            fault = self._not_a_tool(result, entry)
            if fault is None:
                kept.append(entry)
            else:
                logger.warning(
                    "MCP server %s: %s is left out of its tools: %s",
                    self.label,
                    entry_label(entry, index, cursor),
                    fault,
                )
        return result if len(kept) == len(tools) else {**result, "tools": kept}

    def _protocol_version(self) -> str:
        """The protocol version the client checks answers against (its fallback before one is agreed)."""
        try:
            version = None if self._client is None else self._client.session.protocol_version
        except RuntimeError:
            version = None
        return version or "2025-11-25"

    def _not_a_tool(self, result: dict[str, Any], entry: Any) -> str | None:
        """Why a `tools/list` entry is not an MCP tool (None when it is): the checks the client makes of the
        page ``result`` (the negotiated protocol version's, then its own model's), made of the page with this
        entry alone, and counting only what they find wrong within the entry."""
        from mcp_types import ListToolsResult, methods
        from pydantic import ValidationError

        if holds_cut(entry):
            return f"it nests deeper than a tool's input schema may ({SCHEMA_DEPTH} levels)"
        page = {**result, "tools": [entry]}
        version = self._protocol_version()

        def by_version() -> None:
            try:
                methods.validate_server_result("tools/list", version, page)
            except KeyError:
                pass  # a version without a `tools/list` of its own: the client checks its model only

        for check in (by_version, lambda: ListToolsResult.model_validate(page, by_name=False)):
            try:
                check()
            except ValidationError as exc:
                faults = [error for error in exc.errors(include_url=False) if tuple(error["loc"][:2]) == ("tools", 0)]
                if faults:
                    return f"it is not an MCP tool: {shown_errors(faults, within=2)}"
            except ValueError as exc:
                # pydantic's serializer refuses a part nested deeper than it goes.
                return f"it is not an MCP tool: {exc}"
        return None

    def _server_closed(self) -> None:
        """The server's side of the transport ended: later calls fail at once (the waiting ones get the
        transport's own "connection closed")."""
        if self._lost is None and self._closing is not None and not self._closing.is_set():
            self._lost = f"MCP server {self.label} closed the connection"
            logger.warning("%s", self._lost)

    def _closed_here(self) -> bool:
        """Whether the connection's own ``async with`` ended (it closes the transport, not the server)."""
        return self._closing is not None and self._closing.is_set()

    def _closed_during(self, name: str) -> str:
        """The message of a call that waited while the connection's ``async with`` block ended."""
        return f"the connection to MCP server {self.label} was closed during `{name}`: its `async with` block ended"

    def _not_sent(self, request: str) -> str:
        """The message of a request made after the connection was gone: it was never sent."""
        return f"{self._lost}; {request} was called after that and was not sent"

    def _lose(self, reason: str) -> None:
        """The transport is gone: the calls waiting for it stop now, later ones fail at once."""
        logger.warning("%s", reason)
        self._lost = reason
        for scope in list(self._waiting):
            scope.cancel()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack, self._stack = self._stack, None
        if self._closing is not None:
            self._closing.set()
        try:
            if stack is not None:
                await stack.aclose()
        finally:
            self._entered = False

    @property
    def client(self) -> mcp.Client:
        """The underlying ``mcp.Client`` (for resources, prompts and the rest of the protocol)."""
        if self._lost is not None:
            raise McpConnectionError(self._lost)
        if self._client is None:
            raise McpConnectionError(f"MCP server {self.label} is not connected (use `async with`)")
        return self._client

    @property
    def tools_changed(self) -> bool:
        """Whether the server said its tool list changed since it was last listed."""
        return self._changed

    async def _on_message(self, message: Any) -> None:
        """The client's message handler: a ``tools/list_changed`` notification marks the tool list stale."""
        method = getattr(getattr(message, "root", message), "method", None)
        if method == "notifications/tools/list_changed":
            self._changed = True
        await anyio.lowlevel.checkpoint()

    def _waits_for(self, timeout: float | None) -> float | None:
        """How long a tool call waits for its answer: ``read_timeout``, or the tool's longer ``timeout``."""
        if self.read_timeout is None or timeout is None:
            return self.read_timeout
        return max(self.read_timeout, timeout)

    def _not_taken(self, message: Any) -> _Unanswered:
        """The error of a request the transport did not take within ``read_timeout``: the server is not reading."""
        params = getattr(message, "params", None)
        name = params.get("name") if isinstance(params, dict) and message.method == "tools/call" else None
        request = f"`{name}`" if isinstance(name, str) else f"`{message.method}`"
        return _Unanswered(
            f"MCP server {self.label} did not read {request} within {self.read_timeout:g} seconds (read_timeout)"
        )

    def _unanswered(self, request: str) -> str:
        within = "in time" if self.read_timeout is None else f"within {self.read_timeout:g} seconds"
        return f"MCP server {self.label} did not answer {request} {within} (read_timeout)"

    @contextmanager
    def _watched(self) -> Iterator[anyio.CancelScope]:
        """A scope around one request: cancelled if the transport is lost while it waits."""
        scope = anyio.CancelScope()
        self._waiting.add(scope)
        try:
            with scope:
                yield scope
        finally:
            self._waiting.discard(scope)

    async def tools(self) -> list[McpTool]:
        """The server's tools as toolsched tools (listed on first use, or when the server said they changed)."""
        if self._tools is None or self._changed:
            return await self.refresh_tools()
        return list(self._tools)

    async def refresh_tools(self) -> list[McpTool]:
        """Lists the server's tools again; unchanged tools keep their ``McpTool`` object.

        Through ``connect_stdio`` and ``connect_http``, an entry that is not an MCP tool (no ``inputSchema``,
        a name that is not text) or nests deeper than a tool's schema may is left out with a warning naming
        it; an answer the ``mcp`` package refuses whole (its ``tools`` not a list; through ``connect``, any
        entry that is not an MCP tool) is an ``McpConnectionError`` naming the fields.
        """
        from mcp.shared.exceptions import MCPError
        from mcp_types import REQUEST_TIMEOUT
        from pydantic import ValidationError

        if self._lost is not None:
            raise McpConnectionError(
                f"could not list the tools of MCP server {self.label}: {self._not_sent('`tools/list`')}"
            )
        client = self.client
        self._changed = False
        specs: list[mcp_types.Tool] = []
        cursor: str | None = None
        followed: set[str] = set()
        try:
            with self._watched() as scope:
                for _ in range(MAX_TOOL_PAGES):
                    page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                    specs.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
                    if cursor in followed:
                        # Following it would list the same pages again, each of their tools under a new name.
                        logger.warning(
                            "MCP server %s: its `tools/list` cursor %r came back; the tools listed before it are "
                            "kept and the list ends there",
                            self.label,
                            cursor,
                        )
                        break
                    followed.add(cursor)
                else:
                    logger.warning(
                        "MCP server %s: its `tools/list` goes on past %d pages (the next at cursor %r); the tools "
                        "of the first %d are kept",
                        self.label,
                        MAX_TOOL_PAGES,
                        cursor,
                        MAX_TOOL_PAGES,
                    )
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise McpConnectionError(self._unanswered("`tools/list`")) from exc
            raise McpConnectionError(f"could not list the tools of MCP server {self.label}: {exc}") from exc
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream) as exc:
            raise McpConnectionError(f"could not list the tools of MCP server {self.label}: {exc}") from exc
        except ValidationError as exc:
            # The mcp package refuses the whole page: its `tools` is not a list (or, through `connect`, one
            # entry is not an MCP tool: its answers are not read before the client's).
            raise McpConnectionError(
                f"could not list the tools of MCP server {self.label}: its `tools/list` answer is not MCP: "
                f"{_not_mcp(exc)}"
            ) from exc
        if scope.cancelled_caught:
            raise McpConnectionError(f"could not list the tools of MCP server {self.label}: {self._lost}")
        specs = self._first_of_each_name(specs)
        previous = {member.remote_name: member for member in self._tools or ()}
        # A tool the server still lists keeps its name, changed or not, whatever is listed before it: a
        # name the model has seen must never start calling a different server tool. New tools are named
        # around the kept names.
        reserved = {previous[spec.name].name for spec in specs if spec.name in previous}
        fresh: list[McpTool] = []
        taken: set[str] = set()
        for spec in specs:
            kept = previous.pop(spec.name, None)
            if kept is not None and kept.spec == spec:
                member = kept
            else:
                name = kept.name if kept is not None else local_name(self.prefix, spec.name, taken | reserved)
                member = McpTool(self, spec, name=name, trust_hints=self.trust_hints)
                try:
                    ToolRegistry([member])
                except (SchemaError, ToolDefinitionError) as exc:
                    logger.warning("MCP server %s: tool %r is left out: %s", self.label, spec.name, exc)
                    continue
            taken.add(member.name)
            fresh.append(member)
        self._tools = fresh
        return list(fresh)

    def _first_of_each_name(self, specs: list[mcp_types.Tool]) -> list[mcp_types.Tool]:
        """``specs`` with each name's first entry only: a server calls one tool by a name, so a second entry
        for it would be a second toolsched tool for that one tool, checked against a schema it may not hold.
        Each entry left out is a warning."""
        listed: set[str] = set()
        first: list[mcp_types.Tool] = []
        for spec in specs:
            if spec.name in listed:
                logger.warning("MCP server %s: tool %r is listed again; its first entry is kept", self.label, spec.name)
                continue
            listed.add(spec.name)
            first.append(spec)
        return first

    async def call_tool(
        self, name: str, args: Mapping[str, Any], ctx: ToolContext | None = None, *, tool_timeout: float | None = None
    ) -> Any:
        """Calls the server's tool ``name``; raises ``McpToolError`` or ``McpConnectionError`` on failure.

        Progress the server reports is passed on as ``ctx.report_progress``. The answer is waited for
        ``read_timeout``, or the tool's ``timeout`` when that is longer (the executor stops it then).
        """
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
        from pydantic import ValidationError

        if self._lost is not None:
            raise McpConnectionError(self._not_sent(f"`{name}`"))
        client = self.client

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if ctx is None or not total:
                return
            fraction = progress / total
            # NaN (a NaN amount, or infinity over infinity) is no fraction: not reported.
            if not math.isnan(fraction):
                ctx.report_progress(min(max(fraction, 0.0), 1.0), message)

        try:
            with self._watched() as scope:
                result = await client.call_tool(
                    name, dict(args), read_timeout_seconds=self._waits_for(tool_timeout), progress_callback=on_progress
                )
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED and self._closed_here():
                raise McpConnectionError(self._closed_during(name)) from exc
            if exc.code == CONNECTION_CLOSED:
                # The transport gave up on the server (an HTTP server that cannot be reached says so only
                # here): later calls fail at once.
                self._server_closed()
                raise McpConnectionError(
                    f"MCP server {self.label} closed the connection during `{name}`: {exc.message}"
                ) from exc
            if exc.code == REQUEST_TIMEOUT:
                # No answer came: the server hangs, or what it sent was not a reply to this request. The call
                # ends as ``timeout``, as it would past the tool's own ``timeout``.
                raise _Unanswered(self._unanswered(f"`{name}`")) from exc
            raise McpToolError(f"MCP server {self.label} refused `{name}`: {exc.message}") from exc
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream) as exc:
            if self._closed_here():
                raise McpConnectionError(self._closed_during(name)) from exc
            self._server_closed()
            raise McpConnectionError(f"MCP server {self.label} closed the connection during `{name}`") from exc
        except ValidationError as exc:
            raise McpToolError(
                f"MCP server {self.label} answered `{name}` with a result that is not MCP: {_not_mcp(exc)}"
            ) from exc
        except RuntimeError as exc:
            # The `mcp` package checks a result against the output schema its tool declared (and refuses kinds
            # of result a plain call does not take) with a RuntimeError; its first line says why (the rest is
            # the schema and the value, of any size).
            refused = str(exc).split("\n", 1)[0] or type(exc).__name__
            raise McpToolError(
                f"MCP server {self.label} answered `{name}` with a result the `mcp` package refused: {refused}"
            ) from exc
        if scope.cancelled_caught:
            raise McpConnectionError(f"{self._lost} (during `{name}`)")
        if result.is_error:
            raise McpToolError(_error_message(result))
        return _content_output(result)


def connect(client: Any, *, label: str = "", prefix: str = "", trust_hints: bool = True) -> McpConnection:
    """A connection through an ``mcp.Client`` you built (any transport, or an in-process server).

    The client must not be entered yet; the connection enters and exits it.
    """
    _check_options(prefix)
    return McpConnection(
        lambda _connection: client,
        label=label or repr(client.server),
        prefix=prefix,
        trust_hints=trust_hints,
        read_timeout=getattr(client, "read_timeout_seconds", None),
    )


def _text_or_path(option: str, value: Any) -> str:
    """``value`` as the text of a command line: text, or a path (``os.PathLike``); ``OptionError`` otherwise."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise OptionError(f"{option} must be text or a path, got {shown(value)}")
    return value


def _command_line(command: Any, args: Any, env: Any, cwd: Any) -> tuple[str, list[str], dict[str, str] | None, Any]:
    """``connect_stdio``'s command, arguments, environment and directory, checked: ``OptionError`` names the
    first that is not what it must be (a single string for ``args`` included: it is not a list of them)."""
    if isinstance(args, str | bytes):
        raise OptionError(f"args must be a sequence of arguments (text or paths), not one string: {shown(args)}")
    if not isinstance(args, Sequence):
        raise OptionError(f"args must be a sequence of arguments (text or paths), got {shown(args)}")
    arguments = [_text_or_path(f"args[{index}]", argument) for index, argument in enumerate(args)]
    if env is not None:
        if not isinstance(env, Mapping):
            raise OptionError(f"env must map names to text, got {shown(env)}")
        for name, value in env.items():
            if not isinstance(name, str) or not isinstance(value, str):
                raise OptionError(f"env must map names to text, got {shown(name)}: {shown(value)}")
        env = dict(env)
    if cwd is not None:
        cwd = _text_or_path("cwd", cwd)
    return _text_or_path("command", command), arguments, env, cwd


def connect_stdio(
    command: str | os.PathLike[str],
    args: Sequence[str | os.PathLike[str]] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    prefix: str = "",
    trust_hints: bool = True,
    read_timeout: float | None = DEFAULT_READ_TIMEOUT,
    errlog: TextIO | None = None,
) -> McpConnection:
    """A connection to a server started as a subprocess that speaks MCP over its stdin and stdout.

    ``env`` is merged over a minimal default environment; ``errlog`` receives
    the server's stderr (default ``sys.stderr``; a stream without a file
    descriptor, such as a ``StringIO``, is fed through a pipe); ``read_timeout`` bounds each
    request's wait for an answer (``DEFAULT_READ_TIMEOUT``, 300 seconds; None
    waits for ever): a tool call it ends is that call's ``timeout``, saying
    the server did not answer (called directly, an ``McpConnectionError`` that
    is also a ``TimeoutError``). ``prefix`` is put before every tool name.
    The command, its arguments and ``cwd`` are text or paths; an option of
    another kind is an ``OptionError`` here.
    """
    _check_options(prefix, read_timeout)
    program, arguments, environment, directory = _command_line(command, args, env, cwd)

    def build(connection: McpConnection) -> Any:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        parameters = StdioServerParameters(command=program, args=arguments, env=environment, cwd=directory)
        # A stream without a descriptor (a StringIO, a notebook's or a test runner's captured stderr) is fed
        # through a pipe.
        transport = stderr_into(
            errlog if errlog is not None else sys.stderr, lambda stream: stdio_client(parameters, errlog=stream)
        )
        return Client(
            connection._watch(transport), message_handler=connection._on_message, read_timeout_seconds=read_timeout
        )

    return McpConnection(build, label=f"`{program}`", prefix=prefix, trust_hints=trust_hints, read_timeout=read_timeout)


def connect_http(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    http_client: Any = None,
    prefix: str = "",
    trust_hints: bool = True,
    read_timeout: float | None = DEFAULT_READ_TIMEOUT,
) -> McpConnection:
    """A connection to a server over streamable HTTP at ``url``.

    ``headers`` are sent with every request (e.g. authorization); for more
    control pass your own ``http_client`` (an ``httpx2.AsyncClient``; a
    `tools/list` answer nesting deeper than the ``mcp`` package's JSON parser
    reads is then refused whole, as the transport reads it).
    ``read_timeout`` is as for ``connect_stdio``.
    """
    _check_options(prefix, read_timeout)

    def build(connection: McpConnection) -> Any:
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        if http_client is not None:
            return Client(
                connection._watch(streamable_http_client(url, http_client=http_client)),
                message_handler=connection._on_message,
                read_timeout_seconds=read_timeout,
            )

        import httpx2

        # The transport's own defaults: 30 s to connect and write, 300 s to read a held-open stream. The hook
        # keeps the answers to `tools/list` for a second reading when the transport's parser refuses them.
        @asynccontextmanager
        async def own_client() -> AsyncIterator[Any]:
            async with (
                httpx2.AsyncClient(
                    headers=dict(headers or {}),
                    timeout=httpx2.Timeout(30.0, read=300.0),
                    event_hooks={"response": [connection._keep_listing_body]},
                ) as client,
                streamable_http_client(url, http_client=client) as streams,
            ):
                yield streams

        return Client(
            connection._watch(own_client()), message_handler=connection._on_message, read_timeout_seconds=read_timeout
        )

    return McpConnection(build, label=f"at {url}", prefix=prefix, trust_hints=trust_hints, read_timeout=read_timeout)
