"""The lag adapter in a live group whose members subscribe to different topics
(KIP-49's rolling update): once it settles, every topic is planned by lag - the
assignment is what :func:`fairstream.assign.plan` gives on the same snapshot."""

from __future__ import annotations

import uuid

import pytest
from aiokafka import AIOKafkaConsumer
from structlog.testing import capture_logs

from fairstream.assign import plan
from fairstream.runtime._admin import BrokerAdmin
from fairstream.runtime._assignors import PlanningAssignor
from tests.conftest import Broker
from tests.kafka_helpers import create_topic, produce
from tests.runtime.lag_members import settled_plan, start_lag_member

pytestmark = pytest.mark.broker

BACKLOG = {"all": (300, 20, 10), "two": (250, 30, 5), "one": (400, 15)}
"""Records per partition: one topic shared by all, one by two, one by one member."""
SUBSCRIPTIONS = (("all", "two", "one"), ("all", "two"), ("all",))


async def test_members_with_different_subscriptions_get_the_lag_plan_for_every_topic(
    noida: Broker, group_id: str
) -> None:
    bootstrap = noida.bootstrap
    suffix = uuid.uuid4().hex[:8]
    topics = {name: f"mixed-{name}-{suffix}" for name in BACKLOG}
    for name, counts in BACKLOG.items():
        await create_topic(bootstrap, topics[name], len(counts))
        records = [(p, b"x") for p, n in enumerate(counts) for _ in range(n)]
        await produce(bootstrap, topics[name], records)

    total = sum(len(counts) for counts in BACKLOG.values())
    assignors: list[PlanningAssignor] = []
    consumers: list[AIOKafkaConsumer] = []
    with capture_logs() as logs:
        try:
            # The member with one topic joins first and leads: it learns the other
            # topics only from the members that join after it.
            for index, names in reversed(list(enumerate(SUBSCRIPTIONS))):
                assignor, consumer = await start_lag_member(
                    bootstrap,
                    group_id,
                    [topics[n] for n in names],
                    client_id=f"member-{index}",
                    instance_id=noida.instance_id(f"mixed-{index}"),
                )
                assignors.append(assignor)
                consumers.append(consumer)

            async with BrokerAdmin(bootstrap) as admin:
                record = await settled_plan(admin, group_id, assignors, total)
                snapshot, actual = await admin.group_snapshot(
                    group_id, auto_offset_reset="earliest"
                )
        finally:
            for consumer in consumers:
                await consumer.stop()
            for assignor in assignors:
                await assignor.aclose()

    assert record.strategy == "lag"
    assert record.snapshot == snapshot  # the leader saw every topic's lag
    assert actual == record.assignment == plan("lag", snapshot, record.previous)
    assert not [e for e in logs if e["event"] == "lag_snapshot_unusable"]
