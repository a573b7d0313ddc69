"""Where a read starts and a batch read ends: Spark's offset options against the logs.

Spark's Kafka source takes ``earliest``, ``latest`` or JSON naming an offset for every
partition (-2 earliest, -1 latest); this source adds ``committed`` (the group's
commit, with its open catch-up ranges) for starting a stream. JSON must name every
partition of the subscribed topics, as Spark requires: one left out would start or end
somewhere the user did not say. By timestamp, a start or end is the first offset whose
timestamp is at or after the time (Kafka's ListOffsets by timestamp): a start takes
``startingTimestamp`` over ``startingOffsetsByTimestamp`` over ``startingOffsets``, an
end ``endingTimestamp`` over ``endingOffsetsByTimestamp`` over ``endingOffsets``.

Pure: reads :class:`~.planning.PartitionState` values, does no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from fairstream.errors import ConfigError
from fairstream.spark.planning import PartitionState
from fairstream.spark.streamplan import Position, TopicPartition

__all__ = [
    "End",
    "Start",
    "ending_offsets",
    "starting_positions",
    "timestamp_positions",
    "timestamp_times",
]

Lookup = Callable[[Mapping[TopicPartition, int]], Mapping[TopicPartition, int]]
"""Offsets by timestamp (:meth:`.cluster.GroupClient.offsets_for_times`)."""


@dataclass(frozen=True, slots=True)
class Start:
    """Where a read starts: ``startingOffsets``, or by timestamp when one is given."""

    offsets: str
    by_timestamp: str | None = None
    timestamp: int | None = None
    strategy: str = "error"

    def positions(
        self, states: Sequence[PartitionState], lookup: Lookup
    ) -> dict[TopicPartition, Position]:
        """Each partition's start; ``lookup`` is asked only for a start by timestamp.

        :raises ConfigError: a bad option, or no record late enough (strategy error).
        """
        option = "startingOffsetsByTimestamp"
        times = timestamp_times(option, self.by_timestamp, self.timestamp, states)
        if times is None:
            return starting_positions(self.offsets, states)
        return timestamp_positions(times, lookup(times), states, self.strategy)


@dataclass(frozen=True, slots=True)
class End:
    """Where a batch read ends: ``endingOffsets``, or by timestamp when one is given."""

    offsets: str = "latest"
    by_timestamp: str | None = None
    timestamp: int | None = None

    @property
    def option(self) -> tuple[str, str]:
        """The option that decides, and its value (for errors)."""
        if self.timestamp is not None:
            return "endingTimestamp", str(self.timestamp)
        if self.by_timestamp is not None:
            return "endingOffsetsByTimestamp", self.by_timestamp
        return "endingOffsets", self.offsets

    def ends(self, states: Sequence[PartitionState], lookup: Lookup) -> dict[TopicPartition, int]:
        """Each partition's end (exclusive); ``lookup`` is asked only for an end by
        timestamp. As in Spark, a partition with no record that late ends at its log end.

        :raises ConfigError: a bad option.
        """
        option = "endingOffsetsByTimestamp"
        times = timestamp_times(option, self.by_timestamp, self.timestamp, states)
        if times is None:
            return ending_offsets(self.offsets, states)
        found = lookup(times)
        ends = {}
        for s in states:
            offset = found.get((s.topic, s.partition), -1)
            ends[s.topic, s.partition] = s.log_end if offset < 0 else offset
        return ends


def starting_positions(
    starting: str, states: Sequence[PartitionState]
) -> dict[TopicPartition, Position]:
    """Where each partition starts, by ``startingOffsets``.

    :raises ConfigError: not a known word or JSON, or JSON that leaves a partition out.
    """
    if starting in ("committed", "earliest", "latest"):
        return {(s.topic, s.partition): _named_start(starting, s) for s in states}
    offsets = _every_partition("startingOffsets", starting, states, "committed, earliest, latest")
    return {
        (s.topic, s.partition): Position(_resolve(offsets[s.topic, s.partition], s)) for s in states
    }


def ending_offsets(ending: str, states: Sequence[PartitionState]) -> dict[TopicPartition, int]:
    """Where a batch read of each partition ends (exclusive), by ``endingOffsets``.

    :raises ConfigError: not ``latest`` or JSON, JSON that leaves a partition out, or
        -2 (earliest), which Spark refuses as an end.
    """
    if ending == "latest":
        return {(s.topic, s.partition): s.log_end for s in states}
    if ending == "earliest":
        raise ConfigError("endingOffsets", ending, "earliest is not an end", "use latest or JSON")
    offsets = _every_partition("endingOffsets", ending, states, "latest")
    if -2 in offsets.values():
        raise ConfigError("endingOffsets", ending, "-2 (earliest) is not an end", "use -1 or N")
    return {(s.topic, s.partition): _resolve(offsets[s.topic, s.partition], s) for s in states}


def _named_start(starting: str, state: PartitionState) -> Position:
    if starting == "committed":
        if state.committed is None:
            return Position(state.log_start)
        return Position(state.committed, tuple(state.shadow))
    return Position(state.log_start if starting == "earliest" else state.log_end)


def _resolve(offset: int, state: PartitionState) -> int:
    return {-2: state.log_start, -1: state.log_end}.get(offset, offset)


def _every_partition(
    option: str, text: str, states: Sequence[PartitionState], words: str
) -> dict[TopicPartition, int]:
    try:
        parsed = json.loads(text)
        offsets = {
            (topic, int(partition)): int(offset)
            for topic, by_partition in parsed.items()
            for partition, offset in by_partition.items()
        }
    except (ValueError, AttributeError, TypeError):
        raise ConfigError(
            option, text, f"expected {words} or JSON", 'e.g. {"clicks": {"0": 42, "1": -2}}'
        ) from None
    missing = sorted(
        f"{s.topic}/{s.partition}" for s in states if (s.topic, s.partition) not in offsets
    )
    if missing:
        raise ConfigError(
            option,
            text,
            f"names no offset for {', '.join(missing[:5])}" + (" ..." if len(missing) > 5 else ""),
            "name every partition of the subscribed topics (-2 earliest, -1 latest)",
        )
    return offsets


def timestamp_times(
    option: str, by_timestamp: str | None, timestamp: int | None, states: Sequence[PartitionState]
) -> dict[TopicPartition, int] | None:
    """The time (ms) each partition starts or ends at: Spark's ``startingTimestamp`` /
    ``endingTimestamp`` (every partition; it wins) or ``option``, JSON naming every
    partition (``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``); ``None``
    when neither is given.

    :raises ConfigError: JSON that is bad or leaves a partition out.
    """
    if timestamp is not None:
        return {(s.topic, s.partition): timestamp for s in states}
    if by_timestamp is None:
        return None
    return _every_partition(option, by_timestamp, states, "JSON")


def timestamp_positions(
    times: Mapping[TopicPartition, int],
    found: Mapping[TopicPartition, int],
    states: Sequence[PartitionState],
    strategy: str,
) -> dict[TopicPartition, Position]:
    """Positions from ``found``, the first offset at or after each time (-1: none).

    Where a partition has no record that late, Spark's
    ``startingOffsetsByTimestampStrategy`` decides: ``error`` (the default) fails,
    ``latest`` starts at the log end.

    :raises ConfigError: a partition has no such offset and the strategy is ``error``.
    """
    positions = {}
    for s in states:
        tp = (s.topic, s.partition)
        offset = found.get(tp, -1)
        if offset < 0:
            if strategy != "latest":
                raise ConfigError(
                    "startingOffsetsByTimestamp",
                    times[tp],
                    f"{s.topic} partition {s.partition} has no record at or after that time",
                    "set startingOffsetsByTimestampStrategy=latest to start at its end",
                )
            offset = s.log_end
        positions[tp] = Position(offset)
    return positions
