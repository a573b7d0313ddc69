"""Kafka's fetch wait, for a benchmark on a broker that answers an empty fetch at once.

A Kafka broker holds a fetch that finds no record until ``fetch.min.bytes`` (1) have
arrived or ``fetch_max_wait_ms`` (aiokafka: 500 ms) have passed; the client spends
nothing meanwhile, and aiokafka sends that broker no other fetch while one is in
flight. The embedded noida broker answers such a fetch at once. A consumer whose
fetch loop runs beside its handlers (fairstream's, or any loop that awaits I/O)
then fetches its drained partitions again and again while the others are still
being handled: at the end of a backlog drained round-robin, at 2,048 partitions,
one fetch every ~15 ms, each asking for hundreds of partitions and each answer
decoded per partition (``benchmarks/notes/per_record_cost.md``, "The tail of a
drain"). A raw loop whose handler never awaits starves aiokafka's fetch task and
sends none of them.

:func:`held_empty_fetches` makes every consumer of the process, while it is
entered, wait out ``fetch_max_wait_ms`` after an answer that brought no record, where
the broker would have waited. That is Kafka's behaviour only while no record
arrives, so it suits a topic produced before the run and read as it is
(``throughput.py``), not a live one.
It patches aiokafka's private ``Fetcher._proc_fetch_request``, checked against the
pinned aiokafka; benchmarks only, never the library.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from aiokafka.consumer.fetcher import Fetcher

__all__ = ["held_empty_fetches"]


@contextlib.contextmanager
def held_empty_fetches() -> Iterator[None]:
    """Hold each fetch answer that brought no record for ``fetch_max_wait_ms``."""
    original = Fetcher._proc_fetch_request
    if "needs_wakeup" not in original.__code__.co_varnames:
        raise RuntimeError(
            "aiokafka's Fetcher._proc_fetch_request is not the one this benchmark knows "
            "(it returns whether the answer brought records): run without --kafka-fetch-wait"
        )

    async def held(self: Any, assignment: Any, node_id: int, request: Any) -> bool:
        brought = bool(await original(self, assignment, node_id, request))
        if not brought:
            # Cancelled when the fetcher closes or the assignment goes, like a
            # request in flight; aiokafka awaits the task and expects it to end.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(self._fetch_max_wait_ms / 1000)
        return brought

    Fetcher._proc_fetch_request = held  # type: ignore[method-assign]
    try:
        yield
    finally:
        Fetcher._proc_fetch_request = original  # type: ignore[method-assign]
