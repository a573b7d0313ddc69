"""Exactly-once's commit barrier for keyed lanes (``ordering="key"``/``"none"``).

A keyed lane finishes a partition's records out of order, each one publishing into
its partition's open transaction while it runs. A commit must carry, for every
output in the transaction, its record's offset: the committed offset (everything
below it finished) plus the offset map of the finished records above it
(:mod:`fairstream.ranges`, which the next owner skips). A record still in a handler
may have published already and is in neither, so its outputs would commit without
it and be published again by whoever handles it next.

So a commit tick *closes* the :class:`Gate` of each keyed partition it commits: the
partition's chains start no new record (a run stops before its next record), the
records in a handler finish, and once none is left (:meth:`Gate.drained`) the
watermark and map are read and the transaction commits; then the gate opens and the
chains go on. Other partitions run meanwhile.

The cost, per partition and tick (``commit_interval``, 100 ms by default): its
handlers stand still for the longest handler call in flight when the tick came
(a 5 ms I/O call: up to 5 ms; retries with their backoff count too) plus the
transaction commit's round trips, and its handler slots are lent to other
partitions meanwhile. A handler that runs for seconds holds its partition's commit
(and every output of that partition) that long; a tick waits for it at most
:data:`HOLD_LIMIT`, then commits the other partitions without it, and the partition
stays held until a later tick finds its handlers done: a partition whose handler
calls all outlast the limit still commits, one call apart.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from typing import final

import anyio

from fairstream.runtime._record import TP

__all__ = ["HOLD_LIMIT", "OPEN", "Barrier", "Gate", "Hold"]

HOLD_LIMIT = 1.0
"""Seconds a commit tick waits for a keyed partition's handlers before it commits the
others and leaves that partition, still held, for a later tick (a handler that
hangs must not stop every commit)."""


@final
class Gate:
    """One partition's gate: closed while a commit of it waits for, or holds, it.

    Its events are made only for a waiter (making one looks up the async library).
    """

    __slots__ = ("_closers", "_idle", "_opened", "_running", "closed")

    def __init__(self) -> None:
        self.closed = False
        """No record of the partition may start in a handler now (an attribute, not a
        property: the handler loop reads it before every record)."""
        self._closers = 0
        self._running = 0
        self._idle: anyio.Event | None = None
        self._opened: anyio.Event | None = None

    def enter(self) -> None:
        """A run of the partition's records starts (with the gate open)."""
        self._running += 1

    def leave(self) -> None:
        """The run ended, its finished records marked."""
        self._running -= 1
        if not self._running and self._idle is not None:
            self._idle.set()
            self._idle = None

    async def wait_open(self) -> None:
        while self._closers:
            if self._opened is None:
                self._opened = anyio.Event()
            await self._opened.wait()

    def close(self) -> None:
        """Start nothing more; closers nest (a revoke's commit beside the periodic one)."""
        self._closers += 1
        self.closed = True

    def open(self) -> None:
        self._closers -= 1
        self.closed = self._closers > 0
        if not self.closed and self._opened is not None:
            self._opened.set()
            self._opened = None

    @property
    def busy(self) -> bool:
        """A run of the partition's records is in a handler."""
        return self._running > 0

    async def drained(self) -> None:
        """Return once no run of the partition is in a handler."""
        while self._running:
            if self._idle is None:
                self._idle = anyio.Event()
            await self._idle.wait()


OPEN = Gate()
"""The gate of a lane that no barrier closes (at-least-once)."""


@final
class Barrier:
    """The gates of the keyed lanes' partitions, for the committer to close."""

    def __init__(self, topics: Collection[str]) -> None:
        self._topics = frozenset(topics)
        self._gates: dict[TP, Gate] = {}
        self._carried: dict[TP, Gate] = {}
        """Gates a hold left closed: their partitions had a record in a handler still."""

    def covers(self, tp: TP) -> bool:
        """``tp``'s records run in a keyed lane: its commits go through the barrier."""
        return tp[0] in self._topics

    def gate(self, tp: TP) -> Gate:
        gate = self._gates.get(tp)
        if gate is None:
            gate = self._gates[tp] = Gate()
        return gate

    @asynccontextmanager
    async def hold(self, tps: Collection[TP], *, limit: float) -> AsyncIterator[Hold]:
        """Close ``tps``' gates and wait until none of their records is in a handler;
        the :class:`Hold` holds those that got there within ``limit`` seconds until
        each is let go, or the block ends.

        A partition whose handler outlasts ``limit`` is left out but stays closed,
        carried over to the next hold: it commits at a later tick, once its handlers
        finished (a slow handler holds up its own partition, and each tick's others
        at most ``limit``). A carried partition that the next hold does not name
        (revoked, say) opens then.
        """
        held = Hold({tp: self.gate(tp) for tp in tps})
        for gate in held.gates.values():
            gate.close()
        for tp in list(self._carried):  # this hold closed them again, or lets them go
            self._carried.pop(tp).open()
        try:
            with anyio.move_on_after(limit):
                for gate in held.gates.values():
                    await gate.drained()
            for tp in [tp for tp, gate in held.gates.items() if gate.busy]:
                gate = held.gates.pop(tp)
                if tp in self._carried:  # a hold beside this one carries it already
                    gate.open()
                else:
                    self._carried[tp] = gate
            yield held
        finally:
            for tp in list(held.gates):
                held.let_go(tp)


@final
class Hold:
    """The partitions a commit holds still, none of their records in a handler."""

    __slots__ = ("gates",)

    def __init__(self, gates: dict[TP, Gate]) -> None:
        self.gates = gates

    def __contains__(self, tp: object) -> bool:
        return tp in self.gates

    def let_go(self, tp: TP) -> None:
        """``tp`` is committed (or left for a later tick): its records may start again."""
        gate = self.gates.pop(tp, None)
        if gate is not None:
            gate.open()
