"""Error text: one line, the exception's name once."""

from __future__ import annotations

import pytest
from aiokafka.errors import CommitFailedError, KafkaConnectionError

from fairstream.errors import describe


def test_a_multiline_aiokafka_error_reads_as_one_line_with_its_summary() -> None:
    summary = "Commit cannot be completed since the group has already rebalanced"
    text = describe(CommitFailedError(summary))
    assert text == f"CommitFailedError: {summary}"


def test_the_name_is_not_repeated_and_whitespace_collapses() -> None:
    assert describe(KafkaConnectionError("no route")) == "KafkaConnectionError: no route"
    assert describe(ValueError("bad\n    value")) == "ValueError: bad value"
    assert describe(RuntimeError()) == "RuntimeError"


def test_describe_keeps_a_decode_errors_sentence() -> None:
    """Its args are an encoding, bytes, positions and a reason: the shortest is no summary."""
    with pytest.raises(UnicodeDecodeError) as caught:
        b"ok\xff".decode()
    assert describe(caught.value) == (
        "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 2: invalid start byte"
    )


def test_describe_keeps_the_summary_of_an_error_made_of_messages() -> None:
    error = CommitFailedError("the summary", "a paragraph\n   of advice that runs on")
    assert describe(error) == "CommitFailedError: the summary"
