"""One JoinGroup per join with several strategies (``fairstream/runtime/_kafka/_join.py``).

aiokafka 0.14 sends one JoinGroup per strategy (aio-libs/aiokafka#1168): the
offers ``[fair]``, ``[fair, roundrobin]``, then all three. With the hook only the
last goes out. What goes out is counted under the hook, at the coordinator's
sender. If the first assertion fails, aiokafka fixed its loop and ``_join.py``
can go.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.protocol.group import JoinGroupRequest

from fairstream.runtime._kafka._assignors import make_assignor
from fairstream.runtime._kafka._join import offer_all_at_once
from tests.conftest import Broker
from tests.support.backends import QUICK_JOIN
from tests.support.kafka_helpers import create_topic

pytestmark = pytest.mark.broker


async def _offers_sent(bootstrap: str, topic: str, *, hooked: bool) -> list[list[str]]:
    """The protocol names of each JoinGroup sent until the first assignment."""
    assignor = make_assignor(["fair", "roundrobin", "range"])
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=f"join-{uuid.uuid4().hex[:8]}",
        enable_auto_commit=False,
        partition_assignment_strategy=assignor.protocols,
        # tansu answers each JoinGroup round after half the session: 3 s, not 5 s.
        session_timeout_ms=QUICK_JOIN.session_timeout_ms,
        heartbeat_interval_ms=QUICK_JOIN.heartbeat_interval_ms,
    )
    await consumer.start()
    sent: list[list[str]] = []
    coordinator: Any = consumer._coordinator
    send = coordinator._send_req

    async def spy(request: Any) -> Any:
        if isinstance(request, JoinGroupRequest):
            sent.append([name for name, _ in request._group_protocols])
        return await send(request)

    coordinator._send_req = spy
    try:
        if hooked:
            assert offer_all_at_once(consumer)
        consumer.subscribe([topic])
        with anyio.fail_after(30):
            while not consumer.assignment():
                await consumer.getmany(timeout_ms=100)
        assert assignor.protocol == "fairstream-fair"
        return sent
    finally:
        await consumer.stop()


async def test_a_join_offers_every_strategy_in_one_request(tansu: Broker) -> None:
    topic = f"join-{uuid.uuid4().hex[:8]}"
    await create_topic(tansu.bootstrap, topic, 2)
    everything = ["fairstream-fair", "roundrobin", "range"]
    # A request may go out twice with the same offer: KIP-394's member id round trip.
    unhooked = await _offers_sent(tansu.bootstrap, topic, hooked=False)
    assert {len(offer) for offer in unhooked} == {1, 2, 3}, (
        "aiokafka now sends one JoinGroup per join: remove _join.py"
    )
    hooked = await _offers_sent(tansu.bootstrap, topic, hooked=True)
    assert hooked and all(offer == everything for offer in hooked)
