"""The two reads of aiokafka's private ``_coordinator`` outside the coordinator hooks, pinned.

``AIOKafkaClients.member_id`` reads ``consumer._coordinator.member_id`` (the stats and
logs name the member) and ``_lag_listener.request_rebalance`` calls
``consumer._coordinator.request_rejoin()`` (the lag assignor's follow-up rebalance and
the drift watch). Both fall back quietly when the names are gone, so an aiokafka
release that moves them fails here instead.
"""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaConsumer

from fairstream.runtime._kafka._lag_listener import request_rebalance
from tests.conftest import Broker

pytestmark = pytest.mark.broker


async def test_a_group_consumer_has_the_coordinator_fairstream_reads(
    noida: Broker, group_id: str
) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=noida.bootstrap, group_id=group_id)
    await consumer.start()
    try:
        coordinator = consumer._coordinator
        assert isinstance(coordinator.member_id, str)  # "" until the first join
        assert callable(coordinator.request_rejoin)
        assert request_rebalance(consumer)
    finally:
        await consumer.stop()
