"""Parallel rebalance (KIP-333): new records at once after a rebalance, the backlog beside them.

    fairstream broker &                      # or your own Kafka; note the bootstrap
    export FAIRSTREAM_BOOTSTRAP=127.0.0.1:PORT
    python examples/parallel_rebalance.py    # creates 'sensors', fills a 200k backlog
    fairstream run parallel_rebalance:app    # from examples/; then watch, and:
    fairstream lag --group sensors --topics sensors

A member that is assigned a partition more than ``ParallelRebalance.threshold``
records behind jumps to the partition's end and serves new readings at once; a
shadow task replays the backlog through the same handler with ``record.replay``
set. Give each member a stable ``FAIRSTREAM_INSTANCE_ID`` (e.g. the StatefulSet pod
name) so a restarted member gets its partitions back at once.
"""

from __future__ import annotations

import os

import anyio
import structlog
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from fairstream import App, ParallelRebalance, Record, SchedulerConfig

log = structlog.get_logger()

TOPIC = os.environ.get("SENSORS_TOPIC", "sensors")

app = App(
    group_id=os.environ.get("FAIRSTREAM_GROUP_ID", "sensors"),
    parallel_rebalance=ParallelRebalance(threshold=10_000),
    scheduler=SchedulerConfig(concurrency=4),  # the shadow may use up to half of these
)


@app.subscriber(TOPIC)
async def handle(record: Record[bytes]) -> None:
    if record.replay:
        # Older than readings this partition may already have served: e.g. write
        # it to history only, never overwrite a "current value" with it.
        return
    log.info("reading", size=len(record.value or b""))


async def fill_backlog(bootstrap: str, records: int = 200_000) -> None:
    """Create the topic and write ``records`` readings, so the next start has a backlog."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(TOPIC, 2, 1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    try:
        for n in range(records):
            await producer.send(TOPIC, b"%d" % n, partition=n % 2)
        await producer.flush()
    finally:
        await producer.stop()


if __name__ == "__main__":
    anyio.run(fill_backlog, os.environ.get("FAIRSTREAM_BOOTSTRAP", "127.0.0.1:9092"))
