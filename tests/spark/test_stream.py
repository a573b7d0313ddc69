"""The streaming source on a real broker and the shared local Spark session."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import cast

import pyarrow.parquet as pq
import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession
from pyspark.sql.streaming.datasource import ReadMaxRows
from pyspark.sql.streaming.query import StreamingQuery

from fairstream.ranges import decode_shadow
from fairstream.spark import register
from fairstream.spark.backfill import spark_cause
from fairstream.spark.cluster import read_states
from fairstream.spark.columns import TaskPartition
from fairstream.spark.listener import GroupCommitter
from fairstream.spark.planning import Chunk
from fairstream.spark.stream import StreamOptions, StreamReader
from tests.conftest import Broker
from tests.spark.conftest import fill_topic, record_value

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def run_available_now(
    spark: SparkSession, options: dict[str, str], out: Path, checkpoint: Path
) -> StreamingQuery:
    register(spark)
    query = (
        spark.readStream.format("fairstream")
        .options(**options)
        .load()
        .writeStream.format("parquet")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(out))
    )
    query.awaitTermination(120)
    return query


def source_options(broker: Broker, topic: str, group_id: str, **more: str) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": broker.bootstrap,
        "subscribe": topic,
        "kafka.group.id": group_id,
        **more,
    }


def written(out: Path) -> list[tuple[int, int, bytes | None]]:
    table = pq.read_table(out, columns=["partition", "offset", "value"])
    return list(
        zip(*(table.column(c).to_pylist() for c in ("partition", "offset", "value")), strict=True)
    )


def test_available_now_writes_every_record_once_and_commits_the_group(
    spark: SparkSession, noida: Broker, group_id: str, tmp_path: Path
) -> None:
    topic = fill_topic(noida.bootstrap, [2500, 300, 40])
    options = source_options(noida, topic, group_id, maxOffsetsPerTrigger="1000")

    query = run_available_now(spark, options, tmp_path / "out", tmp_path / "ck")

    rows = written(tmp_path / "out")
    expected = {(p, o) for p, n in enumerate([2500, 300, 40]) for o in range(n)}
    assert sorted((p, o) for p, o, _ in rows) == sorted(expected)  # each exactly once
    assert all(v == (record_value(p, o) if o else None) for p, o, v in rows)
    # 2840 records at most 1000 a batch: three batches, the small partitions first
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert batches == [1000, 1000, 840]
    states = read_states(noida.bootstrap, group_id, [topic])
    assert [(s.committed, s.metadata) for s in states] == [(2500, ""), (300, ""), (40, "")]


def test_a_large_first_read_waits_one_batch_while_every_task_starts_its_reader(
    spark: SparkSession, noida: Broker, group_id: str, tmp_path: Path
) -> None:
    topic = fill_topic(noida.bootstrap, [25_000, 300])
    options = source_options(noida, topic, group_id, maxOffsetsPerTrigger="20000")

    query = run_available_now(spark, options, tmp_path / "out", tmp_path / "ck")

    # Batch 0 reads partition 1 alone and starts partition 0's readers in two tasks
    # (as many as the 20k-record batch that reads it), so no batch waits for them.
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert batches == [300, 20_000, 5_000]
    rows = written(tmp_path / "out")
    expected = {(0, o) for o in range(25_000)} | {(1, o) for o in range(300)}
    assert sorted((p, o) for p, o, _ in rows) == sorted(expected)  # each exactly once


def test_the_held_batch_plans_a_task_per_reader_the_next_batch_needs(
    noida: Broker, group_id: str
) -> None:
    """The driver's side of the hold, without Spark: what each task reads and warms."""
    topic = fill_topic(noida.bootstrap, [25_000, 300])
    options = source_options(noida, topic, group_id, maxOffsetsPerTrigger="20000")
    reader = StreamReader(StreamOptions.parse({**options, "startingOffsets": "earliest"}))
    limit = ReadMaxRows(20_000)
    start = reader.initialOffset()

    held = reader.latestOffset(start, limit)
    tasks = cast(list[TaskPartition], reader.partitions(start, held))
    first = Chunk(topic=topic, partition=0, start=0, end=20_000 - 300)
    assert [t.chunks for t in tasks] == [(Chunk(topic=topic, partition=1, start=0, end=300),), ()]
    assert [t.warm for t in tasks] == [(first,), (first,)]

    later = reader.latestOffset(held, limit)
    tasks = cast(list[TaskPartition], reader.partitions(held, later))
    assert sorted(c for t in tasks for c in t.chunks) == [
        Chunk(topic=topic, partition=0, start=0, end=10_000),
        Chunk(topic=topic, partition=0, start=10_000, end=20_000),
    ]
    assert all(t.warm == () for t in tasks)


def test_catch_up_ranges_resume_from_the_checkpoint_and_reach_the_group(
    spark: SparkSession, noida: Broker, group_id: str, tmp_path: Path
) -> None:
    topic = fill_topic(noida.bootstrap, [3000, 100])
    options = {
        **source_options(noida, topic, group_id, maxOffsetsPerTrigger="400"),
        "parallelCatchUp": "true",
        "catchUpThreshold": "500",
        "catchUpShare": "0.25",
    }
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    register(spark)
    # One batch, then stop: partition 0 jumped to 3000 and [300, 3000) is still open.
    query = (
        spark.readStream.format("fairstream")
        .options(**options)
        .load()
        .writeStream.format("parquet")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="1 hour")
        .start(str(out))
    )
    while not query.recentProgress:
        time.sleep(0.2)
    query.stop()
    first = written(out)
    assert sorted((p, o) for p, o, _ in first) == [(0, o) for o in range(300)] + [
        (1, o) for o in range(100)
    ]

    producer = Producer({"bootstrap.servers": noida.bootstrap})
    for offset in range(100, 150):
        producer.produce(topic, partition=1, value=record_value(1, offset))
    assert producer.flush(30) == 0
    run_available_now(spark, options, out, checkpoint)  # the same query, restarted

    rows = written(out)
    expected = {(0, o) for o in range(3000)} | {(1, o) for o in range(150)}
    assert sorted((p, o) for p, o, _ in rows) == sorted(expected)
    states = read_states(noida.bootstrap, group_id, [topic])
    assert [(s.committed, decode_shadow(s.metadata)) for s in states] == [(3000, []), (150, [])]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("maxRecordPerBatch", "5", "ConfigError: maxrecordperbatch='5': unknown option"),
        ("admission", "fastest", "ConfigError: admission='fastest': unknown admission"),
        ("catchUpShare", "abc", "ConfigError: catchUpShare='abc': not a number"),
        ("kafka.auto.offset.reset", "latest", "ConfigError: kafka.auto.offset.reset='latest'"),
    ],
)
def test_bad_option_fails_the_query_naming_it(
    spark: SparkSession,
    noida: Broker,
    group_id: str,
    tmp_path: Path,
    option: str,
    value: str,
    message: str,
) -> None:
    options = source_options(noida, "t", group_id, **{option: value})
    with pytest.raises(Exception) as caught:
        run_available_now(spark, options, tmp_path / "out", tmp_path / "ck")
    text = str(caught.value).split("JVM stacktrace:")[0]
    assert message in text
    # PySpark's runner stops a reader it never made: that error must not be what is left
    assert "UnboundLocalError" not in text
    assert message in spark_cause(cast(Exception, caught.value))  # the line a user is shown


@pytest.mark.parametrize("headers", [False, True])
def test_the_columns_are_spark_kafka_sources(
    spark: SparkSession, noida: Broker, group_id: str, tmp_path: Path, headers: bool
) -> None:
    topic = fill_topic(noida.bootstrap, [3])
    options = source_options(noida, topic, group_id, includeHeaders=str(headers).lower())
    run_available_now(spark, options, tmp_path / "out", tmp_path / "ck")
    table = pq.read_table(tmp_path / "out")
    spark_columns = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert table.column_names == spark_columns + (["headers"] if headers else [])
    row = next(r for r in table.to_pylist() if r["offset"] == 1)
    assert (row["key"], row["value"], row["topic"], row["partition"]) == (
        b"k1",
        record_value(0, 1),
        topic,
        0,
    )
    assert row["timestampType"] == 0  # CreateTime, as the producer stamped it
    assert row["timestamp"] is not None
    if headers:
        assert row["headers"] == [{"key": "source", "value": b"test"}]


def test_trigger_once_reads_everything_available_and_the_listener_commits_it(
    spark: SparkSession, noida: Broker, group_id: str, tmp_path: Path
) -> None:
    counts = [30_000, 100, 100]
    topic = fill_topic(noida.bootstrap, counts)
    options = source_options(noida, topic, group_id)
    register(spark)
    committer = GroupCommitter(options)
    spark.streams.addListener(committer)
    try:
        query = (
            spark.readStream.format("fairstream")
            .options(**options)
            .load()
            .writeStream.format("parquet")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(once=True)
            .start(str(tmp_path / "out"))
        )
        query.awaitTermination(120)
        # ReadAllAvailable: one batch with every record, none held back for a reader's start
        assert [p["numInputRows"] for p in query.recentProgress] == [sum(counts)]
        assert len(written(tmp_path / "out")) == sum(counts)
        # Spark plans no batch after it, so only the listener can commit it to the group
        deadline = time.monotonic() + 60
        while [s.committed for s in read_states(noida.bootstrap, group_id, [topic])] != counts:
            assert time.monotonic() < deadline, "the group never reached the log end"
            time.sleep(0.2)
    finally:
        spark.streams.removeListener(committer)


def test_starting_offsets_json_must_name_every_partition(
    spark: SparkSession, noida: Broker, group_id: str, tmp_path: Path
) -> None:
    topic = fill_topic(noida.bootstrap, [5, 5])
    starting = json.dumps({topic: {"0": 2}})
    options = source_options(noida, topic, group_id, startingOffsets=starting)
    with pytest.raises(Exception, match=f"names no offset for {topic}/1"):
        run_available_now(spark, options, tmp_path / "out", tmp_path / "ck")
    named = json.dumps({topic: {"0": 2, "1": -2}})
    run_available_now(
        spark, {**options, "startingOffsets": named}, tmp_path / "out2", tmp_path / "ck2"
    )
    assert sorted((p, o) for p, o, _ in written(tmp_path / "out2")) == [
        *((0, o) for o in range(2, 5)),
        *((1, o) for o in range(5)),
    ]


def test_a_checkpoint_of_another_query_is_refused(
    spark: SparkSession, noida: Broker, group_id: str, tmp_path: Path
) -> None:
    topic = fill_topic(noida.bootstrap, [20])
    options = source_options(noida, topic, group_id)
    checkpoint = tmp_path / "ck"
    run_available_now(spark, options, tmp_path / "out", checkpoint)
    other = {**options, "kafka.group.id": f"{group_id}-other"}
    with pytest.raises(Exception, match="the checkpoint belongs to another query"):
        run_available_now(spark, other, tmp_path / "out", checkpoint)
    assert read_states(noida.bootstrap, f"{group_id}-other", [topic])[0].committed is None


def produce_more(bootstrap: str, topic: str, offsets: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for offset in offsets:
        producer.produce(topic, partition=0, value=record_value(0, offset))
    assert producer.flush(30) == 0


@pytest.mark.parametrize("fail", [True, False])
def test_records_deleted_before_they_were_read_fail_the_query_unless_told(
    spark: SparkSession, noida: Broker, group_id: str, tmp_path: Path, fail: bool
) -> None:
    topic = fill_topic(noida.bootstrap, [20])
    options = source_options(noida, topic, group_id)
    run_available_now(spark, options, tmp_path / "out", tmp_path / "ck")
    produce_more(noida.bootstrap, topic, range(20, 100))
    admin = AdminClient({"bootstrap.servers": noida.bootstrap})
    for future in admin.delete_records([KafkaPartition(topic, 0, 60)]).values():
        future.result(timeout=30)
    if fail:
        with pytest.raises(Exception) as caught:
            run_available_now(spark, options, tmp_path / "out", tmp_path / "ck")
        assert spark_cause(cast(Exception, caught.value)) == (
            f"fairstream.DataLossError: {topic} partition 0: offsets 20-59 were deleted before "
            "they were read (log start 60); set failOnDataLoss=false to go on without them"
        )
        return
    run_available_now(
        spark, {**options, "failOnDataLoss": "false"}, tmp_path / "out", tmp_path / "ck"
    )
    assert sorted(o for _, o, _ in written(tmp_path / "out")) == [*range(20), *range(60, 100)]


def test_a_recreated_topic_is_data_loss_and_read_from_its_start_when_allowed(
    spark: SparkSession, noida: Broker, group_id: str, tmp_path: Path
) -> None:
    topic = fill_topic(noida.bootstrap, [20])
    options = source_options(noida, topic, group_id)
    run_available_now(spark, options, tmp_path / "out", tmp_path / "ck")
    admin = AdminClient({"bootstrap.servers": noida.bootstrap})
    for future in admin.delete_topics([topic]).values():
        future.result(timeout=30)
    deadline = time.monotonic() + 30
    while True:  # the deletion completes in the background
        try:
            for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
                future.result(timeout=30)
            break
        except KafkaException:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    produce_more(noida.bootstrap, topic, range(5))
    with pytest.raises(Exception, match="the log ends at 5 but the query read up to 20"):
        run_available_now(spark, options, tmp_path / "out", tmp_path / "ck")
    run_available_now(
        spark, {**options, "failOnDataLoss": "false"}, tmp_path / "out", tmp_path / "ck"
    )
    offsets = sorted(o for _, o, _ in written(tmp_path / "out"))
    assert offsets == sorted([*range(20), *range(5)])  # the new topic's records, all of them


def test_a_pattern_picks_up_a_matching_topic_created_while_the_query_runs(
    spark: SparkSession, noida: Broker, group_id: str, tmp_path: Path
) -> None:
    prefix = f"pattern-{uuid.uuid4().hex[:8]}"
    first = fill_topic(noida.bootstrap, [30, 20], topic=f"{prefix}-a")
    register(spark)
    options = {
        "kafka.bootstrap.servers": noida.bootstrap,
        "subscribePattern": f"{prefix}-.*",
        "kafka.group.id": group_id,
    }
    out = tmp_path / "out"
    query = (
        spark.readStream.format("fairstream")
        .options(**options)
        .load()
        .writeStream.format("parquet")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="1 second")
        .start(str(out))
    )
    try:
        query.processAllAvailable()
        second = fill_topic(noida.bootstrap, [15, 5, 10], topic=f"{prefix}-b")
        # Each call returns after a trigger that found nothing new; the one that lists
        # the topics after the new one exists reads it.
        deadline = time.monotonic() + 60
        while sum(p["numInputRows"] for p in query.recentProgress) < 80:
            assert time.monotonic() < deadline, query.recentProgress
            query.processAllAvailable()
    finally:
        query.stop()
    table = pq.read_table(out, columns=["topic", "partition", "offset"])
    rows = sorted(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))
    counts = {first: [30, 20], second: [15, 5, 10]}
    assert rows == sorted(  # the new topic from its first record, each record once
        (t, p, o) for t, sizes in counts.items() for p, n in enumerate(sizes) for o in range(n)
    )
    # The trigger that found nothing new after it committed the new topic to the group too.
    assert [s.committed for s in read_states(noida.bootstrap, group_id, [second])] == [15, 5, 10]
