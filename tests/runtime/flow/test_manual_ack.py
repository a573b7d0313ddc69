"""``ack="manual"``: the group's offset is exactly what the handler acknowledged."""

from __future__ import annotations

import anyio
import structlog

from fairstream import Record, SchedulerConfig
from tests.support.backends import Backend

QUICK = SchedulerConfig(commit_interval=0.1)


async def test_commit_stops_at_the_acknowledged_record_not_at_what_was_handled(
    backend: Backend, group_id: str
) -> None:
    """A buffering handler saw 0-49 and acknowledges 10: the group must be at 11, not 50."""
    topic = await backend.create_topic(1)
    await backend.produce(topic, [(0, str(i).encode()) for i in range(50)])
    app = backend.app(group_id=group_id, ack="manual", scheduler=QUICK)
    seen: list[Record[bytes]] = []
    acknowledged: list[bool] = []
    done = anyio.Event()

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        seen.append(record)
        if record.offset == 49:
            acknowledged.append(await app.commit(seen[10]))
            done.set()

    async with app:
        with anyio.fail_after(30):
            await done.wait()
        await anyio.sleep(0.3)  # periodic commits run meanwhile: they must not move it
    assert acknowledged == [True]
    assert await backend.committed(group_id, topic, 1) == [11]


async def test_highest_acknowledgement_wins_and_earlier_ones_do_not_move_it_back(
    backend: Backend, group_id: str
) -> None:
    topic = await backend.create_topic(1)
    await backend.produce(topic, [(0, str(i).encode()) for i in range(30)])
    app = backend.app(group_id=group_id, ack="manual", scheduler=QUICK)
    seen: list[Record[bytes]] = []
    done = anyio.Event()

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        seen.append(record)
        if record.offset == 29:
            await app.commit(seen[20])
            await app.commit(seen[5])
            done.set()

    async with app:
        with anyio.fail_after(30):
            await done.wait()
    assert await backend.committed(group_id, topic, 1) == [21]


async def test_commit_of_a_partition_not_owned_says_so(backend: Backend, group_id: str) -> None:
    topic = await backend.create_topic(1)
    await backend.produce(topic, [(0, b"x")])
    app = backend.app(group_id=group_id, ack="manual", scheduler=QUICK)
    answers: list[bool] = []
    done = anyio.Event()

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        answers.append(await app.commit(record._replace(partition=7)))
        done.set()

    with structlog.testing.capture_logs() as logs:
        async with app:
            with anyio.fail_after(30):
                await done.wait()
    assert answers == [False]
    events = [e for e in logs if e["event"] == "commit_not_owned"]
    assert [(e["topic"], e["partition"], e["offset"]) for e in events] == [(topic, 7, 0)]
    assert await backend.committed(group_id, topic, 1) == [None]
