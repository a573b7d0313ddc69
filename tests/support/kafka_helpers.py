"""Small real-broker helpers shared by the tests (no mocks: these talk to Kafka)."""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterable, Iterator

import anyio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from fairstream import SecurityConfig


async def create_topic(
    bootstrap: str, name: str, partitions: int, *, security: SecurityConfig | None = None
) -> None:
    settings = (security or SecurityConfig()).aiokafka_kwargs()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **settings)  # type: ignore[arg-type]
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


async def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[int, bytes | None]],
    *,
    key: bytes | None = None,
) -> int:
    """Send ``(partition, value)`` pairs and wait until all are acknowledged."""
    return await produce_keyed(bootstrap, topic, ((p, key, value) for p, value in records))


async def produce_keyed(
    bootstrap: str, topic: str, records: Iterable[tuple[int, bytes | None, bytes | None]]
) -> int:
    """Send ``(partition, key, value)`` triples through one producer, in order, and
    wait until all are acknowledged (a producer per key costs ~50 ms each)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    count = 0
    try:
        for partition, key, value in records:
            await producer.send(topic, value, key=key, partition=partition)
            count += 1
        await producer.flush()
    finally:
        await producer.stop()
    return count


async def committed(bootstrap: str, group_id: str, topic: str, partitions: int) -> list[int | None]:
    """The group's committed offsets, read by an unsubscribed consumer of that group."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id)
    await consumer.start()
    try:
        return [await consumer.committed(TopicPartition(topic, p)) for p in range(partitions)]
    finally:
        await consumer.stop()


def group_less_reader(bootstrap: str) -> AIOKafkaConsumer:
    """A consumer without a group that reads from the log start (not started).

    A fetch answer the shared broker never sends would hold aiokafka for its default
    40 s request timeout (one CI run saw that in test_direct_records); 10 s retries it.
    """
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", request_timeout_ms=10_000
    )


async def read_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list[object]:
    """Every record of a topic (for checking dead-letter topics), without a group."""
    consumer = group_less_reader(bootstrap)
    await consumer.start()
    out: list[object] = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        while len(out) < expected:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                out.extend(records)
    finally:
        await consumer.stop()
    return out


async def input_output_topics(bootstrap: str, prefix: str, partitions: int) -> tuple[str, str]:
    """A new input topic and output topic of ``partitions`` each, for a transform."""
    run = uuid.uuid4().hex[:8]
    source, sink = f"{prefix}-in-{run}", f"{prefix}-out-{run}"
    await create_topic(bootstrap, source, partitions)
    await create_topic(bootstrap, sink, partitions)
    return source, sink


async def read_committed(bootstrap: str, topic: str, partitions: int) -> list[bytes | None]:
    """Every value of ``topic`` a ``read_committed`` reader sees, up to its stable end."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        request_timeout_ms=10_000,
    )
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    try:
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)  # the last stable offsets
        values: list[bytes | None] = []
        with anyio.fail_after(30):
            while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                batches = await consumer.getmany(timeout_ms=200)
                values += [r.value for records in batches.values() for r in records]
        return values
    finally:
        await consumer.stop()


class CommitFetches(logging.Handler):
    """How many times aiokafka's coordinator asked for commits (one line a request)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Fetching committed offsets"):
            self.count += 1


@contextlib.contextmanager
def counting_commit_fetches() -> Iterator[CommitFetches]:
    """Count aiokafka's own commit fetches while the block runs."""
    coordinator = logging.getLogger("aiokafka.consumer.group_coordinator")
    fetches, level = CommitFetches(), coordinator.level
    coordinator.addHandler(fetches)
    coordinator.setLevel(logging.DEBUG)
    try:
        yield fetches
    finally:
        coordinator.removeHandler(fetches)
        coordinator.setLevel(level)
