"""Exactly-once on the in-memory broker (issue 41): a transaction's outputs and its
offsets become visible together when it commits, never when it aborts, and a new
producer of a transactional id fences the old one, as on Kafka."""

from __future__ import annotations

import anyio
import pytest
from aiokafka.errors import ProducerFenced

from fairstream import App, Record, RetryPolicy, SchedulerConfig
from fairstream.testing import MemoryBroker
from fairstream.testing._transactions import MemoryProducer


def _app(broker: MemoryBroker, **scheduler: object) -> App:
    return App(
        group_id="g",
        clients=broker.clients,
        processing="exactly_once",
        scheduler=SchedulerConfig(**scheduler),  # type: ignore[arg-type]
    )


def _outputs(broker: MemoryBroker) -> list[bytes | None]:
    return sorted(record.value for record in broker.records("out"))


async def _tick(app: App) -> None:
    """One commit tick now, as the commit loop runs it every commit_interval."""
    assert app._engine is not None
    await app._engine.commit()


async def test_keyed_outputs_commit_once_each_with_their_offsets() -> None:
    broker = MemoryBroker()
    broker.create_topic("in", partitions=2)
    broker.create_topic("out", partitions=2)
    app = _app(broker, ordering="key", concurrency=8)

    @app.subscriber("in")
    async def transform(record: Record[bytes]) -> None:
        await anyio.sleep(0.001)
        await app.publish("out", record.value, key=record.key)

    values = [b"v%03d" % n for n in range(200)]
    async with app:
        for n, value in enumerate(values):
            await broker.publish("in", value, key=b"k%d" % (n % 10))
        with anyio.fail_after(10):
            await broker.drain(app)
    assert _outputs(broker) == values
    ends = [broker.end_offset("in", p) for p in (0, 1)]
    assert [broker.committed("g", "in", p) for p in (0, 1)] == ends


async def test_an_output_is_invisible_until_its_record_commits() -> None:
    broker = MemoryBroker()
    broker.create_topic("in")
    broker.create_topic("out")
    app = _app(broker, commit_interval=60.0)  # the test ticks itself
    published, release = anyio.Event(), anyio.Event()

    @app.subscriber("in")
    async def transform(record: Record[bytes]) -> None:
        await app.publish("out", record.value)
        published.set()
        await release.wait()

    async with app:
        await broker.publish("in", b"a")
        with anyio.fail_after(5):
            await published.wait()
        await _tick(app)  # its record is in hand: neither output nor offset commits
        assert broker.records("out") == []
        assert broker.committed("g", "in", 0) is None
        release.set()
        with anyio.fail_after(5):
            await broker.drain(app)
        await _tick(app)
        assert _outputs(broker) == [b"a"]
        assert broker.committed("g", "in", 0) == 1


async def test_outputs_of_a_handler_cancelled_after_it_published_are_aborted() -> None:
    broker = MemoryBroker()
    broker.create_topic("in")
    broker.create_topic("out")
    app = _app(broker, shutdown_timeout=0.5, max_batch=1)
    published = anyio.Event()

    @app.subscriber("in")
    async def transform(record: Record[bytes]) -> None:
        await app.publish("out", record.value)
        if record.value == b"hangs":
            published.set()
            await anyio.sleep_forever()

    async with app:
        await broker.publish("in", b"done")
        with anyio.fail_after(5):
            await broker.drain(app)
        await _tick(app)
        await broker.publish("in", b"hangs")
        with anyio.fail_after(5):
            await published.wait()
    assert _outputs(broker) == [b"done"]
    assert broker.committed("g", "in", 0) == 1


async def test_a_new_producer_of_the_id_fences_the_old_one() -> None:
    broker = MemoryBroker()
    broker.create_topic("out")
    epochs: dict[str, int] = {}
    zombie = MemoryProducer(broker, "g-in-0", epochs)
    await zombie.start()
    await zombie.begin_transaction()
    await zombie.send("out", b"late", key=None, headers=[], partition=None)
    await MemoryProducer(broker, "g-in-0", epochs).start()
    with pytest.raises(ProducerFenced):
        await zombie.commit_transaction()
    assert broker.records("out") == []


async def test_a_hung_keyed_handler_holds_up_only_its_own_partition() -> None:
    broker = MemoryBroker()
    broker.create_topic("in", partitions=2)
    broker.create_topic("out", partitions=2)
    app = _app(broker, ordering="key", concurrency=8, shutdown_timeout=0.5)

    @app.subscriber("in")
    async def transform(record: Record[bytes]) -> None:
        await app.publish("out", record.value)
        if record.value == b"hangs":
            await anyio.sleep_forever()

    async with app:
        await broker.publish("in", b"hangs", partition=0)
        for n in range(20):
            await broker.publish("in", b"v%02d" % n, partition=1)
        with anyio.fail_after(10):
            while broker.committed("g", "in", 1) != 20:  # noqa: ASYNC110 - commits: no event
                await anyio.sleep(0.02)
        # The barrier let partition 0 go for this tick rather than wait for its handler.
        assert _outputs(broker) == [b"v%02d" % n for n in range(20)]
    assert broker.committed("g", "in", 0) is None


async def test_offsets_commit_for_records_that_published_nothing() -> None:
    broker = MemoryBroker()
    broker.create_topic("in")
    app = _app(broker)

    @app.subscriber("in")
    async def drop(record: Record[bytes]) -> None: ...

    async with app:
        await broker.publish("in", b"a")
        with anyio.fail_after(5):
            await broker.drain(app)
    assert broker.committed("g", "in", 0) == 1


async def test_a_dead_letter_commits_in_the_transaction_of_its_record() -> None:
    broker = MemoryBroker()
    broker.create_topic("in")
    broker.create_topic("out")
    app = App(
        group_id="g",
        clients=broker.clients,
        processing="exactly_once",
        scheduler=SchedulerConfig(ordering="key", concurrency=4),
        retry=RetryPolicy(attempts=2, backoff=0.001),
    )

    @app.subscriber("in")
    async def transform(record: Record[bytes]) -> None:
        if record.value == b"bad":
            raise ValueError("bad input")
        await app.publish("out", record.value)

    async with app:
        for value in (b"a", b"bad", b"b"):
            await broker.publish("in", value, key=value)
        with anyio.fail_after(5):
            await broker.drain(app)
    assert _outputs(broker) == [b"a", b"b"]
    assert [record.value for record in broker.records("in.dlq")] == [b"bad"]
    assert broker.committed("g", "in", 0) == 3
