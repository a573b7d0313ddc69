"""Re-planning on drift in a live group: no burst, no rebalance; a burst on the
partitions one member holds makes the leader ask for one rebalance, after which
the busiest member carries less lag."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from aiokafka import AIOKafkaConsumer
from structlog.testing import capture_logs

from fairstream import App, Record
from fairstream.assign import member_lags
from fairstream.runtime._kafka._admin import BrokerAdmin
from fairstream.runtime._kafka._assignors import PlanningAssignor, PlanRecord
from fairstream.runtime._kafka._drift import watch_drift
from tests.conftest import Broker
from tests.support.backends import QUICK_JOIN
from tests.support.kafka_helpers import create_topic, produce
from tests.support.lag_members import start_lag_member

pytestmark = pytest.mark.broker

PARTITIONS, BACKLOG, BURST = 4, 20, 400


async def _until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(30):
        while True:
            if condition():
                return
            await anyio.sleep(0.05)


def _events(logs: list[dict[str, Any]], name: str, **match: object) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == name and match.items() <= e.items()]


async def test_a_burst_causes_one_rebalance_and_no_burst_none(noida: Broker, group_id: str) -> None:
    bootstrap = noida.bootstrap
    suffix = uuid.uuid4().hex[:8]
    topics = [f"drift-{name}-{suffix}" for name in ("a", "b")]
    for topic in topics:
        await create_topic(bootstrap, topic, PARTITIONS)
        backlog = [(p, b"x") for p in range(PARTITIONS) for _ in range(BACKLOG)]
        await produce(bootstrap, topic, backlog)

    assignors: list[PlanningAssignor] = []
    consumers: list[AIOKafkaConsumer] = []
    with capture_logs() as logs:
        try:
            async with anyio.create_task_group() as tasks:
                for index in range(2):
                    assignor, consumer = await start_lag_member(
                        bootstrap,
                        group_id,
                        topics,
                        client_id=f"drift-{index}",
                        instance_id=noida.instance_id(f"drift-{index}"),
                        replan_interval_s=0.2,
                    )
                    assignors.append(assignor)
                    consumers.append(consumer)
                    tasks.start_soon(watch_drift, assignor, lambda c=consumer: c)

                def leader_plan() -> PlanRecord | None:
                    for assignor in assignors:
                        plan = assignor.last_plan
                        if assignor.leading and plan and len(plan.snapshot.members) == 2:
                            return plan
                    return None

                await _until(lambda: leader_plan() is not None)
                first = leader_plan()
                assert first is not None
                # No burst: the leader checks again and again, and keeps the plan.
                await _until(lambda: len(_events(logs, "lag_replan_checked")) >= 3)
                assert not _events(logs, "lag_replan_checked", decision="rebalance")
                assert leader_plan() is first

                # A burst on the two partitions of "a" one member holds.
                busy = next(iter(first.assignment.members))
                held = first.assignment.members[busy][topics[0]]
                await produce(bootstrap, topics[0], [(p, b"x") for p in held for _ in range(BURST)])
                await _until(lambda: (p := leader_plan()) is not None and p is not first)
                second = leader_plan()
                assert second is not None
                # Settled: later checks keep the new plan.
                checks = len(_events(logs, "lag_replan_checked"))
                await _until(lambda: len(_events(logs, "lag_replan_checked")) >= checks + 3)
                async with BrokerAdmin(bootstrap) as admin:
                    snapshot, actual = await admin.group_snapshot(
                        group_id, auto_offset_reset="earliest"
                    )
                tasks.cancel_scope.cancel()
        finally:
            for consumer in consumers:
                await consumer.stop()
            for assignor in assignors:
                await assignor.aclose()

    asked = _events(logs, "lag_replan_checked", decision="rebalance")
    assert len(asked) == 1
    assert asked[0]["planned_busiest_lag"] < asked[0]["busiest_lag"]
    assert leader_plan() is second  # one rebalance, no more
    assert actual == second.assignment
    before = max(member_lags(snapshot, first.assignment).values())
    after = max(member_lags(snapshot, actual).values())
    assert after < before


async def test_an_app_with_replan_interval_checks_for_drift_as_leader(
    broker: Broker, group_id: str
) -> None:
    topic = f"drift-app-{uuid.uuid4().hex[:8]}"
    await create_topic(broker.bootstrap, topic, 2)
    app = App(
        bootstrap=broker.bootstrap,
        group_id=group_id,
        assignor="lag",
        replan_interval=0.2,
        instance_id=broker.instance_id("drift-app"),
        consumer=QUICK_JOIN,
    )

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        pass

    with capture_logs() as logs:
        async with app:
            await _until(lambda: len(_events(logs, "lag_replan_checked")) >= 2)
    assert _events(logs, "lag_replan_checked", decision="keep", moves=0)
    assert not _events(logs, "lag_replan_checked", decision="rebalance")
