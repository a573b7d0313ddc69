"""A pull takes from each buffered partition in turn, at most its allowance, losing nothing."""

from __future__ import annotations

import anyio
import pytest
import structlog
from aiokafka import AIOKafkaConsumer, TopicPartition

from fairstream.runtime._kafka._pull_in_turn import pull_in_turn
from tests.conftest import Broker, TopicFactory
from tests.support.kafka_helpers import produce
from tests.support.live_traffic import wait_until

pytestmark = pytest.mark.broker

PARTITIONS, PER_PARTITION, ALLOWED = 6, 300, 50
WAIT_MS = 30_000
"""A waiting pull's timeout: one that returns sooner was woken, or drained when due."""


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
        in_turn = pull_in_turn(consumer, lambda tp: allowance[tp.partition])
        assert in_turn is not None
        # An emptied buffer wakes the fetch loop only while no fetch to its broker is
        # in flight: aiokafka still tracks those (else it is woken every time).
        fetcher = consumer._fetcher
        assert isinstance(fetcher._in_flight, set)
        assert callable(fetcher._select_read_replica)
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

        async def allow_later() -> None:
            await anyio.sleep(0.3)
            allowance.update(held)
            allowance[PARTITIONS - 1] = ALLOWED
            in_turn.wake()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(allow_later)
            began = anyio.current_time()
            third = await consumer.getmany(timeout_ms=WAIT_MS, max_records=ALLOWED)
        waited = anyio.current_time() - began
        assert waited < WAIT_MS / 1_000, "the pull slept through the wake"
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


async def test_a_trickle_waits_in_its_buffer_while_there_is_other_work(
    broker: Broker, make_topic: TopicFactory
) -> None:
    """A partition whose last buffer gave less than its allowance (a live one fed a
    few records at a time) is left in aiokafka's buffer for up to ``linger`` while
    another partition's buffer has records or ``busy()`` says the handlers have work,
    so aiokafka's next fetch comes later and fuller; otherwise it is taken at once.
    Nothing is skipped or repeated."""
    topic = await make_topic(partitions=2)
    trickle, backlog = TopicPartition(topic, 0), TopicPartition(topic, 1)
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    taken: dict[int, list[bytes]] = {0: [], 1: []}

    async def pull(timeout_ms: int) -> set[int]:
        got = await consumer.getmany(timeout_ms=timeout_ms)
        for tp, records in got.items():
            taken[tp.partition] += [r.value for r in records]
        return {tp.partition for tp, records in got.items() if records}

    async def trickle_to(value: bytes) -> None:
        await produce(broker.bootstrap, topic, [(0, value)])
        await wait_until(lambda: trickle in consumer._fetcher._records, 30)

    linger, busy = 3.0, False
    try:
        in_turn = pull_in_turn(consumer, lambda tp: ALLOWED, linger=linger, busy=lambda: busy)
        assert in_turn is not None
        consumer.assign([trickle, backlog])
        # Its first buffer gives less than the allowance: taken at once, and from
        # then on the partition is a trickle.
        await trickle_to(b"t0")
        assert await pull(0) == {0}
        # The backlog partition's buffer holds more than its allowance: it gives
        # each pull its allowance, while the trickle's buffer waits.
        await produce(broker.bootstrap, topic, [(1, b"%d" % i) for i in range(3 * ALLOWED)])
        await wait_until(lambda: backlog in consumer._fetcher._records, 30)
        await trickle_to(b"t1")
        assert [await pull(0) for _ in range(3)] == [{1}, {1}, {1}]
        # Nothing else left to give: the trickle goes with the next pull.
        assert await pull(0) == {0}
        # Handlers busy: the trickle waits its linger, and a pull waiting for data
        # drains again when it is due, not at the end of its timeout.
        busy = True
        await trickle_to(b"t2")
        began = anyio.current_time()
        assert await pull(0) == set()
        assert await pull(WAIT_MS) == {0}
        waited = anyio.current_time() - began
        assert linger * 0.9 <= waited < WAIT_MS / 1_000, waited
        # The handlers run low while a trickle waits: a wake makes the waiting pull
        # take it then, not when it is due.
        await trickle_to(b"t3")
        first_seen = anyio.current_time()  # its wait starts at the next pull
        assert await pull(0) == set()
        assert in_turn.holding

        async def run_low() -> None:
            nonlocal busy
            await anyio.sleep(0.2)
            busy = False
            in_turn.wake()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run_low)
            assert await pull(WAIT_MS) == {0}
        due = first_seen + linger
        assert anyio.current_time() < due, "the pull waited for the due time"
        # Alone and not busy, a trickle's buffer is taken at once.
        await trickle_to(b"t4")
        assert await pull(0) == {0}
    finally:
        await consumer.stop()
    assert taken == {
        0: [b"t0", b"t1", b"t2", b"t3", b"t4"],
        1: [b"%d" % i for i in range(3 * ALLOWED)],
    }
