"""Spark's minOffsetsPerTrigger, maxTriggerDelay, minPartitions, starting timestamps and
fetchOffset retries, on the driver's side.

The reader is driven as Spark drives it (initialOffset, latestOffset, partitions),
without a Spark session: these rules are decided there.
"""

from __future__ import annotations

import socket
import time

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable
from structlog.testing import capture_logs

from fairstream.errors import BrokerError, ConfigError
from fairstream.spark.cluster import GroupClient
from fairstream.spark.planning import Chunk
from fairstream.spark.stream import StreamOptions, StreamReader
from fairstream.spark.streamplan import Position, available, plan_tasks
from tests.conftest import Broker
from tests.spark.conftest import fill_topic

pytestmark = pytest.mark.broker


def reader(broker: Broker, topic: str, group_id: str, **more: str) -> StreamReader:
    options = {
        "kafka.bootstrap.servers": broker.bootstrap,
        "subscribe": topic,
        "kafka.group.id": group_id,
        "startingOffsets": "earliest",
        "commitToGroup": "false",
        **more,
    }
    return StreamReader(StreamOptions.parse(options))


def test_fewer_records_than_min_offsets_per_trigger_wait(noida: Broker, group_id: str) -> None:
    topic = fill_topic(noida.bootstrap, [10, 5])
    source = reader(noida, topic, group_id, minOffsetsPerTrigger="100")
    start = source.initialOffset()
    try:
        assert source.latestOffset(start, ReadAllAvailable()) == start  # 15 < 100: no batch
    finally:
        source.stop()


def test_max_trigger_delay_fires_a_batch_below_the_minimum(noida: Broker, group_id: str) -> None:
    topic = fill_topic(noida.bootstrap, [10, 5])
    source = reader(noida, topic, group_id, minOffsetsPerTrigger="100", maxTriggerDelay="1ms")
    start = source.initialOffset()
    try:
        end = source.latestOffset(start, ReadAllAvailable())
        assert end != start
        assert sum(len(c) for t in source.partitions(start, end) for c in t.chunks) == 15
    finally:
        source.stop()


def test_min_partitions_spreads_a_small_batch_over_that_many_tasks(
    noida: Broker, group_id: str
) -> None:
    topic = fill_topic(noida.bootstrap, [30])
    source = reader(noida, topic, group_id, minPartitions="3")
    start = source.initialOffset()
    try:
        end = source.latestOffset(start, ReadAllAvailable())
        tasks = source.partitions(start, end)
        assert [sum(len(c) for c in t.chunks) for t in tasks] == [10, 10, 10]
    finally:
        source.stop()


def test_plan_tasks_never_makes_more_tasks_than_records() -> None:
    chunks = [Chunk(topic="t", partition=0, start=0, end=2)]
    assert len(plan_tasks(chunks, max_tasks=8, min_tasks=5)) == 2


def test_available_counts_new_records_catch_up_ranges_and_new_partitions() -> None:
    from fairstream.ranges import OffsetRange

    start = {("t", 0): Position(10, (OffsetRange(2, 5),))}
    logs = {("t", 0): (0, 14), ("t", 1): (3, 9)}
    assert available(start, logs) == 4 + 3 + 6


@pytest.mark.parametrize(
    ("text", "seconds"), [("15m", 900.0), ("30s", 30.0), ("500ms", 0.5), ("2", 2.0)]
)
def test_max_trigger_delay_takes_spark_durations(text: str, seconds: float) -> None:
    options = {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.group.id": "g"}
    assert StreamOptions.parse({**options, "maxTriggerDelay": text}).max_trigger_delay == seconds
    with pytest.raises(ConfigError, match="maxTriggerDelay='soon': not a duration"):
        StreamOptions.parse({**options, "maxTriggerDelay": "soon"})


HOUR_AGO = int(time.time() * 1000) - 3_600_000
"""The base of the tests' create times: recent, because a broker's retention deletes
records by their timestamps (noida deleted records stamped in 1970 within seconds, so a
read that came a moment late found none)."""


def timed_topic(bootstrap: str, stamps: list[int]) -> str:
    """A one-partition topic whose records carry the given create times (ms)."""
    from confluent_kafka import Producer

    topic = fill_topic(bootstrap, [0])
    producer = Producer({"bootstrap.servers": bootstrap})
    for millis in stamps:
        producer.produce(topic, partition=0, value=b"v", timestamp=millis)
    assert producer.flush(30) == 0
    return topic


def test_a_starting_timestamp_starts_at_the_first_record_that_late(
    noida: Broker, group_id: str
) -> None:
    topic = timed_topic(noida.bootstrap, [HOUR_AGO + t for t in (1_000, 2_000, 3_000, 4_000)])
    source = reader(noida, topic, group_id, startingTimestamp=str(HOUR_AGO + 2_500))
    try:
        start = source.initialOffset()
        assert start["topics"][topic] == {"0": {"next": 2, "catchup": []}}
    finally:
        source.stop()


def test_offsets_by_timestamp_past_every_record_fail_or_start_at_the_end(
    noida: Broker, group_id: str
) -> None:
    topic = timed_topic(noida.bootstrap, [HOUR_AGO + 1_000, HOUR_AGO + 2_000])
    by_time = f'{{"{topic}": {{"0": {HOUR_AGO + 9_000}}}}}'
    source = reader(noida, topic, group_id, startingOffsetsByTimestamp=by_time)
    try:
        with pytest.raises(ConfigError, match="has no record at or after that time"):
            source.initialOffset()
    finally:
        source.stop()
    latest = reader(
        noida,
        topic,
        group_id,
        startingOffsetsByTimestamp=by_time,
        startingOffsetsByTimestampStrategy="latest",
    )
    try:
        assert latest.initialOffset()["topics"][topic] == {"0": {"next": 2, "catchup": []}}
    finally:
        latest.stop()


def test_offsets_are_asked_as_often_as_fetch_offset_num_retries_says() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{sock.getsockname()[1]}"
    options = StreamOptions.parse(
        {
            "kafka.bootstrap.servers": closed,
            "subscribePattern": "t.*",
            "kafka.group.id": "g",
            "fetchOffset.numRetries": "3",
            "fetchOffset.retryIntervalMs": "20",
        }
    )
    client = GroupClient(closed, "g", {}, options.offset_retry)
    try:
        with capture_logs() as logs, pytest.raises(BrokerError, match="cannot list the cluster"):
            client.topic_names(timeout=0.3)
    finally:
        client.close()
    # Three attempts in all, as Spark counts them: two failures asked again, then the error.
    assert [e["attempt"] for e in logs if e["event"] == "offsets_fetch_retried"] == [1, 2]
