"""The Kafka sink (``df.write`` / ``writeStream`` ``format("fairstream")``) on a real broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Message, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from fairstream.errors import ConfigError
from fairstream.spark import register
from fairstream.spark.sink import SinkOptions
from tests.conftest import Broker
from tests.spark.conftest import fill_topic, record_value

pytestmark = [pytest.mark.spark, pytest.mark.broker]

ROOT = Path(__file__).resolve().parents[2]

HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])


def new_topic(bootstrap: str, partitions: int) -> str:
    topic = f"sink-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=30)
    return topic


def read_back(bootstrap: str, topic: str, partitions: int, expected: int) -> list[Message]:
    """Every record of ``topic`` (at least ``expected``; a short wait for extras)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[Message] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            batch = consumer.consume(10_000, timeout=0.5)
            out.extend(m for m in batch if m.error() is None)
            if len(out) >= expected and not batch:
                break
    finally:
        consumer.close()
    return out


def test_a_batch_write_delivers_every_row_with_key_partition_and_headers(
    spark: SparkSession, noida: Broker
) -> None:
    topic = new_topic(noida.bootstrap, 3)
    register(spark)
    rows = [(f"k{i}", f"v{i}".encode(), i % 3, [(("n", str(i).encode()))]) for i in range(3000)]
    schema = StructType(
        [
            StructField("key", StringType()),
            StructField("value", BinaryType()),
            StructField("partition", IntegerType()),
            StructField("headers", ArrayType(HEADER)),
        ]
    )
    frame = spark.createDataFrame(rows, schema).repartition(2)
    (
        frame.write.format("fairstream")
        .mode("append")
        .option("kafka.bootstrap.servers", noida.bootstrap)
        .option("topic", topic)
        .save()
    )
    written = read_back(noida.bootstrap, topic, 3, len(rows))
    got = sorted((m.key(), m.value(), m.partition(), m.headers()) for m in written)
    assert got == sorted(
        (k.encode(), v, p, [(h[0], h[1]) for h in hs]) for k, v, p, hs in rows
    )  # every row once, on the partition it named


def test_a_topic_column_routes_rows_and_a_string_value_is_utf8(
    spark: SparkSession, noida: Broker
) -> None:
    topics = [new_topic(noida.bootstrap, 1) for _ in range(2)]
    register(spark)
    frame = spark.createDataFrame(
        [(topics[i % 2], f"é{i}") for i in range(10)], "topic string, value string"
    )
    frame.write.format("fairstream").mode("append").option(
        "kafka.bootstrap.servers", noida.bootstrap
    ).save()
    for index, topic in enumerate(topics):
        values = sorted(m.value() for m in read_back(noida.bootstrap, topic, 1, 5))
        assert values == sorted(f"é{i}".encode() for i in range(index, 10, 2))


def test_a_record_the_broker_refuses_fails_the_write(spark: SparkSession, noida: Broker) -> None:
    topic = new_topic(noida.bootstrap, 1)
    register(spark)
    frame = spark.createDataFrame([(b"a", 0), (b"b", 7)], "value binary, partition int")
    with pytest.raises(Exception, match="partition 7 was not written to Kafka") as caught:
        frame.coalesce(1).write.format("fairstream").mode("append").option(
            "kafka.bootstrap.servers", noida.bootstrap
        ).option("topic", topic).option("kafka.message.timeout.ms", "5000").save()
    assert "BrokerError" in str(caught.value)


@pytest.mark.parametrize(
    ("mode", "options", "message"),
    [
        ("overwrite", {}, "mode='overwrite': a Kafka topic is append-only"),
        ("append", {"kafka.value.serializer": "x"}, "kafka.value.serializer='x': not supported"),
        ("append", {"topics": "t"}, "topics='t': unknown option of the fairstream sink"),
    ],
)
def test_a_bad_write_is_refused_naming_what(
    spark: SparkSession, noida: Broker, mode: str, options: dict[str, str], message: str
) -> None:
    register(spark)
    frame = spark.createDataFrame([(b"a",)], "value binary")
    with pytest.raises(Exception, match=message):
        frame.write.format("fairstream").mode(mode).option(
            "kafka.bootstrap.servers", noida.bootstrap
        ).option("topic", "t").options(**options).save()


@pytest.mark.parametrize(
    ("fields", "topic", "field"),
    [
        ([StructField("key", BinaryType())], "t", "value"),
        ([StructField("value", BinaryType())], None, "topic"),
        ([StructField("value", LongType())], "t", "value"),
        (
            [StructField("value", BinaryType()), StructField("partition", LongType())],
            "t",
            "partition",
        ),
        (
            [StructField("value", BinaryType()), StructField("headers", ArrayType(StringType()))],
            "t",
            "headers",
        ),
    ],
)
def test_a_frame_spark_kafka_sink_would_refuse_is_refused_naming_the_column(
    fields: list[StructField], topic: str | None, field: str
) -> None:
    options = SinkOptions.parse(
        {"kafka.bootstrap.servers": "h:1", **({"topic": topic} if topic else {})}
    )
    with pytest.raises(ConfigError) as caught:
        options.check(StructType(fields))
    assert caught.value.field == field


def test_read_transform_write_streams_every_record_once(
    spark: SparkSession, noida: Broker, group_id: str, tmp_path: Path
) -> None:
    counts = [2000, 500, 40]
    source = fill_topic(noida.bootstrap, counts)
    out = new_topic(noida.bootstrap, 2)
    register(spark)
    query = (
        spark.readStream.format("fairstream")
        .option("kafka.bootstrap.servers", noida.bootstrap)
        .option("subscribe", source)
        .option("kafka.group.id", group_id)
        .option("maxOffsetsPerTrigger", "1000")
        .load()
        .select(
            F.col("key"),
            F.concat(F.coalesce(F.col("value"), F.lit(b"")), F.lit(b"!")).alias("value"),
        )
        .writeStream.format("fairstream")
        .option("kafka.bootstrap.servers", noida.bootstrap)
        .option("topic", out)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    values = sorted(m.value() for m in read_back(noida.bootstrap, out, 2, sum(counts)))
    expected = sorted(
        (record_value(p, o) if o else b"") + b"!" for p, n in enumerate(counts) for o in range(n)
    )
    assert values == expected  # every input record once, transformed


def run_job(args: list[str], *, wait: bool) -> subprocess.Popen[bytes]:
    job = subprocess.Popen(
        [sys.executable, "-m", "tests.spark.sink_job", *args],
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its JVM is in its process group: one kill takes both
    )
    if wait:
        assert job.wait(timeout=240) == 0
    return job


def test_a_killed_read_transform_write_query_loses_no_record(
    noida: Broker, group_id: str, tmp_path: Path
) -> None:
    # 500 records a batch: one written before the kill (the next one in flight), three
    # left for the restart. More batches on either side prove nothing more and cost
    # ~2.5 s each (6,000 records made it nine more, ~20 s; 3,000 three more).
    counts = [600, 600, 600]
    source = fill_topic(noida.bootstrap, counts)
    out = new_topic(noida.bootstrap, 3)
    args = [noida.bootstrap, group_id, source, out, str(tmp_path / "ck")]
    job = run_job([*args, "running"], wait=False)
    try:
        deadline = time.monotonic() + 180
        while len(read_back(noida.bootstrap, out, 3, 0)) < 500:  # a batch is written
            assert job.poll() is None, "the query ended before it was killed"
            assert time.monotonic() < deadline, "the query wrote nothing in time"
            time.sleep(1)
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the driver and its JVM, mid-batch
        job.wait(timeout=30)
    at_kill = len(read_back(noida.bootstrap, out, 3, 0))
    assert at_kill < sum(counts), "the kill came after the last batch: nothing to resume"
    run_job([*args, "available-now"], wait=True)  # the same checkpoint: it resumes
    values = [m.value() for m in read_back(noida.bootstrap, out, 3, sum(counts))]
    # a tombstone (each partition's offset 0) stays one: concat with null is null
    expected = {
        record_value(p, o) + b"!" if o else None for p, n in enumerate(counts) for o in range(n)
    }
    assert set(values) == expected  # every record written, none lost (at least once)
    assert len(values) >= sum(counts)
