"""KIP-387 on every backend: a backlog partition gets its share and no more."""

from __future__ import annotations

import anyio
import pytest

from fairstream import Record, SchedulerConfig
from tests.support.backends import Backend

BACKLOG = 5_000
SMALL = 40
QUOTA = 10


async def test_small_partitions_are_served_while_a_backlog_drains(
    backend: Backend, group_id: str
) -> None:
    topic = await backend.create_topic(4)
    # The backlog is written first, so a fetch-order consumer would drain it first.
    await backend.produce(topic, [(0, b"x" * 100)] * BACKLOG)
    await backend.produce(topic, [(p, b"y" * 100) for p in (1, 2, 3) for _ in range(SMALL)])
    app = backend.app(
        group_id=group_id,
        scheduler=SchedulerConfig(partition_quota=QUOTA, max_batch=4 * QUOTA),
    )
    order: list[int] = []
    done = anyio.Event()

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        order.append(record.partition)
        if len(order) == BACKLOG + 3 * SMALL:
            done.set()

    async with app:
        with anyio.fail_after(60):
            await done.wait()

    last_small = max(i for i, p in enumerate(order) if p != 0)
    backlog_before = order[:last_small].count(0)
    # Round-robin with a quota of 10: the small partitions need 4 rounds, so the
    # backlog contributes ~40 records before they finish. Allow for fetch timing
    # (the small partitions may arrive a few fetches later), never for starvation.
    assert backlog_before <= 20 * QUOTA, f"backlog served {backlog_before} records first"
    assert order.count(0) == BACKLOG


@pytest.mark.parametrize(
    ("value", "bounds"),
    [
        pytest.param(b"v", {"queue_target_records": 50}, id="by-records"),
        # Only bytes can hold a queue here: ~19 records of 1 kB reach 20 kB.
        pytest.param(
            b"v" * 1_000,
            {"queue_target_records": 10_000, "queue_target_bytes": 20_000},
            id="by-bytes",
        ),
    ],
)
async def test_full_queue_pauses_its_partition_and_loses_nothing(
    backend: Backend, group_id: str, value: bytes, bounds: dict[str, int]
) -> None:
    topic = await backend.create_topic(2)
    total = 3_000
    await backend.produce(topic, [(i % 2, value) for i in range(total)])
    app = backend.app(
        group_id=group_id,
        scheduler=SchedulerConfig(
            **bounds, max_buffered_records=200, partition_quota=20, max_batch=20
        ),
    )
    seen: set[tuple[int, int]] = set()
    paused_seen = False
    done = anyio.Event()

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        nonlocal paused_seen
        seen.add((record.partition, record.offset))
        if record.offset % 100 == 0:
            await anyio.sleep(0.01)  # slower than the fetcher, so queues fill up
            stats = app.stats()
            paused_seen = paused_seen or any(p.paused for p in stats.partitions)
            assert stats.buffered_records <= 200
        if len(seen) == total:
            done.set()

    async with app:
        with anyio.fail_after(60):
            await done.wait()

    assert paused_seen, "no partition was ever paused although its queue was full"
    assert seen == {(i % 2, i // 2) for i in range(total)}


@pytest.mark.parametrize(
    ("partitions", "per_partition", "watched", "idle_first"),
    [
        pytest.param(4, 3_000, 200, False, id="backlog-at-start"),
        pytest.param(4, 3_000, 200, True, id="backlog-while-idle"),
        pytest.param(24, 1_000, 2_400, False, id="more-partitions-than-the-buffer-holds"),
    ],
)
async def test_slow_handler_runs_every_backlog_partition_at_once(
    backend: Backend,
    group_id: str,
    partitions: int,
    per_partition: int,
    watched: int,
    idle_first: bool,
) -> None:
    """One pull must not fill the shared buffer from one partition.

    aiokafka's ``getmany`` drains its partitions one after another, so a pull as big
    as the whole buffer gave the first backlog partition all of it; with an I/O-bound
    handler the other partitions then waited for that queue to drain, one record of
    room at a time, and most of ``concurrency`` stood idle. A member with nothing
    to do must not take a bigger first pull when the backlog lands either (tried:
    pulling the whole room while no dispatch ran gave ``[0, 100, 100, 0]``).

    Partitions whose queues the buffer cannot all hold (2,000 records, ten queue
    targets of 200) take turns: aiokafka keeps its fetched buffers in the order the
    fetches arrived and drained the first ones first, so each room a slow handler
    made went back to the same ten partitions while the other fourteen waited for
    their fetched records to run out.
    """
    topic = await backend.create_topic(partitions)
    backlog = [(p, b"x" * 100) for p in range(partitions)] * per_partition
    if not idle_first:
        await backend.produce(topic, backlog)
    app = backend.app(group_id=group_id)
    order: list[int] = []
    done = anyio.Event()

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        order.append(record.partition)
        if len(order) == watched:
            done.set()
        await anyio.sleep(0.005)  # I/O-bound: the partitions' lanes should overlap

    async with app:
        if idle_first:
            with anyio.fail_after(30):
                await app.wait_ready()
            await anyio.sleep(1)  # polling, nothing to do
            await backend.produce(topic, backlog)
        with anyio.fail_after(60):
            await done.wait()

    shares = [order[:watched].count(p) for p in range(partitions)]
    # The lanes in parallel give each an even share; starved ones got ~0.
    assert min(shares) >= watched // (4 * partitions), f"records per partition: {shares}"
