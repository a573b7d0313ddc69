"""The record a handler receives.

A NamedTuple rather than a dataclass: it is immutable and typed like one, but
building it costs a third as much, and one is built for every record consumed.
"""

from __future__ import annotations

from typing import Generic, NamedTuple, TypeVar

__all__ = ["Headers", "Record"]

T = TypeVar("T")

Headers = tuple[tuple[str, bytes], ...]


class Record(NamedTuple, Generic[T]):
    """One Kafka record with its value decoded for the handler.

    ``replay`` is true for records re-read by a KIP-333 shadow task, i.e. older
    than records the handler may already have seen for this partition.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: T
    headers: Headers
    timestamp: int
    raw: bytes | None = None
    replay: bool = False
