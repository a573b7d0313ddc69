"""How far a keyed partition reads ahead (issue #38, defect 10), on real brokers.

The rule (``_keyed.py``, README "Concurrency and ordering"): a partition holds at
most ``room = max(2 x partition_quota, concurrency)`` admitted records that are not
finished. Finished records do not count, wherever they are: a record that never
finishes holds its key, not a window of the partition, so the other keys go on
past it; and once ``room`` records wait unfinished (its key's, say), the partition
admits nothing more until one finishes.
"""

from __future__ import annotations

import uuid

import anyio

from fairstream import App, Record, SchedulerConfig
from tests.conftest import Broker
from tests.support.backends import QUICK_JOIN
from tests.support.kafka_helpers import create_topic, produce_keyed

QUOTA = 5
CONCURRENCY = 4
ROOM = max(2 * QUOTA, CONCURRENCY)  # 10


async def test_unfinished_records_not_distance_bound_what_a_keyed_partition_admits(
    broker: Broker, group_id: str
) -> None:
    topic = f"room-{uuid.uuid4().hex[:10]}"
    await create_topic(broker.bootstrap, topic, 2)
    # Partition 0: a record that stays in its handler, then 3 x ROOM records of other keys.
    passers = 3 * ROOM
    records = [(0, b"S", b"S:0")]
    records += [(0, f"k{i}".encode(), f"k{i}:{i}".encode()) for i in range(1, passers + 1)]
    # Partition 1: key X stuck at its first record, 2 x ROOM more of X behind it, then Y.
    behind = 2 * ROOM
    records += [(1, b"X", f"X:{i}".encode()) for i in range(behind + 1)]
    records.append((1, b"Y", b"Y:0"))
    await produce_keyed(broker.bootstrap, topic, records)

    app = App(
        bootstrap=broker.bootstrap,
        group_id=group_id,
        instance_id=broker.instance_id(group_id),
        consumer=QUICK_JOIN,
        scheduler=SchedulerConfig(partition_quota=QUOTA, commit_interval=0.2),
    )
    release_s, release_x, passed, y_done = (anyio.Event() for _ in range(4))
    finished: list[str] = []
    x_finished_before_y: list[int] = []

    @app.subscriber(topic, ordering="key", concurrency=CONCURRENCY)
    async def handle(record: Record[bytes]) -> None:
        value = record.value.decode()
        if value == "S:0":
            await release_s.wait()
        elif value == "X:0":
            await release_x.wait()
        elif value == "Y:0":
            x_finished_before_y.append(sum(v.startswith("X:") for v in finished))
            y_done.set()
        finished.append(value)
        if sum(v.startswith("k") for v in finished) == passers:
            passed.set()

    async with app:
        with anyio.fail_after(60):
            # Not a window: 3 x ROOM records past S:0 finish while it is still in hand.
            await passed.wait()
        assert "S:0" not in finished
        # A bound: Y waits behind ROOM unfinished X records until X:0 lets them go.
        assert not y_done.is_set()
        assert not any(v.startswith("X:") for v in finished)
        release_x.set()
        release_s.set()
        with anyio.fail_after(60):
            await y_done.wait()

    # Y (offset 2 x ROOM + 1) was admitted only once at most ROOM - 1 of the records
    # before it were unfinished: at least 2 x ROOM + 1 - (ROOM - 1) of X had finished.
    assert x_finished_before_y[0] >= behind + 1 - (ROOM - 1)
