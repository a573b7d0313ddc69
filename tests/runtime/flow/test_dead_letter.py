"""The copies tried for a dead-letter topic: whole first, then shedding the largest part."""

from __future__ import annotations

from fairstream.runtime._record import Record
from fairstream.runtime.flow._dead_letter import dead_letter_copies, dead_letter_headers

ERROR = ValueError("bad")


def _record(
    key: bytes | None, value: bytes | None, headers: tuple[tuple[str, bytes], ...]
) -> Record[bytes]:
    return Record(
        topic="orders",
        partition=2,
        offset=7,
        key=key,
        value=value,
        raw=value,
        headers=headers,
        timestamp=0,
    )


def _notes(headers: tuple[tuple[str, bytes], ...]) -> dict[str, bytes]:
    return {k: v for k, v in headers if k.endswith(".dropped")}


def test_the_largest_part_goes_first_and_each_is_recorded() -> None:
    record = _record(b"kk", b"v" * 10, (("trace", b"t" * 95),))
    copies = dead_letter_copies(record, ERROR, 3)

    assert [c.dropped for c in copies] == [
        (),
        (("headers", 100),),
        (("headers", 100), ("value", 10)),
        (("headers", 100), ("value", 10), ("key", 2)),
    ]
    assert copies[0].headers == dead_letter_headers(record, ERROR, 3)
    assert (copies[1].key, copies[1].value) == (b"kk", b"v" * 10)
    assert _notes(copies[1].headers) == {"fairstream.headers.dropped": b"100"}
    assert ("trace", b"t" * 95) not in copies[1].headers
    assert (copies[3].key, copies[3].value) == (None, None)
    assert _notes(copies[3].headers) == {
        "fairstream.headers.dropped": b"100",
        "fairstream.value.dropped": b"10",
        "fairstream.key.dropped": b"2",
    }
    # The facts of the failure are in every copy.
    for copy in copies:
        assert ("fairstream.source.offset", b"7") in copy.headers
        assert ("fairstream.error.type", b"ValueError") in copy.headers


def test_empty_parts_are_never_dropped() -> None:
    copies = dead_letter_copies(_record(None, b"v" * 50, ()), ERROR, 1)
    assert [c.dropped for c in copies] == [(), (("value", 50),)]
