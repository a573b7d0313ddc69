"""One definition of lag: ``fairstream lag``, ``app.stats()`` and the lag assignor's
reading give the same figures after retention deleted records the group had not read.

The group committed offset 10 on both partitions of a topic of 100 records each;
then the first 40 records of partition 0 are deleted. Records below the log start
are gone, so every view counts partition 0 from 40 (60 behind), partition 1 from
its commit (90 behind). The handler holds every record, so nothing moves on.
"""

from __future__ import annotations

import json

import anyio
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.structs import OffsetAndMetadata

from fairstream import App, ConsumerConfig, Record, SchedulerConfig
from fairstream.cli import main
from fairstream.runtime._kafka._clients import AIOKafkaClients
from tests.conftest import Broker
from tests.support.kafka_helpers import create_topic, produce

pytestmark = pytest.mark.broker

RECORDS, COMMITTED, LOG_START = 100, 10, 40
EXPECTED = (RECORDS - LOG_START, RECORDS - COMMITTED)


async def _commit_then_delete(bootstrap: str, group_id: str, topic: str) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in (0, 1)]
        consumer.assign(tps)
        await consumer.commit({tp: OffsetAndMetadata(COMMITTED, "") for tp in tps})
    finally:
        await consumer.stop()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_records({TopicPartition(topic, 0): RecordsToDelete(LOG_START)})
    finally:
        await admin.close()


async def test_cli_stats_and_assignor_agree_after_records_are_deleted(
    noida: Broker, group_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = f"agree-{group_id[-8:]}"
    await create_topic(noida.bootstrap, topic, 2)
    await produce(noida.bootstrap, topic, [(p, b"x") for p in (0, 1) for _ in range(RECORDS)])
    await _commit_then_delete(noida.bootstrap, group_id, topic)

    app = App(
        bootstrap=noida.bootstrap,
        group_id=group_id,
        assignor="lag",
        instance_id=noida.instance_id("agree-0"),
        consumer=ConsumerConfig(auto_offset_reset="latest"),
        # The member reads partition 0 on from its log start and would commit that
        # within a commit interval, after which nothing deleted is unread any more:
        # the CLI must look before (it did not always, on a busy machine).
        scheduler=SchedulerConfig(commit_interval=120),
    )
    release = anyio.Event()

    @app.subscriber(topic)
    async def hold(record: Record[bytes]) -> None:
        await release.wait()

    async with app:
        try:
            with anyio.fail_after(30):
                while True:
                    stats = app.stats()
                    lags = tuple(p.lag for p in stats.partitions)
                    if len(lags) == 2 and None not in lags:
                        break
                    await anyio.sleep(0.1)
            capsys.readouterr()
            argv = ["lag", "--bootstrap", noida.bootstrap, "--group", group_id]
            assert await anyio.to_thread.run_sync(main, [*argv, "--format", "json"]) == 0
            rows = json.loads(capsys.readouterr().out)["partitions"]
            clients = app._clients  # the member's own assignor planned the group
            assert isinstance(clients, AIOKafkaClients)
            plan = clients.assignor.last_plan
        finally:
            release.set()

    assert plan is not None and plan.strategy == "lag"
    assert plan.snapshot.lag == {topic: EXPECTED}
    assert lags == EXPECTED
    assert tuple(row["lag"] for row in rows) == EXPECTED
    assert [row["deleted_unread"] for row in rows] == [LOG_START - COMMITTED, 0]
