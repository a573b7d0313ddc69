"""Records built straight from aiokafka's fetch buffers equal aiokafka's own, copied."""

from __future__ import annotations

import time

import anyio
import pytest
import structlog
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.structs import ConsumerRecord

from fairstream import Record
from fairstream.runtime._kafka._direct_records import build_records_directly
from tests.conftest import Broker, TopicFactory
from tests.support.kafka_helpers import group_less_reader

pytestmark = pytest.mark.broker

TOTAL = 300


async def _produce_varied(bootstrap: str, topic: str) -> None:
    """Keys or none, headers or none, tombstones (keyed), explicit timestamps, two partitions."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    # Explicit, but recent: noida deletes records older than its retention (7 days) by
    # their timestamps within seconds (docs/testing.md, the quirks table), so 2023's
    # timestamps left nothing to read when its sweep came between produce and read.
    base = int(time.time() * 1000) - 60_000
    await producer.start()
    try:
        for i in range(TOTAL):
            await producer.send(
                topic,
                None if i % 7 == 0 else f"value-{i}".encode(),
                key=f"k{i}".encode() if i % 3 or i % 7 == 0 else None,
                headers=[("n", str(i).encode()), ("empty", b"")] if i % 2 else None,
                partition=i % 2,
                timestamp_ms=base + i,
            )
        await producer.flush()
    finally:
        await producer.stop()


async def _read(bootstrap: str, topic: str, *, direct: bool) -> tuple[bool, list[object]]:
    """Every record of ``topic`` as ``getmany`` returned it, and whether ``direct`` took."""
    consumer = group_less_reader(bootstrap)
    await consumer.start()
    built = False
    out: list[object] = []
    try:
        if direct:
            built = build_records_directly(consumer)
        consumer.assign([TopicPartition(topic, p) for p in range(2)])
        with anyio.move_on_after(60):
            while len(out) < TOTAL:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    out.extend(records)
    finally:
        await consumer.stop()
    offsets = {(r.partition, r.offset) for r in out}  # type: ignore[attr-defined]
    missing = sorted({(p, o) for p in range(2) for o in range(TOTAL // 2)} - offsets)
    assert not missing, f"direct={direct}: {len(missing)} records not read in 60 s: {missing[:20]}"
    return built, out


def _copied(record: ConsumerRecord[bytes, bytes]) -> Record[bytes]:
    """The Record the public path makes of aiokafka's record."""
    return Record(
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        key=record.key,
        value=record.value,
        headers=tuple(record.headers),
        timestamp=record.timestamp,
        raw=record.value,
    )


async def test_direct_records_equal_aiokafkas_own(broker: Broker, make_topic: TopicFactory) -> None:
    topic = await make_topic(partitions=2)
    await _produce_varied(broker.bootstrap, topic)

    _, plain = await _read(broker.bootstrap, topic, direct=False)
    built, direct = await _read(broker.bootstrap, topic, direct=True)

    # The pinned aiokafka is the one the hook knows: if an upgrade breaks that, this
    # says so (fairstream still works, copying records, but slower).
    assert built, "aiokafka's fetcher changed: records are no longer built directly"
    assert all(type(r) is Record for r in direct)
    assert all(isinstance(r, ConsumerRecord) for r in plain)
    key = lambda r: (r.partition, r.offset)  # noqa: E731
    assert sorted(direct, key=key) == sorted(map(_copied, plain), key=key)  # type: ignore[arg-type]
    assert len(direct) == TOTAL


async def test_a_consumer_without_the_expected_fetcher_is_left_alone() -> None:
    class NotAiokafka:
        _fetcher = None

    with structlog.testing.capture_logs() as logs:
        assert build_records_directly(NotAiokafka()) is False
    assert [e["event"] for e in logs] == ["direct_records_unavailable"]
