"""KIP-387 fair scheduling over per-partition queues.

Kafka's fetcher hands records over in fetch order, so one partition with a deep
backlog can fill every poll while the others wait. Here each partition has its
own bounded queue, and a dispatch is built by walking a round-robin ring of ready
partitions and taking at most ``quota`` records from each. A partition that was
served goes to the back of the ring, so a backlog gets its share and no more. The
quota shares a dispatch among partitions that compete: the last one left in the
ring takes what the dispatch has room for, since no other is waiting for it (a
backlog draining beside live partitions then takes its whole queue, half the
dispatches and pulls of quota-sized ones and ~1% of the CPU, ``benchmarks/RESULTS.md``,
Fairness).

Pure data structure: no I/O and no asyncio, so its fairness is tested directly.
A partition is *ready* when its queue holds records and no dispatch holding it is
in flight; that one-in-flight rule is what keeps per-partition order.

A KIP-333 shadow task (parallel rebalance) replays a partition's older records
beside its live ones. Its records get a queue of their own, in a *replay lane*
per subscriber, so shadow and live records of one partition may be in flight at
the same time (the documented exception to per-partition order; each queue keeps
its own order). Lanes are served round-robin, so live records wait for at most
one shadow dispatch, and at most ``shadow_limit`` shadow dispatches run at once,
so the shadow never holds every handler slot.

A lane may be *single* (a record handler): each of its dispatches holds one
partition, so the partitions of one subscriber run side by side instead of one
after another inside a dispatch, up to the lane's ``limit`` dispatches at once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from fairstream.runtime._record import TP

__all__ = ["Dispatch", "FairScheduler", "Lane", "PartitionQueue", "Slice"]

Lane = tuple[int, bool]
"""A subscriber's index, and whether its records are replayed by a shadow task."""
R = TypeVar("R")


@dataclass(slots=True, eq=False)
class PartitionQueue(Generic[R]):
    """The records fetched for one partition and not yet dispatched.

    Stored as the lists the fetcher returned, so enqueueing and slicing cost per
    batch rather than per record.
    """

    tp: TP
    lane: int
    replay: bool = False
    chunks: deque[list[R]] = field(default_factory=deque)
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
        """Remove and return up to ``limit`` records from the front, in order.

        A chunk taken in part loses what was taken at once (``del``, a memmove of
        the rest): kept to its end behind a read index, a record handled stayed
        alive until its chunk's last record was taken, a round of the ring later,
        and the garbage collector promoted it meanwhile.
        """
        taken: list[R] = []
        chunks = self.chunks
        while chunks and len(taken) < limit:
            chunk = chunks[0]
            want = limit - len(taken)
            if len(chunk) <= want:
                chunks.popleft()
                if taken:
                    taken += chunk
                else:
                    taken = chunk  # the common case: hand the fetched list over as is
            else:
                taken += chunk[:want]
                del chunk[:want]
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
        self.count = self.nbytes = 0


@dataclass(frozen=True, slots=True)
class Slice(Generic[R]):
    """Consecutive records of one partition inside a dispatch."""

    tp: TP
    records: list[R]


@dataclass(frozen=True, slots=True)
class Dispatch(Generic[R]):
    """One unit of handler work: slices of several partitions of one lane.

    ``replay`` marks records read by a shadow task from its own queues.
    """

    lane: int
    slices: Sequence[Slice[R]]
    replay: bool = False

    def __len__(self) -> int:
        return sum(len(s.records) for s in self.slices)


class FairScheduler(Generic[R]):
    """Round-robin dispatch builder with a per-partition quota.

    ``lane`` groups partitions that may share a dispatch (the partitions of one
    subscriber); lanes are served round-robin too, and each has its own bound on
    the records of one dispatch (the subscriber's ``max_batch``). ``queues`` holds
    the live queues, ``shadows`` the replay queues.
    """

    def __init__(self, *, quota: int, shadow_limit: int = 1) -> None:
        self.quota = quota
        self.shadow_limit = shadow_limit
        self.shadow_in_flight = 0
        self.queues: dict[TP, PartitionQueue[R]] = {}
        self.shadows: dict[TP, PartitionQueue[R]] = {}
        self._rings: dict[Lane, deque[PartitionQueue[R]]] = {}
        self._limits: dict[int, int] = {}
        self._lanes: deque[Lane] = deque()
        self._single: set[int] = set()
        self._lane_limit: dict[int, int] = {}
        self._lane_running: dict[int, int] = {}
        self.buffered = 0
        self.buffered_bytes = 0
        self.replay_buffered = 0
        """Of ``buffered``, the records in shadow queues."""
        self.version = 0
        """Counts changes to the set of live queues, so a reader may cache what it derives."""

    @property
    def live_buffered(self) -> int:
        """Records queued for the live lanes: what the fetch loop's pulls add to."""
        return self.buffered - self.replay_buffered

    def configure_lane(self, lane: int, *, single: bool, limit: int) -> None:
        """``single``: one partition per live dispatch; at most ``limit`` in flight."""
        if single:
            self._single.add(lane)
        self._lane_limit[lane] = limit

    def _table(self, replay: bool) -> dict[TP, PartitionQueue[R]]:
        return self.shadows if replay else self.queues

    def add_partition(
        self, tp: TP, lane: int, max_batch: int, *, replay: bool = False
    ) -> PartitionQueue[R]:
        """Start queueing for a newly assigned partition of ``lane`` (or its shadow)."""
        table = self._table(replay)
        queue = table.get(tp)
        if queue is None:
            queue = table[tp] = PartitionQueue(tp, lane, replay)
            self.version += 1
            if (lane, replay) not in self._rings:
                self._rings[lane, replay] = deque()
                self._lanes.append((lane, replay))
            self._limits[lane] = max_batch
        return queue

    def push(
        self, tp: TP, records: list[R], nbytes: int, *, replay: bool = False
    ) -> PartitionQueue[R]:
        """Queue fetched records; the partition joins the ring if it became ready."""
        queue = self._table(replay)[tp]
        was_ready = queue.count > 0 and not queue.in_flight
        queue.push(records, nbytes)
        self.buffered += len(records)
        self.buffered_bytes += nbytes
        if replay:
            self.replay_buffered += len(records)
        if not was_ready and not queue.in_flight:
            self._rings[queue.lane, replay].append(queue)
        return queue

    def _eligible(self, lane: Lane) -> bool:
        if not self._rings[lane]:
            return False
        if lane[1]:
            return self.shadow_in_flight < self.shadow_limit
        limit = self._lane_limit.get(lane[0])
        return limit is None or self._lane_running.get(lane[0], 0) < limit

    def has_ready(self) -> bool:
        return any(self._eligible(lane) for lane in self._lanes)

    def next_dispatch(self) -> Dispatch[R] | None:
        """Build the next dispatch, or ``None`` when no partition is ready."""
        for _ in range(len(self._lanes)):
            key = self._lanes[0]
            self._lanes.rotate(-1)
            if not self._eligible(key):
                continue
            lane, replay = key
            ring = self._rings[key]
            slices: list[Slice[R]] = []
            room = self._limits[lane]
            single = lane in self._single and not replay
            while ring and room > 0 and not (single and slices):
                queue = ring.popleft()
                bytes_before = queue.nbytes
                # The quota shares a dispatch among partitions that compete; one
                # alone in its lane takes what the dispatch has room for.
                records = queue.take(min(self.quota, room) if ring else room)
                self.buffered -= len(records)
                self.buffered_bytes -= bytes_before - queue.nbytes
                if replay:
                    self.replay_buffered -= len(records)
                queue.in_flight = True
                slices.append(Slice(queue.tp, records))
                room -= len(records)
            if replay:
                self.shadow_in_flight += 1
            else:
                self._lane_running[lane] = self._lane_running.get(lane, 0) + 1
            return Dispatch(lane, slices, replay)
        return None

    def release(self, dispatch: Dispatch[R]) -> None:
        """The dispatch finished: its partitions rejoin the back of the ring."""
        if dispatch.replay:
            self.shadow_in_flight -= 1
        else:
            self._lane_running[dispatch.lane] -= 1
        table = self._table(dispatch.replay)
        for piece in dispatch.slices:
            queue = table.get(piece.tp)
            if queue is None or not queue.in_flight:
                continue
            queue.in_flight = False
            if queue.count:
                self._rings[queue.lane, queue.replay].append(queue)

    def revoke(self, tps: Iterable[TP], *, replay: bool | None = None) -> None:
        """Forget these partitions' queued records; in-flight dispatches finish alone.

        Both the live and the shadow queue go, unless ``replay`` names one of them.
        """
        for tp in tps:
            for table in (self.queues, self.shadows):
                if replay is not None and table is not self._table(replay):
                    continue
                queue = table.pop(tp, None)
                if queue is None:
                    continue
                queue.revoked = True
                self.version += 1
                self.buffered -= queue.count
                self.buffered_bytes -= queue.nbytes
                if queue.replay:
                    self.replay_buffered -= queue.count
                queue.clear()
                ring = self._rings[queue.lane, queue.replay]
                if queue in ring:
                    ring.remove(queue)
