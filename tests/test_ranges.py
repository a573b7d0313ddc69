"""The commit-metadata codec at the wire: one NUL after the JSON, and a read that
ignores what follows the JSON (what a C-string reader may run into)."""

from __future__ import annotations

import pytest

from fairstream.ranges import (
    OffsetRange,
    decode_done,
    decode_shadow,
    encode_metadata,
    from_commit,
    is_ours,
    to_commit,
)

SHADOW = [OffsetRange(0, 600), OffsetRange(700, 750)]
DONE = [OffsetRange(1_002, 1_010)]


def test_commit_metadata_carries_one_nul_and_reads_back_without_it() -> None:
    text = encode_metadata(SHADOW, 1_000, DONE) or ""
    assert to_commit(text) == text + "\x00"
    assert to_commit(to_commit(text)) == text + "\x00"
    assert from_commit(to_commit(text)) == text
    assert to_commit("") == "" and from_commit(None) == ""


def test_other_tools_metadata_round_trips_unchanged() -> None:
    for text in ["checkpoint-17", "checkpoint-17\x00", '{"owner": "etl"}']:
        assert to_commit(text) == text
        assert from_commit(text) == text


@pytest.mark.parametrize("after", ["", "\x00", "\x00\x00", "xxx", "d", "\x11", "P\x7f", "\x00junk"])
def test_what_follows_the_json_is_not_read(after: str) -> None:
    text = (encode_metadata(SHADOW, 1_000, DONE) or "") + after
    assert decode_shadow(text) == SHADOW
    assert decode_done(text, 1_000) == DONE
    assert is_ours(text)


def test_foreign_metadata_is_still_foreign() -> None:
    for text in ["checkpoint-17", "[1, 2]", '{"owner": "etl"}', "\x00x"]:
        assert decode_shadow(text) == []
        assert decode_done(text, 0) == []
        assert not is_ours(text)
    assert is_ours("") and is_ours("\x00")
