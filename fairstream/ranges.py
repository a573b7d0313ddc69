"""Offset ranges and the commit-metadata codec for open KIP-333 shadow ranges.

A leaf module: the runtime writes these ranges into the group's commit metadata,
the Spark backfill and ``fairstream lag`` read them back, and neither may import
the other, so the format lives here.

The metadata is compact JSON, ``{"shadow": [[start, end], ...], "done": [base,
"runs"]}``, both keys optional. ``shadow`` holds half-open ranges below the
committed offset still owed by a KIP-333 shadow, sorted and merged. ``done`` is the
offset map of ``ordering="key"``/``"none"``: records above the committed offset
``base`` that already finished, as run lengths (unfinished, finished, unfinished,
... counted from ``base``) written as unsigned LEB128 varints in URL-safe base64.
A map whose ``base`` is not the committed offset is stale and ignored. Brokers cap
commit metadata (Kafka's default ``offset.metadata.max.bytes`` is 4096), so the
encoders refuse to produce more than :data:`METADATA_LIMIT` bytes: the caller must
then not jump, or commit without the map.

On the wire the JSON is followed by one NUL (:func:`to_commit`, :func:`from_commit`):
confluent-kafka, the Spark side's client, reads metadata as a C string.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "METADATA_LIMIT",
    "OffsetRange",
    "decode_done",
    "decode_shadow",
    "encode_metadata",
    "encode_shadow",
    "from_commit",
    "is_ours",
    "merge_ranges",
    "to_commit",
]

METADATA_LIMIT = 4000
"""Bytes of commit metadata we allow ourselves (Kafka's default limit is 4096)."""

_TERMINATOR = "\x00"
_JSON = json.JSONDecoder()


def to_commit(metadata: str) -> str:
    """``metadata`` as it is committed: ours followed by one NUL, other tools' as read.

    confluent-kafka (librdkafka's Python client, which the Spark source reads commits
    with) hands commit metadata to Python as a C string. Without a NUL in the stored
    bytes it runs past their end and appends whatever follows in its memory:
    ``{"shadow":[[0,600]]}xxx`` after some allocations, or bytes that are not UTF-8,
    which fail as it decodes them. Its own commits carry the NUL for that reason, so
    with it both clients write the same bytes.
    """
    if metadata and not metadata.endswith(_TERMINATOR) and is_ours(metadata):
        return metadata + _TERMINATOR
    return metadata


def from_commit(metadata: str | None) -> str:
    """Commit metadata as read back: ours without its NUL (:func:`to_commit`), other
    tools' as it is, so that committing it back leaves it unchanged."""
    text = metadata or ""
    return text[:-1] if text.endswith(_TERMINATOR) and is_ours(text[:-1]) else text


def _payload(metadata: str | None) -> dict[str, Any] | None:
    """The JSON object that ``metadata`` starts with, if any. What follows it is not
    ours: the NUL terminator, or what a C-string reader ran into (:func:`to_commit`)."""
    if not metadata:
        return None
    try:
        payload, _ = _JSON.raw_decode(metadata)
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


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
    so it yields no range rather than an error.
    """
    payload = _payload(metadata)
    if payload is None:
        return []
    try:
        pairs = payload.get("shadow", [])
        return merge_ranges(OffsetRange(int(a), int(b)) for a, b in pairs)
    except (ValueError, TypeError):
        return []


def _runs(base: int, done: Sequence[OffsetRange]) -> str:
    out = bytearray()
    at = base
    for r in done:
        for number in (r.start - at, len(r)):
            while number >= 0x80:
                out.append((number & 0x7F) | 0x80)
                number >>= 7
            out.append(number)
        at = r.end
    return base64.urlsafe_b64encode(bytes(out)).decode().rstrip("=")


def _ranges(base: int, runs: str) -> list[OffsetRange]:
    data = base64.urlsafe_b64decode(runs + "=" * (-len(runs) % 4))
    numbers: list[int] = []
    number = shift = 0
    for byte in data:
        number |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            numbers.append(number)
            number = shift = 0
    found: list[OffsetRange] = []
    at = base
    for gap, length in zip(numbers[::2], numbers[1::2], strict=False):
        found.append(OffsetRange(at + gap, at + gap + length))
        at += gap + length
    return found


def encode_metadata(
    shadow: Iterable[OffsetRange], base: int, done: Iterable[OffsetRange]
) -> str | None:
    """Metadata for open shadow ranges and the finished ranges above ``base``.

    ``None`` if it would not fit :data:`METADATA_LIMIT`. Nothing to record encodes
    as the empty string.
    """
    open_ranges = merge_ranges(shadow)
    finished = [
        OffsetRange(max(r.start, base + 1), r.end) for r in merge_ranges(done) if r.end > base + 1
    ]
    payload: dict[str, object] = {}
    if open_ranges:
        payload["shadow"] = [[r.start, r.end] for r in open_ranges]
    if finished:
        payload["done"] = [base, _runs(base, finished)]
    if not payload:
        return ""
    text = json.dumps(payload, separators=(",", ":"))
    return text if len(text.encode()) <= METADATA_LIMIT else None


def decode_done(metadata: str | None, committed: int | None) -> list[OffsetRange]:
    """The finished ranges above ``committed`` in an offset map; none if stale or foreign."""
    payload = _payload(metadata)
    if payload is None or committed is None:
        return []
    try:
        base, runs = payload["done"]
        if base != committed or not isinstance(runs, str):
            return []
        return _ranges(committed, runs)
    except (ValueError, TypeError, KeyError, binascii.Error):
        return []


def is_ours(metadata: str) -> bool:
    """Empty, or the JSON this module writes (other tools' metadata is kept as is)."""
    if not metadata.rstrip(_TERMINATOR):
        return True
    payload = _payload(metadata)
    return payload is not None and bool(payload) and set(payload) <= {"shadow", "done"}
