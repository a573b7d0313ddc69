"""A static member leaves its group on stop only when told to (``leave_group_on_stop``)."""

from __future__ import annotations

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
    # A broker that evicts (Kafka) would hand the partitions over once the session
    # timeout expired: before then, only the leave can have done it.
    session_s = ConsumerConfig().session_timeout_ms / 1_000
    with structlog.testing.capture_logs() as logs:
        async with stays:
            async with goes:
                await wait_until(lambda: len(partitions(stays)) == 2, 30)
            await wait_until(
                lambda: len(partitions(stays)) == 4, session_s, lambda: partitions(stays)
            )
    assert [e["instance_id"] for e in logs if e["event"] == "group_left"] == ["goes"]


def test_a_coordinator_not_aiokafkas_is_left_alone() -> None:
    class Consumer:
        _coordinator = object()

    with structlog.testing.capture_logs() as logs:
        assert leave_when_stopped(Consumer(), "m1") is False
    assert [e["event"] for e in logs] == ["static_leave_unavailable"]
