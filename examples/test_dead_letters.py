"""Testing an app without Kafka: ``fairstream.testing.MemoryBroker`` runs the real engine.

    pip install pytest pytest-asyncio      # pytest-asyncio runs the async test
    pytest test_dead_letters.py            # from this folder

The app is the module-level one ``fairstream run dead_letters:app`` runs: for the test's
block it runs on the in-memory broker instead of Kafka, with retries, dead letters and
commits exactly as they would run against Kafka.
"""

from __future__ import annotations

import anyio
import pytest
from dead_letters import TOPIC, app

from fairstream.testing import MemoryBroker


@pytest.mark.asyncio
async def test_a_negative_amount_is_dead_lettered_and_the_partition_moves_on() -> None:
    async with MemoryBroker().run(app) as broker:  # creates the app's topic
        for amount in (5, -1, 7):
            await broker.publish(TOPIC, b'{"amount": %d}' % amount)
        with anyio.fail_after(10):
            await broker.drain(app)  # every record handled or dead-lettered

    (dead,) = broker.records(f"{TOPIC}.dlq")
    headers = dict(dead.headers)
    assert dead.value == b'{"amount": -1}'
    assert headers["fairstream.error.type"] == b"ValueError"
    assert headers["fairstream.source.offset"] == b"1"
    assert headers["fairstream.attempts"] == b"2"
    assert broker.committed("orders", TOPIC, 0) == 3  # past all three records
