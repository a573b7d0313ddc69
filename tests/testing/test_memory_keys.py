"""MemoryBroker puts a keyed record where Kafka would, and runs a module-level app."""

from __future__ import annotations

import anyio
import pytest
from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given
from hypothesis import strategies as st

from fairstream import App, Record
from fairstream.runtime._kafka._clients import aiokafka_clients
from fairstream.testing import MemoryBroker
from fairstream.testing._memory import partition_for

# Apache Kafka's own murmur2 vectors (clients/.../common/utils/UtilsTest.testMurmur2):
# the Java client's signed 32-bit hash of each key.
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("partitions", [1, 2, 3, 6, 7, 12, 100, 1009])
@pytest.mark.parametrize("key", list(JAVA_MURMUR2), ids=[k.decode() for k in JAVA_MURMUR2])
def test_the_partition_is_the_java_clients(key: bytes, partitions: int) -> None:
    # DefaultPartitioner.partition: Utils.toPositive(Utils.murmur2(keyBytes)) % numPartitions
    assert partition_for(key, partitions) == (JAVA_MURMUR2[key] & 0x7FFFFFFF) % partitions


@given(key=st.binary(max_size=64), partitions=st.integers(min_value=1, max_value=4096))
def test_the_partition_is_aiokafkas(key: bytes, partitions: int) -> None:
    every = list(range(partitions))
    assert partition_for(key, partitions) == DefaultPartitioner()(key, every, every)


async def test_a_keys_records_share_one_partition_whatever_came_before() -> None:
    broker = MemoryBroker()
    broker.create_topic("orders", partitions=6)
    for n in range(30):
        await broker.publish("orders", b"%d" % n, key=b"customer-%d" % (n % 5))
    await broker.publish("orders", b"no key")  # keyless records still spread round-robin
    for c in range(5):
        key = b"customer-%d" % c
        landed = {r.partition for r in broker.records("orders") if r.key == key}
        assert landed == {partition_for(key, 6)}


# An app as a service module builds it: at import, with the real (aiokafka) clients.
app = App(group_id="billing")
handled: list[tuple[bytes | None, int]] = []


@app.subscriber("orders")
async def handle(record: Record[dict[str, int]]) -> None:
    handled.append((record.key, record.value["n"]))


async def test_a_module_level_app_runs_on_the_broker_for_the_block() -> None:
    handled.clear()
    async with MemoryBroker().run(app, partitions=3) as broker:
        assert broker.partitions("orders") == 3  # created for the block, as asked
        for n in range(12):
            await broker.publish("orders", b'{"n": %d}' % n, key=b"k%d" % (n % 4))
        with anyio.fail_after(10):
            await broker.drain(app)
    for k in range(4):
        assert [n for key, n in handled if key == b"k%d" % k] == list(range(k, 12, 4))
    assert broker.committed("billing", "orders", partition_for(b"k0", 3)) is not None
    assert app._clients_factory is aiokafka_clients  # its own clients again


async def test_the_app_gets_its_clients_back_when_the_block_fails() -> None:
    broker = MemoryBroker()
    broker.create_topic("orders", partitions=2)  # an existing topic keeps its count
    # The app's task group wraps what the block raises, as under `async with app`.
    with pytest.RaisesGroup(LookupError):
        async with broker.run(app, partitions=5):
            raise LookupError("the test's own failure")
    assert broker.partitions("orders") == 2
    assert app._clients_factory is aiokafka_clients
    async with MemoryBroker().run(app) as again:  # and runs on a second broker later
        await again.publish("orders", b'{"n": 99}')
        with anyio.fail_after(10):
            await again.drain(app)
    assert handled[-1] == (None, 99)
