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

It is private API, so it is guarded: the fetcher must use the names this copy of its
loop uses, else nothing changes and the fetch room pulls small, as before.
``tests/runtime/test_pull_in_turn.py`` checks, against real brokers and the pinned
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

__all__ = ["pull_in_turn"]

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


def pull_in_turn(consumer: Any, allowance: Callable[[Any], int]) -> Callable[[], None] | None:
    """Make ``consumer.getmany()`` take at most ``allowance(tp)`` per partition, in turn.

    ``allowance`` gets aiokafka's ``TopicPartition`` (a tuple ``(topic, partition)``).
    Returns ``wake``: call it when an allowance grew, and a pull waiting for fetched
    data looks at the buffers again at once (cancelling the pull instead costs ~20 us:
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
    in_turn = _InTurn(fetcher, allowance)
    fetcher.fetched_records = in_turn.fetched_records
    return in_turn.wake


class _InTurn:
    """aiokafka's ``Fetcher.fetched_records`` loop, with a per-partition allowance."""

    def __init__(self, fetcher: Any, allowance: Callable[[Any], int]) -> None:
        self._fetcher = fetcher
        self._allowance = allowance
        self._woken: asyncio.Future[None] | None = None

    def wake(self) -> None:
        """An allowance grew: a pull waiting for fetched data drains again now."""
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
            try:
                done, _ = await asyncio.wait(
                    [waiter, woken], timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                self._woken = None
                woken.cancel()
            if not done or fetcher._closed:
                waiter.cancel()
                return {}
            if waiter.done():
                waiter.result()  # an authorization error, say
            else:
                waiter.cancel()  # woken: new allowance, not new data
            timeout = max(0.0, timeout - (time.monotonic() - start))

    def _drain(self, partitions: Any, max_records: int | None) -> dict[Any, list[Any]]:
        fetcher = self._fetcher
        buffers = fetcher._records
        subscriptions = fetcher._subscriptions
        left = max_records if max_records is not None else float("inf")
        drained: dict[Any, list[Any]] = {}
        for tp in list(buffers):
            allowed = self._allowance(tp) if not partitions or tp in partitions else 0
            if allowed <= 0:
                if not subscriptions.is_assigned(tp):
                    del buffers[tp]  # revoked: aiokafka drops it the same way
                continue
            result = buffers[tp]
            if type(result) is not FetchResult:  # an error of this partition's fetch
                if drained:
                    return drained  # raised by the next pull, as aiokafka does
                del buffers[tp]
                fetcher._notify(fetcher._wait_consume_future)
                result.check_raise()
                continue
            records = result.getall(int(min(allowed, left)))
            if result.has_more():
                buffers.move_to_end(tp)  # its turn is over: the others go first next time
            else:
                del buffers[tp]
                fetcher._notify(fetcher._wait_consume_future)
            if records:
                drained[tp] = records
                left -= len(records)
                if left <= 0:
                    break
        return drained
