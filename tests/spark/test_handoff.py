"""The Spark shadow handoff end to end: an App jumps, Spark replays the backlog range."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
import structlog.testing
from confluent_kafka import TopicPartition as ConfluentPartition
from pyspark.sql import SparkSession

from fairstream import App, ParallelRebalance, Record, SchedulerConfig
from fairstream.ranges import OffsetRange, decode_shadow, encode_shadow
from fairstream.spark.cluster import read_states
from fairstream.spark.handoff import spark_shadow_handoff
from tests.conftest import Broker
from tests.spark.conftest import fill_topic, stored_metadata
from tests.spark.test_backfill import recorder, seen
from tests.support.kafka_helpers import produce

pytestmark = [pytest.mark.spark, pytest.mark.broker]


async def test_a_large_shadow_range_is_backfilled_on_spark(
    spark: SparkSession, noida: Broker, group_id: str, tmp_path: Path
) -> None:
    topic = fill_topic(noida.bootstrap, [600])
    app = App(
        bootstrap=noida.bootstrap,
        group_id=group_id,
        parallel_rebalance=ParallelRebalance(
            threshold=100,
            handoff=spark_shadow_handoff(
                bootstrap=noida.bootstrap, group_id=group_id, handler=recorder(tmp_path), chunk=200
            ),
            handoff_threshold=500,
        ),
        scheduler=SchedulerConfig(commit_interval=0.2),
    )
    live: list[tuple[int, bool]] = []
    all_live = anyio.Event()

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        live.append((record.offset, record.replay))
        if sum(not replay for _, replay in live) == 20:
            all_live.set()

    with structlog.testing.capture_logs() as events:
        async with app:
            with anyio.fail_after(30):
                await app.wait_ready()
            await produce(noida.bootstrap, topic, [(0, b"live")] * 20)
            with anyio.fail_after(120):
                await all_live.wait()
                while (await stored_metadata(noida, group_id, topic)) != "":  # noqa: ASYNC110
                    await anyio.sleep(0.2)  # the handoff returned: the range was dropped

    failed = [event for event in events if event["event"] == "shadow_handoff_failed"]
    assert failed == [], "the Spark job failed, so the in-process shadow replayed the range"
    counts, _ = seen(tmp_path)
    assert set(counts) == {(topic, 0, offset) for offset in range(600)}
    assert live == [(offset, False) for offset in range(600, 620)]


async def test_the_runtimes_commit_metadata_reads_back_exactly_through_confluent_kafka(
    noida: Broker, group_id: str
) -> None:
    """confluent-kafka reads commit metadata as a C string. The runtime commits it with
    aiokafka, which writes the bytes it is given: without a NUL after them the Spark
    side read ``{"shadow":[[0,600]]}`` plus whatever followed in memory (junk that
    decode_shadow dropped the range for, or bytes that failed UTF-8, as CI met)."""
    topic = fill_topic(noida.bootstrap, [600])
    app = App(
        bootstrap=noida.bootstrap,
        group_id=group_id,
        parallel_rebalance=ParallelRebalance(threshold=100),
        scheduler=SchedulerConfig(commit_interval=0.2),
    )
    release = anyio.Event()

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        if record.replay:
            await release.wait()  # the shadow range stays open while it is read

    def read_back(times: int) -> list[str]:
        found = []
        for _ in range(times):
            # Freed C buffers of 24 bytes with "x" where a missing NUL would be read:
            # the next copy of a 20-byte metadata reuses one.
            litter = [ConfluentPartition(topic, 0, metadata="x" * 23) for _ in range(50)]
            del litter
            [state] = read_states(noida.bootstrap, group_id, [topic], quiet=True)
            found.append(state.metadata)
        return found

    async with app:
        with anyio.fail_after(30):
            while not decode_shadow(await stored_metadata(noida, group_id, topic)):  # noqa: ASYNC110
                await anyio.sleep(0.1)
        found = await anyio.to_thread.run_sync(read_back, 100)
        release.set()

    assert set(found) == {encode_shadow([OffsetRange(0, 600)])}
