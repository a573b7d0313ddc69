"""The fair scheduler as pure data: quotas, order, round-robin, no starvation."""

from __future__ import annotations

import gc
import weakref

from hypothesis import given, settings
from hypothesis import strategies as st

from fairstream.runtime.flow._scheduler import FairScheduler, PartitionQueue

TP = tuple[str, int]


def _scheduler(quota: int, max_batch: int, partitions: int) -> FairScheduler[int]:
    scheduler: FairScheduler[int] = FairScheduler(quota=quota)
    for p in range(partitions):
        scheduler.add_partition(("t", p), lane=0, max_batch=max_batch)
    return scheduler


def test_backlog_gets_one_quota_per_round() -> None:
    scheduler = _scheduler(quota=10, max_batch=1_000, partitions=3)
    scheduler.push(("t", 0), list(range(1_000)), nbytes=1_000)
    scheduler.push(("t", 1), list(range(5)), nbytes=5)
    scheduler.push(("t", 2), list(range(5)), nbytes=5)
    dispatch = scheduler.next_dispatch()
    assert dispatch is not None
    assert [(s.tp[1], len(s.records)) for s in dispatch.slices] == [(0, 10), (1, 5), (2, 5)]


class _Held:
    """A record stand-in that can be watched for its end."""


def test_records_taken_from_part_of_a_chunk_are_not_kept_alive_by_the_queue() -> None:
    """A handled record dies with its dispatch, not when the rest of its chunk is taken:
    one kept a round of the ring longer is promoted by the garbage collector, which
    then walks it at every full collection (benchmarks/notes/per_record_cost.md)."""
    queue: PartitionQueue[_Held] = PartitionQueue(("t", 0), lane=0)
    chunk = [_Held() for _ in range(4)]
    first = weakref.ref(chunk[0])
    queue.push(chunk, nbytes=4)
    del chunk
    taken = queue.take(3)
    assert len(taken) == 3 and queue.count == 1
    del taken
    gc.collect()
    assert first() is None, "the queue still holds a record it handed over"
    assert len(queue.take(5)) == 1 and queue.count == 0


def test_a_partition_alone_takes_what_the_dispatch_has_room_for() -> None:
    """The quota shares a dispatch among partitions that compete; alone, one takes more."""
    scheduler = _scheduler(quota=10, max_batch=300, partitions=2)
    scheduler.push(("t", 0), list(range(500)), nbytes=500)
    alone = scheduler.next_dispatch()
    assert alone is not None and [len(s.records) for s in alone.slices] == [300]
    scheduler.release(alone)
    scheduler.push(("t", 1), list(range(50)), nbytes=50)
    shared = scheduler.next_dispatch()
    assert shared is not None
    assert [(s.tp[1], len(s.records)) for s in shared.slices] == [(0, 10), (1, 50)]

    single = _scheduler(quota=10, max_batch=300, partitions=2)
    single.configure_lane(0, single=True, limit=2)
    single.push(("t", 0), list(range(500)), nbytes=500)
    single.push(("t", 1), list(range(50)), nbytes=50)
    first, second = single.next_dispatch(), single.next_dispatch()
    assert first is not None and second is not None
    assert [len(s.records) for d in (first, second) for s in d.slices] == [10, 50]


def test_a_partition_in_flight_is_not_dispatched_again_until_released() -> None:
    scheduler = _scheduler(quota=2, max_batch=2, partitions=1)
    scheduler.push(("t", 0), [0, 1, 2, 3], nbytes=4)
    first = scheduler.next_dispatch()
    assert first is not None and first.slices[0].records == [0, 1]
    assert scheduler.next_dispatch() is None
    scheduler.release(first)
    second = scheduler.next_dispatch()
    assert second is not None and second.slices[0].records == [2, 3]


def test_revoked_partition_loses_its_queue_and_never_comes_back() -> None:
    scheduler = _scheduler(quota=5, max_batch=5, partitions=2)
    scheduler.push(("t", 0), [0, 1], nbytes=2)
    scheduler.push(("t", 1), [0, 1], nbytes=2)
    scheduler.revoke([("t", 0)])
    dispatch = scheduler.next_dispatch()
    assert dispatch is not None and [s.tp for s in dispatch.slices] == [("t", 1)]
    assert scheduler.buffered == 0 and scheduler.buffered_bytes == 0


@settings(max_examples=150, deadline=None)
@given(
    quota=st.integers(1, 20),
    max_batch=st.integers(1, 60),
    pushes=st.lists(st.tuples(st.integers(0, 4), st.integers(1, 40)), min_size=1, max_size=30),
    concurrency=st.integers(1, 3),
)
def test_every_record_dispatched_once_in_order_within_quota(
    quota: int, max_batch: int, pushes: list[tuple[int, int]], concurrency: int
) -> None:
    scheduler = _scheduler(quota, max_batch, partitions=5)
    next_value = dict.fromkeys(range(5), 0)
    expected: dict[int, list[int]] = {p: [] for p in range(5)}
    for partition, count in pushes:
        values = list(range(next_value[partition], next_value[partition] + count))
        next_value[partition] += count
        expected[partition] += values
        scheduler.push(("t", partition), values, nbytes=count)

    seen: dict[int, list[int]] = {p: [] for p in range(5)}
    in_flight = []
    while True:
        while len(in_flight) < concurrency and (dispatch := scheduler.next_dispatch()):
            assert len(dispatch) <= max_batch
            partitions = [s.tp for s in dispatch.slices]
            assert len(partitions) == len(set(partitions)), "a partition twice in a dispatch"
            busy = {s.tp for d in in_flight for s in d.slices}
            assert not busy & set(partitions), "a partition in two dispatches at once"
            for i, piece in enumerate(dispatch.slices):
                assert len(piece.records) >= 1
                if len(piece.records) > quota:  # only the last, when no other was ready
                    assert i == len(dispatch.slices) - 1
                    waiting = {tp for tp, queue in scheduler.queues.items() if queue.count}
                    assert waiting <= busy | set(partitions)
                seen[piece.tp[1]] += piece.records
            in_flight.append(dispatch)
        if not in_flight:
            break
        scheduler.release(in_flight.pop(0))
    assert seen == expected
    assert scheduler.buffered == 0


@settings(max_examples=100, deadline=None)
@given(backlog=st.integers(100, 5_000), small=st.integers(1, 50), quota=st.integers(1, 50))
def test_small_partitions_finish_within_their_rounds(backlog: int, small: int, quota: int) -> None:
    """No starvation: a small partition needs ceil(small/quota) rounds, whatever the backlog."""
    scheduler = _scheduler(quota, max_batch=10 * quota, partitions=4)
    scheduler.push(("t", 0), list(range(backlog)), nbytes=backlog)
    for p in (1, 2, 3):
        scheduler.push(("t", p), list(range(small)), nbytes=small)
    backlog_served = 0
    remaining = 3 * small
    while remaining:
        dispatch = scheduler.next_dispatch()
        assert dispatch is not None
        for piece in dispatch.slices:
            if piece.tp[1] == 0:
                backlog_served += len(piece.records)
            else:
                remaining -= len(piece.records)
        scheduler.release(dispatch)
    rounds = -(-small // quota)
    assert backlog_served <= rounds * quota


def test_a_single_lane_dispatches_one_partition_at_a_time_up_to_its_limit() -> None:
    scheduler = _scheduler(quota=10, max_batch=1_000, partitions=3)
    scheduler.configure_lane(0, single=True, limit=2)
    for p in range(3):
        scheduler.push(("t", p), list(range(5)), nbytes=5)
    first, second = scheduler.next_dispatch(), scheduler.next_dispatch()
    assert first is not None and second is not None
    assert [[s.tp for s in d.slices] for d in (first, second)] == [[("t", 0)], [("t", 1)]]
    assert scheduler.next_dispatch() is None, "a third dispatch passed the lane's limit"
    scheduler.release(first)
    third = scheduler.next_dispatch()
    assert third is not None and [s.tp for s in third.slices] == [("t", 2)]
