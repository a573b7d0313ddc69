"""A static member leaves its group on stop only when told to (``leave_group_on_stop``)."""

from __future__ import annotations

import anyio
import pytest
import structlog

from fairstream import App, ConsumerConfig, Record
from fairstream.runtime._kafka._static_leave import leave_when_stopped
from tests.conftest import Broker
from tests.support.kafka_helpers import create_topic
from tests.support.live_traffic import wait_until


@pytest.mark.broker
async def test_a_static_member_told_to_leave_hands_its_partitions_over_at_once(
    noida: Broker, group_id: str
) -> None:
    """noida never evicts a member: without the leave, ``stays`` would keep two
    partitions for ever (the cooperative leave test shows that side)."""
    topic = f"leave-{group_id[-8:]}"
    await create_topic(noida.bootstrap, topic, 4)

    def member(name: str, *, leaves: bool) -> App:
        app = App(
            bootstrap=noida.bootstrap,
            group_id=group_id,
            instance_id=name,
            consumer=ConsumerConfig(heartbeat_interval_ms=500, leave_group_on_stop=leaves),
        )

        @app.subscriber(topic)
        async def handle(record: Record[bytes]) -> None:
            pass

        return app

    def partitions(app: App) -> set[int]:
        return {p.partition for p in app.stats().partitions}

    stays, goes = member("stays", leaves=False), member("goes", leaves=True)
    with structlog.testing.capture_logs() as logs:
        async with stays:
            async with goes:
                await wait_until(lambda: len(partitions(stays)) == 2, 30)
            left_at = anyio.current_time()
            await wait_until(lambda: len(partitions(stays)) == 4, 30, lambda: partitions(stays))
            taken_over_s = anyio.current_time() - left_at
    assert [e["instance_id"] for e in logs if e["event"] == "group_left"] == ["goes"]
    assert taken_over_s < 5, taken_over_s


def test_a_coordinator_not_aiokafkas_is_left_alone() -> None:
    class Consumer:
        _coordinator = object()

    with structlog.testing.capture_logs() as logs:
        assert leave_when_stopped(Consumer(), "m1") is False
    assert [e["event"] for e in logs] == ["static_leave_unavailable"]
