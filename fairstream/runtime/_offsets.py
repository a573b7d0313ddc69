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
Each record is *admitted* (in offset order) before it runs and *finished* after;
the watermark is then the lowest admitted record not finished, and the finished
ones above it are kept apart (``done``). Each commit writes them into the metadata
as an offset map (:func:`fairstream.ranges.encode_metadata`, beside the shadow
ranges); the next owner reads the map back (``skip``) and does not run those
records again. A map that does not fit is left out: the plain watermark only
repeats work.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fairstream.ranges import (
    OffsetRange,
    decode_done,
    decode_shadow,
    encode_metadata,
    encode_shadow,
    is_ours,
    merge_ranges,
)
from fairstream.runtime._record import TP

__all__ = ["OffsetTracker", "PartitionOffsets", "clip_below"]


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
    open: deque[int] = field(default_factory=deque)
    """Admitted offsets, ascending, from the lowest one not finished (keyed lanes)."""
    done: set[int] = field(default_factory=set)
    """Finished offsets in ``open`` above its first: they wait for it to finish."""
    skip: tuple[OffsetRange, ...] = field(default_factory=tuple)
    """Records above the committed offset a previous owner finished (its offset map)."""
    keyed: bool = False
    """Records were admitted out of order: commits carry the offset map."""
    map_dropped: bool = False

    def finish(self, offset: int) -> None:
        """The admitted record at ``offset`` is done: move the watermark if it can."""
        opened = self.open
        if not opened or offset < opened[0]:
            return  # finished twice
        if offset != opened[0]:
            self.done.add(offset)
            return
        opened.popleft()
        following = offset + 1
        done = self.done
        if done:
            while opened and opened[0] in done:
                first = opened.popleft()
                done.discard(first)
                following = first + 1
        watermark = opened[0] if opened else following
        if self.handled is None or watermark > self.handled:
            self.handled = watermark

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

    def admitting(self, tp: TP, first: int) -> deque[int] | None:
        """The admitted offsets of ``tp``, to append to in offset order from ``first``.

        Handed out once per slice so admitting a record costs one append.
        """
        state = self.partitions.get(tp)
        if state is None:
            return None
        state.keyed = True
        if state.handled is None:
            state.handled = first  # the map needs a committed base, even at the start
        return state.open

    def admit(self, tp: TP, offset: int) -> None:
        """``offset`` starts out of order (keyed lane); admitted in offset order."""
        opened = self.admitting(tp, offset)
        if opened is not None:
            opened.append(offset)

    def finish(self, tp: TP, offset: int) -> None:
        """The admitted record at ``offset`` is done: move the watermark if it can."""
        state = self.partitions.get(tp)
        if state is not None:  # else not ours any more
            state.finish(offset)

    def finisher(self, tp: TP) -> Callable[[int], None]:
        """:meth:`finish` for ``tp``, looked up once for a run of its records.

        If ``tp`` is revoked during the run the finishes land on the state it had,
        which is dropped: a later owner of ``tp`` does not see them.
        """
        state = self.partitions.get(tp)
        return state.finish if state is not None else _not_ours

    def out_of_order(self, tp: TP) -> bool:
        """Records of ``tp`` are admitted and not all finished (a keyed lane's)."""
        state = self.partitions.get(tp)
        return state is not None and bool(state.open)

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
        finished = merge_ranges([*_as_ranges(state.done), *state.skip])
        text = encode_metadata(state.shadow, offset, finished) if self.maps else None
        if text is None:
            if self.maps and not state.map_dropped:
                self.overflowed.append((tp, len(finished)))
            state.map_dropped = self.maps
            text = encode_shadow(state.shadow)
        else:
            state.map_dropped = False
        return state.metadata if text is None else text

    def unsaved(self, tps: set[TP]) -> dict[TP, tuple[tuple[int, str], tuple[int | None, str]]]:
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


def _not_ours(offset: int) -> None:
    """A finish for a partition that is not owned: nothing to move."""


def _as_ranges(offsets: set[int]) -> list[OffsetRange]:
    """Sorted offsets as runs of consecutive ones."""
    ranges: list[OffsetRange] = []
    start = end = -1
    for offset in sorted(offsets):
        if offset != end:
            if end > start:
                ranges.append(OffsetRange(start, end))
            start = offset
        end = offset + 1
    if end > start:
        ranges.append(OffsetRange(start, end))
    return ranges
