"""The lag adapter in a live group whose members subscribe to different topics
(KIP-49's rolling update): once it settles, every topic is planned by lag - the
assignment is what :func:`fairstream.assign.plan` gives on the same snapshot - and a
leader that planned a topic by count (its lag unknown at the join) follows up."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import pytest
from aiokafka import AIOKafkaConsumer
from structlog.testing import capture_logs

from fairstream.assign import Assignment, GroupSnapshot, plan
from fairstream.runtime._kafka._admin import BrokerAdmin
from fairstream.runtime._kafka._assignors import PlanningAssignor, PlanRecord
from tests.conftest import Broker
from tests.support.kafka_helpers import create_topic, produce
from tests.support.lag_members import settled_plan, start_lag_member

pytestmark = pytest.mark.broker

BACKLOG = {"all": (300, 20, 10), "two": (250, 30, 5), "one": (400, 15)}
"""Records per partition: one topic shared by all, one by two, one by one member."""
SUBSCRIPTIONS = (("all", "two", "one"), ("all", "two"), ("all",))
PARTITIONS = sum(len(counts) for counts in BACKLOG.values())


async def _topics(bootstrap: str) -> dict[str, str]:
    suffix = uuid.uuid4().hex[:8]
    topics = {name: f"mixed-{name}-{suffix}" for name in BACKLOG}
    for name, counts in BACKLOG.items():
        await create_topic(bootstrap, topics[name], len(counts))
        records = [(p, b"x") for p, n in enumerate(counts) for _ in range(n)]
        await produce(bootstrap, topics[name], records)
    return topics


def _check_settled(
    record: PlanRecord,
    snapshot: GroupSnapshot,
    actual: Assignment,
    topics: dict[str, str],
    logs: Sequence[Mapping[str, Any]],
) -> None:
    assert record.strategy == "lag"
    assert record.snapshot == snapshot  # the leader saw every topic's lag
    assert actual == record.assignment == plan("lag", snapshot, record.previous)
    assert set(snapshot.lag) == set(topics.values())
    assert all(any(lags) for lags in snapshot.lag.values())  # real lag, not zeros
    assert not [e for e in logs if e["event"] == "lag_snapshot_unusable"]


async def test_members_with_different_subscriptions_get_the_lag_plan_for_every_topic(
    noida: Broker, group_id: str
) -> None:
    bootstrap = noida.bootstrap
    topics = await _topics(bootstrap)
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
                record = await settled_plan(admin, group_id, assignors, PARTITIONS)
                snapshot, actual = await admin.group_snapshot(
                    group_id, auto_offset_reset="earliest"
                )
        finally:
            for consumer in consumers:
                await consumer.stop()
            for assignor in assignors:
                await assignor.aclose()

    _check_settled(record, snapshot, actual, topics, logs)
    # The leader subscribes to one topic only, and read the two others' lag too.
    (leader,) = [a for a in assignors if a.leading]
    assert leader is assignors[0]


async def test_a_leader_without_a_topics_lag_plans_it_by_count_then_follows_up(
    noida: Broker, group_id: str
) -> None:
    """Static members starting together join one generation (as seen on noida): the
    leader read lag before any other member had joined, so it lacks the lag of the
    topics only the others subscribe to. It plans those by count (``lag_snapshot_partial``,
    the rest by lag), asks for a follow-up rebalance, and the next plan has every lag."""
    bootstrap = noida.bootstrap
    topics = await _topics(bootstrap)
    members: dict[int, tuple[PlanningAssignor, AIOKafkaConsumer]] = {}

    async def start(index: int) -> None:
        members[index] = await start_lag_member(
            bootstrap,
            group_id,
            [topics[n] for n in SUBSCRIPTIONS[index]],
            client_id=f"member-{index}",
            instance_id=noida.instance_id(f"together-{index}"),
        )

    with capture_logs() as logs:
        try:
            async with anyio.create_task_group() as group:
                for index in reversed(range(len(SUBSCRIPTIONS))):
                    group.start_soon(start, index)
            assignors = [members[i][0] for i in sorted(members)]
            async with BrokerAdmin(bootstrap) as admin:
                record = await settled_plan(admin, group_id, assignors, PARTITIONS)
                snapshot, actual = await admin.group_snapshot(
                    group_id, auto_offset_reset="earliest"
                )
        finally:
            for assignor, consumer in members.values():
                await consumer.stop()
                await assignor.aclose()

    _check_settled(record, snapshot, actual, topics, logs)
    (leader,) = [i for i, (a, _) in members.items() if a.leading]
    unsubscribed = sorted(topics[n] for n in BACKLOG if n not in SUBSCRIPTIONS[leader])
    events = [
        e for e in logs if e["event"].startswith("lag_") or e["event"] == "assignment_planned"
    ]
    names = [e["event"] for e in events]
    if not unsubscribed:  # member-0 led: it subscribes to every topic, nothing to follow up
        assert "lag_snapshot_partial" not in names
        return
    partial = [e for e in events if e["event"] == "lag_snapshot_partial"]
    follow_ups = [e for e in events if e["event"] == "lag_follow_up_requested"]
    assert partial and follow_ups
    assert partial[0]["topics"] == follow_ups[0]["topics"]
    assert set(partial[0]["topics"]) <= set(unsubscribed)
    # After the last follow-up: a plan, and no partial warning any more.
    last = max(i for i, name in enumerate(names) if name == "lag_follow_up_requested")
    assert "assignment_planned" in names[last:]
    assert "lag_snapshot_partial" not in names[last:]
