"""The engine on every backend: delivery, order, commits."""

from __future__ import annotations

import asyncio
import time

import anyio
import pytest

from fairstream import Record, SchedulerConfig
from tests.support.backends import Backend


@pytest.mark.parametrize("assignor", ["fair", "lag"])
async def test_every_record_handled_once_in_partition_order_and_committed(
    backend: Backend, group_id: str, assignor: str
) -> None:
    topic = await backend.create_topic(4)
    total = 2_000
    sent = [(i % 4, f"{i % 4}:{i // 4}".encode()) for i in range(total)]
    await backend.produce(topic, sent)

    app = backend.app(
        group_id=group_id,
        assignor=assignor,
        scheduler=SchedulerConfig(partition_quota=50, commit_interval=0.2),
    )
    seen: list[Record[str]] = []
    all_seen = anyio.Event()

    @app.subscriber(topic)
    async def handle(record: Record[str]) -> None:
        seen.append(record)
        if len(seen) == total:
            all_seen.set()

    async with app:
        with anyio.fail_after(60):
            await all_seen.wait()

    assert sorted(r.value for r in seen) == sorted(v.decode() for _, v in sent)
    for partition in range(4):
        offsets = [r.offset for r in seen if r.partition == partition]
        assert offsets == list(range(total // 4)), f"partition {partition} out of order"
    assert await backend.committed(group_id, topic, 4) == [total // 4] * 4


async def test_a_handler_that_never_awaits_still_lets_other_tasks_run(
    backend: Backend, group_id: str
) -> None:
    """Workers run dispatches back to back while their handler never suspends, but let
    the event loop turn at least every millisecond: other tasks (the fetcher, the
    commits, the group's heartbeat, this test's watcher) run while the backlog drains."""
    topic = await backend.create_topic(4)
    total = 6_000  # three times max_buffered_records: the fetcher must run in between
    await backend.produce(topic, [(i % 4, b"x") for i in range(total)])
    # One worker: several would each run a dispatch in the same turn of the loop.
    app = backend.app(group_id=group_id, scheduler=SchedulerConfig(concurrency=1))
    handled = 0
    all_seen = anyio.Event()

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        nonlocal handled
        spin_until = time.perf_counter() + 20e-6  # busy, never awaiting
        while time.perf_counter() < spin_until:
            pass
        handled += 1
        if handled == total:
            all_seen.set()

    seen_between: set[int] = set()

    async def watch() -> None:
        while not all_seen.is_set():
            if 0 < handled < total:
                seen_between.add(handled)
            await asyncio.sleep(0)

    async with app, anyio.create_task_group() as tasks:
        tasks.start_soon(watch)
        with anyio.fail_after(60):
            await all_seen.wait()

    # 6,000 records of 20 us are 120 ms of handling: 60 dispatches of 2 ms, a turn after
    # each; a worker that never let the loop turn would give one per 2,000 records.
    assert len(seen_between) >= 20, f"the loop turned {len(seen_between)} times while handling"
