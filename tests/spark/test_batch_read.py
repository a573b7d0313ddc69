"""``spark.read.format("fairstream")`` with Spark's Kafka source options, on noida."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from fairstream.spark import register
from tests.conftest import Broker
from tests.spark.conftest import fill_topic, record_value

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
