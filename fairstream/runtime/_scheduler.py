"""KIP-387 fair scheduling over per-partition queues.

Kafka's fetcher hands records over in fetch order, so one partition with a deep
backlog can fill every poll while the others wait. Here each partition has its
own bounded queue, and a dispatch is built by walking a round-robin ring of ready
partitions and taking at most ``quota`` records from each. A partition that was
served goes to the back of the ring, so a backlog gets its share and no more.

Pure data structure: no I/O and no asyncio, so its fairness is tested directly.
A partition is *ready* when its queue holds records and no dispatch holding it is
in flight; that one-in-flight rule is what keeps per-partition order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["TP", "Dispatch", "FairScheduler", "PartitionQueue", "Slice"]

TP = tuple[str, int]
R = TypeVar("R")


@dataclass(slots=True, eq=False)
class PartitionQueue(Generic[R]):
    """The records fetched for one partition and not yet dispatched.

    Stored as the lists the fetcher returned, plus a read index into the first,
    so enqueueing and slicing cost per batch rather than per record.
    """

    tp: TP
    lane: int
    chunks: deque[list[R]] = field(default_factory=deque)
    head: int = 0
    count: int = 0
    nbytes: int = 0
    in_flight: bool = False
    paused: bool = False
    revoked: bool = False

    def push(self, records: list[R], nbytes: int) -> None:
        self.chunks.append(records)
        self.count += len(records)
        self.nbytes += nbytes

    def take(self, limit: int) -> list[R]:
        """Remove and return up to ``limit`` records from the front, in order."""
        taken: list[R] = []
        while self.chunks and len(taken) < limit:
            chunk = self.chunks[0]
            want = limit - len(taken)
            end = min(len(chunk), self.head + want)
            if not taken and self.head == 0 and end == len(chunk):
                taken = chunk  # the common case: hand the fetched list over as is
            else:
                taken.extend(chunk[self.head : end])
            if end == len(chunk):
                self.chunks.popleft()
                self.head = 0
            else:
                self.head = end
        # Bytes are tracked per queue on average: exact per-record sizes would cost
        # a pass over every record just to keep an approximate memory bound.
        if self.count:
            self.nbytes -= self.nbytes * len(taken) // self.count
        self.count -= len(taken)
        if not self.count:
            self.nbytes = 0
        return taken

    def clear(self) -> None:
        self.chunks.clear()
        self.head = self.count = self.nbytes = 0


@dataclass(frozen=True, slots=True)
class Slice(Generic[R]):
    """Consecutive records of one partition inside a dispatch."""

    tp: TP
    records: list[R]


@dataclass(frozen=True, slots=True)
class Dispatch(Generic[R]):
    """One unit of handler work: slices of several partitions of one lane."""

    lane: int
    slices: Sequence[Slice[R]]

    def __len__(self) -> int:
        return sum(len(s.records) for s in self.slices)


class FairScheduler(Generic[R]):
    """Round-robin dispatch builder with a per-partition quota.

    ``lane`` groups partitions that may share a dispatch (the partitions of one
    subscriber); lanes are served round-robin too, and each has its own bound on
    the records of one dispatch (the subscriber's ``max_batch``).
    """

    def __init__(self, *, quota: int) -> None:
        self.quota = quota
        self.queues: dict[TP, PartitionQueue[R]] = {}
        self._rings: dict[int, deque[PartitionQueue[R]]] = {}
        self._limits: dict[int, int] = {}
        self._lanes: deque[int] = deque()
        self.buffered = 0
        self.buffered_bytes = 0

    def add_partition(self, tp: TP, lane: int, max_batch: int) -> PartitionQueue[R]:
        """Start queueing for a newly assigned partition of ``lane``."""
        queue = self.queues.get(tp)
        if queue is None:
            queue = self.queues[tp] = PartitionQueue(tp, lane)
            if lane not in self._rings:
                self._rings[lane] = deque()
                self._lanes.append(lane)
            self._limits[lane] = max_batch
        return queue

    def push(self, tp: TP, records: list[R], nbytes: int) -> PartitionQueue[R]:
        """Queue fetched records; the partition joins the ring if it became ready."""
        queue = self.queues[tp]
        was_ready = queue.count > 0 and not queue.in_flight
        queue.push(records, nbytes)
        self.buffered += len(records)
        self.buffered_bytes += nbytes
        if not was_ready and not queue.in_flight:
            self._rings[queue.lane].append(queue)
        return queue

    def has_ready(self) -> bool:
        return any(self._rings.values())

    def next_dispatch(self) -> Dispatch[R] | None:
        """Build the next dispatch, or ``None`` when no partition is ready."""
        for _ in range(len(self._lanes)):
            lane = self._lanes[0]
            self._lanes.rotate(-1)
            ring = self._rings[lane]
            if not ring:
                continue
            slices: list[Slice[R]] = []
            room = self._limits[lane]
            while ring and room > 0:
                queue = ring.popleft()
                bytes_before = queue.nbytes
                records = queue.take(min(self.quota, room))
                self.buffered -= len(records)
                self.buffered_bytes -= bytes_before - queue.nbytes
                queue.in_flight = True
                slices.append(Slice(queue.tp, records))
                room -= len(records)
            return Dispatch(lane, slices)
        return None

    def release(self, dispatch: Dispatch[R]) -> None:
        """The dispatch finished: its partitions rejoin the back of the ring."""
        for piece in dispatch.slices:
            queue = self.queues.get(piece.tp)
            if queue is None or not queue.in_flight:
                continue
            queue.in_flight = False
            if queue.count:
                self._rings[queue.lane].append(queue)

    def revoke(self, tps: Iterable[TP]) -> None:
        """Forget these partitions' queued records; in-flight dispatches finish alone."""
        for tp in tps:
            queue = self.queues.pop(tp, None)
            if queue is None:
                continue
            queue.revoked = True
            self.buffered -= queue.count
            self.buffered_bytes -= queue.nbytes
            queue.clear()
            ring = self._rings[queue.lane]
            if queue in ring:
                ring.remove(queue)
