"""The record a handler receives, and how fetched records become one.

A NamedTuple rather than a dataclass: it is immutable and typed like one, but
building it costs a third as much, and one is built for every record consumed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Generic, NamedTuple

from typing_extensions import TypeVar

__all__ = [
    "TP",
    "Headers",
    "Record",
    "as_records",
    "publish_bytes",
    "record_bytes",
    "record_from",
    "with_key",
    "with_value",
]

T = TypeVar("T")
K = TypeVar("K", default=bytes | None)

TP = tuple[str, int]
"""A partition: (topic, partition). Plain tuples hash and compare fast, and every
runtime room keys its per-partition state by one."""

Headers = tuple[tuple[str, bytes], ...]


class Record(NamedTuple, Generic[T, K]):
    """One Kafka record with its value (and, with a key decoder, its key) decoded.

    ``Record[V]`` is ``Record[V, bytes | None]``: the key as it was sent.
    ``Record[V, str]`` (or ``dict``, a pydantic model) asks for a decoded key.
    ``replay`` is true for records re-read by a KIP-333 shadow task, i.e. older
    than records the handler may already have seen for this partition.
    """

    topic: str
    partition: int
    offset: int
    key: K
    value: T
    headers: Headers
    timestamp: int
    raw: bytes | None = None
    replay: bool = False


# Record(...) runs NamedTuple's generated __new__ (keyword handling, defaults);
# tuple.__new__ with the fields in order builds the same record for a third less.
_new_record = tuple.__new__


def record_from(replay: bool, where: Any, fetched: Any) -> Record[bytes]:
    """The undecoded Record of ``fetched``, from partition ``where``.

    ``fetched`` is aiokafka's ``ConsumerRecord`` or its wire record; ``where`` has
    ``topic`` and ``partition`` (a ``TopicPartition``, or the ``ConsumerRecord``).
    The argument order suits ``partial(record_from, replay)`` as aiokafka's builder.
    """
    value = fetched.value
    return _new_record(
        Record,
        (
            where.topic,
            where.partition,
            fetched.offset,
            fetched.key,
            value,
            tuple(fetched.headers),
            fetched.timestamp,
            value,
            replay,
        ),
    )


def as_records(fetched: list[Any], *, replay: bool = False) -> list[Record[bytes]]:
    """``fetched`` as undecoded Records: as it is if it holds Records already.

    A batch is all Records when aiokafka built them (``_direct_records``), or all aiokafka
    ``ConsumerRecord``s (a buffer aiokafka built without us, the in-memory broker),
    which are copied here.
    """
    if not fetched or type(fetched[0]) is Record:
        return fetched
    return [record_from(replay, r, r) for r in fetched]


def with_value(record: Record[bytes], value: T) -> Record[T]:
    """``record`` with its value decoded (``raw`` keeps the bytes)."""
    return _new_record(
        Record,
        (
            record.topic,
            record.partition,
            record.offset,
            record.key,
            value,
            record.headers,
            record.timestamp,
            record.raw,
            record.replay,
        ),
    )


def with_key(record: Record[T], key: Any) -> Record[T, Any]:
    """``record`` with its key decoded."""
    return _new_record(
        Record,
        (
            record.topic,
            record.partition,
            record.offset,
            key,
            record.value,
            record.headers,
            record.timestamp,
            record.raw,
            record.replay,
        ),
    )


_SAMPLED = 8


def record_bytes(records: Sequence[Record[bytes]]) -> int:
    """Queue bytes charged for fetched records: their values plus a fixed overhead each.

    Estimated from about ``_SAMPLED`` records spread over the batch. The byte bounds are
    memory guards, and records of one fetch are mostly alike; summing every value
    cost 2% of the consumer's time. The record bounds are exact.
    """
    sample = records[:: len(records) // _SAMPLED or 1]
    values = sum(len(r.raw) for r in sample if r.raw is not None)
    return len(records) * (values // len(sample) + 64) if sample else 0


def publish_bytes(value: object) -> bytes | None:
    """Bytes for ``publish``: bytes as given, str as UTF-8, models and JSON data as JSON."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    dump = getattr(value, "model_dump_json", None)
    if callable(dump):
        return str(dump()).encode()
    return json.dumps(value, separators=(",", ":")).encode()
