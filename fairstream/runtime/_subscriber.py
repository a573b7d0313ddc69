"""A registered handler and the settings that belong to it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fairstream.config import DeadLetterPolicy, Ordering, ParallelRebalance, RetryPolicy
from fairstream.runtime._decode import Decoder

__all__ = ["Handler", "Subscriber"]

Handler = Callable[[Any], Awaitable[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscriber:
    """What ``@app.subscriber(...)`` registered.

    A record handler is called once per record, in offset order within each
    partition; a batch handler once per dispatch with records of several
    partitions (each partition's records still in order).
    """

    name: str
    topics: tuple[str, ...]
    handler: Handler
    batch: bool
    max_batch: int
    decoder: Decoder[Any]
    retry: RetryPolicy
    dead_letter: DeadLetterPolicy
    parallel_rebalance: ParallelRebalance | None
    """KIP-333 settings, ``None`` when off (open ranges are still resumed)."""
    ordering: Ordering = "partition"
    """What may run beside what (``SchedulerConfig.ordering``); batch handlers keep
    ``"partition"``: a batch holds records of partitions with no dispatch in flight."""
    concurrency: int = 64
    """Records (dispatches, for batch handlers) of this subscriber in flight at once."""

    @property
    def keyed(self) -> bool:
        """Its records run per key (or alone), not one partition dispatch at a time."""
        return self.ordering != "partition" and not self.batch
