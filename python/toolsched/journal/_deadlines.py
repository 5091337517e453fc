"""Deadlines on a journal's statements: a connection whose statement goes unanswered too long is severed.

A blocking driver waits for the server's answer as long as it takes. When the server stops
answering (a hung backend, a host paused, a network that drops everything) the worker thread
waiting holds the journal for good, and with it every run that writes to it: their writes are
shielded from cancellation, so neither a lost lease nor a timeout ends them. ``Deadlines`` runs
one thread per process that watches the statements under way; each one past its deadline is severed
from a thread of its own (the journal asks the server to cancel it, within a bound, then shuts down
its socket): the driver's wait wakes to a closed connection and fails, and the journal connects
afresh for what comes next.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["DEADLINES", "Deadlines", "Watch", "sever_socket"]

# How often the deadline thread looks for statements past their deadline while any is under way, in seconds:
# a deadline is met this much late at most, and statements need not wake the thread one by one.
_TICK = 0.25


def sever_socket(descriptor: Callable[[], int]) -> None:
    """Shuts down, both ways, the socket whose descriptor ``descriptor()`` gives (nothing when it is closed
    already): whatever waits on it wakes to a connection the peer closed."""
    try:
        # A duplicate of the descriptor: shutting it down shuts the socket down, closing it leaves the original.
        with socket.socket(fileno=os.dup(descriptor())) as duplicate:
            duplicate.shutdown(socket.SHUT_RDWR)
    except Exception:  # closed meanwhile, or no socket at all: nothing waits on it
        return


class Watch:
    """One block under a deadline: ``severed`` once its deadline passed and ``sever`` was called (internal);
    ``settled`` is set once ``sever`` has returned."""

    __slots__ = ("settled", "severed")

    def __init__(self) -> None:
        self.severed = False
        self.settled: threading.Event | None = None


class Deadlines:
    """Severs what runs past its deadline, from one daemon thread started on first use (internal)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._pending: dict[int, tuple[float, Callable[[], None], Watch]] = {}
        self._next = 0
        self._thread: threading.Thread | None = None
        # Whether the thread sleeps until told (nothing was under way when it last looked).
        self._idle = False

    @contextmanager
    def within(self, seconds: float, sever: Callable[[], None]) -> Iterator[Watch]:
        """Calls ``sever`` (from a thread of its own) if the block is still running ``seconds`` from now; the
        ``Watch`` says afterwards whether it was called (the connection is then to be closed and opened anew).
        A block severed leaves only once ``sever`` has returned: what ``sever`` uses (the block's connection)
        stays open while it runs, and ``sever`` must return within a bound of its own."""
        deadline = time.monotonic() + seconds
        watch = Watch()
        with self._changed:
            token = self._next
            self._next += 1
            self._pending[token] = (deadline, sever, watch)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="toolsched journal deadlines", daemon=True)
                self._thread.start()
            elif self._idle:
                self._idle = False
                self._changed.notify()
        try:
            yield watch
        finally:
            with self._changed:
                self._pending.pop(token, None)
                settled = watch.settled
            # The block does not leave (and close its connection, whose descriptor another could then take)
            # while it is being severed.
            if settled is not None:
                settled.wait()

    def _run(self) -> None:
        with self._changed:
            while True:
                now = time.monotonic()
                due = [token for token, (deadline, _, _) in self._pending.items() if deadline <= now]
                for token in due:
                    _, sever, watch = self._pending.pop(token)
                    watch.severed = True
                    watch.settled = threading.Event()
                    # A thread per statement severed (a rare event): a cancel request waiting for a server that
                    # does not answer holds up neither the other deadlines nor the blocks entering or leaving.
                    severer = threading.Thread(
                        target=_sever, args=(sever, watch.settled), name="toolsched journal sever", daemon=True
                    )
                    try:
                        severer.start()
                    except RuntimeError:  # no thread to be had: severed here, late as that makes the others
                        _sever(sever, watch.settled)
                if self._pending:
                    self._changed.wait(_TICK)
                else:
                    self._idle = True
                    self._changed.wait()

    def forked(self) -> None:
        """In a child process just forked: the parent's thread and its statements are not the child's."""
        self._changed = threading.Condition()
        self._pending = {}
        self._thread = None
        self._idle = False


def _sever(sever: Callable[[], None], settled: threading.Event) -> None:
    try:
        sever()
    finally:
        settled.set()


DEADLINES = Deadlines()
os.register_at_fork(after_in_child=DEADLINES.forked)
