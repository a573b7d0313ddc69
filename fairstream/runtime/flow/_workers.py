"""The dispatch room: ``concurrency`` workers take dispatches from the fair scheduler.

Each worker takes the next dispatch, tells the fetcher (``taken``: the dispatch may
have made room in a held queue), runs it through the :class:`DispatchRunner`, and
releases it. What is in flight is registered per partition, so a revoke can wait
for it or cancel it, and a forced shutdown can cancel everything.

A live dispatch of a keyed subscriber (``ordering="key"``/``"none"``) is not run
here: its records are admitted to the subscriber's :class:`KeyedLane`, which runs
them per key, and the partition is released for its next dispatch at once.

An idle worker waits on an event of its own and ``wake`` sets one of them, so new
records wake one worker, not all of them; a worker that takes a dispatch while more
is ready wakes the next, so the wake passes along until the work or the workers
run out.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Collection, Sequence

import anyio
import anyio.abc

from fairstream.errors import FairstreamError
from fairstream.runtime._record import TP, Record
from fairstream.runtime._subscriber import Subscriber
from fairstream.runtime.flow._barrier import Barrier
from fairstream.runtime.flow._handling import DispatchRunner
from fairstream.runtime.flow._keyed import InFlight, KeyedLane
from fairstream.runtime.flow._scheduler import Dispatch, FairScheduler

__all__ = ["InFlight", "Workers"]

_CHECKPOINT_EVERY = 0.001
"""Seconds a worker may run dispatches that never suspend before it lets the event
loop turn: the fetcher, the commit loop and the group's heartbeat wait at most this
(and one dispatch) for a handler that never awaits."""


class Workers:
    """Runs dispatches until :meth:`stop`.

    ``taken`` is called with each dispatch before it runs, ``replayed`` after a
    shadow (replay) dispatch finished, ``fail`` with an error that stops the app;
    ``room`` is how many records of a partition a keyed lane admits ahead;
    ``barrier`` (exactly-once) holds keyed partitions still for their commits.
    """

    def __init__(
        self,
        *,
        scheduler: FairScheduler[Record[bytes]],
        runner: DispatchRunner,
        subscribers: Sequence[Subscriber],
        taken: Callable[[Dispatch[Record[bytes]]], None],
        replayed: Callable[[], None],
        fail: Callable[[FairstreamError], None],
        room: int,
        barrier: Barrier | None = None,
    ) -> None:
        self._scheduler = scheduler
        self._runner = runner
        self._subscribers = subscribers
        self._taken = taken
        self._replayed = replayed
        self._fail = fail
        self._in_flight: dict[tuple[TP, bool], InFlight] = {}
        self._sleepers: deque[anyio.Event] = deque()
        self._stopping = False
        self._keyed = {
            lane: KeyedLane(
                sub,
                runner,
                room=room,
                owned=lambda tp: tp in scheduler.queues,
                fail=fail,
                barrier=barrier,
            )
            for lane, sub in enumerate(subscribers)
            if sub.keyed
        }

    def start(self, tasks: anyio.abc.TaskGroup, count: int) -> None:
        for keyed in self._keyed.values():
            keyed.start(tasks)
        for _ in range(count):
            tasks.start_soon(self._work_loop)

    def wake(self) -> None:
        """There is work: wake one waiting worker (a busy one looks for work when done)."""
        if self._sleepers:
            self._sleepers.popleft().set()

    def stop(self, *, cancel: bool = False) -> None:
        """Start no new dispatch and no record not started yet; ``cancel`` those in hand."""
        self._stopping = True
        self._runner.halted = True
        while self._sleepers:
            self.wake()
        if cancel:
            for running in self.running():
                running.cancel()

    @property
    def in_flight(self) -> int:
        return len(self.running())

    def running_on(self, tps: Collection[TP]) -> list[InFlight]:
        """The dispatches (and keyed chains) in flight that hold a record of ``tps``."""
        found = {id(r): r for (tp, _), r in self._in_flight.items() if tp in tps}
        for keyed in self._keyed.values():
            found.update((id(r), r) for r in keyed.running_on(tps))
        return list(found.values())

    def running(self) -> list[InFlight]:
        found = {id(r): r for r in self._in_flight.values()}
        for keyed in self._keyed.values():
            found.update((id(r), r) for r in keyed.running())
        return list(found.values())

    async def _work_loop(self) -> None:
        scheduler = self._scheduler
        loop = asyncio.get_running_loop()
        busy = False
        passing = False
        turned = loop.time()

        def pass_on() -> None:
            nonlocal passing, turned
            passing = False
            turned = loop.time()  # the loop turned: the fetcher had its chance
            if busy and scheduler.has_ready():
                self.wake()

        while not self._stopping:
            # One cancel scope a worker, not one a dispatch: making and entering one
            # costs ~4.5 us, a quarter of what a no-op dispatch costs beside its
            # handler calls. A dispatch's InFlight cancels it only while that dispatch
            # runs, and the worker leaves a cancelled scope before its next await, so
            # the cancel ends that dispatch and no other, as a scope of its own did.
            with anyio.CancelScope() as scope:
                while not self._stopping:
                    dispatch = scheduler.next_dispatch()
                    if dispatch is None:
                        awake = anyio.Event()
                        self._sleepers.append(awake)
                        try:
                            await awake.wait()
                        finally:
                            if awake in self._sleepers:
                                self._sleepers.remove(awake)
                        continue
                    # One pull (or release) may have readied several partitions, and it
                    # woke one worker: the wake is passed on as soon as this dispatch
                    # suspends (its handler awaits), or the others would wait out this
                    # handler, however long it takes, beside idle workers. A dispatch
                    # that never suspends is over by then, and this worker takes the
                    # next one itself: a wake (~10 us: an event, a task switch) is
                    # spent only where it buys concurrency.
                    busy = True
                    if not passing:  # one call at a time: dispatches that never suspend share it
                        passing = True
                        loop.call_soon(pass_on)
                    self._taken(dispatch)
                    try:
                        await self._run(dispatch, scope)
                    finally:
                        busy = False
                    if scope.cancel_called:  # cancelled as it ended: a new scope
                        break
                    # A handler that never suspends would otherwise keep the loop to
                    # itself: the fetcher (and an in-process producer) must run between
                    # dispatches. anyio.lowlevel.checkpoint() on asyncio, without its
                    # look-up of the running library (as the keyed lane between its
                    # runs); but at most once a _CHECKPOINT_EVERY, not after every
                    # dispatch: each turn polls the sockets and wakes the fetcher for
                    # what one dispatch freed, and cheap dispatches paid that each time
                    # (steady CPU a record 1.45x -> 1.22x the raw loop's at 512
                    # partitions, benchmarks/notes/per_record_cost.md).
                    if loop.time() - turned >= _CHECKPOINT_EVERY:
                        # Not with the finished dispatch in hand: the fetcher's next pull
                        # runs in this turn, and it would find that batch's records
                        # alive and the collector would promote them with its own.
                        dispatch = None
                        await asyncio.sleep(0)

    async def _run(self, dispatch: Dispatch[Record[bytes]], scope: anyio.CancelScope) -> None:
        """Run ``dispatch`` in the worker's ``scope``; its cancel propagates from here."""
        subscriber = self._subscribers[dispatch.lane]
        running = InFlight(scope)
        keys = [(piece.tp, dispatch.replay) for piece in dispatch.slices]
        for key in keys:
            self._in_flight[key] = running
        try:
            keyed = None if dispatch.replay else self._keyed.get(dispatch.lane)
            if keyed is not None:
                await keyed.admit(dispatch)
            else:
                await self._runner.run(subscriber, dispatch)
        except FairstreamError as exc:
            self._fail(exc)
        finally:
            for key in keys:
                if self._in_flight.get(key) is running:
                    del self._in_flight[key]
            self._scheduler.release(dispatch)
            running.finish()
            if dispatch.replay:
                self._replayed()
