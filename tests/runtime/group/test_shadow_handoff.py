"""A shadow handoff that fails on one record, on noida: every record counted.

The handoff here is real work on the real broker: it reads its range with its own
group-less consumer and "handles" each record by counting it, and stops with
:class:`~fairstream.HandoffFailed` at a poison record, as a backfill that handles
records in order would. The App's handler fails on the poison records too, so the
retry and dead-letter policy has something to do.
"""

from __future__ import annotations

from collections import Counter

import anyio
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from structlog.testing import capture_logs

from fairstream import (
    App,
    DeadLetterPolicy,
    HandoffFailed,
    ParallelRebalance,
    Record,
    RetryPolicy,
    SchedulerConfig,
)
from fairstream.ranges import OffsetRange
from tests.conftest import Broker
from tests.runtime.group.test_parallel_rebalance import _topic, _values, _wait_commits
from tests.support.kafka_helpers import create_topic, produce, read_all

pytestmark = pytest.mark.broker

POISON = {"b300", "b700"}
ATTEMPTS = 2


async def _read_range(bootstrap: str, topic: str, shadow: OffsetRange) -> list[tuple[int, str]]:
    """(offset, value) of every record of partition 0 in ``shadow``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    tp = TopicPartition(topic, 0)
    out: list[tuple[int, str]] = []
    try:
        consumer.assign([tp])
        consumer.seek(tp, shadow.start)
        while not out or out[-1][0] < shadow.end - 1:
            for records in (await consumer.getmany(tp, timeout_ms=500)).values():
                out += [(r.offset, r.value.decode()) for r in records if r.offset < shadow.end]
    finally:
        await consumer.stop()
    return out


async def test_a_handoff_failing_on_one_record_hands_only_that_record_to_the_policy(
    noida: Broker, group_id: str
) -> None:
    topic = await _topic(noida.bootstrap, 1)
    await create_topic(noida.bootstrap, f"{topic}.dlq", 1)
    backlog = _values("b", 1, 1_000)
    await produce(noida.bootstrap, topic, backlog)
    calls: list[OffsetRange] = []
    by_handoff: Counter[str] = Counter()
    by_app: Counter[str] = Counter()
    attempts: Counter[str] = Counter()

    async def handoff(topic_: str, partition: int, shadow: OffsetRange) -> None:
        calls.append(shadow)
        for offset, value in await _read_range(noida.bootstrap, topic_, shadow):
            if value in POISON:
                raise HandoffFailed(offset, cause=ValueError(value))
            by_handoff[value] += 1

    app = App(
        bootstrap=noida.bootstrap,
        group_id=group_id,
        instance_id=noida.instance_id("only"),
        # handoff_threshold=500: [0, 1000) and [301, 1000) are handed off, [701, 1000) not.
        parallel_rebalance=ParallelRebalance(threshold=100, handoff=handoff, handoff_threshold=500),
        scheduler=SchedulerConfig(commit_interval=0.2, partition_quota=50, max_batch=100),
        retry=RetryPolicy(attempts=ATTEMPTS, backoff=0.01),
        dead_letter=DeadLetterPolicy(on_error="dead_letter"),
    )

    @app.subscriber(topic)
    async def handle(record: Record[str]) -> None:
        attempts[record.value] += 1
        if record.value in POISON:
            raise ValueError(record.value)
        by_app[record.value] += 1

    live = _values("l", 1, 50)
    with capture_logs() as logs:
        async with app:
            with anyio.fail_after(30):
                await app.wait_ready()
            await produce(noida.bootstrap, topic, live)
            await _wait_commits(noida.bootstrap, group_id, topic, [(1_050, [])])
    dead = await read_all(noida.bootstrap, f"{topic}.dlq", 1, expected=len(POISON))

    assert calls == [OffsetRange(0, 1_000), OffsetRange(301, 1_000)]
    # Every record exactly once: by the handoff, the App's handler, or the dead letters.
    dead_values = Counter(r.value.decode() for r in dead)  # type: ignore[attr-defined]
    assert by_handoff + by_app + dead_values == Counter(v.decode() for _, v in [*backlog, *live])
    assert dead_values == Counter(POISON)
    assert {v: attempts[v] for v in POISON} == dict.fromkeys(POISON, ATTEMPTS)
    # No whole-range replay: only the poison records and the tail under the
    # handoff threshold ran in process.
    replayed = set(by_app) - {v.decode() for _, v in live}
    assert replayed == {f"b{i}" for i in range(701, 1_000)}
    failed = [e["offset"] for e in logs if e["event"] == "shadow_handoff_failed"]
    assert failed == [300, 700]
