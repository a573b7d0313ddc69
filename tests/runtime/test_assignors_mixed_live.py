"""The lag adapter in a live group whose members subscribe to different topics
(KIP-49's rolling update): once it settles, every topic is planned by lag - the
assignment is what :func:`fairstream.assign.plan` gives on the same snapshot."""

from __future__ import annotations

import uuid

import anyio
import pytest
from aiokafka import AIOKafkaConsumer
from structlog.testing import capture_logs

from fairstream.assign import plan
from fairstream.runtime._admin import BrokerAdmin
from fairstream.runtime._assignors import PlanningAssignor, make_assignor
from tests.conftest import Broker
from tests.kafka_helpers import create_topic, produce

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
                assignor = make_assignor(
                    "lag", bootstrap=bootstrap, group_id=group_id, auto_offset_reset="earliest"
                )
                consumer = AIOKafkaConsumer(
                    bootstrap_servers=bootstrap,
                    group_id=group_id,
                    group_instance_id=noida.instance_id(f"mixed-{index}"),
                    client_id=f"member-{index}",
                    enable_auto_commit=False,
                    auto_offset_reset="earliest",
                    partition_assignment_strategy=[assignor],
                )
                consumer.subscribe([topics[n] for n in names], listener=assignor.listener(consumer))
                await consumer.start()
                assignors.append(assignor)
                consumers.append(consumer)

            async with BrokerAdmin(bootstrap) as admin:
                with anyio.fail_after(30):
                    while True:
                        group = await admin.describe_group(group_id)
                        held = sum(
                            len(ps) for m in group.members.values() for ps in m.assignment.values()
                        )
                        record = next(
                            (
                                a.last_plan
                                for a in assignors
                                if a.last_plan is not None
                                and set(a.last_plan.snapshot.members) == set(group.members)
                            ),
                            None,
                        )
                        settled = group.state == "Stable" and len(group.members) == 3
                        if settled and held == total and record and not record.by_count:
                            break
                        await anyio.sleep(0.2)
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
