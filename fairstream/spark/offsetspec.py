"""``startingOffsets`` and ``endingOffsets``: Spark's offset options against the logs.

Spark's Kafka source takes ``earliest``, ``latest`` or JSON naming an offset for every
partition (-2 earliest, -1 latest); this source adds ``committed`` (the group's
commit, with its open catch-up ranges) for starting a stream. JSON must name every
partition of the subscribed topics, as Spark requires: one left out would start or end
somewhere the user did not say.

Pure: reads :class:`~.planning.PartitionState` values, does no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from fairstream.errors import ConfigError
from fairstream.spark.planning import PartitionState
from fairstream.spark.streamplan import Position, TopicPartition

__all__ = ["ending_offsets", "starting_positions"]


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
