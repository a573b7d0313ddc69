"""Pure planning for a backfill: which offsets to read, how to split them, what to commit.

No I/O and no Spark here: the driver reads the cluster into :class:`PartitionState`
values once, and everything after that is a function of plain data, so it is
tested without a broker.

The steps, in order:

1. :func:`plan_ranges` - per partition, the ranges to read: the group's
   ``[committed, end)`` plus its open KIP-333 shadow ranges, or the explicit
   ``--from``/``--to`` bounds (:func:`parse_bounds`).
2. :func:`split_ranges` - cut each range into chunks of at most ``--chunk`` offsets,
   so one hot partition is read by several Spark tasks.
3. :func:`place_chunks` - put the chunks on Spark input partitions with the
   lag-aware planner (``fairstream.assign``): chunks are the partitions of one
   pseudo-topic with lag = chunk size, Spark tasks are the members.
4. :func:`plan_commits` - the offset and shadow metadata to commit per partition
   once every chunk was read and handled.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fairstream.assign import GroupSnapshot, plan
from fairstream.errors import ConfigError, PlanError
from fairstream.ranges import OffsetRange, decode_shadow, encode_shadow, merge_ranges

__all__ = [
    "Bound",
    "Chunk",
    "PartitionCommit",
    "PartitionState",
    "parse_bounds",
    "place_chunks",
    "plan_commits",
    "plan_ranges",
    "split_ranges",
]

_TAIL = 2**63 - 1
"""Stands for "no end" in set arithmetic on offsets (Kafka offsets are int64)."""

_CHUNK_TOPIC = "chunks"
"""The pseudo-topic whose partitions are the chunks when asking the lag planner."""


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class Chunk:
    """The offsets ``[start, end)`` of one Kafka partition, read by one Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise PlanError(
                f"invalid offset range [{self.start}, {self.end})",
                where=f"{self.topic}[{self.partition}]",
                hint="a range needs 0 <= start <= end",
            )

    def __len__(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionState:
    """What the cluster said about one partition of the group, read once before planning.

    ``log_start``/``log_end`` are the low and high watermarks; ``committed`` is the
    group's committed offset (``None`` if it never committed) and ``metadata`` the
    commit metadata that carries open shadow ranges.
    """

    topic: str
    partition: int
    log_start: int
    log_end: int
    committed: int | None = None
    metadata: str = ""

    @property
    def shadow(self) -> list[OffsetRange]:
        """The open KIP-333 shadow ranges recorded in the commit metadata."""
        return decode_shadow(self.metadata)


@dataclass(frozen=True, slots=True, kw_only=True)
class Bound:
    """An explicit first (``--from``) or end (``--to``) offset.

    ``partition=None`` applies to every partition of ``topic``; a bound naming the
    partition wins over a topic-wide one.
    """

    topic: str
    partition: int | None
    offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionCommit:
    """The offset and metadata (remaining shadow ranges) to commit for one partition."""

    topic: str
    partition: int
    offset: int
    metadata: str


def parse_bounds(option: str, values: Iterable[str]) -> list[Bound]:
    """Parse ``TOPIC[:PARTITION]=OFFSET`` items, several per value separated by commas.

    >>> parse_bounds("--from", ["orders:0=100,payments=5"])  # doctest: +NORMALIZE_WHITESPACE
    [Bound(topic='orders', partition=0, offset=100), Bound(topic='payments', partition=None,
     offset=5)]

    :raises ConfigError: an item is malformed or names the same partition twice.
    """
    bounds: list[Bound] = []
    seen: set[tuple[str, int | None]] = set()
    for value in values:
        for item in filter(None, (part.strip() for part in value.split(","))):
            bound = _parse_bound(option, item)
            if (bound.topic, bound.partition) in seen:
                raise ConfigError(
                    option, item, "this partition already has a bound", "give each one once"
                )
            seen.add((bound.topic, bound.partition))
            bounds.append(bound)
    return bounds


def _parse_bound(option: str, item: str) -> Bound:
    where, sep, offset_text = item.rpartition("=")
    topic, colon, partition_text = where.rpartition(":") if ":" in where else (where, "", "")
    try:
        partition = int(partition_text) if colon else None
        offset = int(offset_text)
    except ValueError:
        partition = offset = -1
    if not sep or not topic or offset < 0 or (partition is not None and partition < 0):
        raise ConfigError(
            option,
            item,
            "expected TOPIC=OFFSET or TOPIC:PARTITION=OFFSET with non-negative integers",
            f"for example {option} orders:0=1500",
        )
    return Bound(topic=topic, partition=partition, offset=offset)


def _bound_for(bounds: Sequence[Bound], state: PartitionState) -> int | None:
    exact = [b.offset for b in bounds if (b.topic, b.partition) == (state.topic, state.partition)]
    topic_wide = [b.offset for b in bounds if b.topic == state.topic and b.partition is None]
    return next(iter(exact + topic_wide), None)


def _check_bounds(option: str, bounds: Sequence[Bound], states: Sequence[PartitionState]) -> None:
    partitions: dict[str, set[int]] = {}
    for state in states:
        partitions.setdefault(state.topic, set()).add(state.partition)
    for bound in bounds:
        text = f"{bound.topic}{'' if bound.partition is None else f':{bound.partition}'}"
        if bound.topic not in partitions:
            raise ConfigError(
                option, text, "this topic is not being backfilled", "add it to the topics"
            )
        if bound.partition is not None and bound.partition not in partitions[bound.topic]:
            raise ConfigError(
                option,
                text,
                f"topic {bound.topic!r} has partitions 0..{max(partitions[bound.topic])}",
                "name an existing partition",
            )


def plan_ranges(
    states: Sequence[PartitionState],
    *,
    starts: Sequence[Bound] = (),
    ends: Sequence[Bound] = (),
) -> list[Chunk]:
    """The ranges to read, one or more per partition, sorted by topic, partition, offset.

    Without bounds a partition contributes its open shadow ranges and
    ``[committed, log_end)``; a partition with no committed offset starts at
    ``log_start``. With a ``--from`` or ``--to`` bound the partition contributes
    the single range between them, the missing side defaulting as above. Ranges
    are clipped to ``[log_start, log_end)``: retention already deleted what lies
    below, and the backfill reads only records that exist when it starts.

    :raises ConfigError: a bound names an unknown topic or partition, a ``--to``
        lies beyond the end of its partition, or a ``--from`` lies after its ``--to``.
    """
    _check_bounds("starts", starts, states)
    _check_bounds("ends", ends, states)
    chunks: list[Chunk] = []
    for state in sorted(states, key=lambda s: (s.topic, s.partition)):
        first, last = _bound_for(starts, state), _bound_for(ends, state)
        default_start = state.log_start if state.committed is None else state.committed
        if last is not None and last > state.log_end:
            raise ConfigError(
                "ends",
                f"{state.topic}:{state.partition}={last}",
                f"the partition ends at offset {state.log_end}",
                "choose an offset at or below the end; a backfill reads existing records",
            )
        if first is None and last is None:
            wanted = [*state.shadow, OffsetRange(min(default_start, state.log_end), state.log_end)]
        else:
            start = default_start if first is None else first
            end = state.log_end if last is None else last
            if start > end:
                raise ConfigError(
                    "starts",
                    f"{state.topic}:{state.partition}={start}",
                    f"it lies after the end offset {end} of that partition",
                    "start at or below the end",
                )
            wanted = [OffsetRange(start, end)]
        for r in merge_ranges(wanted):
            start, end = max(r.start, state.log_start), min(r.end, state.log_end)
            if start < end:
                chunks.append(
                    Chunk(topic=state.topic, partition=state.partition, start=start, end=end)
                )
    return chunks


def split_ranges(ranges: Iterable[Chunk], size: int) -> list[Chunk]:
    """Cut every range into consecutive chunks of at most ``size`` offsets.

    :raises ConfigError: ``size`` is not positive.
    """
    if size < 1:
        raise ConfigError("chunk", size, "a chunk needs at least one offset", "use e.g. 100000")
    return [
        Chunk(topic=r.topic, partition=r.partition, start=s, end=min(s + size, r.end))
        for r in ranges
        for s in range(r.start, r.end, size)
    ]


def place_chunks(chunks: Sequence[Chunk], tasks: int) -> list[list[Chunk]]:
    """Spread chunks over at most ``tasks`` Spark tasks, balancing offsets per task.

    Asks the lag planner, modelling the chunks as the partitions of one pseudo-topic
    with lag = chunk size and the tasks as members: it keeps the chunk counts within
    one of each other and minimises the largest task. Tasks come back sorted by
    their first chunk, each task's chunks in offset order; no task is empty.

    :raises ConfigError: ``tasks`` is not positive.
    """
    if tasks < 1:
        raise ConfigError("tasks", tasks, "a job needs at least one task", "use e.g. 4")
    if not chunks:
        return []
    members = {f"task-{i:05d}": frozenset({_CHUNK_TOPIC}) for i in range(min(tasks, len(chunks)))}
    snapshot = GroupSnapshot(
        members=members,
        partitions={_CHUNK_TOPIC: len(chunks)},
        lag={_CHUNK_TOPIC: tuple(len(c) for c in chunks)},
    )
    assignment = plan("lag", snapshot)
    placed = [
        sorted(chunks[i] for i in topics.get(_CHUNK_TOPIC, ()))
        for topics in assignment.members.values()
    ]
    return sorted((task for task in placed if task), key=lambda task: task[0])


def _subtract(ranges: Iterable[OffsetRange], cut: OffsetRange) -> list[OffsetRange]:
    """``ranges`` without the offsets in ``cut``."""
    pieces = ((r.start, min(r.end, cut.start)) for r in ranges)
    tails = ((max(r.start, cut.end), r.end) for r in ranges)
    return [OffsetRange(start, end) for start, end in (*pieces, *tails) if start < end]


def plan_commits(states: Sequence[PartitionState], done: Iterable[Chunk]) -> list[PartitionCommit]:
    """What to commit once the ``done`` ranges were read and handled.

    Per partition the group still owes the shadow ranges plus everything from the
    committed offset on; the finished ranges (and what retention deleted) are taken
    out. The new committed offset is where the remaining open-ended part starts, and
    the remaining bounded parts become the new shadow metadata. So the offset never
    moves backwards, finished shadow ranges disappear, and a range finished above
    the old committed offset leaves the gap below it as a shadow range. Partitions
    whose state does not change get no commit.

    :raises PlanError: the remaining ranges do not fit in the commit metadata.
    """
    finished: dict[tuple[str, int], list[Chunk]] = {}
    for chunk in done:
        finished.setdefault((chunk.topic, chunk.partition), []).append(chunk)
    commits: list[PartitionCommit] = []
    for state in sorted(states, key=lambda s: (s.topic, s.partition)):
        chunks = finished.get((state.topic, state.partition))
        if not chunks:
            continue
        committed = state.committed
        if committed is None:
            committed = min(c.start for c in chunks)
        owed = [*state.shadow, OffsetRange(committed, _TAIL)]
        for cut in [
            OffsetRange(0, state.log_start),
            *(OffsetRange(c.start, c.end) for c in chunks),
        ]:
            owed = _subtract(owed, cut)
        *bounded, tail = merge_ranges(owed)  # cuts are bounded, so an open-ended part survives
        # A shadow range touching the committed offset merges into the tail; keep it
        # apart so the committed offset never moves backwards.
        offset = max(tail.start, committed)
        metadata = encode_shadow([*bounded, OffsetRange(tail.start, offset)])
        if metadata is None:
            raise PlanError(
                f"{len(bounded)} open ranges would remain and do not fit the commit metadata",
                where=f"{state.topic}[{state.partition}]",
                hint="backfill contiguous ranges (fewer gaps between bounds) so fewer stay open",
            )
        if (offset, metadata) != (state.committed, state.metadata or ""):
            commits.append(
                PartitionCommit(
                    topic=state.topic, partition=state.partition, offset=offset, metadata=metadata
                )
            )
    return commits
