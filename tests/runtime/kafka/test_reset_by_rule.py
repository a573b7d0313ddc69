"""New partitions marked for aiokafka's reset by rule start there, with no commit fetch.

Pins ``_reset_by_rule``: the pinned aiokafka's fetcher still takes the mark, resets a
marked partition by the rule without asking the coordinator for its commit, and lets
a seek made before the reset lands win over it.
"""

from __future__ import annotations

import anyio
import pytest
import structlog
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from fairstream.config import OffsetReset
from fairstream.runtime._kafka._reset_by_rule import reset_by_rule
from tests.conftest import Broker, TopicFactory
from tests.support.kafka_helpers import counting_commit_fetches, produce

pytestmark = pytest.mark.broker

PARTITIONS = 8
SOUGHT = 3  # this partition is sought to offset 1 in the listener, after the mark


class _Marks(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, consumer: AIOKafkaConsumer, rule: OffsetReset) -> None:
        self.consumer = consumer
        self.rule = rule
        self.marked: bool | None = None

    async def on_partitions_revoked(self, revoked: object) -> None: ...

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.consumer.pause(*assigned)  # as the rebalance room does: positions stay put
        self.marked = reset_by_rule(self.consumer, assigned, self.rule)
        for tp in assigned:
            if tp.partition == SOUGHT:
                self.consumer.seek(tp, 1)
        await anyio.sleep(0.5)  # the room's reads: aiokafka's fetcher runs meanwhile


@pytest.mark.parametrize("rule", ["earliest", "latest"])
async def test_marked_partitions_start_by_the_rule_without_a_commit_fetch(
    broker: Broker, make_topic: TopicFactory, group_id: str, rule: OffsetReset
) -> None:
    topic = await make_topic(partitions=PARTITIONS)
    for _ in (0, 1):  # one batch each: tansu answers ListOffsets(latest) with the last
        # batch's base offset + 1 (docs/testing.md, the quirks table)
        await produce(broker.bootstrap, topic, [(p, b"x") for p in range(PARTITIONS)])
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="none",  # without the mark, a partition with no commit fails
    )
    listener = _Marks(consumer, rule)
    with counting_commit_fetches() as fetches:
        await consumer.start()
        try:
            consumer.subscribe([topic], listener=listener)
            with anyio.fail_after(60):
                while len(consumer.assignment()) < PARTITIONS or listener.marked is None:
                    await consumer.getmany(timeout_ms=100)
                positions = {
                    tp.partition: await consumer.position(tp) for tp in consumer.assignment()
                }
        finally:
            await consumer.stop()

    assert listener.marked, "aiokafka's fetcher changed: new partitions are not marked"
    start = 0 if rule == "earliest" else 2
    assert positions == {p: 1 if p == SOUGHT else start for p in range(PARTITIONS)}
    assert fetches.count == 0


async def test_a_consumer_without_the_expected_fetcher_is_left_alone() -> None:
    class NotAiokafka:
        _fetcher = None

    with structlog.testing.capture_logs() as logs:
        assert reset_by_rule(NotAiokafka(), [TopicPartition("t", 0)], "earliest") is False
    assert [e["event"] for e in logs] == ["reset_by_rule_unavailable"]
