"""Consumers kept between tasks (fairstream/spark/_readers.py) on a real broker: the
next chunk of a partition reuses the consumer that already fetched it, and every
chunk still reads exactly its own records."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from fairstream.errors import BrokerError
from fairstream.spark import _readers, reading
from fairstream.spark._readers import Reader, ReaderPool
from fairstream.spark.planning import Chunk
from fairstream.spark.reading import ReadSettings, read_task
from tests.conftest import Broker
from tests.spark.conftest import fill_topic, record_value

pytestmark = [pytest.mark.spark, pytest.mark.broker]


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[ReaderPool]:
    """A pool of this test alone, closed after it."""
    own = ReaderPool()
    monkeypatch.setattr(reading, "POOL", own)
    yield own
    own.close()


def read(settings: ReadSettings, topic: str, partition: int, start: int, end: int) -> list[int]:
    """The offsets read for one chunk, after checking each record's value."""
    chunk = Chunk(topic=topic, partition=partition, start=start, end=end)
    offsets: list[int] = []
    for batch in read_task(settings, [chunk]):
        rows = batch.to_pylist()
        for row in rows:
            assert row["partition"] == partition
            if row["offset"]:  # offset 0 is a tombstone (fill_topic)
                assert row["value"] == record_value(partition, row["offset"])
        offsets += [row["offset"] for row in rows]
    return offsets


def only(pool: ReaderPool) -> Reader:
    [reader] = pool.idle()
    return reader


def test_the_next_chunk_reuses_the_reader_that_fetched_it(noida: Broker, pool: ReaderPool) -> None:
    topic = fill_topic(noida.bootstrap, [30_000])
    settings = ReadSettings(bootstrap=noida.bootstrap)

    assert read(settings, topic, 0, 0, 5_000) == list(range(5_000))
    first = only(pool)
    assert (first.topic, first.partition, first.position) == (topic, 0, 5_000)

    assert read(settings, topic, 0, 5_000, 9_000) == list(range(5_000, 9_000))
    assert only(pool) is first  # no new consumer, no new fetch from offset 5000
    # A gap below SKIP_LIMIT: the kept reader reads and drops [9000, 9500).
    assert read(settings, topic, 0, 9_500, 12_000) == list(range(9_500, 12_000))
    assert only(pool) is first
    assert first.position == 12_000


def test_a_warmed_reader_fetches_before_its_chunk_is_read(noida: Broker, pool: ReaderPool) -> None:
    topic = fill_topic(noida.bootstrap, [30_000])
    settings = ReadSettings(bootstrap=noida.bootstrap)
    held = Chunk(topic=topic, partition=0, start=5_000, end=20_000)

    assert list(read_task(settings, [], warm=[held])) == []  # a task that only warms
    warmed = only(pool)
    assert (warmed.topic, warmed.partition, warmed.position) == (topic, 0, 5_000)
    deadline = time.monotonic() + 10
    while warmed.records_ahead() != 25_000:  # the log end comes with a fetch's answer
        assert time.monotonic() < deadline, "the warmed reader never fetched"
        time.sleep(0.05)

    assert read(settings, topic, 0, 5_000, 20_000) == list(range(5_000, 20_000))
    assert only(pool) is warmed
    # Warming where a kept reader stands already starts nothing.
    list(read_task(settings, [], warm=[Chunk(topic=topic, partition=0, start=20_000, end=21_000)]))
    assert only(pool) is warmed


def test_a_chunk_below_the_kept_position_gets_its_own_reader(
    noida: Broker, pool: ReaderPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A smaller skip limit keeps the topic small: the limit itself is a tuning value.
    monkeypatch.setattr(_readers, "SKIP_LIMIT", 10_000)
    topic = fill_topic(noida.bootstrap, [30_000])
    settings = ReadSettings(bootstrap=noida.bootstrap)

    assert read(settings, topic, 0, 0, 6_000) == list(range(6_000))
    kept = only(pool)
    assert read(settings, topic, 0, 2_000, 2_500) == list(range(2_000, 2_500))
    assert len(pool.idle()) == 2 and kept in pool.idle()
    # Beyond the skip limit: a fresh fetch, not 10k+ records read and dropped.
    start = 6_000 + _readers.SKIP_LIMIT + 1
    assert read(settings, topic, 0, start, start + 100) == list(range(start, start + 100))
    assert len(pool.idle()) == 3


def test_near_the_log_end_the_reader_is_kept_unassigned(noida: Broker, pool: ReaderPool) -> None:
    """An assigned consumer at the log end would keep fetching (noida answers at
    once); unassigned, it serves the next chunk of any partition."""
    topic = fill_topic(noida.bootstrap, [300, 200])
    settings = ReadSettings(bootstrap=noida.bootstrap)

    assert read(settings, topic, 0, 0, 300) == list(range(300))
    spare = only(pool)
    assert spare.topic is None
    assert read(settings, topic, 1, 50, 200) == list(range(50, 200))
    assert only(pool) is spare


def test_a_failed_or_abandoned_read_closes_its_reader(noida: Broker, pool: ReaderPool) -> None:
    topic = fill_topic(noida.bootstrap, [30_000])
    settings = ReadSettings(bootstrap=noida.bootstrap, batch_size=1_000, stall_timeout=1)

    batches = read_task(settings, [Chunk(topic=topic, partition=0, start=0, end=20_000)])
    next(batches)
    batches.close()
    assert pool.idle() == ()

    with pytest.raises(BrokerError, match="no progress"):
        list(read_task(settings, [Chunk(topic=topic, partition=0, start=29_000, end=31_000)]))
    assert pool.idle() == ()


def test_the_pool_keeps_few_readers_for_a_short_while(
    noida: Broker, pool: ReaderPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = fill_topic(noida.bootstrap, [30_000, 30_000, 30_000])
    settings = ReadSettings(bootstrap=noida.bootstrap)
    monkeypatch.setattr(_readers, "MAX_IDLE", 2)
    for partition in range(3):
        read(settings, topic, partition, 0, 100)
    assert [r.partition for r in pool.idle()] == [1, 2]  # the oldest went first

    monkeypatch.setattr(_readers, "IDLE_SECONDS", 0.0)
    read(settings, topic, 0, 100, 200)  # takes a new reader; the idle ones expired
    assert [r.partition for r in pool.idle()] == [0]
    # Other client options: never handed a reader made with these.
    other = ReadSettings(bootstrap=noida.bootstrap, kafka_config={"client.id": "other"})
    monkeypatch.setattr(_readers, "IDLE_SECONDS", 60.0)
    read(other, topic, 0, 200, 300)
    assert len(pool.idle()) == 2
