"""New partitions reset by ``auto_offset_reset`` at once, without a commit fetch each.

aiokafka's fetcher wants a position for every assigned partition, paused ones too;
for one without a position it asks the coordinator for that partition's commit, one
request after the other, and only then resets it. The rebalance room reads all the
commits itself in one request and seeks, but until its seeks land the fetcher's
requests go on: 3 to 5 of 64 partitions on a quiet machine, 19 once under load, one
round trip each (the race ``tests/runtime/group/test_start_positions.py`` measured).
A partition marked for a reset needs no commit: the fetcher resets all of them in one
ListOffsets request, and a seek replaces that position before or after it lands
(aiokafka keeps a seek over a reset that comes later). A partition the room does not
seek starts where aiokafka's own reset would have put it.

aiokafka's public ``seek_to_beginning``/``seek_to_end`` mark partitions so, but they
are coroutines that then wait for the positions and consume the coordinator's
pending error (``check_errors``), which belongs to the engine's next fetch. The mark
is made here with the fetcher's ``request_offset_reset``, synchronously, in the
assign listener before its first await: private API, so guarded (nothing is marked
and aiokafka fetches the commits as before, logged) and pinned by
``tests/runtime/kafka/test_reset_by_rule.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

import structlog
from aiokafka import TopicPartition
from aiokafka.consumer.fetcher import OffsetResetStrategy

from fairstream.config import OffsetReset

__all__ = ["reset_by_rule"]

log = structlog.get_logger(__name__)


def reset_by_rule(consumer: Any, partitions: Collection[TopicPartition], rule: OffsetReset) -> bool:
    """Mark the assigned ``partitions`` of ``consumer`` for a reset by ``rule``; ``False``
    if this aiokafka's fetcher cannot be asked (nothing is marked then)."""
    request = getattr(getattr(consumer, "_fetcher", None), "request_offset_reset", None)
    if not callable(request):
        log.info(
            "reset_by_rule_unavailable",
            reason="aiokafka's fetcher is not the one this fairstream knows; it fetches "
            "each new partition's commit itself",
        )
        return False
    strategy = OffsetResetStrategy.LATEST if rule == "latest" else OffsetResetStrategy.EARLIEST
    positions: asyncio.Future[Any] = request(list(partitions), strategy)
    # Nobody waits for the positions: retrieve the outcome, or asyncio would log a
    # partition unassigned before its reset as an exception never retrieved.
    positions.add_done_callback(lambda done: done.cancelled() or done.exception())
    return True
