"""A pull takes from each buffered partition in turn, at most its allowance, losing nothing."""

from __future__ import annotations

import anyio
import pytest
import structlog
from aiokafka import AIOKafkaConsumer, TopicPartition

from fairstream.runtime._pull_in_turn import pull_in_turn
from tests.conftest import Broker, TopicFactory
from tests.kafka_helpers import produce
from tests.runtime.live_traffic import wait_until

pytestmark = pytest.mark.broker

PARTITIONS, PER_PARTITION, ALLOWED = 6, 300, 50


async def test_a_pull_takes_each_partition_in_turn_up_to_its_allowance(
    broker: Broker, make_topic: TopicFactory
) -> None:
    topic = await make_topic(partitions=PARTITIONS)
    await produce(
        broker.bootstrap,
        topic,
        [(p, b"%d" % i) for i in range(PER_PARTITION) for p in range(PARTITIONS)],
    )
    allowance = dict.fromkeys(range(PARTITIONS), ALLOWED)
    allowance[PARTITIONS - 1] = 0  # held: its fetched records stay where they are
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        # The pinned aiokafka is the one the hook knows; if an upgrade breaks that,
        # this says so (fairstream still works, pulling small, but slower).
        wake = pull_in_turn(consumer, lambda tp: allowance[tp.partition])
        assert wake is not None
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        # A pull can reach a partition once it is fetched.
        await wait_until(lambda: len(consumer._fetcher._records) == PARTITIONS, 30)

        first = await consumer.getmany(timeout_ms=1_000, max_records=2 * ALLOWED)
        second = await consumer.getmany(timeout_ms=1_000, max_records=2 * ALLOWED)
        for pull in (first, second):
            assert sum(map(len, pull.values())) == 2 * ALLOWED
            assert all(len(records) <= ALLOWED for records in pull.values())
            assert PARTITIONS - 1 not in {tp.partition for tp in pull}
        # The partitions the first pull took from went to the back.
        assert not set(first) & set(second), (sorted(first), sorted(second))

        # A pull that finds nothing allowed waits for data; a grown allowance wakes it.
        held = dict(allowance)
        allowance.update(dict.fromkeys(range(PARTITIONS), 0))
        woken_after = 0.0

        async def allow_later() -> None:
            nonlocal woken_after
            await anyio.sleep(0.3)
            allowance.update(held)
            allowance[PARTITIONS - 1] = ALLOWED
            woken_after = anyio.current_time()
            wake()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(allow_later)
            third = await consumer.getmany(timeout_ms=10_000, max_records=ALLOWED)
        assert anyio.current_time() - woken_after < 1, "the pull slept through the wake"
        assert sum(map(len, third.values())) == ALLOWED

        offsets: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        for pull in (first, second, third):
            for tp, records in pull.items():
                offsets[tp.partition] += [r.offset for r in records]
        with anyio.fail_after(30):
            while sum(map(len, offsets.values())) < PARTITIONS * PER_PARTITION:
                pull = await consumer.getmany(timeout_ms=200, max_records=1_000)
                for tp, records in pull.items():
                    assert len(records) <= ALLOWED
                    offsets[tp.partition] += [r.offset for r in records]
    finally:
        await consumer.stop()
    # Every record once, in offset order per partition: nothing skipped or repeated.
    assert offsets == {p: list(range(PER_PARTITION)) for p in range(PARTITIONS)}


async def test_a_consumer_not_aiokafkas_is_left_alone() -> None:
    class MemoryLike:
        pass

    class OtherFetcher:
        _fetcher = object()

    with structlog.testing.capture_logs() as logs:
        assert pull_in_turn(MemoryLike(), lambda tp: 1) is None
        assert logs == []  # MemoryBroker's consumer pulls its own way, nothing to say
        assert pull_in_turn(OtherFetcher(), lambda tp: 1) is None
    assert [e["event"] for e in logs] == ["pull_in_turn_unavailable"]
