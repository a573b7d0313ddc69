"""Pulls that take from each partition in turn, at most what its queue has room for.

aiokafka's ``getmany(max_records=n)`` drains its fetched buffers one partition
after another, in the order the fetches arrived, and gives the first buffered
partition as much of ``n`` as it holds. The fetch room could only keep that fair by
pulling little (about one queue target, 200 records): at hundreds of owned
partitions that meant ten times the pulls of a raw aiokafka loop, and aiokafka
plans a new fetch over every partition each time a pull drains a buffer, which
made fairstream's cost grow with the partition count (``benchmarks/RESULTS.md``,
"Partition count sweep"). Naming the partitions to pull costs per owned partition
too (aiokafka type-checks every name and scans the tuple for each buffer).

:func:`pull_in_turn` replaces the consumer's ``Fetcher.fetched_records`` with the
same loop, but asks ``allowance(tp)`` how many records each buffered partition may
give (0: leave its buffer, and a fetch error of its, where it is), and moves a
partition it took from but did not empty to the back, so the next pull starts with
the partitions this one did not reach: one pull may fill the whole buffer, one
queue target per partition, round-robin across partitions. Everything else stays
aiokafka's: positions, the wait for data, the wait for an assignment, errors.

A *trickle* (a partition whose last buffer gave less than its allowance, a live
partition fed a few records at a time) may also wait up to ``linger`` seconds in its
buffer before a pull takes it, while the same pull takes records of a partition that
is not a trickle or ``busy()`` says the handlers have work enough; otherwise it goes
with the pull that finds it. aiokafka sends no fetch to a broker while a fresh
buffer of it waits, so the next fetch comes after the trickle is taken and brings
what arrived meanwhile: with a backlog draining beside 1,000 live records a second,
a third of the fetches, each of which costs the consumer a request to build, send
and parse and the broker a wake-up (``benchmarks/RESULTS.md``, Fairness). A broker
with ``fetch_min_bytes`` would batch them itself; the embedded noida broker answers
at once.

It is private API, so it is guarded: the fetcher must use the names this copy of its
loop uses, else nothing changes and the fetch room pulls small, as before.
``tests/runtime/kafka/test_pull_in_turn.py`` checks, against real brokers and the pinned
aiokafka, that it is in use and what a pull takes.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import structlog
from aiokafka.consumer.fetcher import Fetcher, FetchResult

__all__ = ["InTurn", "pull_in_turn"]

log = structlog.get_logger(__name__)

_NAMES = frozenset(
    {
        "_records",
        "_subscriptions",
        "reassignment_in_progress",
        "wait_for_assignment",
        "is_assigned",
        "getall",
        "has_more",
        "_notify",
        "_wait_consume_future",
        "check_raise",
        "_create_fetch_waiter",
        "_closed",
    }
)
"""The private names aiokafka's own ``fetched_records`` uses, and this copy with it."""


def pull_in_turn(
    consumer: Any,
    allowance: Callable[[Any], int],
    *,
    linger: float = 0.0,
    busy: Callable[[], bool] = lambda: False,
) -> InTurn | None:
    """Make ``consumer.getmany()`` take at most ``allowance(tp)`` per partition, in turn.

    ``allowance`` gets aiokafka's ``TopicPartition`` (a tuple ``(topic, partition)``);
    a trickle's buffer may wait up to ``linger`` seconds while the pull takes another
    partition's records or ``busy()`` says the handlers have work enough.
    Returns the hook: call its ``wake()`` when an allowance grew or ``busy()`` turned
    false while it is ``holding`` a trickle, and a pull waiting for fetched data
    looks at the buffers again at once (cancelling the pull instead costs ~20 us:
    anyio formats the cancelling task's repr into its reason). ``None``: the consumer
    is not aiokafka's, or not the one this fairstream knows (logged); nothing changed.
    """
    fetcher: Any = getattr(consumer, "_fetcher", None)
    if fetcher is None:  # not aiokafka's: MemoryBroker's consumer pulls its own way
        return None
    original = getattr(Fetcher, "fetched_records", None)
    if (
        type(fetcher) is not Fetcher
        or not isinstance(getattr(fetcher, "_records", None), OrderedDict)
        or original is None
        or not set(original.__code__.co_names) >= _NAMES
    ):
        log.info(
            "pull_in_turn_unavailable",
            reason="aiokafka's fetcher is not the one this fairstream knows; "
            "pulls stay small to stay fair",
        )
        return None
    in_turn = InTurn(fetcher, allowance, linger, busy)
    fetcher.fetched_records = in_turn.fetched_records
    return in_turn


class InTurn:
    """aiokafka's ``Fetcher.fetched_records`` loop, with a per-partition allowance
    and trickles left to linger (see the module's docstring)."""

    def __init__(
        self,
        fetcher: Any,
        allowance: Callable[[Any], int],
        linger: float,
        busy: Callable[[], bool],
    ) -> None:
        self._fetcher = fetcher
        self._allowance = allowance
        self._linger = linger
        self._busy = busy
        self._woken: asyncio.Future[None] | None = None
        self._trickles: set[Any] = set()
        """Partitions whose last buffer gave less than their allowance."""
        self._waiting: dict[Any, tuple[Any, float]] = {}
        """A trickle's buffer left to wait, and when a pull first left it (entries
        whose buffer is gone are dropped at the next drain)."""
        self._due = float("inf")
        """When the first buffer left to wait in the last drain is due."""
        in_flight = getattr(fetcher, "_in_flight", None)
        node_of = getattr(fetcher, "_select_read_replica", None)
        self._fetching: Callable[[Any], bool] = (
            (lambda tp: node_of(tp) in in_flight)
            if isinstance(in_flight, set) and callable(node_of)
            else (lambda tp: False)
        )
        """Whether a fetch to ``tp``'s broker is in flight (``_take``); else always no."""

    @property
    def holding(self) -> bool:
        """A pull left a trickle's buffer to wait (it is due at the latest ``linger`` on)."""
        return self._due != float("inf")

    def wake(self) -> None:
        """An allowance grew, or ``busy()`` turned false while a trickle lingers: a
        pull waiting for fetched data drains again now."""
        woken = self._woken
        if woken is not None and not woken.done():
            woken.set_result(None)

    async def fetched_records(
        self,
        partitions: Any,
        timeout: float = 0,  # noqa: ASYNC109 (aiokafka's signature: getmany calls it)
        max_records: int | None = None,
    ) -> dict[Any, list[Any]]:
        """Previously fetched records, at most ``allowance(tp)`` per partition."""
        fetcher = self._fetcher
        subscriptions = fetcher._subscriptions
        while True:
            if subscriptions.reassignment_in_progress:
                await subscriptions.wait_for_assignment()
            start = time.monotonic()
            drained = self._drain(partitions, max_records)
            if drained or not timeout:
                return drained
            waiter = fetcher._create_fetch_waiter()
            self._woken = woken = asyncio.get_running_loop().create_future()
            wait = min(timeout, self._due - start)
            try:
                done, _ = await asyncio.wait(
                    [waiter, woken], timeout=max(wait, 0.0), return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                self._woken = None
                woken.cancel()
            if fetcher._closed:
                waiter.cancel()
                return {}
            if not done:
                waiter.cancel()
                if wait >= timeout:
                    return {}
                # A buffer left to wait is due: drain again, within what is left.
                timeout = max(0.0, timeout - (time.monotonic() - start))
                continue
            if waiter.done():
                waiter.result()  # an authorization error, say
            else:
                waiter.cancel()  # woken: new allowance, not new data
            timeout = max(0.0, timeout - (time.monotonic() - start))

    def _drain(self, partitions: Any, max_records: int | None) -> dict[Any, list[Any]]:
        fetcher = self._fetcher
        buffers = fetcher._records
        subscriptions = fetcher._subscriptions
        trickles = self._trickles
        left = max_records if max_records is not None else float("inf")
        drained: dict[Any, list[Any]] = {}
        self._due = float("inf")
        linger = self._linger if trickles else 0.0
        now = time.monotonic() if linger else 0.0
        waiting = self._waiting
        for tp in [tp for tp, (seen, _) in waiting.items() if buffers.get(tp) is not seen]:
            del waiting[tp]  # aiokafka dropped it (a rebalance): keep no records alive
        lingering: list[tuple[Any, int, float]] = []
        other_work = False
        # The loop walks the buffers themselves, not a copy: a pull takes a few
        # partitions and stops, and a copy of every buffered partition per pull cost
        # ~50 us at 2,048 partitions. What a pull changes in the table (a partition
        # taken from to the back, an emptied or revoked one out) is applied as it ends.
        done: list[tuple[Any, bool]] = []  # each partition taken from or dropped: stays?
        try:
            for tp in buffers:
                allowed = self._allowance(tp) if not partitions or tp in partitions else 0
                if allowed <= 0:
                    if not subscriptions.is_assigned(tp):
                        done.append((tp, False))  # revoked: aiokafka drops it the same way
                        trickles.discard(tp)
                    continue
                result = buffers[tp]
                if type(result) is not FetchResult:  # an error of this partition's fetch
                    if drained:
                        return drained  # raised by the next pull, as aiokafka does
                    done.append((tp, False))
                    fetcher._notify(fetcher._wait_consume_future)
                    result.check_raise()
                    continue
                trickle = tp in trickles
                if linger and trickle:
                    seen, since = waiting.get(tp, (None, now))
                    if seen is not result:  # a new buffer: its wait starts now
                        waiting[tp] = (result, now)
                        since = now
                    if now - since < linger:
                        lingering.append((tp, allowed, since))
                        continue
                taken = self._take(tp, result, int(min(allowed, left)), drained, done)
                other_work = other_work or (taken > 0 and not trickle)
                left -= taken
                if left <= 0:
                    return drained
            if lingering and (other_work or self._busy()):
                self._due = min(since for _, _, since in lingering) + linger
            else:  # nothing else to do: a trickle waits for nothing
                for tp, allowed, _ in lingering:
                    left -= self._take(tp, buffers[tp], int(min(allowed, left)), drained, done)
                    if left <= 0:
                        break
            return drained
        finally:
            for tp, stays in done:
                if stays:
                    buffers.move_to_end(tp)  # its turn is over: the others go first next time
                else:
                    del buffers[tp]

    def _take(
        self,
        tp: Any,
        result: Any,
        wanted: int,
        drained: dict[Any, list[Any]],
        done: list[tuple[Any, bool]],
    ) -> int:
        """Move up to ``wanted`` records of ``tp``'s buffer into ``drained``; how many.

        An emptied buffer wakes aiokafka's fetch loop to fetch the partition again,
        unless a fetch to its broker is in flight: aiokafka sends one at a time per
        broker and plans the next when it returns, so the wake would only plan a
        fetch it cannot send, a walk over every assigned partition (~2 ms at 2,048
        partitions, about a third of those walks in a steady drain).
        """
        fetcher = self._fetcher
        records = result.getall(wanted)
        more = result.has_more()
        done.append((tp, more))
        if more:
            self._trickles.discard(tp)
        else:
            if not self._fetching(tp):
                fetcher._notify(fetcher._wait_consume_future)
            if len(records) < wanted:
                self._trickles.add(tp)
            else:
                self._trickles.discard(tp)
        if records:
            drained[tp] = records
        return len(records)
