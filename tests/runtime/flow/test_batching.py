"""Batch handlers and concurrency: dispatches span partitions, order holds per partition."""

from __future__ import annotations

from collections import defaultdict

import anyio
import pytest

from fairstream import Record, SchedulerConfig
from tests.support.backends import Backend


async def test_batch_handler_gets_bounded_cross_partition_batches_in_order(
    backend: Backend, group_id: str
) -> None:
    topic = await backend.create_topic(4)
    total = 2_000
    await backend.produce(topic, [(i % 4, str(i).encode()) for i in range(total)])
    app = backend.app(group_id=group_id, scheduler=SchedulerConfig(partition_quota=50))
    batches: list[list[Record[str]]] = []
    done = anyio.Event()

    @app.subscriber(topic, batch=True, max_batch=120)
    async def handle(records: list[Record[str]]) -> None:
        batches.append(records)
        if sum(map(len, batches)) == total:
            done.set()

    async with app:
        with anyio.fail_after(60):
            await done.wait()

    assert all(1 <= len(b) <= 120 for b in batches)
    assert any(len({r.partition for r in b}) > 1 for b in batches), "no batch spanned partitions"
    offsets: dict[int, list[int]] = defaultdict(list)
    for batch in batches:
        for record in batch:
            offsets[record.partition].append(record.offset)
    assert offsets == {p: list(range(total // 4)) for p in range(4)}
    assert await backend.committed(group_id, topic, 4) == [total // 4] * 4


@pytest.mark.parametrize("concurrency", [1, 4])
async def test_concurrency_overlaps_partitions_but_never_a_partition_with_itself(
    backend: Backend, group_id: str, concurrency: int
) -> None:
    topic = await backend.create_topic(6)
    total = 600
    await backend.produce(topic, [(i % 6, b"x") for i in range(total)])
    app = backend.app(
        group_id=group_id,
        scheduler=SchedulerConfig(concurrency=concurrency, partition_quota=10, max_batch=10),
    )
    active: dict[int, int] = defaultdict(int)
    most_at_once = 0
    order: dict[int, list[int]] = defaultdict(list)
    done = anyio.Event()

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        nonlocal most_at_once
        active[record.partition] += 1
        assert active[record.partition] == 1, "two records of one partition at once"
        most_at_once = max(most_at_once, sum(active.values()))
        await anyio.sleep(0.001)
        order[record.partition].append(record.offset)
        active[record.partition] -= 1
        if sum(map(len, order.values())) == total:
            done.set()

    async with app:
        with anyio.fail_after(60):
            await done.wait()

    assert order == {p: list(range(total // 6)) for p in range(6)}
    assert most_at_once <= concurrency
    if concurrency > 1:
        assert most_at_once > 1, "concurrency never overlapped two partitions"
