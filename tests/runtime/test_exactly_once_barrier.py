"""Exactly-once's commit barrier for keyed lanes, without a broker (issue 41).

A commit of a keyed partition holds it (``Barrier.hold``): no record of it starts
in a handler, those in one finish, and only then does the commit read the
watermark and offset map, so every output in the transaction belongs to a record
the commit marks done. The other partitions run on meanwhile.
"""

from __future__ import annotations

from collections import Counter

import anyio
import pytest

from fairstream import Record, SchedulerConfig
from fairstream.runtime._record import TP
from fairstream.runtime._stats import StatsRecorder
from fairstream.runtime.flow._barrier import Barrier, Gate
from fairstream.runtime.flow._handling import DispatchRunner
from fairstream.runtime.flow._keyed import KeyedLane
from fairstream.runtime.flow._offsets import OffsetTracker
from fairstream.runtime.flow._scheduler import Dispatch, Slice
from tests.support.subscribers import no_dead_letter, plain_subscriber

HELD, OTHER = ("t", 0), ("t", 1)
PER_PARTITION = 400


def _records(tp: TP) -> list[Record[bytes]]:
    return [
        Record(tp[0], tp[1], offset, b"k%d" % (offset % 16), b"v", (), 0)
        for offset in range(PER_PARTITION)
    ]


async def test_a_closed_gate_waits_for_the_runs_in_it_and_closers_nest() -> None:
    gate = Gate()
    gate.enter()
    gate.close()
    gate.close()
    drained = False

    async def drain() -> None:
        nonlocal drained
        await gate.drained()
        drained = True

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(drain)
        await anyio.wait_all_tasks_blocked()
        assert not drained
        gate.leave()
    assert drained
    gate.open()
    assert gate.closed  # the second closer still holds it
    gate.open()
    assert not gate.closed
    with anyio.fail_after(1):
        await gate.wait_open()


@pytest.mark.parametrize("ordering", ["key", "none"])
async def test_a_held_partition_starts_nothing_and_its_handlers_finish_first(
    ordering: str,
) -> None:
    offsets = OffsetTracker()
    for tp in (HELD, OTHER):
        offsets.assign(tp, committed=None)
    started: Counter[TP] = Counter()
    ended: Counter[TP] = Counter()
    waiting: dict[tuple[TP, int], anyio.Event] = {}

    async def handle(record: Record[bytes]) -> None:
        tp = (record.topic, record.partition)
        started[tp] += 1
        await anyio.sleep(0.002)
        ended[tp] += 1
        if (reached := waiting.pop((tp, ended[tp]), None)) is not None:
            reached.set()

    async def ended_at_least(tp: TP, count: int) -> None:
        if ended[tp] < count:
            await waiting.setdefault((tp, count), anyio.Event()).wait()

    subscriber = plain_subscriber(
        handle,
        SchedulerConfig(ordering=ordering, concurrency=8),  # type: ignore[arg-type]
    )

    runner = DispatchRunner(offsets, no_dead_letter, StatsRecorder())
    barrier = Barrier(["t"])
    failures: list[Exception] = []
    lane = KeyedLane(
        subscriber,
        runner,
        room=PER_PARTITION,
        owned=lambda tp: True,
        fail=failures.append,
        barrier=barrier,
    )
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tasks:
            lane.start(tasks)
            for tp in (HELD, OTHER):
                await lane.admit(Dispatch(0, [Slice(tp, _records(tp))]))
            await ended_at_least(HELD, 50)
            async with barrier.hold([HELD], limit=30) as drained:
                assert set(drained.gates) == {HELD}
                # Every record of HELD that started has finished, and is marked.
                assert started[HELD] == ended[HELD]
                done = [o for o in range(PER_PARTITION) if offsets.finished(HELD, o)]
                assert len(done) == ended[HELD]
                # While held, OTHER goes on and HELD starts nothing.
                before, other_before = started[HELD], ended[OTHER]
                await ended_at_least(OTHER, other_before + 50)
                assert started[HELD] == before
            await ended_at_least(HELD, PER_PARTITION)
            await ended_at_least(OTHER, PER_PARTITION)
            tasks.cancel_scope.cancel()
    assert not failures
    assert offsets.next_commit(HELD) == PER_PARTITION


async def test_a_handler_that_outlasts_the_limit_leaves_its_partition_held_for_later() -> None:
    barrier = Barrier(["t"])
    slow, idle = barrier.gate(HELD), barrier.gate(OTHER)
    slow.enter()  # a handler call that outlasts the limit
    with anyio.fail_after(5):
        async with barrier.hold([HELD, OTHER], limit=0.05) as held:
            assert set(held.gates) == {OTHER}  # committed without waiting any longer
        assert not idle.closed
        assert slow.closed  # still held: no record of it starts before its commit
        slow.leave()
        async with barrier.hold([HELD, OTHER], limit=1) as held:  # the next tick
            assert set(held.gates) == {HELD, OTHER}
    assert not slow.closed
    assert not idle.closed


async def test_a_held_over_partition_the_next_hold_does_not_name_opens() -> None:
    barrier = Barrier(["t"])
    barrier.gate(HELD).enter()
    with anyio.fail_after(5):
        async with barrier.hold([HELD], limit=0.01):
            pass
        assert barrier.gate(HELD).closed
        async with barrier.hold([OTHER], limit=1):  # HELD was revoked meanwhile
            pass
    assert not barrier.gate(HELD).closed


def test_what_a_commit_counts_as_finished_and_when_it_lacks_its_map() -> None:
    offsets = OffsetTracker()
    offsets.assign(HELD, committed=None)
    records = _records(HELD)[:10]
    offsets.admit_all(HELD, records)
    offsets.finish(HELD, 0)
    offsets.finish(HELD, 5)
    assert [o for o in range(10) if offsets.finished(HELD, o)] == [0, 5]
    offsets.pending()
    assert not offsets.map_missing(HELD)  # 5 is in the map above the watermark 1
    offsets.maps = False
    assert offsets.map_missing(HELD)  # without the map, 5's outputs would commit unmarked
    for record in records:
        offsets.finish(HELD, record.offset)
    assert not offsets.map_missing(HELD)  # all below the watermark: nothing to mark


async def test_a_partition_let_go_runs_again_while_the_others_stay_held() -> None:
    barrier = Barrier(["t"])
    with anyio.fail_after(5):
        async with barrier.hold([HELD, OTHER], limit=1) as held:
            held.let_go(HELD)  # its commit ended: it need not wait for the others'
            assert not barrier.gate(HELD).closed
            assert barrier.gate(OTHER).closed
    assert not barrier.gate(OTHER).closed
