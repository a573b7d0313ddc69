"""The embedded brokers are real enough to build on: a group round trip on each engine."""

from __future__ import annotations

import anyio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.conftest import Broker, TopicFactory

RECORDS = 1_000


async def test_group_round_trip_delivers_each_record_once(
    broker: Broker, make_topic: TopicFactory, group_id: str
) -> None:
    topic = await make_topic(partitions=3)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        sent: dict[int, int] = {0: 0, 1: 0, 2: 0}
        for i in range(RECORDS):
            await producer.send(topic, str(i).encode(), partition=i % 3)
            sent[i % 3] += 1
        await producer.flush()
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=group_id,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    seen: list[int] = []
    try:
        with anyio.fail_after(60):
            while len(seen) < RECORDS:
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    seen.extend(int(r.value) for r in records)
        await consumer.commit()
        committed = {p: await consumer.committed(TopicPartition(topic, p)) for p in range(3)}
    finally:
        await consumer.stop()

    assert sorted(seen) == list(range(RECORDS))
    assert committed == sent
