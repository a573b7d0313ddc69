"""The engine on every backend: delivery, order, commits."""

from __future__ import annotations

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
