"""A cancelled dispatch ends there, and no other: a worker's cancel scope outlives its
dispatches (one scope a worker, not one a dispatch), so these pin what a scope of
each dispatch's own gave. The dispatch room alone, with its real scheduler, runner and
offsets, and one worker, so the next dispatch runs on the same scope."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel

from fairstream import Record
from fairstream.runtime._record import TP
from fairstream.runtime._stats import StatsRecorder
from fairstream.runtime.flow._handling import DispatchRunner
from fairstream.runtime.flow._offsets import OffsetTracker
from fairstream.runtime.flow._scheduler import FairScheduler
from fairstream.runtime.flow._workers import Workers
from tests.support.subscribers import no_dead_letter, plain_subscriber

A: TP = ("t", 0)
B: TP = ("t", 1)


def _records(tp: TP, count: int) -> list[Record[bytes]]:
    return [Record(tp[0], tp[1], offset, None, b"v", (), 0, b"v") for offset in range(count)]


class _Room:
    """One worker over partitions A and B, and the offsets behind it."""

    def __init__(self, handler: Callable[[Record[bytes]], Awaitable[None]]) -> None:
        self.offsets = OffsetTracker()
        self.scheduler: FairScheduler[Record[bytes]] = FairScheduler(quota=100)
        self.scheduler.configure_lane(0, single=True, limit=1)
        subscriber = plain_subscriber(handler)
        for tp in (A, B):
            self.offsets.assign(tp, None)
            self.scheduler.add_partition(tp, 0, 1000)
        self.workers = Workers(
            scheduler=self.scheduler,
            runner=DispatchRunner(self.offsets, no_dead_letter, StatsRecorder()),
            subscribers=[subscriber],
            taken=lambda _: None,
            replayed=lambda: None,
            fail=lambda exc: None,
            room=200,
        )

    def push(self, tp: TP, count: int) -> None:
        self.scheduler.push(tp, _records(tp, count), 100 * count)
        self.workers.wake()

    async def run(self, pushes: list[tuple[TP, int]], done: anyio.Event) -> None:
        """One worker, ``pushes`` in order, until ``done`` (within 5 s)."""
        async with anyio.create_task_group() as tasks:
            self.workers.start(tasks, 1)
            for tp, count in pushes:
                self.push(tp, count)
            with anyio.fail_after(5):
                await done.wait()
            self.workers.stop()


async def test_a_dispatch_cancelled_in_its_handler_ends_there_and_the_next_runs_whole() -> None:
    handled: list[TP] = []
    held = anyio.Event()
    b_done = anyio.Event()

    async def handle(record: Record[bytes]) -> None:
        tp = (record.topic, record.partition)
        if tp == A and record.offset == 1:
            held.set()
            await anyio.sleep_forever()
        await anyio.lowlevel.checkpoint()
        handled.append(tp)
        if tp == B and record.offset == 4:
            b_done.set()

    room = _Room(handle)
    async with anyio.create_task_group() as tasks:
        room.workers.start(tasks, 1)
        room.push(A, 3)
        await held.wait()
        (running,) = room.workers.running_on({A})
        running.cancel()
        await running.wait()
        room.push(B, 5)
        with anyio.fail_after(5):
            await b_done.wait()
        room.workers.stop()
    assert handled == [A] + [B] * 5
    assert room.offsets.next_commit(A) == 1  # the record in hand stays unfinished
    assert room.offsets.next_commit(B) == 5


async def test_a_dispatch_cancelled_as_it_ends_leaves_the_next_one_alone() -> None:
    handled: list[TP] = []
    b_done = anyio.Event()
    room: _Room

    async def handle(record: Record[bytes]) -> None:
        tp = (record.topic, record.partition)
        if tp == A and record.offset == 2:
            # Cancelled with no await left in the dispatch: the cancel must not
            # reach the worker's next dispatch, whose handler awaits.
            (running,) = room.workers.running_on({A})
            running.cancel()
        else:
            await anyio.lowlevel.checkpoint()
        handled.append(tp)
        if tp == B and record.offset == 4:
            b_done.set()

    room = _Room(handle)
    await room.run([(A, 3), (B, 5)], b_done)
    assert handled == [A] * 3 + [B] * 5
    assert room.offsets.next_commit(B) == 5


async def test_cancelling_a_dispatch_that_ended_cancels_nothing() -> None:
    handled: list[TP] = []
    b_done = anyio.Event()
    room: _Room
    ended = []

    async def handle(record: Record[bytes]) -> None:
        tp = (record.topic, record.partition)
        if tp == A:
            ended.extend(room.workers.running_on({A}))
        elif record.offset == 1:
            # A revoke that timed out as A's dispatch ended: B's, on the same worker's
            # scope, runs on.
            ended[0].cancel()
        await anyio.lowlevel.checkpoint()
        handled.append(tp)
        if tp == B and record.offset == 4:
            b_done.set()

    room = _Room(handle)
    await room.run([(A, 1), (B, 5)], b_done)
    assert handled == [A] + [B] * 5
    assert room.offsets.next_commit(B) == 5
