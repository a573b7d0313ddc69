"""BrokerAdmin on each real engine: end offsets right even where ListOffsets is not."""

from __future__ import annotations

import gc
import uuid

import anyio
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from fairstream.errors import BrokerError
from fairstream.runtime._kafka._admin import BrokerAdmin, Committed
from tests.conftest import Broker, TopicFactory
from tests.support.kafka_helpers import produce

pytestmark = pytest.mark.broker


async def test_offsets_and_lags_match_what_was_written(
    broker: Broker, make_topic: TopicFactory, group_id: str
) -> None:
    topic = await make_topic(partitions=3)
    # Batched sends: tansu's ListOffsets(latest) would answer the last batch's base + 1.
    await produce(broker.bootstrap, topic, [(p, b"x") for p in (0, 0, 0, 0, 0, 1, 1)])
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=group_id, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.commit({TopicPartition(topic, 0): (2, "shadow")})
    finally:
        await consumer.stop()
    tps = [TopicPartition(topic, p) for p in range(3)]
    missing = "no-such-topic-" + uuid.uuid4().hex
    async with BrokerAdmin(broker.bootstrap) as admin:
        assert await admin.partition_counts([topic, missing]) == {topic: 3}
        assert await admin.partition_counts([missing]) == {}  # asking did not create it
        assert await admin.end_offsets(tps) == dict(zip(tps, [5, 2, 0], strict=True))
        assert await admin.log_start_offsets(tps) == dict.fromkeys(tps, 0)
        committed = await admin.committed_offsets(group_id, tps)
        metadata = "shadow" if broker.keeps_commit_metadata else ""
        assert committed == {
            tps[0]: Committed(offset=2, metadata=metadata),
            tps[1]: None,
            tps[2]: None,
        }
        earliest = await admin.topic_lags(group_id, {topic: 3}, auto_offset_reset="earliest")
        latest = await admin.topic_lags(group_id, {topic: 3}, auto_offset_reset="latest")
    assert earliest == {topic: (3, 2, 0)}
    assert latest == {topic: (3, 0, 0)}


async def test_unreachable_cluster_is_a_broker_error() -> None:
    admin = BrokerAdmin("127.0.0.1:1", request_timeout_ms=2_000)
    with pytest.raises(BrokerError, match="could not connect"):
        await admin.start()


async def test_starts_side_by_side_share_one_pair_of_clients(broker: Broker) -> None:
    """The app's users of its admin start it side by side; each start made its own
    admin client and consumer, and only the last was kept and closed: the others were
    collected unclosed (a ResourceWarning, an error in this suite)."""
    admin = BrokerAdmin(broker.bootstrap)
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(admin.start)
    assert await admin.partition_counts(["no-such-topic-here"]) == {}
    await admin.aclose()
    gc.collect()  # an unclosed one warns now, inside this test
