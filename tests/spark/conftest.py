"""One local Spark session for every Spark test, and topics filled with confluent-kafka.

Starting a session costs seconds, so it is built once per run (``local[2]``, the
master the benchmark uses) and shared; each test still gets its own topic and group.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator, Sequence

import pytest
from aiokafka import TopicPartition
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from fairstream.runtime._kafka._admin import BrokerAdmin
from fairstream.spark import build_session
from tests.conftest import Broker

SPARK_PRIORITY = -5
"""The nice value of a pytest worker from its first Spark test on, where it may be set.

Spark gives a Python worker it starts 10 s to connect back, hard-coded in Spark 4.3's
``PythonWorkerFactory`` (no option changes it), and a streaming query whose worker
misses it fails with "Python worker failed to connect back". On two cores busy with
the suite's other workers and a second suite, a new interpreter's imports took longer
than that. Every Spark process (the JVMs, their Python workers, spark-submit) is a
child of the worker that runs the Spark tests, so it inherits the priority; the
other tests' waits are hang guards far longer than a start-up."""


SPARK_JVM_FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""Java options for every JVM the Spark tests start (drivers, spark-submit, the
standalone master, workers and executors), through ``JAVA_TOOL_OPTIONS``.

The tests' Spark jobs are small and short: a JVM spends them compiling (C2) and
collecting with threads that compete with the suite's other workers for two cores.
The quick compiler alone and the serial collector ran ``tests/spark`` (-n 2, quiet) in
138 s against 177 s, 64 against 97 s of user CPU, every test passing; the Spark JVMs
were ~40% of the whole suite's CPU. Each JVM prints "Picked up JAVA_TOOL_OPTIONS" on
its stderr, which no test reads."""


@pytest.fixture(scope="session", autouse=True)
def spark_first() -> None:
    """Put the Spark tests' processes ahead of the others on the CPU (root only:
    elsewhere the priority stays as it was), and their JVMs on a light footing."""
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, 0, SPARK_PRIORITY)
    flags = os.environ.get("JAVA_TOOL_OPTIONS", "")
    os.environ["JAVA_TOOL_OPTIONS"] = f"{flags} {SPARK_JVM_FLAGS}".strip()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session("local[2]", app_name="fairstream-tests")
    yield session
    session.stop()


async def stored_metadata(broker: Broker, group_id: str, topic: str) -> str | None:
    """The group's commit metadata of partition 0 of ``topic`` as aiokafka reads it."""
    async with BrokerAdmin(broker.bootstrap) as admin:
        found = await admin.committed_offsets(group_id, [TopicPartition(topic, 0)])
    committed = found[TopicPartition(topic, 0)]
    return None if committed is None else committed.metadata


def record_value(partition: int, offset: int) -> bytes:
    """The value produced at ``offset`` of ``partition``: tests check it round-trips."""
    return f"value-{partition}-{offset}".encode()


def fill_topic(bootstrap: str, counts: Sequence[int], topic: str | None = None) -> str:
    """Create a topic (``topic``, or a new name) with ``len(counts)`` partitions and
    ``counts[p]`` records in each.

    Every record has a key, a header and :func:`record_value`; the first record of
    each partition has no value (a tombstone), to check nulls survive.
    """
    topic = topic or f"spark-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, len(counts), 1)]).values():
        future.result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, count in enumerate(counts):
        for offset in range(count):
            producer.produce(
                topic,
                partition=partition,
                key=f"k{offset}".encode(),
                value=record_value(partition, offset) if offset else None,
                headers=[("source", b"test")],
            )
            producer.poll(0)
    assert producer.flush(30) == 0
    return topic
