"""``ProducerConfig``: the settings reach the producer behind dead letters and ``app.publish``."""

from __future__ import annotations

import anyio
import pytest
from structlog.testing import capture_logs

from fairstream import App, ProducerConfig, Record, RetryPolicy
from tests.conftest import Broker, TopicFactory
from tests.support.backends import QUICK_JOIN
from tests.support.kafka_helpers import produce, read_all

pytestmark = pytest.mark.broker


async def test_dead_letters_and_publish_go_through_the_configured_producer(
    broker: Broker, make_topic: TopicFactory, group_id: str
) -> None:
    """gzip, lingering, larger batches, acks='all'; idempotent where the broker allows.

    tansu hands out no producer ids: the app falls back to a producer without
    idempotence and says so once, instead of failing to start.
    """
    source = await make_topic(partitions=1)
    receipts = await make_topic(partitions=1)
    app = App(
        bootstrap=broker.bootstrap,
        group_id=group_id,
        instance_id=broker.instance_id("producer-0"),
        consumer=QUICK_JOIN,
        retry=RetryPolicy(attempts=1),
        producer=ProducerConfig(compression_type="gzip", linger_ms=5, max_batch_size=65_536),
    )

    @app.subscriber(source)
    async def handle(record: Record[bytes]) -> None:
        if record.value == b"bad":
            raise ValueError("refused")
        await app.publish(receipts, b"receipt:" + record.value)

    await produce(broker.bootstrap, source, [(0, b"good"), (0, b"bad")])
    with capture_logs() as logs:
        async with app:
            with anyio.fail_after(60):
                (dead,) = await read_all(broker.bootstrap, f"{source}.dlq", 1, expected=1)
                (receipt,) = await read_all(broker.bootstrap, receipts, 1, expected=1)
    assert (dead.value, receipt.value) == (b"bad", b"receipt:good")  # type: ignore[attr-defined]
    fallbacks = [e for e in logs if e["event"] == "producer_idempotence_unavailable"]
    assert len(fallbacks) == (1 if broker.engine == "tansu" else 0), fallbacks
