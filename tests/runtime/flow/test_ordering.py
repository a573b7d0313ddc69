"""Ordering and concurrency: what may run beside what, on real brokers and MemoryBroker.

``ordering="key"`` keeps each key in offset order while other keys of the same
partition run beside it; ``"partition"`` keeps each partition in order while
partitions run beside each other; a retrying or poison record holds only its key.
"""

from __future__ import annotations

import random
from collections import defaultdict

import anyio
import pytest

from fairstream import Record, RetryPolicy, SchedulerConfig
from tests.support.backends import Backend

QUICK = SchedulerConfig(commit_interval=0.1)


async def _produce_keyed(
    backend: Backend, topic: str, partitions: int, keys: int, per_key: int
) -> int:
    """``per_key`` records of each key ``k<i>`` (value ``k<i>:<seq>``) into partition i % n."""
    for k in range(keys):
        await backend.produce(
            topic,
            [(k % partitions, f"k{k}:{seq}".encode()) for seq in range(per_key)],
            key=f"k{k}".encode(),
        )
    return keys * per_key


async def _wait_committed(
    backend: Backend, group_id: str, topic: str, partitions: int, total: int
) -> list[int | None]:
    """Committed offsets, once they add up to ``total`` (the commit loop runs on its own)."""
    with anyio.move_on_after(10):
        while True:
            found = await backend.committed(group_id, topic, partitions)
            if sum(o or 0 for o in found) == total:
                return found
            await anyio.sleep(0.1)
    return await backend.committed(group_id, topic, partitions)


async def test_key_order_holds_under_variable_latency_and_keys_of_a_partition_overlap(
    backend: Backend, group_id: str
) -> None:
    topic = await backend.create_topic(4)
    total = await _produce_keyed(backend, topic, partitions=4, keys=24, per_key=15)
    app = backend.app(group_id=group_id, scheduler=QUICK)
    seen: dict[bytes, list[int]] = defaultdict(list)
    active_keys: dict[bytes, int] = defaultdict(int)
    active_in_partition: dict[int, int] = defaultdict(int)
    most_in_a_partition = 0
    jitter = random.Random(15)
    done = anyio.Event()

    @app.subscriber(topic, ordering="key", concurrency=64)
    async def handle(record: Record[str]) -> None:
        nonlocal most_in_a_partition
        assert record.key is not None
        active_keys[record.key] += 1
        assert active_keys[record.key] == 1, "two records of one key at once"
        active_in_partition[record.partition] += 1
        most_in_a_partition = max(most_in_a_partition, active_in_partition[record.partition])
        await anyio.sleep(jitter.uniform(0, 0.01))
        seen[record.key].append(int(record.value.split(":")[1]))
        active_keys[record.key] -= 1
        active_in_partition[record.partition] -= 1
        if sum(map(len, seen.values())) == total:
            done.set()

    async with app:
        with anyio.fail_after(60):
            await done.wait()
        committed = await _wait_committed(backend, group_id, topic, 4, total)

    assert seen == {f"k{k}".encode(): list(range(15)) for k in range(24)}
    assert most_in_a_partition > 1, "keys of one partition never ran side by side"
    assert committed == [total // 4] * 4


async def test_partitions_run_side_by_side_by_default_each_in_order(
    backend: Backend, group_id: str
) -> None:
    topic = await backend.create_topic(4)
    total = 400
    await backend.produce(topic, [(i % 4, b"x") for i in range(total)])
    app = backend.app(group_id=group_id, scheduler=QUICK)
    active: dict[int, int] = defaultdict(int)
    most_at_once = 0
    order: dict[int, list[int]] = defaultdict(list)
    done = anyio.Event()

    @app.subscriber(topic)  # default ordering="partition", concurrency=64
    async def handle(record: Record[bytes]) -> None:
        nonlocal most_at_once
        active[record.partition] += 1
        assert active[record.partition] == 1, "two records of one partition at once"
        most_at_once = max(most_at_once, sum(active.values()))
        await anyio.sleep(0.002)
        order[record.partition].append(record.offset)
        active[record.partition] -= 1
        if sum(map(len, order.values())) == total:
            done.set()

    async with app:
        with anyio.fail_after(60):
            await done.wait()

    assert order == {p: list(range(total // 4)) for p in range(4)}
    assert most_at_once > 1, "the partitions of one member waited on each other"


async def test_a_slow_partition_does_not_hold_the_partitions_fetched_with_it(
    backend: Backend, group_id: str
) -> None:
    """One pull brings records of several partitions and wakes one worker. Each
    worker that took a dispatch used to wake the next only after running it, so
    while the first handler ran (here: until the others are done) the other
    partitions' records sat queued beside 63 idle workers."""
    topic = await backend.create_topic(4)
    await backend.produce(topic, [(p, b"x") for p in range(4)])
    app = backend.app(group_id=group_id, scheduler=QUICK)
    first: list[int] = []
    others_done = anyio.Event()
    handled: set[int] = set()

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        if not first:
            first.append(record.partition)
            await others_done.wait()
        handled.add(record.partition)
        if len(handled) == 3 and first[0] not in handled:
            others_done.set()

    async with app:
        with anyio.fail_after(20):
            await others_done.wait()
    assert handled == set(range(4))


async def test_a_record_that_turns_slow_does_not_hold_the_other_partitions(
    backend: Backend, group_id: str
) -> None:
    """A handler that has been quick so far meets one slow record: the partitions
    beside it go on meanwhile. (Letting a quick handler's dispatch take several
    partitions, to save a worker turn each, made them wait that record out.)"""
    partitions, per_partition = 4, 300
    topic = await backend.create_topic(partitions)
    await backend.produce(topic, [(p, b"x") for p in range(partitions)] * per_partition)
    app = backend.app(group_id=group_id, scheduler=QUICK)
    counts = [0] * partitions
    others_done, all_done = anyio.Event(), anyio.Event()
    held: list[bool] = []

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        counts[record.partition] += 1
        if record.partition == 0 and counts[0] == per_partition // 2:
            with anyio.move_on_after(10):
                await others_done.wait()
            held.append(others_done.is_set())
        elif all(counts[p] == per_partition for p in range(1, partitions)):
            others_done.set()
        if counts == [per_partition] * partitions:
            all_done.set()

    async with app:
        with anyio.fail_after(60):
            await all_done.wait()
    assert held == [True], "the other partitions waited for partition 0's slow record"


@pytest.mark.parametrize("ordering", ["key", "none"])
async def test_concurrency_bounds_records_in_flight(
    backend: Backend, group_id: str, ordering: str
) -> None:
    topic = await backend.create_topic(2)
    total = await _produce_keyed(backend, topic, partitions=2, keys=40, per_key=5)
    app = backend.app(group_id=group_id, scheduler=QUICK)
    active = 0
    most = 0
    handled = 0
    done = anyio.Event()

    @app.subscriber(topic, ordering=ordering, concurrency=8)  # type: ignore[call-overload]
    async def handle(record: Record[bytes]) -> None:
        nonlocal active, most, handled
        active += 1
        most = max(most, active)
        await anyio.sleep(0.005)
        active -= 1
        handled += 1
        if handled == total:
            done.set()

    async with app:
        with anyio.fail_after(60):
            await done.wait()

    assert most == 8


async def test_a_retrying_record_blocks_only_its_key_and_a_poison_one_goes_to_the_dlq(
    backend: Backend, group_id: str
) -> None:
    topic = await backend.create_topic(1)
    total = await _produce_keyed(backend, topic, partitions=1, keys=6, per_key=10)
    app = backend.app(
        group_id=group_id, scheduler=QUICK, retry=RetryPolicy(attempts=3, backoff=0.2)
    )
    attempts: dict[str, int] = defaultdict(int)
    finished: list[str] = []
    done = anyio.Event()

    @app.subscriber(topic, ordering="key")
    async def handle(record: Record[str]) -> None:
        attempts[record.value] += 1
        if record.value == "k0:0" and attempts[record.value] < 3:
            raise RuntimeError("flaky: succeeds on the third attempt")
        if record.value == "k1:0":
            raise RuntimeError("poison")
        finished.append(record.value)
        if len(finished) == total - 1:
            done.set()

    async with app:
        with anyio.fail_after(60):
            await done.wait()
        committed = await _wait_committed(backend, group_id, topic, 1, total)

    # k0:0 retried for 0.6 s: the other keys finished meanwhile, k0's later records waited.
    retried_at = finished.index("k0:0")
    assert {f"k{k}:9" for k in range(2, 6)} <= set(finished[:retried_at])
    assert [v for v in finished if v.startswith("k0:")] == [f"k0:{s}" for s in range(10)]
    # The poison record went to the DLQ; its key went on after it, the others never waited.
    assert [v for v in finished if v.startswith("k1:")] == [f"k1:{s}" for s in range(1, 10)]
    assert attempts["k1:0"] == 3
    (dead,) = await backend.read_all(f"{topic}.dlq", 1, expected=1)
    assert dead.value == b"k1:0"
    assert committed == [total]


async def test_manual_commit_marks_only_that_record_finished_under_key_order(
    backend: Backend, group_id: str
) -> None:
    topic = await backend.create_topic(1)
    total = await _produce_keyed(backend, topic, partitions=1, keys=3, per_key=10)
    app = backend.app(group_id=group_id, scheduler=QUICK, ack="manual")
    handled = 0
    done = anyio.Event()

    @app.subscriber(topic, ordering="key")
    async def handle(record: Record[str]) -> None:
        nonlocal handled
        if record.value != "k1:0":  # offset 10: handled, never acknowledged
            assert await app.commit(record)
        handled += 1
        if handled == total:
            done.set()

    async with app:
        with anyio.fail_after(60):
            await done.wait()

    # Everything from offset 10 on is acknowledged but 10; the group commits 10.
    assert await backend.committed(group_id, topic, 1) == [10]


async def test_a_record_that_does_not_decode_goes_to_the_dlq_and_its_key_goes_on(
    backend: Backend, group_id: str
) -> None:
    """Under ``ordering="key"`` a value the decoder refuses is dead-lettered once (no
    retry can fix it), finished like a handled record, and its key's next records run."""
    topic = await backend.create_topic(1)
    values = [b'{"n": 0}', b"{not json", b'{"n": 2}', b'{"n": 3}']
    await backend.produce(topic, [(0, v) for v in values], key=b"k")
    await backend.produce(topic, [(0, b'{"n": 9}')], key=b"other")
    app = backend.app(group_id=group_id, scheduler=QUICK)
    seen: list[tuple[bytes | None, int]] = []
    done = anyio.Event()

    @app.subscriber(topic, ordering="key")
    async def handle(record: Record[dict[str, int]]) -> None:
        seen.append((record.key, record.value["n"]))
        if len(seen) == 4:
            done.set()

    async with app:
        with anyio.fail_after(60):
            await done.wait()
        committed = await _wait_committed(backend, group_id, topic, 1, 5)

    assert [n for key, n in seen if key == b"k"] == [0, 2, 3]
    assert (b"other", 9) in seen
    (dead,) = await backend.read_all(f"{topic}.dlq", 1, expected=1)
    assert dead.value == b"{not json"
    assert committed == [5]
