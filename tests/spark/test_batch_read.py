"""``spark.read.format("fairstream")`` with Spark's Kafka source options, on noida."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from fairstream.spark import register
from tests.conftest import Broker
from tests.spark.conftest import fill_topic, record_value
from tests.spark.test_trigger_rules import timed_topic

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def read(
    spark: SparkSession, broker: Broker, topic: str, **options: str
) -> list[dict[str, object]]:
    register(spark)
    subscription = {} if {"assign", "subscribePattern"} & set(options) else {"subscribe": topic}
    frame = (
        spark.read.format("fairstream")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .options(**subscription, **options)
        .load()
    )
    return [row.asDict() for row in frame.collect()]


def test_a_batch_read_takes_every_record_with_spark_columns(
    spark: SparkSession, noida: Broker
) -> None:
    topic = fill_topic(noida.bootstrap, [50, 30])
    rows = read(spark, noida, topic)
    assert sorted((r["partition"], r["offset"]) for r in rows) == [
        *((0, o) for o in range(50)),
        *((1, o) for o in range(30)),
    ]
    assert list(rows[0]) == [
        *("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
    ]
    assert all(
        r["value"] == (record_value(r["partition"], r["offset"]) if r["offset"] else None)
        for r in rows
    )


def test_starting_and_ending_offsets_bound_the_read(spark: SparkSession, noida: Broker) -> None:
    topic = fill_topic(noida.bootstrap, [50, 30])
    rows = read(
        spark,
        noida,
        topic,
        startingOffsets=json.dumps({topic: {"0": 10, "1": -2}}),
        endingOffsets=json.dumps({topic: {"0": 20, "1": -1}}),
    )
    assert sorted((r["partition"], r["offset"]) for r in rows) == [
        *((0, o) for o in range(10, 20)),
        *((1, o) for o in range(30)),
    ]


def test_an_end_before_its_start_is_refused_naming_the_partition(
    spark: SparkSession, noida: Broker
) -> None:
    topic = fill_topic(noida.bootstrap, [50])
    with pytest.raises(Exception, match=f"ends {topic} partition 0 at 5, before its start 10"):
        read(
            spark,
            noida,
            topic,
            startingOffsets=json.dumps({topic: {"0": 10}}),
            endingOffsets=json.dumps({topic: {"0": 5}}),
        )


@pytest.mark.parametrize("fail", [True, False])
def test_deleted_records_fail_a_batch_read_unless_told(
    spark: SparkSession, noida: Broker, fail: bool
) -> None:
    topic = fill_topic(noida.bootstrap, [50])
    admin = AdminClient({"bootstrap.servers": noida.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 20)]).values():
        future.result(timeout=30)
    start = json.dumps({topic: {"0": 5}})
    if fail:
        with pytest.raises(Exception, match="offsets 5-19 were deleted before they were read"):
            read(spark, noida, topic, startingOffsets=start)
        return
    rows = read(spark, noida, topic, startingOffsets=start, failOnDataLoss="false")
    assert sorted(r["offset"] for r in rows) == list(range(20, 50))


def test_assign_reads_only_the_partitions_it_names(spark: SparkSession, noida: Broker) -> None:
    topic = fill_topic(noida.bootstrap, [5, 6, 7])
    rows = read(spark, noida, topic, assign=json.dumps({topic: [0, 2]}))
    assert sorted((r["partition"], r["offset"]) for r in rows) == [
        *((0, o) for o in range(5)),
        *((2, o) for o in range(7)),
    ]


def test_a_pattern_reads_every_matching_topic(spark: SparkSession, noida: Broker) -> None:
    first, second = fill_topic(noida.bootstrap, [3]), fill_topic(noida.bootstrap, [4])
    pattern = f"({first}|{second})"
    rows = read(spark, noida, first, subscribePattern=pattern)
    assert sorted((r["topic"], r["offset"]) for r in rows) == sorted(
        [*((first, o) for o in range(3)), *((second, o) for o in range(4))]
    )


@pytest.mark.parametrize("empty", ["topic", "range"])
def test_a_read_of_no_records_is_an_empty_frame(
    spark: SparkSession, noida: Broker, empty: str
) -> None:
    # PySpark reads a planned read of no tasks as one bare InputPartition(None).
    if empty == "topic":
        topic = fill_topic(noida.bootstrap, [0, 0])
        rows = read(spark, noida, topic)
    else:
        topic = fill_topic(noida.bootstrap, [5])
        at = json.dumps({topic: {"0": 3}})
        rows = read(spark, noida, topic, startingOffsets=at, endingOffsets=at)
    assert rows == []


def recent_topic(bootstrap: str, seconds: int) -> tuple[str, int]:
    """A one-partition topic of ``seconds`` records a second apart, and the first one's
    create time (ms). Recent: noida soon deletes records older than its retention."""
    first = (int(time.time()) - seconds - 60) * 1000
    return timed_topic(bootstrap, [first + 1000 * i for i in range(seconds)]), first


Ending = Callable[[str, int], dict[str, str]]
"""Ending options for a topic whose first record was created at the given ms."""


def _at(topic: str, millis: int) -> str:
    return json.dumps({topic: {"0": millis}})


@pytest.mark.parametrize(
    ("ending", "offsets"),
    [
        # the records before the first one that late
        (lambda topic, first: {"endingTimestamp": str(first + 1500)}, [0, 1]),
        (lambda topic, first: {"endingOffsetsByTimestamp": _at(topic, first + 2000)}, [0, 1]),
        # no record that late: the log end, as in Spark
        (lambda topic, first: {"endingOffsetsByTimestamp": _at(topic, first + 9000)}, [0, 1, 2, 3]),
        # endingTimestamp wins over endingOffsets
        (
            lambda topic, first: {
                "endingTimestamp": str(first + 500),
                "endingOffsets": _at(topic, 3),
            },
            [0],
        ),
    ],
)
def test_a_batch_read_ends_by_timestamp(
    spark: SparkSession, noida: Broker, ending: Ending, offsets: list[int]
) -> None:
    topic, first = recent_topic(noida.bootstrap, 4)
    rows = read(spark, noida, topic, **ending(topic, first))
    assert sorted(r["offset"] for r in rows) == offsets


def test_an_end_by_timestamp_before_the_start_is_refused_naming_it(
    spark: SparkSession, noida: Broker
) -> None:
    topic, first = recent_topic(noida.bootstrap, 3)
    start, end = str(first + 1500), str(first + 500)
    with pytest.raises(
        Exception, match=f"endingTimestamp='{end}': ends .* at 1, before its start 2"
    ):
        read(spark, noida, topic, startingTimestamp=start, endingTimestamp=end)


def test_spark_poll_timeout_fails_a_read_that_makes_no_progress(
    spark: SparkSession, noida: Broker
) -> None:
    # An end past the log end: the reader waits for records that never come.
    topic = fill_topic(noida.bootstrap, [5])
    with pytest.raises(Exception, match=r"offset 5 of \[0, 50\) for 1.5 s"):
        read(
            spark,
            noida,
            topic,
            endingOffsets=json.dumps({topic: {"0": 50}}),
            **{"kafkaConsumer.pollTimeoutMs": "1500"},
        )


def test_fetch_offset_retries_are_taken(spark: SparkSession, noida: Broker) -> None:
    topic = fill_topic(noida.bootstrap, [5])
    retries = {"fetchOffset.numRetries": "5", "fetchOffset.retryIntervalMs": "100"}
    assert len(read(spark, noida, topic, **retries)) == 5
