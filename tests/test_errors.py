"""Error text: one line, the exception's name once."""

from __future__ import annotations

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
