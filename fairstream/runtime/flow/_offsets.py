"""Commit watermarks: what may be committed for each partition.

At-least-once means an offset is committed only when every record before it in
the partition was handled (or dead-lettered). Records of a partition are handled
in order, one dispatch at a time, so the watermark is simply the offset after
the last handled record; this module keeps it, and what was last committed, per
partition. Pure bookkeeping: the engine does the committing.

With a KIP-333 jump the watermark moves to the jump point at once, and the records
below it that are not handled yet are kept as *open shadow ranges* in the commit
metadata (:mod:`fairstream.ranges`). A shadow reads its ranges in ascending order,
so its progress is one offset too: everything below it is done, and the ranges are
clipped there. Every commit is a consistent pair - records below the offset are
handled unless a range in the metadata still holds them - so a crash at any moment
loses nothing.

Under ``ordering="key"`` or ``"none"`` records of a partition finish out of order.
Each record is *admitted* (in offset order, a slice at a time) before it runs and
*finished* after (a key's run of records at a time); the watermark is then the
lowest admitted record not finished, and the finished ones above it are marked
(``marks``, a byte an offset). Each commit writes them into the metadata
as an offset map (:func:`fairstream.ranges.encode_metadata`, beside the shadow
ranges); the next owner reads the map back (``skip``) and does not run those
records again. A map that does not fit is left out: the plain watermark only
repeats work.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fairstream.ranges import (
    OffsetRange,
    decode_done,
    decode_shadow,
    encode_metadata,
    encode_shadow,
    is_ours,
    merge_ranges,
)
from fairstream.runtime._record import TP, Record

_COMPACT_AT = 4096
"""Finished offsets below the watermark kept in ``marks`` before they are dropped."""
_ONES = b"\x01" * 256

__all__ = ["OffsetTracker", "PartitionOffsets", "Unsaved", "clip_below"]

Unsaved = dict[TP, tuple[tuple[int, str], tuple[int | None, str]]]
"""Progress a refused commit left unsaved: per partition, ((offset, metadata) it would
have written, (offset or ``None``, metadata) the broker held then)."""


def clip_below(ranges: Sequence[OffsetRange], offset: int) -> tuple[OffsetRange, ...]:
    """``ranges`` without the offsets below ``offset`` (those are done)."""
    return tuple(
        OffsetRange(max(r.start, offset), r.end) for r in ranges if r.end > max(r.start, offset)
    )


@dataclass(slots=True)
class PartitionOffsets:
    """``handled`` is the next offset to commit; ``committed`` what the broker has."""

    handled: int | None = None
    committed: int | None = None
    metadata: str = ""
    committed_metadata: str = ""
    shadow: tuple[OffsetRange, ...] = field(default_factory=tuple)
    marks: bytearray = field(default_factory=bytearray)
    """Admitted offsets from ``base`` on, a byte each (keyed lanes): 0 while the record
    runs or waits, 1 once it finished (or when no record was admitted there: a gap
    holds nothing to wait for). Bytes, not a set of offsets: a run of records is
    admitted or finished with one slice assignment, and the watermark moves with one
    ``find`` (C loops, where a set and a deque cost a Python step a record). A gap
    in the offsets (a compacted topic) costs its length in bytes, for as long as a
    record below it is unfinished."""
    base: int = 0
    head: int = 0
    """Index in ``marks`` of the lowest unfinished offset (``len(marks)``: none)."""
    skip: tuple[OffsetRange, ...] = field(default_factory=tuple)
    """Records above the committed offset a previous owner finished (its offset map)."""
    keyed: bool = False
    """Records were admitted out of order: commits carry the offset map."""
    map_dropped: bool = False

    def admit(self, start: int, stop: int) -> None:
        """Offsets ``start`` to ``stop - 1`` start out of order; admitted in offset order."""
        self.keyed = True
        if self.handled is None:
            self.handled = start  # the map needs a committed base, even at the start
        marks = self.marks
        head = self.head
        if head == len(marks):  # nothing unfinished: start afresh here
            marks.clear()
            self.base = start
            self.head = 0
        elif head >= _COMPACT_AT:  # drop the finished prefix (one memmove)
            del marks[:head]
            self.base += head
            self.head = 0
        end = self.base + len(marks)
        if start < end:  # admitted before (read again): not twice
            start = end
        elif start > end:
            marks.extend(b"\x01" * (start - end))  # a gap: no record to wait for
        if stop > start:
            marks.extend(bytes(stop - start))

    def finish(self, offset: int) -> None:
        """The admitted record at ``offset`` is done: move the watermark if it can."""
        at = offset - self.base
        marks = self.marks
        if at < self.head or at >= len(marks) or marks[at]:
            return  # not admitted, or finished twice
        marks[at] = 1
        if at == self.head:
            self._moved(at + 1)

    def finish_all(self, records: Sequence[Record[Any]]) -> None:
        """The admitted ``records`` (in offset order) are done: one step if they are
        consecutive offsets, as a key's run of records usually is."""
        start = records[0].offset - self.base
        stop = records[-1].offset + 1 - self.base
        count = stop - start
        if count != len(records) or start < self.head or stop > len(self.marks):
            for record in records:
                self.finish(record.offset)
            return
        self.marks[start:stop] = _ONES[:count] if count <= len(_ONES) else b"\x01" * count
        if start == self.head:
            self._moved(stop)

    def _moved(self, after: int) -> None:
        """The head record finished: the watermark moves to the next unfinished one."""
        head = self.marks.find(0, after)
        self.head = head = len(self.marks) if head < 0 else head
        watermark = self.base + head
        if self.handled is None or watermark > self.handled:
            self.handled = watermark

    def finished_above(self) -> list[OffsetRange]:
        """The runs of finished offsets above the lowest unfinished one (the offset map)."""
        marks, base = self.marks, self.base
        ranges = []
        at = self.head
        while (start := marks.find(1, at)) >= 0:
            at = marks.find(0, start)
            if at < 0:
                at = len(marks)
            ranges.append(OffsetRange(base + start, base + at))
        return ranges

    @property
    def unfinished(self) -> bool:
        """Records were admitted out of order and are not all finished."""
        return self.head < len(self.marks)

    @property
    def next_commit(self) -> int | None:
        return self.handled if self.handled is not None else self.committed

    @property
    def dirty(self) -> bool:
        return (
            self.handled is not None and self.handled != self.committed
        ) or self.metadata != self.committed_metadata


class OffsetTracker:
    """Per-partition watermarks for the partitions this member owns."""

    def __init__(self) -> None:
        self.partitions: dict[TP, PartitionOffsets] = {}
        self.maps = True
        """Write offset maps; off once the broker was seen to drop commit metadata."""
        self.overflowed: list[tuple[TP, int]] = []
        """Partitions whose map did not fit (and how many ranges), since last read."""

    def assign(self, tp: TP, committed: int | None, metadata: str = "") -> None:
        """Own ``tp`` from its committed offset; open ranges come from ``metadata``.

        Metadata that is not ours is kept as it is and committed back unchanged.
        """
        self.partitions[tp] = PartitionOffsets(
            committed=committed,
            metadata=metadata,
            committed_metadata=metadata,
            shadow=tuple(decode_shadow(metadata)),
            skip=tuple(decode_done(metadata, committed)),
        )

    def skip(self, tp: TP) -> tuple[OffsetRange, ...]:
        """Records of ``tp`` a previous owner finished (from its offset map)."""
        state = self.partitions.get(tp)
        return state.skip if state is not None else ()

    def jump(self, tp: TP, offset: int, shadow: Sequence[OffsetRange], metadata: str) -> None:
        """The live watermark moves to ``offset``; ``shadow`` holds what is left below."""
        state = self.partitions.get(tp)
        if state is not None:
            state.handled = offset
            state.shadow = tuple(shadow)
            state.metadata = metadata

    def advance_shadow(self, tp: TP, next_offset: int) -> None:
        """The shadow of ``tp`` handled every open offset below ``next_offset``.

        Clipping can lengthen the numbers; if the ranges would then not fit the
        metadata limit, the previous (wider) metadata stays: it only repeats work.
        """
        state = self.partitions.get(tp)
        if state is None or not state.shadow or state.shadow[0].start >= next_offset:
            return
        state.shadow = clip_below(state.shadow, next_offset)
        metadata = encode_shadow(state.shadow)
        if metadata is not None:
            state.metadata = metadata

    def shadow(self, tp: TP) -> tuple[OffsetRange, ...]:
        """The open shadow ranges of ``tp``."""
        state = self.partitions.get(tp)
        return state.shadow if state is not None else ()

    def next_commit(self, tp: TP) -> int | None:
        """The offset a commit of ``tp`` would write now: every record below it is done."""
        state = self.partitions.get(tp)
        return state.next_commit if state is not None else None

    def advance(self, tp: TP, next_offset: int) -> None:
        """Every record of ``tp`` before ``next_offset`` is done."""
        state = self.partitions.get(tp)
        if state is not None and (state.handled is None or next_offset > state.handled):
            state.handled = next_offset

    def admit_all(self, tp: TP, records: Sequence[Record[Any]]) -> bool:
        """``records`` of ``tp`` (in offset order) start out of order: the watermark stays
        below them until they finish. ``False``: ``tp`` is not owned."""
        state = self.partitions.get(tp)
        if state is None:
            return False
        first, last = records[0].offset, records[-1].offset
        if last + 1 - first == len(records):
            state.admit(first, last + 1)  # consecutive offsets: one step
        else:
            for record in records:
                state.admit(record.offset, record.offset + 1)
        return True

    def finish(self, tp: TP, offset: int) -> None:
        """The admitted record at ``offset`` is done: move the watermark if it can."""
        state = self.partitions.get(tp)
        if state is not None:  # else not ours any more
            state.finish(offset)

    def finished(self, tp: TP, offset: int) -> bool:
        """The record at ``offset`` of ``tp`` is done: below the watermark, or finished
        above it (a keyed lane's)."""
        state = self.partitions.get(tp)
        if state is None:
            return False
        watermark = state.next_commit
        if watermark is not None and offset < watermark:
            return True
        at = offset - state.base
        return state.head <= at < len(state.marks) and state.marks[at] == 1

    def map_missing(self, tp: TP) -> bool:
        """``tp``'s next commit lacks the offset map of the records finished above its
        watermark, here or by a previous owner (maps are off, or it does not fit)."""
        state = self.partitions.get(tp)
        if state is None or (self.maps and not state.map_dropped):
            return False
        return state.unfinished or bool(state.skip)

    def finisher(self, tp: TP) -> Callable[[Sequence[Record[Any]]], None]:
        """:meth:`PartitionOffsets.finish_all` for ``tp``, looked up once for a run of
        its records.

        If ``tp`` is revoked during the run the finishes land on the state it had,
        which is dropped: a later owner of ``tp`` does not see them.
        """
        state = self.partitions.get(tp)
        return state.finish_all if state is not None else _not_ours

    def out_of_order(self, tp: TP) -> bool:
        """Records of ``tp`` are admitted and not all finished (a keyed lane's)."""
        state = self.partitions.get(tp)
        return state is not None and state.unfinished

    def pending(self, tps: set[TP] | None = None) -> dict[TP, tuple[int, str]]:
        """Offsets (and metadata) that differ from the last successful commit."""
        pending: dict[TP, tuple[int, str]] = {}
        for tp, state in self.partitions.items():
            offset = state.next_commit
            if offset is not None and (state.keyed or state.skip) and is_ours(state.metadata):
                state.metadata = self._with_map(tp, state, offset)
            if offset is not None and state.dirty and (tps is None or tp in tps):
                pending[tp] = (offset, state.metadata)
        return pending

    def _with_map(self, tp: TP, state: PartitionOffsets, offset: int) -> str:
        """The partition's metadata: its shadow ranges and the offset map above ``offset``."""
        state.skip = clip_below(state.skip, offset + 1)
        finished = merge_ranges([*state.finished_above(), *state.skip])
        text = encode_metadata(state.shadow, offset, finished) if self.maps else None
        if text is None:
            if self.maps and not state.map_dropped:
                self.overflowed.append((tp, len(finished)))
            state.map_dropped = self.maps
            text = encode_shadow(state.shadow)
        else:
            state.map_dropped = False
        return state.metadata if text is None else text

    def unsaved(self, tps: set[TP]) -> Unsaved:
        """What a refused commit of ``tps`` would have written, beside what the broker has.

        Per partition with progress the broker does not have: ((offset, metadata) to
        commit, (committed offset, committed metadata)).
        """
        states = self.partitions
        return {
            tp: (commit, (states[tp].committed, states[tp].committed_metadata))
            for tp, commit in self.pending(tps).items()
        }

    def committed(self, offsets: dict[TP, tuple[int, str]]) -> None:
        for tp, (offset, metadata) in offsets.items():
            state = self.partitions.get(tp)
            if state is not None:
                state.committed = offset
                state.committed_metadata = metadata

    def forget(self, tps: set[TP]) -> None:
        for tp in tps:
            self.partitions.pop(tp, None)


def _not_ours(records: Sequence[Record[Any]]) -> None:
    """A finish for a partition that is not owned: nothing to move."""
