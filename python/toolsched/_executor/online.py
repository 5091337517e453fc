"""The online schedule of a streamed turn: each admitted call placed as it arrives, as ``run`` would batch it.

Batches are numbered as ``run`` numbers them for the same admitted calls:
Sequential gives each call its own; Parallel puts all in one; Batched fills
chunks of its size (a chunk is sealed when full, or when the stream ends);
Partitioned lets a concurrency-safe call join the open safe batch and gives an
unsafe call a batch of its own (sealing the one before). ResourceAware keeps
one batch whose calls wait only for the earlier calls they conflict with, as
the engine's conflict planner says, one call at a time (``Graph``).
"""

from __future__ import annotations

import heapq

from toolsched import _core
from toolsched._executor.schedule import declared_access, is_safe, readable_access
from toolsched._executor.turn import Job

__all__ = ["Batch", "Graph", "Schedule"]


class Batch:
    """A batch of the online schedule: its calls so far, and whether more may join."""

    __slots__ = ("concurrency", "done", "ended", "jobs", "next", "number", "safe", "sealed")

    def __init__(self, number: int, concurrency: int, safe: bool) -> None:
        self.number = number
        self.concurrency = concurrency
        self.safe = safe
        self.jobs: list[Job] = []
        # Index of the next call of the batch to start, and how many finished.
        self.next = 0
        self.done = 0
        self.sealed = False
        self.ended = False

    def complete(self) -> bool:
        return self.sealed and self.done == len(self.jobs)

    def concurrent(self) -> bool | None:
        """Whether the batch's calls may overlap, as ``run`` says it; None while it could still change."""
        if self.concurrency <= 1:
            return False
        if len(self.jobs) > 1:
            return True
        return False if self.sealed else None


class Graph:
    """ResourceAware's online schedule: calls wait only for the earlier calls they conflict with."""

    __slots__ = (
        "batch",
        "dependents",
        "done",
        "finished_since_steering",
        "heap",
        "index",
        "known",
        "planner",
        "remaining",
        "unstarted",
    )

    def __init__(self, batch: Batch) -> None:
        self.batch = batch
        self.planner = _core.ConflictPlanner()
        self.remaining: list[int] = []
        self.dependents: list[list[int]] = []
        self.done: list[bool] = []
        # Whether each call declared its resources (a call of unknown resources runs alone).
        self.known: list[bool] = []
        self.heap: list[int] = []
        self.unstarted = 0
        self.finished_since_steering = 0
        # The graph index of each call, by its slot in the turn.
        self.index: dict[int, int] = {}

    def add(self, job: Job) -> None:
        index = len(self.remaining)
        self.index[job.slot] = index
        access = declared_access(job)
        try:
            waits = self.planner.insert(access)
        except TypeError:
            # An ``Access`` whose fields were set anew after it was made (it is frozen) to what is not keys.
            access = readable_access(access, job)
            waits = self.planner.insert(access)
        remaining = 0
        for earlier in waits:
            if not self.done[earlier]:
                remaining += 1
                self.dependents[earlier].append(index)
        self.remaining.append(remaining)
        self.dependents.append([])
        self.done.append(False)
        self.known.append(access is not None)
        self.unstarted += 1
        if remaining == 0:
            heapq.heappush(self.heap, index)

    def finished(self, index: int) -> None:
        self.done[index] = True
        self.finished_since_steering += 1
        for later in self.dependents[index]:
            self.remaining[later] -= 1
            if self.remaining[later] == 0:
                heapq.heappush(self.heap, later)


class Schedule:
    """The batches of a streamed turn so far (and ResourceAware's graph), by the strategy's rules."""

    __slots__ = ("batch_of", "batches", "cap", "graph", "kind", "size")

    def __init__(self, kind: str, cap: int, size: int) -> None:
        self.kind = kind
        self.cap = cap
        self.size = size
        self.batches: list[Batch] = []
        self.graph: Graph | None = None
        # The batch of every placed call, by its slot in the turn.
        self.batch_of: dict[int, Batch] = {}

    def place(self, job: Job) -> None:
        """Puts an admitted call into the schedule: its batch, and what it waits for."""
        kind = self.kind
        batches = self.batches
        last = batches[-1] if batches else None
        if kind == "resource_aware":
            if self.graph is None:
                batch = Batch(0, self.cap, True)
                batches.append(batch)
                self.graph = Graph(batch)
            batch = self.graph.batch
            batch.jobs.append(job)
            self.graph.add(job)
        elif kind == "parallel":
            if last is None:
                last = Batch(0, self.cap, True)
                batches.append(last)
            batch = last
            batch.jobs.append(job)
        elif kind == "batched":
            if last is None or last.sealed:
                last = Batch(len(batches), min(self.size, self.cap), True)
                batches.append(last)
            batch = last
            batch.jobs.append(job)
            if len(batch.jobs) >= self.size:
                batch.sealed = True
        elif kind == "partitioned":
            safe = job.facts.static_safe if job.facts.static_safe is not None else is_safe(job)
            if safe and last is not None and last.safe and not last.sealed:
                batch = last
            else:
                if last is not None:
                    last.sealed = True
                batch = Batch(len(batches), self.cap if safe else 1, safe)
                batches.append(batch)
            batch.jobs.append(job)
            if not safe:
                batch.sealed = True
        else:
            if last is not None:
                last.sealed = True
            batch = Batch(len(batches), 1, False)
            batch.jobs.append(job)
            batch.sealed = True
            batches.append(batch)
        self.batch_of[job.slot] = batch

    def seal_last(self) -> None:
        if self.batches:
            self.batches[-1].sealed = True
