"""Where the "stray byte" after commit metadata comes from, on the Spark side's read.

CI met the shadow handoff failing on ``{"shadow":[[0,600]]}`` followed by a byte that
is not UTF-8. These tests pin it down: noida returns the committed bytes exactly
(aiokafka reads them back), and confluent-kafka, which the Spark side reads commits
with, reads metadata stored without a NUL as a C string past its end, into whatever
lies next in its memory. They plant that memory: 24-byte C buffers (the size a
20-byte copy is given) holding a lone UTF-8 continuation byte at byte 20, freed just
before the read. The over-read depends on the allocator reusing them (glibc does).
"""

from __future__ import annotations

import uuid

import anyio
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import OffsetAndMetadata
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as ConfluentPartition

from fairstream.ranges import OffsetRange, decode_shadow, encode_shadow, to_commit
from fairstream.spark.cluster import _metadata
from tests.conftest import Broker
from tests.spark.conftest import stored_metadata
from tests.support.kafka_helpers import create_topic

pytestmark = [pytest.mark.broker]

SHADOW = [OffsetRange(0, 600)]
METADATA = encode_shadow(SHADOW)  # 20 bytes
# 22 bytes and a NUL: 'a' * 19, then 0xd0 0xb6 ('ж'), then 'x'. The JSON's 20 bytes
# overwrite the first 20, leaving 0xb6 at byte 20: not UTF-8 on its own.
LITTER = "a" * 19 + "\u0436" + "x"
READS = 100


async def _commit(broker: Broker, group_id: str, metadata: str) -> str:
    """A topic with the group's commit of offset 5 and ``metadata``, as aiokafka sends it."""
    topic = f"meta-{uuid.uuid4().hex[:10]}"
    await create_topic(broker.bootstrap, topic, 1)
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group_id)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(5, metadata)})
    finally:
        await consumer.stop()
    return topic


def _read(bootstrap: str, group_id: str, topic: str) -> list[tuple[bytes, str]]:
    """``READS`` answers of confluent-kafka: the bytes it handed Python, and what
    :func:`fairstream.spark.cluster._metadata` makes of them."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group_id, "enable.auto.commit": False}
    )
    found = []
    try:
        for _ in range(READS):
            litter = [ConfluentPartition(topic, 0, metadata=LITTER) for _ in range(50)]
            del litter
            [tp] = consumer.committed([ConfluentPartition(topic, 0)], timeout=15)
            try:
                raw = tp.metadata.encode()
            except UnicodeDecodeError as exc:
                raw = bytes(exc.object)
            found.append((raw, _metadata(tp)))
    finally:
        consumer.close()
    return found


async def test_confluent_kafka_reads_metadata_without_a_nul_past_its_end(
    noida: Broker, group_id: str
) -> None:
    """Metadata as other clients (and fairstream before ``to_commit``) commit it: the
    broker keeps it exactly, confluent-kafka's read runs on into the planted bytes,
    and the Spark side still finds the shadow range in every answer."""
    topic = await _commit(noida, group_id, METADATA)
    assert await stored_metadata(noida, group_id, topic) == METADATA  # noida adds nothing

    found = await anyio.to_thread.run_sync(_read, noida.bootstrap, group_id, topic)

    raws = {raw for raw, _ in found}
    assert all(raw.startswith(METADATA.encode()) for raw in raws), raws
    assert any(len(raw) > len(METADATA) for raw in raws), raws  # the over-read
    assert all(decode_shadow(text) == SHADOW for _, text in found), found


async def test_metadata_committed_with_a_nul_reads_back_exactly(
    noida: Broker, group_id: str
) -> None:
    """The runtime's commits end in a NUL (``to_commit``), as confluent-kafka's own do:
    with the same memory planted, every read is the metadata and nothing more."""
    topic = await _commit(noida, group_id, to_commit(METADATA))

    found = await anyio.to_thread.run_sync(_read, noida.bootstrap, group_id, topic)

    assert {text for _, text in found} == {METADATA}
    assert {raw for raw, _ in found} == {METADATA.encode()}
