"""The keyed room: records of one subscriber run per key (``ordering="key"``/``"none"``).

A worker takes a dispatch (one partition's slice, handed out round-robin with the
per-partition quota, so KIP-387 fairness decides what is admitted) and *admits*
its records here, in offset order. Each admitted record joins the chain of its
key within its partition; a chain runs its records one after another, so a key
waits only for its own earlier records, and different keys run side by side.
With ``"none"`` every record is a chain of its own. Null keys share one chain per
partition, so they keep partition order among themselves.

Two bounds hold: at most ``concurrency`` handler calls run at once (a semaphore
that a chain takes per record, so a key with a long run holds one slot, not
all), and at most ``room`` records of a partition are admitted and unfinished,
so a partition whose records do not finish stops reading ahead (buffered memory
stays bounded) while the others go on. Finished records do not count: a record
that never finishes holds its key, not a window of its partition.

Chains run as tasks of the lane, each in a cancel scope of its own. A task that ran
its chain out *parks* as a spare and runs the next new chain of any partition of
the lane: starting an anyio task costs ~50 us, half a dispatch of no-op records, and
at hundreds of partitions a partition's chain runs out before its next dispatch. The
spares are lane-wide, the last parked taken first, so a spare's wait (a Future) lasts
about one dispatch and mostly dies young: a spare of each partition waited a whole
round of the ring, every one of its Futures reached the garbage collector's oldest
generation, and the partitions' task groups, serving tasks and parked spares made
that generation a third larger, each full collection walking it (key order's steady
CPU a record 1.52x -> 1.29x raw aiokafka's at 512 partitions,
``benchmarks/notes/per_record_cost.md``, "Key order: lane-wide spares").

While a partition has chains it is *busy*: an :class:`InFlight` (the partition, which
cancels the scopes of the tasks running its chains, and an event set when the last
chain ends) is what a revoke or a forced shutdown waits on or cancels, like a
dispatch's. A task whose scope was cancelled ends with its chain, so the cancel
reaches no other partition's chain. A revoke closes the partition once it is idle.

Under exactly-once each partition's chains pass its gate (``_barrier``) before each
run, and a run stops before its next record once the gate closes: a commit of the
partition waits only for the records in a handler, not for the whole chains.
"""

from __future__ import annotations

import asyncio
import itertools
import operator
from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass, field
from typing import Protocol

import anyio
import anyio.abc

from fairstream.errors import FairstreamError
from fairstream.runtime._record import TP, Record
from fairstream.runtime._subscriber import Subscriber
from fairstream.runtime.flow._barrier import OPEN, Barrier
from fairstream.runtime.flow._handling import DispatchRunner
from fairstream.runtime.flow._scheduler import Dispatch

__all__ = ["InFlight", "KeyedLane"]

_YIELD_EVERY = 256
"""Records a chain runs on one slot before it yields to the event loop and the slot.

More than a partition's admission window (``room``, 200 by default), so a cheap
chain's admitted records run in one turn: each turn costs a slice copy, a log slot,
two clock reads, the offsets' finish, stats and a trip through the event loop
(64 a turn: steady CPU a record 1.64x the raw loop's at 16 partitions; 256 with the
spare task below: 1.29x, ``benchmarks/notes/per_record_cost.md``)."""

_key_of = operator.attrgetter("key")


def _one_key(records: list[Record[bytes]]) -> bool:
    """Whether every record of ``records`` has the same key (a C loop over them)."""
    return len(set(map(_key_of, records))) == 1


_PIN: Hashable = object()
"""The key of an entry every partition's ``chains`` keeps, with a list (a tracked
object) as its value: CPython untracks a dict that holds only atoms, so an emptied
``chains`` was untracked at the next collection and tracked again, as a new object,
when the next chain joined, then promoted to the oldest generation again, once a
dispatch at hundreds of partitions. No record's key equals it."""


class _Cancellable(Protocol):
    def cancel(self) -> None: ...


@dataclass(slots=True, eq=False)
class InFlight:
    """Running work (a dispatch, or a partition's chains), to wait for or cancel.

    Its end is an event made only for a waiter (a revoke, a stop): making an anyio
    Event looks up the running async library, and most dispatches end unwatched.
    """

    scope: _Cancellable
    _ended: anyio.Event | None = None
    _over: bool = False

    def cancel(self) -> None:
        """Cancel the work unless it ended: a worker's scope outlives its dispatch (it
        is the worker's next dispatch's once this one ended)."""
        if not self._over:
            self.scope.cancel()

    def finish(self) -> None:
        """The work ended: wake whoever waits for it."""
        self._over = True
        if self._ended is not None:
            self._ended.set()

    async def wait(self) -> None:
        """Return once the work ended."""
        if not self._over:
            if self._ended is None:
                self._ended = anyio.Event()
            await self._ended.wait()


def _pinned() -> dict[Hashable, list[Record[bytes]]]:
    return {_PIN: []}


@dataclass(slots=True, eq=False)
class _Partition:
    """The chains of one partition, and the cancel scopes of the tasks running them."""

    tp: TP
    busy: InFlight | None = None
    chains: dict[Hashable, list[Record[bytes]]] = field(default_factory=_pinned)
    """The chains by key, beside the ``_PIN`` entry: one entry means no chain."""
    admitted: int = 0
    room: anyio.Event | None = None
    """Set when a full partition has room again; made by the admission that waits."""
    scopes: set[anyio.CancelScope] = field(default_factory=set)
    """The scopes of the tasks running a chain of the partition now."""
    cancelled: bool = False
    """The busy spell's chains were cancelled: a chain handed to a task that has not
    started it yet is dropped unrun."""
    closing: bool = False

    def cancel(self) -> None:
        """Cancel the partition's chains (through its busy :class:`InFlight`)."""
        self.cancelled = True
        for scope in self.scopes:
            scope.cancel()


class KeyedLane:
    """One subscriber's records in flight out of partition order."""

    def __init__(
        self,
        subscriber: Subscriber,
        runner: DispatchRunner,
        *,
        room: int,
        owned: Callable[[TP], bool],
        fail: Callable[[FairstreamError], None],
        barrier: Barrier | None = None,
    ) -> None:
        self._subscriber = subscriber
        self._runner = runner
        self._room = max(room, subscriber.concurrency)
        self._owned = owned
        self._fail = fail
        self._barrier = barrier
        self._slots = anyio.Semaphore(subscriber.concurrency)
        self._by_key = subscriber.ordering == "key"
        self._unique = itertools.count()
        self._parts: dict[TP, _Partition] = {}
        self._spares: list[asyncio.Future[tuple[_Partition, Hashable]]] = []
        """Chain tasks waiting for a new chain (the last one parked is taken first); at
        most ``concurrency``, which is as many chains as can run a handler at once."""
        self._tasks: anyio.abc.TaskGroup | None = None

    def start(self, tasks: anyio.abc.TaskGroup) -> None:
        self._tasks = tasks

    def running_on(self, tps: Collection[TP]) -> list[InFlight]:
        """What is busy on ``tps`` (being revoked): those partitions close once idle."""
        found = []
        for tp, part in self._parts.items():
            if tp in tps:
                part.closing = True
                if part.busy is not None:
                    found.append(part.busy)
                else:
                    self._close(part)
        return found

    def running(self) -> list[InFlight]:
        return [part.busy for part in self._parts.values() if part.busy is not None]

    async def admit(self, dispatch: Dispatch[Record[bytes]]) -> None:
        """Admit the dispatch's records in order; waits while a partition has no room.

        Records not admitted (the partition was revoked, or the app halts) stay
        unfinished, so the watermark never passes them.
        """
        runner = self._runner
        room, by_key, unique = self._room, self._by_key, self._unique
        for piece in dispatch.slices:
            records = piece.records
            if not records:
                continue
            tp = piece.tp
            # The whole slice at once: one that is cut short below stays unfinished.
            if not runner.admit(tp, records):
                return
            skip = runner.skip(tp)
            at, count = 0, len(records)
            while at < count:
                # Nothing below awaits but _room_in: the partition found there stays
                # open and owned until the next wait, so it is only looked up again
                # when it is full, and then records are admitted up to its room.
                part = await self._room_in(tp)
                if part is None:
                    return
                chains = part.chains
                upto = min(count, at + room - part.admitted)
                admitted = upto - at
                run = records[at:upto]
                first: Hashable = run[0].key
                if by_key and not skip and run[-1].key == first and _one_key(run):
                    # One key (null keys, or a partition one key fills): the run joins
                    # its chain in one step, not a record at a time (126 -> 28 ns a
                    # record; the loop was ~7% of a keyed drain's samples).
                    chain = chains.get(first)
                    if chain is None:
                        self._new_chain(part, first, run)
                    else:
                        chain += run
                    part.admitted += admitted
                    at = upto
                    continue
                for record in run:
                    if skip and any(r.start <= record.offset < r.end for r in skip):
                        runner.skipped(record)  # a previous owner finished it (offset map)
                        admitted -= 1
                        continue
                    key = record.key if by_key else next(unique)
                    chain = chains.get(key)
                    if chain is None:
                        self._new_chain(part, key, [record])
                    else:
                        chain.append(record)
                part.admitted += admitted
                at = upto

    def _new_chain(self, part: _Partition, key: Hashable, records: list[Record[bytes]]) -> None:
        """Start the chain of ``key`` with ``records``: on the lane's last parked spare
        task, if one waits, else on a new task."""
        part.chains[key] = records
        if part.busy is None:
            part.busy = InFlight(part)
            part.cancelled = False
        if self._spares:
            self._spares.pop().set_result((part, key))
        else:
            assert self._tasks is not None, "KeyedLane.start was not called"
            self._tasks.start_soon(self._chain, part, key)

    async def _room_in(self, tp: TP) -> _Partition | None:
        """The open chains of ``tp`` once they have room for a record (waits while full).

        ``None``: the app halts or ``tp`` is no longer owned.
        """
        while not self._runner.halted and self._owned(tp):
            part = self._parts.get(tp)
            if part is None:
                part = self._parts[tp] = _Partition(tp)
            if part.admitted < self._room:
                return part
            if part.room is None:
                part.room = anyio.Event()
            await part.room.wait()
        return None

    def _close(self, part: _Partition) -> None:
        """The revoked ``part`` is idle: forget it (a new owner opens a new one)."""
        if self._parts.get(part.tp) is part:
            del self._parts[part.tp]
        if part.room is not None:
            part.room.set()

    async def _chain(self, part: _Partition, key: Hashable) -> None:
        """Run the chain of ``key``, then park as a spare and run the chain handed over.

        The task ends once its scope was cancelled (its partition's chains were): the
        scope is never carried to another chain.
        """
        handed: tuple[_Partition, Hashable] | None = (part, key)
        with anyio.CancelScope() as scope:
            while handed is not None:
                part, key = handed
                if not await self._run_chain(part, key, scope) or scope.cancel_called:
                    return
                handed = await self._park(scope)

    async def _park(self, scope: anyio.CancelScope) -> tuple[_Partition, Hashable] | None:
        """Wait as a spare for a new chain; ``None``: end the task instead."""
        if self._runner.halted or len(self._spares) >= self._subscriber.concurrency:
            return None
        spare: asyncio.Future[tuple[_Partition, Hashable]]
        spare = asyncio.get_running_loop().create_future()
        self._spares.append(spare)
        try:
            return await spare
        except BaseException:
            # Cancelled (a shutdown) while parked, or after a chain was handed over
            # but before it started: that chain ends unrun.
            if spare.done() and not spare.cancelled():
                self._chain_ended(*spare.result(), scope)
            elif spare in self._spares:
                self._spares.remove(spare)
            raise

    async def _run_chain(self, part: _Partition, key: Hashable, scope: anyio.CancelScope) -> bool:
        """Run the chain of ``key`` until it is empty; ``False``: cut short or failed."""
        chain = part.chains[key]
        runner, subscriber, slots = self._runner, self._subscriber, self._slots
        tp = part.tp
        gate = OPEN if self._barrier is None else self._barrier.gate(tp)

        def popped(count: int) -> None:
            self._release(part, count)

        # A cancel of the partition from now on reaches this task through its scope;
        # one since the chain was handed over set ``cancelled``: the chain ends unrun.
        part.scopes.add(scope)
        try:
            while chain and not runner.halted and not part.cancelled:
                if gate.closed:  # exactly-once: a commit of the partition waits
                    await gate.wait_open()
                    continue
                # A free slot is taken without a trip through the event loop; the
                # chain then runs a few records on it at slice cost.
                if slots.value:
                    slots.acquire_nowait()
                else:
                    await slots.acquire()
                # Entered with no await before the run's first record: a commit
                # that closed the gate meanwhile stops the run there, unstarted.
                gate.enter()
                try:
                    await runner.run_chain(subscriber, tp, chain, _YIELD_EVERY, popped, gate)
                finally:
                    gate.leave()
                    slots.release()
                # A handler that never suspends would keep the loop to itself: the
                # fetcher and the other chains run between these runs. What
                # anyio.lowlevel.checkpoint() does on asyncio, without its look-up of
                # the running library (a tenth of this lane's CPU, a run at a time).
                # A chain that ran out parks next (or ends), which suspends as well:
                # a checkpoint before it is a loop turn a dispatch for nothing (at
                # hundreds of partitions every chain runs out in one run).
                if chain:
                    await asyncio.sleep(0)
        except FairstreamError as exc:
            self._fail(exc)
            return False
        finally:
            self._chain_ended(part, key, scope)
        return not runner.halted

    def _chain_ended(self, part: _Partition, key: Hashable, scope: anyio.CancelScope) -> None:
        """The chain of ``key`` ended. Cut short (halt, cancel, stop policy): what is
        left of it stays unfinished. The partition's last chain ends its busy spell."""
        part.scopes.discard(scope)
        chain = part.chains.pop(key)
        if chain:
            self._release(part, len(chain))
        if len(part.chains) == 1 and part.busy is not None:  # only _PIN is left
            part.busy.finish()
            part.busy = None
            if part.closing:
                self._close(part)

    def _release(self, part: _Partition, count: int) -> None:
        part.admitted -= count
        if part.room is not None:  # an admission waits for room: there is some now
            part.room.set()
            part.room = None
