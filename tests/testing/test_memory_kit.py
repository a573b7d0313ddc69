"""The in-memory kit as a user meets it: publish, await handling, inspect the DLQ."""

from __future__ import annotations

import anyio
import pytest
from aiokafka import ConsumerRebalanceListener, TopicPartition

from fairstream import App, ConfigError, Record, RetryPolicy
from fairstream.testing import MemoryBroker


async def test_publish_drain_and_inspect_dead_letters() -> None:
    broker = MemoryBroker()
    broker.create_topic("orders", partitions=2)
    app = App(group_id="billing", clients=broker.clients, retry=RetryPolicy(attempts=1))
    totals: list[int] = []

    @app.subscriber("orders")
    async def handle(record: Record[dict[str, int]]) -> None:
        if record.value["amount"] < 0:
            raise ValueError("negative amount")
        totals.append(record.value["amount"])

    async with app:
        with anyio.fail_after(5):
            await app.wait_ready()
        assert app.health().ready
        for amount in (3, -1, 4):
            await broker.publish("orders", b'{"amount": %d}' % amount)
        with anyio.fail_after(5):
            await broker.drain(app)
        broker.create_topic("receipts")
        await app.publish("receipts", {"total": sum(totals)}, key="billing")

    assert sorted(totals) == [3, 4]
    assert [r.value for r in broker.records("receipts")] == [b'{"total":7}']
    (dead,) = broker.records("orders.dlq")
    assert dict(dead.headers)["fairstream.error.message"] == b"negative amount"
    assert [broker.committed("billing", "orders", p) for p in (0, 1)] == [2, 1]


async def test_a_missing_topic_fails_at_start_like_on_kafka() -> None:
    broker = MemoryBroker()
    app = App(group_id="g", clients=broker.clients)

    @app.subscriber("nowhere")
    async def handle(record: Record[bytes]) -> None: ...

    with pytest.raises(ConfigError, match="not found on the cluster"):
        async with app:
            pass


async def test_logs_inside_a_handler_carry_the_record_coordinates() -> None:
    from fairstream.logs import add_record_context

    broker = MemoryBroker()
    broker.create_topic("orders", partitions=1)
    app = App(group_id="g", clients=broker.clients)
    events: list[dict[str, object]] = []

    @app.subscriber("orders")
    async def handle(record: Record[bytes]) -> None:
        events.append(add_record_context(None, "info", {"event": "seen"}))

    async with app:
        await broker.publish("orders", b"a")
        await broker.publish("orders", b"b")
        with anyio.fail_after(5):
            await broker.drain(app)

    assert events == [
        {"event": "seen", "topic": "orders", "partition": 0, "offset": 0},
        {"event": "seen", "topic": "orders", "partition": 0, "offset": 1},
    ]
    assert add_record_context(None, "info", {"event": "outside"}) == {"event": "outside"}


class _Recorder(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.assigned: list[set[TopicPartition]] = []

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.assigned.append(set(assigned))


async def test_a_restarted_consumer_rejoins_as_a_new_member_and_reads_from_the_commits() -> None:
    broker = MemoryBroker()
    broker.create_topic("orders", partitions=2)
    for value in (b"a", b"b", b"c"):
        await broker.publish("orders", value)
    app = App(group_id="g", clients=broker.clients)
    clients = broker.clients(app, [])
    listener = _Recorder()
    await clients.start(["orders"], listener)
    first = await clients.consumer.getmany(timeout_ms=0)
    await clients.consumer.commit({TopicPartition("orders", 0): 1})
    member = clients.member_id

    await clients.restart_consumer()
    again = await clients.consumer.getmany(timeout_ms=0)

    assert clients.member_id not in (None, member)
    assert listener.assigned[-1] == {TopicPartition("orders", 0), TopicPartition("orders", 1)}
    assert sum(map(len, first.values())) == 3
    # Partition 0 resumes after its commit; partition 1 had none, so from the start.
    assert {tp.partition: [r.offset for r in rs] for tp, rs in again.items()} == {0: [1], 1: [0]}
    await clients.aclose()
