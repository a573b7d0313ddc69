"""The retention-skip scenario: records deleted before the group read them.

The group commits an offset on every partition, then the records below a later
offset are deleted (``DeleteRecords``, what retention does; noida serves it, tansu
does not). An app of that group must handle every record still there, none twice,
and count the deleted ones in ``app.stats()``. The quick suite runs a small case
(``test_retention.py``, which also checks the ``records_skipped_by_retention``
event and the metric), ``benchmarks/soak.py`` a large one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.structs import OffsetAndMetadata

from fairstream import App, ConsumerConfig, Record, SchedulerConfig
from tests.reliability.checker import Result, Sink, check, make_ids, produce_ids, read_sightings
from tests.support.kafka_helpers import create_topic

__all__ = ["RetentionSkip", "commit_offsets", "delete_records", "retention_skip"]


async def commit_offsets(
    bootstrap: str, group_id: str, offsets: Mapping[TopicPartition, int]
) -> None:
    """Commit ``offsets`` for ``group_id`` as a member that then leaves."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id)
    await consumer.start()
    try:
        consumer.assign(list(offsets))
        await consumer.commit({tp: OffsetAndMetadata(o, "") for tp, o in offsets.items()})
    finally:
        await consumer.stop()


async def delete_records(bootstrap: str, before: Mapping[TopicPartition, int]) -> None:
    """Delete every record below ``before`` of each partition (``DeleteRecords``)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_records({tp: RecordsToDelete(o) for tp, o in before.items()})
    finally:
        await admin.close()


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionSkip:
    result: Result
    deleted_unread: int
    """Records between the commit and the log start: what must be reported."""
    counted: int
    """``app.stats().records_skipped_by_retention``."""


async def retention_skip(
    bootstrap: str,
    *,
    static: bool,
    records: int,
    partitions: int,
    workdir: Path,
    wait_limit: float = 120,
) -> RetentionSkip:
    """The group committed a tenth of each partition, then the first third was deleted."""
    started = time.monotonic()
    topic = f"retention-{uuid.uuid4().hex[:10]}"
    group_id = f"g-retention-{uuid.uuid4().hex[:8]}"
    await create_topic(bootstrap, topic, partitions)
    ids = make_ids("retention", records)
    await produce_ids(bootstrap, topic, ids, partitions)  # id i on partition i % partitions
    per_partition = records // partitions
    committed, log_start = per_partition // 10, per_partition // 3
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    await commit_offsets(bootstrap, group_id, dict.fromkeys(tps, committed))
    await delete_records(bootstrap, dict.fromkeys(tps, log_start))
    expected = [record_id for i, record_id in enumerate(ids) if i // partitions >= log_start]

    sink = Sink(workdir / f"{topic}.sink", "retention")
    app = App(
        bootstrap=bootstrap,
        group_id=group_id,
        instance_id="retention-0" if static else None,
        consumer=ConsumerConfig(auto_offset_reset="latest"),
        scheduler=SchedulerConfig(commit_interval=0.2),
    )

    @app.subscriber(topic)
    async def handle(record: Record[dict[str, Any]]) -> None:
        sink.write_record(record)

    async with app:
        await sink.wait_unique(len(expected), wait_limit)
        counted = app.stats().records_skipped_by_retention
    sink.close()
    seen = [s.id for s in read_sightings(sink.path)]
    result = check("retention skip", expected, seen, seconds=time.monotonic() - started)
    return RetentionSkip(
        result=result,
        deleted_unread=partitions * (log_start - committed),
        counted=counted,
    )
