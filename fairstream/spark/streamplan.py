"""Pure planning for the streaming source: offsets, fair admission, parallel catch-up.

No I/O and no Spark here, so every rule is tested without a broker.

The source's offset (what Spark checkpoints per micro-batch) says, per partition,
what the query still *owes*: the open catch-up ranges plus everything from
``next`` on. A micro-batch reads exactly ``owed(start) - owed(end)``
(:func:`batch_ranges`), which covers both the live head and the backlog drained
from catch-up ranges with one rule, and a restart from the checkpoint resumes
open ranges because they are part of the offset.

Admission (:func:`admit`) splits a batch's record budget:

- ``fair`` is max-min fair water-filling: a partition wanting fewer records than
  its fair share gets all of them, the rest of the budget is split evenly among
  the others. A live partition with a few new records is never starved by a hot one.
- ``proportional`` is Spark's Kafka source rule (``maxOffsetsPerTrigger``): each
  partition gets ``limit * its_new / all_new``, rounded down (up below one).

With parallel catch-up a partition more than ``threshold`` records behind jumps to
its end (KIP-333): ``[next, end)`` becomes a catch-up range drained from a bounded
``share`` of each batch while its new records are admitted with the live ones.
The group's commit (:func:`group_commits`) is the runtime's format: the offset is
``next`` and the open ranges go into the metadata (:mod:`fairstream.ranges`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from fairstream.errors import ConfigError
from fairstream.ranges import OffsetRange, encode_shadow, merge_ranges
from fairstream.spark.planning import Chunk, PartitionCommit, place_chunks, split_ranges

__all__ = [
    "Admission",
    "Loss",
    "Position",
    "StreamOffset",
    "TopicPartition",
    "admit",
    "available",
    "batch_ranges",
    "group_commits",
    "hold_new_reads",
    "lag_by_topic",
    "losses",
    "plan_tasks",
    "proportional_split",
    "water_fill",
]

TopicPartition = tuple[str, int]
Mode = Literal["fair", "proportional"]

TASK_RECORDS = 10_000
"""Records a batch needs per Spark task before it gets another (up to ``max_tasks``)."""

HOLD_LIMIT = 2
"""Large first reads :func:`hold_new_reads` puts off at once; each task starts a reader
for each, and a Python worker keeps four idle readers (``_readers.MAX_IDLE``)."""

_TAIL = 2**63 - 1
"""Stands for "no end" when treating ``[next, ...)`` as a range."""


@dataclass(frozen=True, slots=True)
class Position:
    """Where one partition stands: ``next`` to read live, and open catch-up ranges."""

    next: int
    catchup: tuple[OffsetRange, ...] = ()

    def owed(self) -> list[OffsetRange]:
        return merge_ranges([*self.catchup, OffsetRange(self.next, _TAIL)])


@dataclass(frozen=True, slots=True)
class StreamOffset:
    """The source's offset: the group it commits for and every partition's position."""

    group: str
    positions: Mapping[TopicPartition, Position]

    def to_json(self) -> dict[str, Any]:
        topics: dict[str, dict[str, Any]] = {}
        for (topic, partition), pos in sorted(self.positions.items()):
            topics.setdefault(topic, {})[str(partition)] = {
                "next": pos.next,
                "catchup": [[r.start, r.end] for r in pos.catchup],
            }
        return {"group": self.group, "topics": topics}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StreamOffset:
        """Parse an offset Spark hands back (from :meth:`to_json`, maybe a checkpoint).

        :raises ConfigError: the offset is not ours (a checkpoint of another source).
        """
        try:
            positions = {
                (topic, int(partition)): Position(
                    int(pos["next"]),
                    tuple(merge_ranges(OffsetRange(int(s), int(e)) for s, e in pos["catchup"]))
                    if pos["catchup"]
                    else (),
                )
                for topic, partitions in data["topics"].items()
                for partition, pos in partitions.items()
            }
            return cls(str(data["group"]), positions)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(
                "checkpointLocation",
                str(data)[:80],
                "the checkpoint holds an offset the fairstream source did not write",
                "use a new checkpoint directory for this query",
            ) from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class Admission:
    """How a batch's budget is shared: the mode and the parallel catch-up rule."""

    mode: Mode = "fair"
    parallel_catch_up: bool = False
    threshold: int = 100_000
    share: float = 0.5
    """Fraction of a batch reserved for catch-up ranges while live records wait."""

    def __post_init__(self) -> None:
        if self.mode not in ("fair", "proportional"):
            raise ConfigError("admission", self.mode, "unknown admission", "use fair|proportional")
        if self.threshold < 1:
            raise ConfigError("catchUpThreshold", self.threshold, "not positive", "e.g. 100000")
        if not 0 < self.share <= 1:
            raise ConfigError("catchUpShare", self.share, "not in (0, 1]", "e.g. 0.5")


def water_fill(demands: Mapping[TopicPartition, int], budget: int) -> dict[TopicPartition, int]:
    """Max-min fair integer split of ``budget`` over ``demands``; sums to
    ``min(budget, sum(demands))``, and ties go to the lower topic-partition."""
    grants: dict[TopicPartition, int] = {}
    order = sorted((d, tp) for tp, d in demands.items() if d > 0)
    left = max(budget, 0)
    for i, (demand, tp) in enumerate(order):
        fair = left // (len(order) - i)
        if demand <= fair:
            grants[tp] = demand
            left -= demand
            continue
        rest = sorted(tp for _, tp in order[i:])  # all want more than ``fair``
        extra = left - fair * len(rest)
        for j, other in enumerate(rest):
            grants[other] = fair + (1 if j < extra else 0)
        break
    return grants


def proportional_split(
    demands: Mapping[TopicPartition, int], budget: int
) -> dict[TopicPartition, int]:
    """Spark's Kafka source rule: ``budget * demand / total`` per partition, rounded
    down, or up below one so no partition gets nothing; all of it if it fits."""
    total = sum(d for d in demands.values() if d > 0)
    if total <= budget:
        return {tp: d for tp, d in demands.items() if d > 0}
    grants = {}
    for tp, demand in demands.items():
        if demand > 0:
            prorate = budget * (demand / total)
            grants[tp] = min(demand, math.ceil(prorate) if prorate < 1 else math.floor(prorate))
    return grants


def _split(
    mode: Mode, demands: Mapping[TopicPartition, int], budget: int
) -> dict[TopicPartition, int]:
    return water_fill(demands, budget) if mode == "fair" else proportional_split(demands, budget)


@dataclass(frozen=True, slots=True)
class Loss:
    """Offsets a partition's position still owed that its log no longer has."""

    topic: str
    partition: int
    lost: str
    """What went, in words: the offsets and why."""
    restart: Position | None
    """Where to go on from when losses are accepted (``None``: the log start clips it)."""


def losses(
    start: Mapping[TopicPartition, Position], logs: Mapping[TopicPartition, tuple[int, int]]
) -> list[Loss]:
    """What each partition owes that its log lost: offsets below the log start that
    retention deleted, or a position past the log end (the topic was deleted and created
    again, or its log truncated: its offsets went back), as Spark's source detects them."""
    found = []
    for tp, pos in sorted(start.items()):
        if tp not in logs:
            continue
        log_start, log_end = logs[tp]
        if pos.next > log_end:
            lost = f"the log ends at {log_end} but the query read up to {pos.next}"
            found.append(Loss(*tp, f"{lost} (the topic was recreated?)", Position(log_start)))
            continue
        if pos.next >= log_start and all(r.start >= log_start for r in pos.catchup):
            continue  # owes nothing below the log start (the usual case, checked cheaply)
        gone = _difference(pos.owed(), [OffsetRange(log_start, _TAIL)])
        if gone:
            spans = ", ".join(f"{r.start}-{r.end - 1}" for r in gone)
            lost = f"offsets {spans} were deleted before they were read (log start {log_start})"
            found.append(Loss(*tp, lost, None))
    return found


def _clip(position: Position, log_start: int) -> Position:
    """Drop what retention deleted: nothing below the log start can still be read."""
    catchup = [
        OffsetRange(max(r.start, log_start), r.end) for r in position.catchup if r.end > log_start
    ]
    return Position(max(position.next, log_start), tuple(merge_ranges(catchup)))


def _drain(ranges: Iterable[OffsetRange], count: int) -> tuple[OffsetRange, ...]:
    """The ranges without their lowest ``count`` offsets."""
    left: list[OffsetRange] = []
    for r in ranges:
        taken = min(count, len(r))
        count -= taken
        if r.start + taken < r.end:
            left.append(OffsetRange(r.start + taken, r.end))
    return tuple(left)


def admit(
    start: Mapping[TopicPartition, Position],
    logs: Mapping[TopicPartition, tuple[int, int]],
    limit: int | None,
    admission: Admission,
) -> dict[TopicPartition, Position]:
    """The end positions of the next batch from ``start``, given each partition's
    ``(log_start, log_end)`` and the batch's record budget (``None``: no limit).

    A partition missing from ``start`` (new since the last batch) enters at its log
    start and is read from the next batch on, so :func:`batch_ranges` needs only
    the two offsets. Every returned
    position owes a subset of what the start owed (nothing is skipped), and the batch
    holds at most ``limit`` records (``proportional`` may round a few above, as Spark).
    """
    entering = {tp: Position(log_start) for tp, (log_start, _) in logs.items() if tp not in start}
    positions = {tp: _clip(start[tp], logs[tp][0]) for tp in logs if tp in start}
    if limit is None:
        caught_up = {tp: Position(max(pos.next, logs[tp][1])) for tp, pos in positions.items()}
        return {**caught_up, **entering}
    if admission.parallel_catch_up:
        for tp, pos in positions.items():
            log_end = logs[tp][1]
            jump = [OffsetRange(pos.next, log_end)]
            if not pos.catchup and log_end - pos.next > admission.threshold and encode_shadow(jump):
                positions[tp] = Position(log_end, tuple(jump))
    live = {tp: logs[tp][1] - pos.next for tp, pos in positions.items()}
    backlog = {tp: sum(len(r) for r in pos.catchup) for tp, pos in positions.items()}
    reserved = min(sum(backlog.values()), math.floor(limit * admission.share))
    live_grants = _split(admission.mode, live, limit - reserved)
    backlog_grants = _split(admission.mode, backlog, limit - sum(live_grants.values()))
    admitted = {
        tp: replace(
            pos,
            next=pos.next + live_grants.get(tp, 0),
            catchup=_drain(pos.catchup, backlog_grants.get(tp, 0)),
        )
        for tp, pos in positions.items()
    }
    return {**admitted, **entering}


def _difference(ranges: Iterable[OffsetRange], cuts: Iterable[OffsetRange]) -> list[OffsetRange]:
    left = merge_ranges(ranges)
    for cut in cuts:
        pieces = [(r.start, min(r.end, cut.start)) for r in left]
        tails = [(max(r.start, cut.end), r.end) for r in left]
        left = merge_ranges(OffsetRange(s, e) for s, e in (*pieces, *tails) if s < e)
    return left


def batch_ranges(
    start: Mapping[TopicPartition, Position],
    end: Mapping[TopicPartition, Position],
    log_starts: Mapping[TopicPartition, int] | None = None,
) -> list[Chunk]:
    """The offsets one batch reads: what ``start`` owed and ``end`` no longer owes,
    without what retention deleted below each partition's log start.

    A partition new in ``end`` is read from the next batch on (see :func:`admit`).
    """
    chunks = []
    for (topic, partition), after in sorted(end.items()):
        log_start = (log_starts or {}).get((topic, partition), 0)
        before = start.get((topic, partition), after)
        for r in _read(before, after, log_start):
            chunks.append(Chunk(topic=topic, partition=partition, start=r.start, end=r.end))
    return chunks


def _read(before: Position, after: Position, log_start: int) -> list[OffsetRange]:
    """What one partition's batch reads from ``before`` to ``after``."""
    if after.next < before.next:  # its log went back (recreated): read the new one
        before = Position(log_start)
    if not before.catchup and not after.catchup:  # live only: one range (the usual case)
        first = max(before.next, log_start)
        return [OffsetRange(first, after.next)] if after.next > first else []
    return _difference(before.owed(), [*after.owed(), OffsetRange(0, log_start)])


def hold_new_reads(
    start: Mapping[TopicPartition, Position],
    end: Mapping[TopicPartition, Position],
    read_last: Iterable[TopicPartition],
) -> tuple[dict[TopicPartition, Position], list[Chunk]]:
    """Put off by one batch the large reads of partitions the last batch did not read.

    A partition that would start a read of more than :data:`TASK_RECORDS` records (a
    backlog that appeared, the query's first batch) gets none in this batch; instead
    every task of it starts a reader at the partition's first offset to read, and the
    next batch reads with readers that have been fetching meanwhile. Returns the end
    positions and, per held partition, its first range (the readers to start).

    Why: a new reader's first fetch is the slowest read there is, and every live record
    of the batch it lands in waits for it. On noida, which answers a fetch with the
    partition up to its log end, it is ~0.6-1 s for a 1M-record backlog in each Python
    worker; on Kafka a client's connection and first round trip.

    Nothing is held when nothing else would be read (that batch would be empty, so it
    would never run to start the readers), nor when more than :data:`HOLD_LIMIT`
    partitions qualify: a worker keeps only a few idle readers, and a batch that starts
    that many large reads (a replay) waits for new readers whatever is held.
    """
    recent = set(read_last)
    held: dict[TopicPartition, Position] = {}
    warm: list[Chunk] = []
    others = False  # something else is read in this batch
    for tp, after in sorted(end.items()):
        if tp not in start:
            continue
        ranges = _read(start[tp], after, 0)
        if tp not in recent and sum(len(r) for r in ranges) > TASK_RECORDS:
            held[tp] = start[tp]
            topic, partition = tp
            first = ranges[0]  # its reader serves what follows
            warm.append(Chunk(topic=topic, partition=partition, start=first.start, end=first.end))
        elif ranges:
            others = True
    if not held or len(held) > HOLD_LIMIT or not others:
        return dict(end), []
    return {**end, **held}, warm


def group_commits(
    end: Mapping[TopicPartition, Position],
    committed: Mapping[TopicPartition, tuple[int | None, str]] | None = None,
) -> list[PartitionCommit]:
    """The group's commits once Spark finished a batch up to ``end``: offset ``next``,
    open catch-up ranges as metadata; partitions already committed so are left out."""
    commits = []
    for (topic, partition), pos in sorted(end.items()):
        metadata = encode_shadow(pos.catchup) or ""
        if (committed or {}).get((topic, partition)) != (pos.next, metadata):
            commits.append(
                PartitionCommit(
                    topic=topic, partition=partition, offset=pos.next, metadata=metadata
                )
            )
    return commits


def available(
    start: Mapping[TopicPartition, Position], logs: Mapping[TopicPartition, tuple[int, int]]
) -> int:
    """Records the next batch could read: new ones past each ``next``, open catch-up
    ranges, and all of a partition new since ``start``."""
    total = 0
    for tp, (log_start, log_end) in logs.items():
        pos = start.get(tp, Position(log_start))
        total += max(log_end - pos.next, 0) + sum(len(r) for r in pos.catchup)
    return total


def lag_by_topic(
    done: Mapping[TopicPartition, Position], log_ends: Mapping[TopicPartition, int]
) -> dict[str, int]:
    """Records each topic still owes: new ones past ``next`` plus open catch-up ranges."""
    lag: dict[str, int] = {}
    for (topic, partition), end in sorted(log_ends.items()):
        pos = done.get((topic, partition), Position(end))
        owed = max(end - pos.next, 0) + sum(len(r) for r in pos.catchup)
        lag[topic] = lag.get(topic, 0) + owed
    return lag


def plan_tasks(chunks: Sequence[Chunk], max_tasks: int, min_tasks: int = 1) -> list[list[Chunk]]:
    """A batch's ranges on Spark tasks: one task per :data:`TASK_RECORDS` records, at
    most ``max_tasks`` and at least ``min_tasks`` (Spark's ``minPartitions``; never more
    tasks than records), ranges cut to equal pieces and placed by the lag planner, so a
    hot partition is read by several tasks. A task costs a Kafka client and a round
    trip, which is why a small batch gets few."""
    total = sum(len(c) for c in chunks)
    if not total:
        return []
    wanted = max(1, min(max_tasks, math.ceil(total / TASK_RECORDS)), min(min_tasks, total))
    return place_chunks(split_ranges(chunks, math.ceil(total / wanted)), wanted)
