"""Plain aiokafka consumers planned by fairstream's lag assignor, for the live
assignor tests: they join and hold partitions but never read, so lag stays put."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
from aiokafka import AIOKafkaConsumer

from fairstream.runtime._kafka._admin import BrokerAdmin
from fairstream.runtime._kafka._assignors import PlanningAssignor, PlanRecord, make_assignor


async def start_lag_member(
    bootstrap: str,
    group_id: str,
    topics: Sequence[str],
    *,
    client_id: str,
    instance_id: str | None = None,
    replan_interval_s: float | None = None,
) -> tuple[PlanningAssignor, AIOKafkaConsumer]:
    """A started member whose listener reads lag (``earliest``: no commit = all behind)."""
    assignor = make_assignor(
        "lag",
        bootstrap=bootstrap,
        group_id=group_id,
        auto_offset_reset="earliest",
        replan_interval_s=replan_interval_s,
    )
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group_id,
        group_instance_id=instance_id,
        client_id=client_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        partition_assignment_strategy=[assignor],
    )
    consumer.subscribe(list(topics), listener=assignor.listener(consumer))
    await consumer.start()
    return assignor, consumer


async def settled_plan(
    admin: BrokerAdmin, group_id: str, assignors: Sequence[PlanningAssignor], partitions: int
) -> PlanRecord:
    """The leader's plan, once the group is stable with every member and partition held
    and that plan covered every member with every topic's lag."""
    with anyio.fail_after(30):
        while True:
            group = await admin.describe_group(group_id)
            held = sum(len(ps) for m in group.members.values() for ps in m.assignment.values())
            record = next((a.last_plan for a in assignors if a.leading and a.last_plan), None)
            if (
                group.state == "Stable"
                and held == partitions
                and record is not None
                and set(record.snapshot.members) == set(group.members)
                and len(group.members) == len(assignors)
                and not record.by_count
            ):
                return record
            await anyio.sleep(0.2)
