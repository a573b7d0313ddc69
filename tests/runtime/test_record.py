"""Turning fetched records into Records: pure, no broker."""

from __future__ import annotations

from aiokafka.structs import ConsumerRecord

from fairstream import Record
from fairstream.runtime._record import as_records, with_value


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
