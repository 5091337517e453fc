"""Keeping a journal's leases: every run one journal object holds, renewed together, apart from its writes.

A ``LeaseKeeper`` renews all the runs its journal holds in one statement, every quarter of the
lease (a sixteenth after a renewal that failed), from a thread of its own on a connection of its
own: a renewal never waits behind the journal's writes (their lock, their queue, the event loop's
worker threads), and the number of runs held does not change how many statements a renewal takes.

Each run's ``Lease`` is what this process knows of its hold: whether a renewal found the run
held by another owner, and ``stop_at``, the moment the run must stop unless a renewal lands
first: three quarters of the lease after the last statement that extended it was sent (on the
monotonic clock). The database's lease counts from when that statement ran, which is later, so a
run that stops at ``stop_at`` has stopped a quarter of the lease before another process may take
it over: the quarter is the time its calls are given to stop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

__all__ = ["Lease", "LeaseKeeper", "Renewal"]

logger = logging.getLogger("toolsched")

# What one renewal found: the runs whose leases it extended, and the runs another owner holds now
# (or that are gone: ``None``). A run in neither was not renewed this time and is not known lost.
Renewal = tuple[set[str], dict[str, str | None]]


class Lease:
    """This process's hold on one run (internal)."""

    __slots__ = ("run_id", "stop_at", "taken", "taken_by")

    def __init__(self, run_id: str, stop_at: float) -> None:
        self.run_id = run_id
        # The ``time.monotonic()`` at which the run stops unless a renewal lands first.
        self.stop_at = stop_at
        # Set when a renewal found another owner holding the run (``taken_by``; None: the run is gone).
        self.taken = False
        self.taken_by: str | None = None

    def lost(self, now: float) -> bool:
        """Whether this process can no longer vouch for the run: taken, or ``stop_at`` came unrenewed."""
        return self.taken or now >= self.stop_at


class LeaseKeeper:
    """Renews every run one journal holds, together, from a thread of its own (internal).

    ``renew(run_ids)`` runs one renewal on the keeper's own connection (opened by ``renew`` when it
    has none) and says what it found; ``disconnect()`` closes that connection. Both are called only
    from the keeper's thread.
    """

    def __init__(
        self,
        name: str,
        lease: float,
        renew: Callable[[Sequence[str]], Renewal],
        disconnect: Callable[[], None],
    ) -> None:
        self._name = name
        # How long after a statement was sent its run stops unless another lands first.
        self._keep = lease * 3 / 4
        self.interval = max(lease / 4, 0.01)
        self._renew = renew
        self._disconnect = disconnect
        self._leases: dict[str, Lease] = {}
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._failing = False

    def hold(self, run_id: str, since: float) -> Lease:
        """Starts keeping a run this process began or claimed with a statement sent at ``since``."""
        lease = Lease(run_id, since + self._keep)
        with self._changed:
            if self._stopping:
                return lease
            self._leases[run_id] = lease
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"toolsched leases {self._name}", daemon=True)
                self._thread.start()
            self._changed.notify()
        return lease

    def drop(self, lease: Lease) -> None:
        """Stops keeping a run (it ended here and is released)."""
        with self._changed:
            if self._leases.get(lease.run_id) is lease:
                del self._leases[lease.run_id]

    def extend(self, run_id: str, since: float) -> None:
        """A write sent at ``since`` extended the run's lease too."""
        with self._changed:
            lease = self._leases.get(run_id)
            if lease is not None and since + self._keep > lease.stop_at:
                lease.stop_at = since + self._keep

    def stop(self) -> None:
        """Stops renewing and closes the keeper's connection; waits for a renewal under way."""
        with self._changed:
            self._stopping = True
            thread = self._thread
            self._changed.notify()
        if thread is None:
            self._close_connection()
        elif thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        """The keeper's thread: renews while runs are held; ends when none is (``hold`` starts another) or on
        ``stop``. Its connection outlives it, for the next thread, until ``stop``."""
        due = time.monotonic() + self.interval
        while True:
            with self._changed:
                while not self._stopping and self._leases and time.monotonic() < due:
                    self._changed.wait(due - time.monotonic())
                if self._stopping:
                    break
                if not self._leases:
                    self._thread = None
                    return
                held = dict(self._leases)
            began = time.monotonic()
            # A renewal that failed is tried again sooner: one blip does not cost a run its lease.
            due = began + (self.interval if self._renew_all(held) else self.interval / 4)
        self._close_connection()

    def _close_connection(self) -> None:
        try:
            self._disconnect()
        except Exception:
            logger.debug("closing the lease keeper's connection failed", exc_info=True)

    def _renew_all(self, held: dict[str, Lease]) -> bool:
        """One renewal of every run held; whether it landed."""
        since = time.monotonic()
        try:
            renewed, taken = self._renew(list(held))
        except Exception as exc:
            # Opened afresh for the next renewal: a connection that failed may be broken.
            self._close_connection()
            if not self._failing:
                self._failing = True
                logger.warning(
                    "renewing the leases of %d runs failed (%s); a run whose lease runs out before a renewal "
                    "lands stops",
                    len(held),
                    exc,
                )
            return False
        if self._failing:
            self._failing = False
            logger.info("renewing leases works again")
        until = since + self._keep
        with self._changed:
            for run_id in renewed:
                lease = held[run_id]
                if until > lease.stop_at:
                    lease.stop_at = until
            for run_id, owner in taken.items():
                lease = held[run_id]
                lease.taken_by = owner
                lease.taken = True
        return True
