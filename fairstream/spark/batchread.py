"""``spark.read.format("fairstream")`` with Spark's options: plan a bounded read.

Spark's Kafka source reads ``[startingOffsets, endingOffsets)`` of every subscribed
partition in a batch query (either end may be given by timestamp instead); this plans
the same ranges (on the driver, when Spark asks for the reader) and places them on
tasks as a stream's batch is placed, so a hot partition is read by several tasks.
Nothing is committed: a batch read is not a consumer of the group.
"""

from __future__ import annotations

import structlog

from fairstream.errors import ConfigError, DataLossError
from fairstream.spark.cluster import GroupClient
from fairstream.spark.planning import Chunk
from fairstream.spark.streamoptions import BatchOptions
from fairstream.spark.streamplan import Position, batch_ranges, losses, plan_tasks

__all__ = ["plan_read"]

log = structlog.get_logger(__name__)

_STATE_GROUP = "fairstream-batch-read"
"""The group id the driver's offset reads carry when the read names none (it never
joins or commits)."""


def plan_read(options: BatchOptions) -> list[list[Chunk]]:
    """The tasks of a batch read, each a list of chunks.

    :raises ConfigError: a bad offset option, or an end before a start.
    :raises DataLossError: records to read are gone and ``failOnDataLoss`` is true.
    """
    o = options
    group = o.group_id or _STATE_GROUP
    with GroupClient(o.read.bootstrap, group, o.read.kafka_config, o.offset_retry) as client:
        states = o.subscription.states(client, quiet=False)
        starts = o.starting.positions(states, client.offsets_for_times)
        ends = o.ending.ends(states, client.offsets_for_times)
    for tp, end in ends.items():
        if end < starts[tp].next:
            raise ConfigError(
                *o.ending.option,
                f"ends {tp[0]} partition {tp[1]} at {end}, before its start {starts[tp].next}",
                "end at or after the start",
            )
    logs = {(s.topic, s.partition): (s.log_start, s.log_end) for s in states}
    for loss in losses(starts, logs):
        if o.fail_on_data_loss:
            raise DataLossError(topic=loss.topic, partition=loss.partition, lost=loss.lost)
        log.warning("records_lost", topic=loss.topic, partition=loss.partition, lost=loss.lost)
    chunks = batch_ranges(
        starts,
        {tp: Position(end) for tp, end in ends.items()},
        {(s.topic, s.partition): s.log_start for s in states},
    )
    return plan_tasks(chunks, o.max_tasks, o.min_tasks)
