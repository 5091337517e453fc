"""Where tool bodies run: in this process (``LocalBackend``) or on a Ray cluster (``RayBackend``).

A backend runs only the body of a call. Planning, validation, permissions,
hooks, scheduling, timeouts, shaping and result assembly stay in the
executor's process, so every guarantee of a run holds whichever backend a
tool uses. ``Executor(backends={"ray": RayBackend()})`` names the backends; a
tool's ``backend="ray"`` (or the executor's ``default_backend``) picks one.

A backend's ``invoke`` is cancelled when its call must stop (a timeout, an
interrupt, a cancelled run): it stops the work it started and lets the
cancellation propagate, so the executor answers the call as it always does.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import socket
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable
from urllib.parse import urlsplit

import anyio
import anyio.lowlevel
import anyio.to_thread

from toolsched._backends.ray_sending import Outgoing, RaySender
from toolsched._backends.ray_waiting import RayWaiter, Waiting
from toolsched._backends.ray_worker import (
    AsyncToolWorker,
    Body,
    ContextSpec,
    SyncToolWorker,
    pack,
    ray_package,
    summary,
    tool_task,
)
from toolsched._tools.context import ToolContext
from toolsched._tools.exact_integers import with_exact_integers
from toolsched._tools.tools import FunctionTool, Tool, argument_parser, keyword_builder
from toolsched._values.events import ToolProgress, ToolUpdated
from toolsched._values.numeric_options import numeric_fault, shown
from toolsched.errors import (
    BackendError,
    BackendUnavailableError,
    OptionError,
    ResultTooLargeError,
    ToolDefinitionError,
    WorkerLostError,
)

__all__ = [
    "Backend",
    "BackendError",
    "BackendUnavailableError",
    "LocalBackend",
    "RayBackend",
    "ResultTooLargeError",
    "WorkerLostError",
    "assign_backends",
]

logger = logging.getLogger("toolsched")

Args = Mapping[str, Any]
Invoker = Callable[[Args, ToolContext | None], Awaitable[Any]]

LOCAL = "local"
DEFAULT_MAX_RESULT_BYTES = 64 * 1024 * 1024


@runtime_checkable
class Backend(Protocol):
    """Runs tool bodies somewhere; the executor keeps every other phase of a call."""

    def bind(self, tools: Sequence[Tool]) -> None:
        """Checks, when an executor is built, that each of ``tools`` can run here (raise to refuse)."""

    async def invoke(self, tool: Tool, args: Args, ctx: ToolContext | None) -> Any:
        """Runs one call's body on validated ``args``; returns its output or raises its error."""


class LocalBackend:
    """The default: async bodies on the event loop, sync bodies in worker threads, in this process.

    A subclass that overrides ``bind`` or ``invoke`` (to log or meter calls, then call ``super()``) is a
    backend of its own: the executor calls it for the tools that name it (under ``"local"``, for every tool
    that names no other backend).
    """

    def bind(self, tools: Sequence[Tool]) -> None:
        for member in tools:
            _ = member.facts  # checks the tool's metadata (ToolDefinitionError)

    async def invoke(self, tool: Tool, args: Args, ctx: ToolContext | None) -> Any:
        return await tool.facts.invoke(args, ctx)

    def __repr__(self) -> str:
        return "LocalBackend()"


def assign_backends(
    tools: Sequence[Tool], backends: Mapping[str, Backend] | None, default_backend: str | None
) -> dict[Tool, Invoker]:
    """Checks an executor's backends and returns the invoker of every tool that does not run locally.

    Raises ``OptionError`` for a backend that is not one, or a tool (or the
    default) naming a backend the executor lacks; a backend's own ``bind``
    may refuse a tool (``ToolDefinitionError``).
    """
    configured: dict[str, Backend] = {}
    if backends is not None:
        if not isinstance(backends, Mapping):
            raise OptionError(f"backends must be a mapping of names to backends, got {type(backends).__name__}")
        for name, backend in backends.items():
            if not isinstance(name, str) or not name:
                raise OptionError(f"backends: names must be non-empty strings, got {name!r}")
            if not isinstance(backend, Backend):
                raise OptionError(f"backends[{name!r}] must be a backend (bind and invoke), got {backend!r}")
            if name == LOCAL and not isinstance(backend, LocalBackend):
                raise OptionError(
                    f"backends: the name {LOCAL!r} is the built-in local backend; name {backend!r} otherwise"
                )
            configured[name] = backend
    if default_backend is not None and default_backend != LOCAL and default_backend not in configured:
        raise OptionError(
            f"default_backend={default_backend!r} names no backend of this executor ({_listed(configured)})"
        )
    default = default_backend or LOCAL
    groups: dict[str, list[Tool]] = {}
    for member in tools:
        name = member.backend or default
        if name != LOCAL and name not in configured:
            raise OptionError(
                f"tool `{member.name}` runs on backend {name!r}, which this executor does not have "
                f"({_listed(configured)}); pass backends={{{name!r}: ...}}"
            )
        groups.setdefault(name, []).append(member)
    invokers: dict[Tool, Invoker] = {}
    for name, members in groups.items():
        chosen = configured.get(name)
        # The built-in local backend runs the tool's own invoker directly; a subclass that overrides
        # ``bind`` or ``invoke`` (to log, meter, wrap the call) is a backend of its own and is called.
        if chosen is None or type(chosen) is LocalBackend:
            continue
        chosen.bind(members)
        for member in members:
            invoke: Invoker = functools.partial(chosen.invoke, member)
            # The backend runs the body without the tool's own invoker, which takes the exact-integer step.
            step = member.facts.exact_integers
            invokers[member] = invoke if step is None else with_exact_integers(invoke, step)
    return invokers


def _listed(configured: Mapping[str, Backend]) -> str:
    return "it has " + ", ".join(repr(name) for name in (LOCAL, *configured))


# -- the caller's side ------------------------------------------------------------


def _error_classes(module: Any, names: Iterable[str]) -> tuple[type[BaseException], ...]:
    # Some of these appeared in later Ray releases than the oldest one supported.
    return tuple(getattr(module, name) for name in names if hasattr(module, name))


# A body's positional and keyword arguments, made in this process from a call's validated arguments.
Prepared = tuple[tuple[Any, ...], dict[str, Any]]


def _tool_body(tool: Tool, max_result_bytes: int | None) -> tuple[Body, Callable[[Args], Prepared]]:
    """A tool's body for a worker, and how the caller turns validated arguments into its arguments: checked
    by the tool's model as in this process (``ArgumentsRefused`` when it refuses them, before anything is sent)."""
    if isinstance(tool, FunctionTool):
        fn = tool.fn
        build = keyword_builder(tool, with_ctx=False)

        def keywords(args: Args) -> Prepared:
            return (), build(args, None)

        context: Literal["keyword", "positional", "none"] = "keyword" if tool.takes_ctx else "none"
        return Body(tool.name, fn, inspect.iscoroutinefunction(fn), context, max_result_bytes), keywords
    call = getattr(tool, "call", None)
    if call is None or not callable(call):
        raise ToolDefinitionError(f"tool class {type(tool).__name__} must define call(self, args, ctx)")
    # The worker gets its own copy of the tool, without what this process caches about it.
    replica = tool.replica()
    input_model = tool.input_model
    parse = argument_parser(tool)

    def parsed(args: Args) -> Prepared:
        return ((parse(args) if input_model else dict(args)),), {}

    method = getattr(replica, "call", call)
    return Body(tool.name, method, inspect.iscoroutinefunction(method), "positional", max_result_bytes), parsed


class _Placement:
    """How one tool runs on Ray: its task, or its pool of actors."""

    __slots__ = ("actor_count", "actors", "bare_task", "body", "busy", "options", "prepare", "retries", "task")

    def __init__(self, tool: Tool, actor_count: int, max_result_bytes: int | None) -> None:
        self.body, self.prepare = _tool_body(tool, max_result_bytes)
        try:
            ray_package().cloudpickle.dumps(self.body)
        except Exception as exc:
            raise ToolDefinitionError(
                f"tool `{tool.name}` cannot run on Ray: its body cannot be serialised "
                f"({type(exc).__name__}: {summary(exc)}); keep what it refers to picklable "
                "(no locks, open files or live clients: create those inside the body)"
            ) from exc
        if tool.idempotent:
            self.retries = 3 if tool.max_retries is None else tool.max_retries
        else:
            self.retries = 0
        options: dict[str, Any] = {}
        for field in ("num_cpus", "num_gpus", "memory"):
            value = getattr(tool, field)
            if value is not None:
                options[field] = value
        self.options = options
        self.actor_count = actor_count
        self.actors: list[Any] = []
        self.busy: list[int] = []
        self.task: Any = None
        self.bare_task: Any = None

    def submit(self, prepared: Prepared, ctx: ToolContext | None) -> tuple[Any, int]:
        """Starts the call on Ray with its body's arguments (``prepare``); returns its result's reference and
        the actor it went to (-1: a task)."""
        positional, keywords = prepared
        spec = None
        if ctx is not None and self.body.context != "none":
            spec = ContextSpec(ctx.call_id, ctx.tool_name, ctx.context, ctx.interactive)
        packed = pack(positional, keywords, spec)
        if not self.actor_count:
            return self.ray_task(bool(packed)).remote(*packed), -1
        self.start_actors()
        index = min(range(self.actor_count), key=self.busy.__getitem__)
        reference = self.actors[index].run.remote(*packed)
        self.busy[index] += 1
        return reference, index

    def ray_task(self, takes_arguments: bool) -> Any:
        """The tool's Ray task, for calls that send arguments or for calls that send none (made on first use)."""
        task = self.task if takes_arguments else self.bare_task
        if task is None:
            task = (
                ray_package()
                .remote(tool_task(self.body, takes_arguments=takes_arguments))
                .options(
                    name=f"toolsched:{self.body.tool_name}",
                    max_retries=self.retries,
                    retry_exceptions=False,
                    **self.options,
                )
            )
            if takes_arguments:
                self.task = task
            else:
                self.bare_task = task
        return task

    def start_actors(self) -> None:
        """Starts the tool's actors, if it has a pool and they are not running yet (needs a connection)."""
        if self.actors or not self.actor_count:
            return
        worker = AsyncToolWorker if self.body.is_async else SyncToolWorker
        actor_class = (
            ray_package()
            .remote(worker)
            .options(max_restarts=-1, max_task_retries=self.retries, max_concurrency=1, **self.options)
        )
        self.actors = [actor_class.remote(self.body) for _ in range(self.actor_count)]
        self.busy = [0] * self.actor_count

    def settle(self, index: int) -> None:
        if index >= 0 and index < len(self.busy):
            self.busy[index] -= 1

    def cancel(self, reference: Any, index: int) -> None:
        """Stops a call in flight: a task's worker is killed; an actor call is cancelled as Ray allows."""
        try:
            ray_package().cancel(reference, force=index < 0)
        except Exception:
            logger.warning("could not cancel the Ray call of %s", self.body.tool_name, exc_info=True)

    def close(self) -> None:
        ray = ray_package()
        for actor in self.actors:
            try:
                ray.kill(actor)
            except Exception:
                logger.warning("could not stop an actor of %s", self.body.tool_name, exc_info=True)
        self.actors = []
        self.busy = []


class RayBackend:
    """Runs tool bodies on a Ray cluster, as Ray tasks or on a pool of actors.

    - ``address``: ``None`` starts a local cluster in this process (or joins
      the one ``RAY_ADDRESS`` names), as ``ray.init()`` does; ``"auto"`` joins
      the cluster running on this machine; ``"host:port"`` a cluster's head;
      ``"ray://host:port"`` connects through the Ray client. An existing
      cluster that does not answer within ``connect_timeout`` seconds is a
      ``BackendUnavailableError``.
    - ``namespace``: the Ray namespace of this process's job, when this
      backend is the one that connects.
    - ``actor_pool``: ``{tool name: number of actors}``. Those tools run on
      long-lived actors, each holding its own copy of the tool, one call at a
      time: what the body keeps (a loaded model, a client, a cache) lives on
      across calls. Every other tool runs as a Ray task.
    - ``max_result_bytes``: a larger result is refused in the worker with a
      ``ResultTooLargeError`` before it is stored or sent (``None``: no limit,
      and no measuring: results other than text and bytes are measured by
      pickling them once more).
    - ``init_options``: more keyword arguments for ``ray.init`` (``runtime_env``,
      ``num_cpus`` of a local cluster, ...).

    A tool's ``num_cpus``, ``num_gpus`` and ``memory`` become its Ray resource
    requests. A worker or node that dies during a call makes that call an
    ``execution_error`` (``WorkerLostError``); an ``idempotent`` tool is run
    again instead, up to ``max_retries`` times (3 unless set). A timeout or
    cancellation kills the task's worker; an actor call is cancelled when its
    body is async, and otherwise finishes on the actor (its result is dropped;
    the body can watch ``ctx.cancelled``): until it ends there, that actor
    counts as busy, and new calls go to the pool's other actors first.

    The first call connects (or starts the local cluster, which takes
    seconds); call ``connect()`` before the first run to keep that out of it.
    Tool code must be importable on the workers (installed there, or shipped
    with Ray's ``runtime_env``), or registered with
    ``ray.cloudpickle.register_pickle_by_value(module)``.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        namespace: str | None = None,
        actor_pool: Mapping[str, int] | None = None,
        max_result_bytes: int | None = DEFAULT_MAX_RESULT_BYTES,
        connect_timeout: float = 30.0,
        init_options: Mapping[str, Any] | None = None,
    ) -> None:
        if address is not None and (not isinstance(address, str) or not address.strip()):
            raise OptionError(f"RayBackend(address=...) must be a cluster address or None, got {address!r}")
        if namespace is not None and (not isinstance(namespace, str) or not namespace):
            raise OptionError(f"RayBackend(namespace=...) must be a non-empty string or None, got {namespace!r}")
        pools = dict(actor_pool or {})
        for name, count in pools.items():
            if not isinstance(name, str) or numeric_fault(count, integer=True) is not None:
                raise OptionError(
                    f"RayBackend(actor_pool=...) maps tool names to a number of actors (at least 1), "
                    f"got {shown(name)}: {shown(count)}"
                )
        if max_result_bytes is not None:
            fault = numeric_fault(max_result_bytes, integer=True)
            if fault is not None:
                raise OptionError(
                    f"RayBackend(max_result_bytes=...) must be {fault} or None, got {shown(max_result_bytes)}"
                )
        # Waited for by a thread's join, which takes no longer timeout.
        fault = numeric_fault(connect_timeout, integer=False, most=threading.TIMEOUT_MAX)
        if fault is not None:
            raise OptionError(f"RayBackend(connect_timeout=...) must be {fault}, got {shown(connect_timeout)}")
        clashing = {"address", "namespace"} & set(init_options or {})
        if clashing:
            raise OptionError(
                f"RayBackend(init_options=...) cannot set {', '.join(sorted(clashing))}: pass them to RayBackend"
            )
        self.address = address.strip() if address is not None else None
        self.namespace = namespace
        self.actor_pool = pools
        self.max_result_bytes = max_result_bytes
        self.connect_timeout = float(connect_timeout)
        self.init_options = dict(init_options or {})
        ray_package()
        if self.address is not None:
            _parse_address(self.address)
        self._placements: dict[Tool, _Placement] = {}
        self._waiter = RayWaiter()
        self._sender = RaySender(self._waiter)
        self._connected = False
        self._lock = threading.Lock()
        self._connecting: threading.Thread | None = None
        self._connect_error: BaseException | None = None
        # Connects that failed so far, and the last failure: the callers that were waiting while one
        # failed get that failure at once, not a wait of their own (N calls never wait N timeouts).
        self._failed_connects = 0
        self._connect_failure: BackendUnavailableError | None = None

    def __repr__(self) -> str:
        return f"RayBackend(address={self.address!r})"

    # -- the Backend protocol ------------------------------------------------------

    def bind(self, tools: Sequence[Tool]) -> None:
        """Prepares each tool for Ray; a body that cannot be serialised is refused here, naming the tool."""
        names = {member.name for member in tools}
        for name in self.actor_pool:
            if name not in names:
                raise OptionError(
                    f"RayBackend(actor_pool=...) names `{name}`, which is not a tool this executor runs on Ray "
                    f"({', '.join(sorted(names)) or 'none'})"
                )
        for member in tools:
            if member not in self._placements:
                self._placements[member] = self._place(member)

    def _place(self, tool: Tool) -> _Placement:
        _ = tool.facts  # checks the tool's metadata (ToolDefinitionError)
        placement = _Placement(tool, self.actor_pool.get(tool.name, 0), self.max_result_bytes)
        if self._connected:
            placement.start_actors()
        return placement

    async def invoke(self, tool: Tool, args: Args, ctx: ToolContext | None) -> Any:
        placement = self._placements.get(tool)
        if placement is None:
            placement = self._placements[tool] = self._place(tool)
        # The tool's model checks the arguments first, in the call's own task: a refusal is the call's
        # (``invalid_input``, as in this process), and nothing is sent.
        prepared = placement.prepare(args)
        if not self._connected:
            await self._connect_from_loop()
        native = anyio.lowlevel.current_token().native_token
        outgoing = Outgoing(functools.partial(placement.submit, prepared, ctx), RayWaiter.waiting(native))
        self._sender.send(outgoing, native)
        try:
            value, events = await self._waiter.wait(outgoing.waiting)
        except anyio.get_cancelled_exc_class():
            if outgoing.reference is None:
                outgoing.dropped = True  # not sent yet: it never will be
            else:
                placement.cancel(outgoing.reference, outgoing.index)
                if outgoing.index >= 0:
                    # A sync body goes on on its actor (and a cancelled async one ends there later): the actor
                    # counts as busy until it does, so the next calls go to the others rather than queue behind.
                    self._waiter.watch([(outgoing.reference, _settling(placement, outgoing.index, native))])
                    outgoing.index = -1
            raise
        except BaseException as exc:
            if outgoing.failure is not None:  # never sent: submitting it raised
                if isinstance(exc, (BackendError, ToolDefinitionError)) or not isinstance(exc, Exception):
                    raise
                raise BackendError(
                    f"the call of `{tool.name}` cannot be sent to Ray: {type(exc).__name__}: {summary(exc)}"
                ) from exc
            if not isinstance(exc, ray_package().exceptions.RayError):
                raise
            error = self._translate(exc, placement)
            if isinstance(error, BackendError):
                raise error from exc
            raise error from None
        finally:
            placement.settle(outgoing.index)
        if ctx is not None:
            for event in events:
                if isinstance(event, ToolProgress):
                    ctx.report_progress(event.fraction, event.message)
                elif isinstance(event, ToolUpdated):
                    ctx.update(event.partial)
        return value

    # -- connecting --------------------------------------------------------------

    def connect(self) -> None:
        """Connects to the cluster now (the first call does it otherwise) and starts the actor pools.

        Raises ``BackendUnavailableError`` when the cluster cannot be reached;
        never waits longer than ``connect_timeout`` for an existing cluster.
        Starting a local cluster (``address=None``) waits for Ray to start it.
        """
        self._connect(self._failed_connects)

    def _connect(self, failures_seen: int) -> None:
        """Connects, unless a connect failed since the caller saw ``failures_seen`` failures: then fails with it."""
        with self._lock:
            if self._connected:
                return
            failure = self._connect_failure
            if failure is not None and self._failed_connects != failures_seen:
                raise BackendUnavailableError(str(failure)) from failure.__cause__
            try:
                self._connect_now()
            except BackendUnavailableError as exc:
                self._failed_connects += 1
                self._connect_failure = exc
                raise

    def _connect_now(self) -> None:
        """Connects to the cluster and starts the actor pools (with the lock held)."""
        ray = ray_package()
        address = self.address or os.environ.get("RAY_ADDRESS") or None
        if address is None or address == LOCAL:
            if not ray.is_initialized():
                # In this thread: a local cluster's processes end with the thread that started them.
                ray.init(address=address, namespace=self.namespace, **self.init_options)
        else:
            target = _parse_address(address)
            if target is not None:
                _probe(address, target, self.connect_timeout)
            if ray.is_initialized():
                _check_same_cluster(ray, address)
            else:
                self._join(ray, address)
        self._connected = True
        # Actors take seconds to start: start them now rather than under a first call's timeout.
        for placement in list(self._placements.values()):
            placement.start_actors()

    def _join(self, ray: Any, address: str) -> None:
        """Joins an existing cluster in a helper thread, so an address that never answers cannot hang us."""
        thread = self._connecting
        if thread is None or not thread.is_alive():
            self._connect_error = None

            def join() -> None:
                try:
                    ray.init(address=address, namespace=self.namespace, **self.init_options)
                except BaseException as exc:
                    self._connect_error = exc

            thread = self._connecting = threading.Thread(target=join, name="toolsched-ray-connect", daemon=True)
            thread.start()
        thread.join(self.connect_timeout)
        if thread.is_alive():
            raise BackendUnavailableError(
                f"no Ray cluster answered at {address!r} within {self.connect_timeout:g} seconds "
                "(RayBackend(connect_timeout=...))"
            )
        error = self._connect_error
        if error is not None:
            raise BackendUnavailableError(
                f"cannot connect to the Ray cluster at {address!r}: {type(error).__name__}: {summary(error)}"
            ) from error

    async def _connect_from_loop(self) -> None:
        # Counted here, before the thread: a call whose thread starts late still shares an earlier failure.
        failures_seen = self._failed_connects
        address = self.address or os.environ.get("RAY_ADDRESS") or None
        if address is None or address == LOCAL:
            self._connect(failures_seen)
        else:
            await anyio.to_thread.run_sync(self._connect, failures_seen, abandon_on_cancel=True)

    def close(self) -> None:
        """Stops this backend's actors (Ray itself stays connected: other code may use it)."""
        for placement in self._placements.values():
            placement.close()
        self._waiter.close()

    # -- errors ----------------------------------------------------------------

    def _translate(self, exc: BaseException, placement: _Placement) -> BaseException:
        """A Ray error as the call's error: the tool's own exception, or what went wrong around it."""
        errors = ray_package().exceptions
        name = placement.body.tool_name
        if isinstance(exc, errors.RayTaskError):
            cause = exc.cause
            if isinstance(cause, errors.RayError):
                return self._translate(cause, placement)
            if isinstance(cause, Exception):
                # Ray's text of the error carries the worker's traceback.
                cause.add_note(f"raised on a Ray worker: {exc}")
                return cause
            return BackendError(f"`{name}` failed on Ray: {summary(exc)}")
        if isinstance(exc, _error_classes(errors, ("ObjectStoreFullError", "OutOfDiskError"))):
            return ResultTooLargeError(f"the result of `{name}` does not fit in the Ray object store: {summary(exc)}")
        lost = _error_classes(
            errors,
            (
                "WorkerCrashedError",
                "RayActorError",
                "NodeDiedError",
                "ObjectLostError",
                "LocalRayletDiedError",
                "OutOfMemoryError",
            ),
        )
        if isinstance(exc, lost):
            if placement.retries:
                note = f" (and on each of {placement.retries} retries)"
            else:
                note = " (not run again: the tool is not idempotent)"
            return WorkerLostError(
                f"the Ray worker running `{name}` died before returning a result{note}: {summary(exc)}"
            )
        if isinstance(exc, _error_classes(errors, ("UnserializableException",))):
            # Its class cannot be rebuilt in this process: the last line of Ray's text names it and its message.
            original = str(exc).strip().splitlines()[-1]
            return BackendError(f"`{name}` raised an exception that cannot be rebuilt here: {original}")
        if isinstance(exc, errors.TaskCancelledError):
            # This call's own cancellation never gets here (it is raised as a cancellation instead).
            return BackendError(
                f"`{name}` was interrupted on its Ray worker, not cancelled by this run: "
                "a KeyboardInterrupt in the tool, or a cancel from outside toolsched"
            )
        if isinstance(exc, _error_classes(errors, ("TaskUnschedulableError", "ActorUnschedulableError"))):
            return BackendError(f"Ray cannot schedule `{name}` on this cluster: {summary(exc)}")
        return BackendError(f"Ray could not run `{name}`: {type(exc).__name__}: {summary(exc)}")


def _settling(placement: _Placement, index: int, native: Any) -> Waiting:
    """A wait that, once the call on actor ``index`` ends there, settles that actor on the caller's event loop
    (``native``: its native token), or at once when that loop is gone; the call's answer is not fetched."""
    loop_soon = RayWaiter.waiting(native).call_soon
    settle = functools.partial(placement.settle, index)

    def on_end(answer: Callable[[], None]) -> None:
        try:
            loop_soon(settle)
        except RuntimeError:  # the event loop is closed: nothing else runs there
            settle()

    return Waiting(on_end)


def _parse_address(address: str) -> tuple[str, int] | None:
    """The host and port an address names (None for ``"auto"``); a malformed one is an ``OptionError``."""
    if address in ("auto", LOCAL):
        return None
    text = address if "://" in address else f"//{address}"
    try:
        parts = urlsplit(text)
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise OptionError(f"RayBackend(address={address!r}): {exc}") from None
    if parts.scheme not in ("", "ray") or not host or port is None:
        raise OptionError(f"RayBackend(address={address!r}) must be 'host:port', 'ray://host:port', 'auto' or None")
    return host, port


def _probe(address: str, target: tuple[str, int], timeout: float) -> None:
    """Fails fast when nothing listens at the address (Ray itself would retry for minutes)."""
    try:
        with socket.create_connection(target, timeout=timeout):
            pass
    except OSError as exc:
        raise BackendUnavailableError(
            f"cannot reach the Ray cluster at {address!r}: {exc.strerror or summary(exc)}"
        ) from None


def _check_same_cluster(ray: Any, address: str) -> None:
    """This process is connected already: only to the same cluster (one process talks to one cluster)."""
    if address == "auto":
        return
    try:
        through_client = bool(ray.util.client.ray.is_connected())
    except Exception:
        through_client = False
    if through_client:
        if address.startswith("ray://"):
            return
        current = "through the Ray client"
    else:
        try:
            head = str(ray.get_runtime_context().gcs_address)
        except Exception:
            head = ""
        if head and address == head:
            return
        current = f"at {head!r}" if head else "elsewhere"
    raise BackendUnavailableError(
        f"this process is already connected to a Ray cluster {current}, not to {address!r}: "
        "a process talks to one Ray cluster"
    )
