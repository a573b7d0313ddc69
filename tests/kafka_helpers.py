"""Small real-broker helpers shared by the tests (no mocks: these talk to Kafka)."""

from __future__ import annotations

from collections.abc import Iterable

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
