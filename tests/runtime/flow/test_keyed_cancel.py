"""A cancel of a keyed partition's chains (a revoke past its timeout, a lost
partition) ends those chains and no other, without a broker.

Chains run as tasks of the lane, and a task that ran its chain out waits as a spare
for the next new chain of *any* partition (``_keyed.py``): the cancel reaches a task
through its own scope while it runs the partition's chain, and a task whose scope
was cancelled must never serve another chain, which that scope would cancel at its
first await.
"""

from __future__ import annotations

import anyio
import anyio.lowlevel

from fairstream import Record, SchedulerConfig
from fairstream.errors import FairstreamError
from fairstream.runtime._record import TP
from fairstream.runtime._stats import StatsRecorder
from fairstream.runtime.flow._handling import DispatchRunner
from fairstream.runtime.flow._keyed import KeyedLane
from fairstream.runtime.flow._offsets import OffsetTracker
from fairstream.runtime.flow._scheduler import Dispatch, Slice
from tests.support.subscribers import no_dead_letter, plain_subscriber

A: TP = ("t", 0)
B: TP = ("t", 1)


def _dispatch(tp: TP, offset: int, key: bytes) -> Dispatch[Record[bytes]]:
    return Dispatch(0, [Slice(tp, [Record(tp[0], tp[1], offset, key, b"v", (), 0)])])


async def test_a_cancelled_partition_ends_its_own_chains_and_its_tasks_serve_no_other() -> None:
    offsets = OffsetTracker()
    for tp in (A, B):
        offsets.assign(tp, committed=None)
    started: dict[tuple[int, int], anyio.Event] = {}
    release_b = anyio.Event()
    cancelled: list[tuple[int, int]] = []
    handled: list[tuple[int, int]] = []
    all_handled = anyio.Event()

    async def handle(record: Record[bytes]) -> None:
        at = (record.partition, record.offset)
        started.setdefault(at, anyio.Event()).set()
        try:
            if at == (0, 0):
                await anyio.sleep_forever()
            elif at == (1, 1):
                await release_b.wait()
            else:
                await anyio.lowlevel.checkpoint()
        except anyio.get_cancelled_exc_class():
            cancelled.append(at)
            raise
        handled.append(at)
        if len(handled) == 3:
            all_handled.set()

    async def reached(at: tuple[int, int]) -> None:
        await started.setdefault(at, anyio.Event()).wait()

    subscriber = plain_subscriber(handle, SchedulerConfig(ordering="key", concurrency=8))
    runner = DispatchRunner(offsets, no_dead_letter, StatsRecorder())
    lane = KeyedLane(subscriber, runner, room=100, owned=lambda tp: True, fail=_no_failure)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            lane.start(tasks)
            await lane.admit(_dispatch(A, 0, b"a"))  # stays in its handler
            await lane.admit(_dispatch(B, 0, b"b"))  # runs out: its task parks as a spare
            await reached((0, 0))
            await reached((1, 0))
            await lane.admit(_dispatch(B, 1, b"s"))  # in its handler during A's cancel
            await reached((1, 1))
            await anyio.wait_all_tasks_blocked()

            (running,) = lane.running_on([A])
            running.cancel()
            await running.wait()
            assert cancelled == [(0, 0)]
            # The task that ran A's chain parks last if it parks at all, and a new
            # chain takes the last parked spare: this one must not run on that scope.
            await lane.admit(_dispatch(B, 2, b"c"))
            await reached((1, 2))
            release_b.set()
            await all_handled.wait()
            tasks.cancel_scope.cancel()
    assert cancelled == [(0, 0)]
    assert sorted(handled) == [(1, 0), (1, 1), (1, 2)]
    assert offsets.next_commit(A) == 0  # the cancelled record stays unfinished
    assert offsets.next_commit(B) == 3


def _no_failure(error: FairstreamError) -> None:
    raise AssertionError(f"no record fails here: {error!r}")


async def test_a_chain_handed_to_a_spare_and_cancelled_before_it_starts_runs_nothing() -> None:
    offsets = OffsetTracker()
    for tp in (A, B):
        offsets.assign(tp, committed=None)
    started: list[tuple[int, int]] = []
    b_done = anyio.Event()

    async def handle(record: Record[bytes]) -> None:
        started.append((record.partition, record.offset))
        await anyio.lowlevel.checkpoint()
        if record.partition == 1:
            b_done.set()

    subscriber = plain_subscriber(handle, SchedulerConfig(ordering="key", concurrency=8))
    runner = DispatchRunner(offsets, no_dead_letter, StatsRecorder())
    lane = KeyedLane(subscriber, runner, room=100, owned=lambda tp: True, fail=_no_failure)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            lane.start(tasks)
            await lane.admit(_dispatch(B, 0, b"b"))
            await b_done.wait()
            await anyio.wait_all_tasks_blocked()  # B's task parked as a spare
            # Handed to the spare, and cancelled before the spare runs again.
            await lane.admit(_dispatch(A, 0, b"a"))
            (running,) = lane.running_on([A])
            running.cancel()
            await running.wait()
            assert lane.running() == []
            tasks.cancel_scope.cancel()
    assert started == [(1, 0)]
    assert offsets.next_commit(A) == 0
    assert offsets.next_commit(B) == 1
