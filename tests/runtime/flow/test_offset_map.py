"""The offset map: records finished above the watermark, kept in the commit metadata.

Unit tests for the codec and the tracker, then the promise on real brokers: a
member that takes over reads the map back and does not run finished records again;
a broker that drops metadata (tansu) falls back to the plain watermark, and says so.
"""

from __future__ import annotations

import uuid

import anyio
import pytest
from aiokafka import TopicPartition
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from fairstream import App, Record, SchedulerConfig
from fairstream.ranges import (
    METADATA_LIMIT,
    OffsetRange,
    decode_done,
    decode_shadow,
    encode_metadata,
    merge_ranges,
)
from fairstream.runtime._kafka._admin import BrokerAdmin
from fairstream.runtime.flow._offsets import OffsetTracker
from tests.conftest import Broker
from tests.support.backends import QUICK_JOIN
from tests.support.kafka_helpers import create_topic, produce_keyed

TP = ("t", 0)


@given(
    base=st.integers(0, 10**12),
    runs=st.lists(st.tuples(st.integers(1, 10**6), st.integers(1, 10**6)), max_size=50),
)
def test_the_map_round_trips(base: int, runs: list[tuple[int, int]]) -> None:
    done, at = [], base
    for gap, length in runs:
        done.append(OffsetRange(at + gap, at + gap + length))
        at += gap + length
    metadata = encode_metadata([OffsetRange(0, 5)], base, done)
    assert metadata is not None
    assert decode_done(metadata, base) == merge_ranges(done)
    assert decode_shadow(metadata) == [OffsetRange(0, 5)]


def test_a_stale_or_foreign_map_reads_as_nothing() -> None:
    metadata = encode_metadata([], 100, [OffsetRange(102, 110)])
    assert metadata is not None
    assert decode_done(metadata, 100) == [OffsetRange(102, 110)]
    assert decode_done(metadata, 101) == []  # someone moved the offset without the map
    assert decode_done("not ours", 100) == []
    assert decode_done('{"done": [100, "!!"]}', 100) == []


def test_a_map_too_large_is_refused() -> None:
    done = [OffsetRange(i, i + 1) for i in range(1, 40_000, 2)]
    assert encode_metadata([], 0, done) is None
    assert len(encode_metadata([], 0, done[:500]) or "") <= METADATA_LIMIT


def test_tracker_commits_the_lowest_unfinished_with_the_rest_in_the_map() -> None:
    offsets = OffsetTracker()
    offsets.assign(TP, committed=10)
    assert offsets.admit_all(TP, _records(*range(10, 20)))
    for offset in (11, 12, 15, 19):
        offsets.finish(TP, offset)
    ((offset, metadata),) = offsets.pending().values()
    assert offset == 10
    assert decode_done(metadata, 10) == [
        OffsetRange(11, 13),
        OffsetRange(15, 16),
        OffsetRange(19, 20),
    ]
    offsets.finish(TP, 10)
    ((offset, metadata),) = offsets.pending().values()
    assert offset == 13
    assert decode_done(metadata, 13) == [OffsetRange(15, 16), OffsetRange(19, 20)]
    for offset in (13, 14, 16, 17, 18):
        offsets.finish(TP, offset)
    assert offsets.pending() == {TP: (20, "")}


def test_a_new_owner_keeps_the_map_it_read_until_it_passes_it() -> None:
    metadata = encode_metadata([], 10, [OffsetRange(12, 15)])
    offsets = OffsetTracker()
    offsets.assign(TP, committed=10, metadata=metadata or "")
    assert offsets.skip(TP) == (OffsetRange(12, 15),)
    assert offsets.pending() == {}  # nothing new: the map stays as committed
    assert offsets.admit_all(TP, _records(10))
    offsets.finish(TP, 10)
    ((offset, metadata),) = offsets.pending().values()
    assert (offset, decode_done(metadata, 11)) == (11, [OffsetRange(12, 15)])


def test_a_map_that_does_not_fit_falls_back_to_the_watermark() -> None:
    offsets = OffsetTracker()
    offsets.assign(TP, committed=0)
    assert offsets.admit_all(TP, _records(*range(40_000)))
    for offset in range(1, 40_000, 2):
        offsets.finish(TP, offset)
    assert offsets.pending() == {}  # the watermark is still the committed 0
    assert offsets.overflowed == [(TP, 20_000)]
    offsets.finish(TP, 0)
    assert offsets.pending() == {TP: (2, "")}
    assert offsets.overflowed == [(TP, 20_000)], "the fallback is logged once"


def _records(*offsets: int) -> list[Record[bytes]]:
    return [Record(TP[0], TP[1], o, None, b"", (), 0) for o in offsets]


def test_a_slice_with_gaps_is_admitted_and_the_gaps_hold_nothing_back() -> None:
    offsets = OffsetTracker()
    offsets.assign(TP, committed=10)
    assert offsets.admit_all(TP, _records(10, 11, 14, 15))  # 12, 13: no records there
    finish = offsets.finisher(TP)
    finish(_records(14, 15))  # not consecutive with the head: record by record
    ((offset, metadata),) = offsets.pending().values()
    assert (offset, decode_done(metadata, 10)) == (10, [OffsetRange(12, 16)])
    assert offsets.out_of_order(TP)
    finish(_records(10, 11))
    assert offsets.pending() == {TP: (16, "")}
    assert not offsets.out_of_order(TP)
    assert not offsets.admit_all(("t", 1), _records(0))  # not owned


def test_a_run_finished_at_once_moves_the_watermark_only_from_the_head() -> None:
    offsets = OffsetTracker()
    offsets.assign(TP, committed=0)
    offsets.admit_all(TP, _records(*range(10)))
    finish = offsets.finisher(TP)
    finish(_records(3, 4, 5))
    ((offset, metadata),) = offsets.pending().values()
    assert (offset, decode_done(metadata, 0)) == (0, [OffsetRange(3, 6)])
    finish(_records(0, 1, 2))
    assert offsets.next_commit(TP) == 6
    finish(_records(0, 1))  # finished twice: nothing moves back
    assert offsets.next_commit(TP) == 6
    offsets.admit_all(TP, _records(*range(5, 12)))  # read again from 5: only 10, 11 are new
    finish(_records(6, 7, 8, 9))
    assert offsets.next_commit(TP) == 10


def test_the_watermark_and_map_hold_across_dropping_the_finished_prefix() -> None:
    offsets = OffsetTracker()
    offsets.assign(TP, committed=0)
    finish = offsets.finisher(TP)
    offsets.admit_all(TP, _records(*range(10_000)))
    finish(_records(*range(5_000)))
    finish(_records(6_000))
    offsets.admit_all(TP, _records(10_000))  # drops the 5,000 finished below the head
    ((offset, metadata),) = offsets.pending().values()
    assert (offset, decode_done(metadata, 5_000)) == (5_000, [OffsetRange(6_000, 6_001)])
    finish(_records(*range(5_000, 6_000)))
    assert offsets.next_commit(TP) == 6_001
    finish(_records(*range(6_001, 10_001)))
    assert offsets.pending() == {TP: (10_001, "")}


async def _committed(broker: Broker, group_id: str, topic: str) -> tuple[int, str] | None:
    async with BrokerAdmin(broker.bootstrap) as admin:
        found = await admin.committed_offsets(group_id, [TopicPartition(topic, 0)])
    c = found[TopicPartition(topic, 0)]
    return None if c is None else (c.offset, c.metadata)


def _member(broker: Broker, group_id: str, topic: str, handled: list[str], stuck: bool) -> App:
    """A key-ordered member; with ``stuck`` the record ``k0:0`` never finishes."""
    app = App(
        bootstrap=broker.bootstrap,
        group_id=group_id,
        instance_id=broker.instance_id("member"),
        consumer=QUICK_JOIN,
        scheduler=SchedulerConfig(ordering="key", commit_interval=0.1, shutdown_timeout=0.5),
    )

    @app.subscriber(topic)
    async def handle(record: Record[str]) -> None:
        if stuck and record.value == "k0:0":
            await anyio.sleep_forever()
        handled.append(record.value)

    return app


async def _produce_keyed(broker: Broker, topic: str) -> None:
    """Keys k0..k9, ten records each, k0's first: offsets 0..9 are k0's."""
    records = [(0, b"k%d" % k, f"k{k}:{s}".encode()) for k in range(10) for s in range(10)]
    await produce_keyed(broker.bootstrap, topic, records)


@pytest.mark.parametrize("engine", ["noida", "tansu"])
async def test_the_next_owner_skips_what_the_map_says_is_finished(
    engine: str, group_id: str, request: pytest.FixtureRequest
) -> None:
    broker: Broker = request.getfixturevalue(engine)
    topic = f"om-{uuid.uuid4().hex[:10]}"
    await create_topic(broker.bootstrap, topic, 1)
    await _produce_keyed(broker, topic)
    first: list[str] = []
    others = {f"k{k}:{s}" for k in range(1, 10) for s in range(10)}

    with capture_logs() as logs:
        async with _member(broker, group_id, topic, first, stuck=True):
            with anyio.fail_after(30):
                while set(first) != others:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
        # Stopped with k0:0 stuck: the watermark is 0, the map holds offsets 10..99.
    commit = await _committed(broker, group_id, topic)
    assert commit is not None and commit[0] == 0

    second: list[str] = []
    async with _member(broker, group_id, topic, second, stuck=False):
        with anyio.fail_after(30):
            while len(set(second)) < (10 if broker.keeps_commit_metadata else 100):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        with anyio.fail_after(10):
            while (await _committed(broker, group_id, topic) or (0, ""))[0] != 100:  # noqa: ASYNC110
                await anyio.sleep(0.1)

    if broker.keeps_commit_metadata:
        assert decode_done(commit[1], 0) == [OffsetRange(10, 100)]
        assert second == [f"k0:{s}" for s in range(10)], "finished records ran again"
    else:
        assert [e["event"] for e in logs].count("offset_map_unavailable") == 1
        assert sorted(second) == sorted(others | {f"k0:{s}" for s in range(10)})
