"""Records that stay in a handler: found by a slow scan, warned about, their age served.

A handler that never returns holds its partition (or its key) for good while the
member looks healthy: it still heartbeats, and ``/ready`` answers 200. So the
records in hand are looked at every second or so, and one that has been there for
``SchedulerConfig(stuck_handler_warning)`` seconds gets a ``handler_stuck`` warning
(topic, partition, offset, seconds), repeated every five times that while it stays;
``app.health()`` and the ``fairstream_oldest_in_flight_seconds`` gauge show the age of
the oldest.

Nothing is timed per record. The handler room already keeps, for each slice or keyed
run in hand, a :class:`~fairstream.logs.RecordSlot` holding the record the handler is
on (for the log context); the scan reads those slots, and a record it finds in the
same slot as at the previous scan is still in hand. So an age is counted from the
scan that first saw the record: it reads up to one scan interval (at most 1 s) short,
and a record handled between two scans is never seen at all.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from fairstream.logs import RecordSlot

__all__ = ["REPEAT_FACTOR", "StuckWatch"]

log = structlog.get_logger(__name__)

REPEAT_FACTOR = 5
"""A record still in hand is warned about again every this many ``warn_after``."""


@dataclass(slots=True)
class _Seen:
    record: Any
    since: float
    warn_at: float


class StuckWatch:
    """Scans ``in_hand`` (the handler room's live slots) for records held too long."""

    def __init__(self, in_hand: Collection[RecordSlot], *, warn_after: float) -> None:
        self._in_hand = in_hand
        self.warn_after = warn_after
        self.interval = min(1.0, warn_after / 2)
        """Seconds between scans: at most 1 s, and at least twice per ``warn_after``."""
        self._seen: dict[RecordSlot, _Seen] = {}

    def scan(self, now: float) -> list[tuple[Any, float]]:
        """Note what is in hand at ``now``; the records due a warning, with their ages.

        Pure bookkeeping over the slots (no clock, no log), so a test can drive it.
        """
        seen: dict[RecordSlot, _Seen] = {}
        due = []
        for slot in list(self._in_hand):
            record = slot.record
            if record is None:
                continue
            before = self._seen.get(slot)
            if before is None or before.record is not record:
                before = _Seen(record, now, now + self.warn_after)
            elif now >= before.warn_at:
                due.append((record, now - before.since))
                before.warn_at = now + REPEAT_FACTOR * self.warn_after
            seen[slot] = before
        self._seen = seen
        return due

    def oldest(self, now: float) -> float:
        """Seconds the oldest record in hand has been there (0.0 when none is).

        Read-only: a record the last scan did not see in its slot counts as new.
        """
        oldest = 0.0
        for slot in list(self._in_hand):
            before = self._seen.get(slot)
            if before is not None and before.record is slot.record:
                oldest = max(oldest, now - before.since)
        return oldest

    async def run(self) -> None:
        """Scan until cancelled, logging ``handler_stuck`` for each record due a warning."""
        while True:
            await anyio.sleep(self.interval)
            for record, age in self.scan(time.monotonic()):
                log.warning(
                    "handler_stuck",
                    topic=record.topic,
                    partition=record.partition,
                    offset=record.offset,
                    seconds=round(age, 1),
                    reason="the record is still in hand (its handler, retries or dead "
                    "letter): its key or partition waits, and its offset is not committed",
                )
