"""Commit watermarks: what may be committed for each partition.

At-least-once means an offset is committed only when every record before it in
the partition was handled (or dead-lettered). Records of a partition are handled
in order, one dispatch at a time, so the watermark is simply the offset after
the last handled record; this module keeps it, and what was last committed, per
partition. Pure bookkeeping: the engine does the committing.
"""

from __future__ import annotations

from dataclasses import dataclass

from fairstream.runtime._scheduler import TP

__all__ = ["OffsetTracker", "PartitionOffsets"]


@dataclass(slots=True)
class PartitionOffsets:
    """``handled`` is the next offset to commit; ``committed`` what the broker has."""

    handled: int | None = None
    committed: int | None = None
    metadata: str = ""
    committed_metadata: str = ""

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

    def assign(self, tp: TP, committed: int | None, metadata: str = "") -> None:
        self.partitions[tp] = PartitionOffsets(
            committed=committed, metadata=metadata, committed_metadata=metadata
        )

    def advance(self, tp: TP, next_offset: int) -> None:
        """Every record of ``tp`` before ``next_offset`` is done."""
        state = self.partitions.get(tp)
        if state is not None and (state.handled is None or next_offset > state.handled):
            state.handled = next_offset

    def set_metadata(self, tp: TP, metadata: str) -> None:
        state = self.partitions.get(tp)
        if state is not None:
            state.metadata = metadata

    def pending(self, tps: set[TP] | None = None) -> dict[TP, tuple[int, str]]:
        """Offsets (and metadata) that differ from the last successful commit."""
        pending: dict[TP, tuple[int, str]] = {}
        for tp, state in self.partitions.items():
            offset = state.next_commit
            if offset is not None and state.dirty and (tps is None or tp in tps):
                pending[tp] = (offset, state.metadata)
        return pending

    def committed(self, offsets: dict[TP, tuple[int, str]]) -> None:
        for tp, (offset, metadata) in offsets.items():
            state = self.partitions.get(tp)
            if state is not None:
                state.committed = offset
                state.committed_metadata = metadata

    def forget(self, tps: set[TP]) -> None:
        for tp in tps:
            self.partitions.pop(tp, None)
