"""Offset ranges and the commit-metadata codec for open KIP-333 shadow ranges.

A leaf module: the runtime writes these ranges into the group's commit metadata,
the Spark backfill and ``fairstream lag`` read them back, and neither may import
the other, so the format lives here.

The metadata is compact JSON, ``{"shadow": [[start, end], ...]}``, half-open
ranges sorted and merged. Brokers cap commit metadata (Kafka's default
``offset.metadata.max.bytes`` is 4096), so :func:`encode_shadow` refuses to
produce more than :data:`METADATA_LIMIT` bytes and the caller must then not jump.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "METADATA_LIMIT",
    "OffsetRange",
    "decode_shadow",
    "encode_shadow",
    "merge_ranges",
]

METADATA_LIMIT = 4000
"""Bytes of commit metadata we allow ourselves (Kafka's default limit is 4096)."""


@dataclass(frozen=True, slots=True, order=True)
class OffsetRange:
    """The half-open offset range ``[start, end)`` of one partition."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise ValueError(f"invalid offset range [{self.start}, {self.end})")

    def __len__(self) -> int:
        return self.end - self.start


def merge_ranges(ranges: Iterable[OffsetRange]) -> list[OffsetRange]:
    """Sort, drop empty ranges, and merge overlapping or touching ones."""
    merged: list[OffsetRange] = []
    for current in sorted(r for r in ranges if len(r)):
        if merged and current.start <= merged[-1].end:
            last = merged[-1]
            merged[-1] = OffsetRange(last.start, max(last.end, current.end))
        else:
            merged.append(current)
    return merged


def encode_shadow(ranges: Iterable[OffsetRange]) -> str | None:
    """Commit metadata for these open ranges, or ``None`` if it would not fit.

    No open range encodes as the empty string, which is what a plain commit carries.
    """
    merged = merge_ranges(ranges)
    if not merged:
        return ""
    text = json.dumps({"shadow": [[r.start, r.end] for r in merged]}, separators=(",", ":"))
    return text if len(text.encode()) <= METADATA_LIMIT else None


def decode_shadow(metadata: str | None) -> list[OffsetRange]:
    """The open ranges recorded in commit metadata; foreign metadata reads as none.

    Metadata written by other tools (not our JSON shape) is not ours to interpret,
    so it yields no range rather than an error. Trailing NUL bytes, which some
    brokers pad metadata with, are ignored.
    """
    metadata = (metadata or "").rstrip("\x00")
    if not metadata:
        return []
    try:
        payload = json.loads(metadata)
        pairs = payload["shadow"] if isinstance(payload, dict) else []
        return merge_ranges(OffsetRange(int(a), int(b)) for a, b in pairs)
    except (ValueError, TypeError, KeyError):
        return []
