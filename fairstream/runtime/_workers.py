"""The dispatch room: ``concurrency`` workers take dispatches from the fair scheduler.

Each worker takes the next dispatch, tells the fetcher (``taken``: the dispatch may
have made room in a held queue), runs it through the :class:`DispatchRunner`, and
releases it. What is in flight is registered per partition, so a revoke can wait
for it or cancel it, and a forced shutdown can cancel everything.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import anyio
import anyio.abc
import anyio.lowlevel

from fairstream.errors import FairstreamError
from fairstream.runtime._handling import DispatchRunner
from fairstream.runtime._record import TP, Record
from fairstream.runtime._scheduler import Dispatch, FairScheduler
from fairstream.runtime._subscriber import Subscriber

__all__ = ["InFlight", "Workers"]


@dataclass(slots=True, eq=False)
class InFlight:
    """A running dispatch, so revocation can wait for it or cancel it."""

    scope: anyio.CancelScope
    done: anyio.Event = field(default_factory=anyio.Event)


class Workers:
    """Runs dispatches until :meth:`stop`.

    ``taken`` is called with each dispatch before it runs, ``replayed`` after a
    shadow (replay) dispatch finished, ``fail`` with an error that stops the app.
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
    ) -> None:
        self._scheduler = scheduler
        self._runner = runner
        self._subscribers = subscribers
        self._taken = taken
        self._replayed = replayed
        self._fail = fail
        self._in_flight: dict[tuple[TP, bool], InFlight] = {}
        self._work = anyio.Event()
        self._idle = 0
        self._stopping = False

    def start(self, tasks: anyio.abc.TaskGroup, count: int) -> None:
        for _ in range(count):
            tasks.start_soon(self._work_loop)

    def wake(self) -> None:
        """There is work: wake a waiting worker (a busy one looks for work when done)."""
        if self._idle:
            self._work.set()
            self._work = anyio.Event()

    def stop(self, *, cancel: bool = False) -> None:
        """Start no new dispatch and no record not started yet; ``cancel`` those in hand."""
        self._stopping = True
        self._runner.halted = True
        self.wake()
        if cancel:
            for running in self._in_flight.values():
                running.scope.cancel()

    @property
    def in_flight(self) -> int:
        return len({id(r) for r in self._in_flight.values()})

    def running_on(self, tps: Collection[TP]) -> list[InFlight]:
        """The dispatches in flight that hold a record of ``tps``, each once."""
        found = {id(r): r for (tp, _), r in self._in_flight.items() if tp in tps}
        return list(found.values())

    def running(self) -> list[InFlight]:
        return list({id(r): r for r in self._in_flight.values()}.values())

    async def _work_loop(self) -> None:
        scheduler = self._scheduler
        while not self._stopping:
            dispatch = scheduler.next_dispatch()
            if dispatch is None:
                self._idle += 1
                try:
                    await self._work.wait()
                finally:
                    self._idle -= 1
                continue
            self._taken(dispatch)
            await self._run(dispatch)
            if scheduler.has_ready():
                self.wake()
            # A handler that never suspends would otherwise keep the loop to itself:
            # the fetcher (and an in-process producer) must run between dispatches.
            await anyio.lowlevel.checkpoint()

    async def _run(self, dispatch: Dispatch[Record[bytes]]) -> None:
        subscriber = self._subscribers[dispatch.lane]
        running = InFlight(anyio.CancelScope())
        keys = [(piece.tp, dispatch.replay) for piece in dispatch.slices]
        for key in keys:
            self._in_flight[key] = running
        try:
            with running.scope:
                await self._runner.run(subscriber, dispatch)
        except FairstreamError as exc:
            self._fail(exc)
        finally:
            for key in keys:
                if self._in_flight.get(key) is running:
                    del self._in_flight[key]
            self._scheduler.release(dispatch)
            running.done.set()
            if dispatch.replay:
                self._replayed()
