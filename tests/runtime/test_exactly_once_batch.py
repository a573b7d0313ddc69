"""Batch handlers under exactly-once (issue 41): a batch holds one partition, so its
outputs go into that partition's transaction with the batch's offsets."""

from __future__ import annotations

from collections import Counter

import anyio
import pytest

from fairstream import App, Record, SchedulerConfig
from tests.conftest import Broker
from tests.support.kafka_helpers import committed, input_output_topics, produce, read_committed

pytestmark = pytest.mark.broker

PARTITIONS, RECORDS = 4, 400


async def test_each_batch_holds_one_partition_and_its_outputs_commit_once(
    noida: Broker, group_id: str
) -> None:
    source, sink = await input_output_topics(noida.bootstrap, "eos-batch", PARTITIONS)
    values = [b"v%d" % n for n in range(RECORDS)]
    # All partitions are full before the app starts, and a partition gives a batch 10
    # of its 64 records: at-least-once batches mix them.
    await produce(noida.bootstrap, source, ((n % PARTITIONS, v) for n, v in enumerate(values)))
    app = App(
        group_id=group_id,
        bootstrap=noida.bootstrap,
        processing="exactly_once",
        scheduler=SchedulerConfig(commit_interval=0.1, max_batch=64, partition_quota=10),
    )
    partitions_per_batch: set[int] = set()

    @app.subscriber(source, batch=True)
    async def transform(records: list[Record[bytes]]) -> None:
        partitions_per_batch.add(len({record.partition for record in records}))
        for record in records:
            await app.publish(sink, record.value)

    async with app:
        with anyio.fail_after(60):
            while await _committed(noida.bootstrap, group_id, source) < RECORDS:  # noqa: ASYNC110 - the broker's commits: no event
                await anyio.sleep(0.05)
    assert partitions_per_batch == {1}
    assert Counter(await read_committed(noida.bootstrap, sink, PARTITIONS)) == Counter(values)


async def _committed(bootstrap: str, group_id: str, topic: str) -> int:
    return sum(offset or 0 for offset in await committed(bootstrap, group_id, topic, PARTITIONS))
