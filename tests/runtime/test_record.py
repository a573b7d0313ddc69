"""Turning fetched records into Records: pure, no broker."""

from __future__ import annotations

from aiokafka.structs import ConsumerRecord

from fairstream import Record
from fairstream.runtime._record import as_records, record_bytes, with_value


def _fetched(offset: int, value: bytes | None) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic="t",
        partition=3,
        offset=offset,
        timestamp=1_000 + offset,
        timestamp_type=0,
        key=b"k",
        value=value,
        checksum=None,
        serialized_key_size=1,
        serialized_value_size=-1 if value is None else len(value),
        headers=[("h", b"1")],  # type: ignore[arg-type]
    )


def test_aiokafka_records_are_copied_with_the_replay_flag() -> None:
    records = as_records([_fetched(5, b"v"), _fetched(6, None)], replay=True)

    assert records == [
        Record("t", 3, 5, b"k", b"v", (("h", b"1"),), 1_005, b"v", True),
        Record("t", 3, 6, b"k", None, (("h", b"1"),), 1_006, None, True),
    ]


def test_records_pass_through_as_they_are() -> None:
    built = as_records([_fetched(1, b"v")])

    assert as_records(built) is built
    assert as_records([]) == []


def test_with_value_decodes_and_keeps_the_bytes() -> None:
    (record,) = as_records([_fetched(9, b'{"a": 1}')])

    decoded = with_value(record, {"a": 1})

    assert decoded.value == {"a": 1}
    assert decoded.raw == b'{"a": 1}'
    assert decoded._replace(value=record.value) == record


def test_queue_bytes_are_estimated_from_a_sample_of_the_batch() -> None:
    alike = as_records([_fetched(i, b"x" * 100) for i in range(1_000)])
    tombstones = as_records([_fetched(i, None) for i in range(10)])
    big = as_records([_fetched(i, b"x" * 1_000_000) for i in range(3)])

    assert record_bytes(alike) == 1_000 * (100 + 64)
    assert record_bytes(tombstones) == 10 * 64
    assert record_bytes(big) == 3 * (1_000_000 + 64)
    assert record_bytes([]) == 0
