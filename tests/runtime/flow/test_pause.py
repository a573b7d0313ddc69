"""``app.pause(topic, partition)`` / ``app.resume(...)`` on every backend.

A paused partition is not fetched while the others are, keeps its assignment (no
rebalance, its committed offset stays), still hands out what its queue held, and
after ``resume`` delivers the rest in order, each record once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import anyio
import pytest

from fairstream import App, ConfigError, Record, SchedulerConfig
from tests.support.backends import Backend

LIMIT = 60


async def _until(condition: Callable[[], bool], what: str) -> None:
    try:
        with anyio.fail_after(LIMIT):
            while not condition():  # noqa: ASYNC110 (a condition, not an event)
                await anyio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"waited {LIMIT} s for {what}") from None


async def test_a_paused_partition_waits_keeps_its_assignment_and_resumes_in_order(
    backend: Backend, group_id: str
) -> None:
    topic = await backend.create_topic(2)
    app = backend.app(
        group_id=group_id,
        instance_id=backend.instance_id(group_id),
        scheduler=SchedulerConfig(partition_quota=1, max_batch=1, commit_interval=0.1),
    )
    seen: dict[int, list[int]] = defaultdict(list)
    hold = anyio.Event()

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        if record.partition == 0 and record.offset == 5:
            await hold.wait()  # so that what follows it is queued when the pause comes
        seen[record.partition].append(record.offset)

    def queued(partition: int) -> int:
        return sum(p.queue_depth for p in app.stats().partitions if p.partition == partition)

    async with app:
        with anyio.fail_after(LIMIT):
            await app.wait_ready()
        await backend.produce(topic, [(0, b"a")] * 5 + [(1, b"a")] * 5)
        await _until(lambda: len(seen[0]) == 5 and len(seen[1]) == 5, "the first records")
        rebalances = app.stats().rebalances

        # Records 5-9 of partition 0 are fetched; 5 is in its handler, 6-9 queued.
        await backend.produce(topic, [(0, b"b")] * 5)
        await _until(lambda: queued(0) == 4, "records 6-9 queued")
        app.pause(topic, 0)
        hold.set()
        await _until(lambda: len(seen[0]) == 10, "the queued records")  # still handled

        # Nothing more of partition 0 while partition 1 is read, three rounds over.
        await backend.produce(topic, [(0, b"c")] * 5)
        for round_ in range(3):
            await backend.produce(topic, [(1, b"c")] * 5)
            await _until(lambda n=10 + 5 * round_: len(seen[1]) == n, "partition 1")
        assert seen[0] == list(range(10))
        assert [p.partition for p in app.stats().partitions] == [0, 1]  # still ours
        assert app.stats().rebalances == rebalances

        app.resume(topic, 0)
        await _until(lambda: len(seen[0]) == 15, "partition 0 after resume")
        app.resume(topic, 0)  # resuming what is not paused does nothing
    assert seen[0] == list(range(15))
    assert seen[1] == list(range(20))
    assert await backend.committed(group_id, topic, 2) == [15, 20]


async def test_pause_names_what_is_wrong() -> None:
    app = App(group_id="g", bootstrap="127.0.0.1:9")

    @app.subscriber("orders")
    async def handle(record: Record[bytes]) -> None: ...

    with pytest.raises(ConfigError, match="is not running"):
        app.pause("orders", 0)
    with pytest.raises(ConfigError, match=r"'payments'.*has no subscriber"):
        app.pause("payments", 0)
    with pytest.raises(ConfigError, match=r"partition.*not a partition number"):
        app.resume("orders", -1)


async def test_the_pause_outlives_a_rebalance_that_gives_the_partition_back(
    backend: Backend, group_id: str
) -> None:
    topic, other = await backend.create_topic(2), await backend.create_topic(1)
    seen: dict[int, list[int]] = defaultdict(list)

    def member(name: str, subscribed: str) -> App:
        app = backend.app(
            group_id=group_id,
            instance_id=backend.instance_id(f"{group_id}-{name}"),
            scheduler=SchedulerConfig(commit_interval=0.1),
        )

        @app.subscriber(subscribed)
        async def handle(record: Record[bytes]) -> None:
            if record.topic == topic:
                seen[record.partition].append(record.offset)

        return app

    first = member("first", topic)
    async with first:
        with anyio.fail_after(LIMIT):
            await first.wait_ready()
        first.pause(topic, 0)
        rebalances = first.stats().rebalances
        # A member of another topic joins: the group rebalances, and the first member
        # gets both partitions of its topic again (revoked and assigned anew).
        async with member("second", other):
            await _until(lambda: first.stats().rebalances > rebalances, "the rebalance")
            await backend.produce(topic, [(0, b"a")] * 5)
            for round_ in range(3):
                await backend.produce(topic, [(1, b"a")] * 5)
                await _until(lambda n=5 + 5 * round_: len(seen[1]) == n, "partition 1")
            assert seen[0] == []
            first.resume(topic, 0)
            await _until(lambda: len(seen[0]) == 5, "partition 0 after resume")
    assert seen[0] == list(range(5))
