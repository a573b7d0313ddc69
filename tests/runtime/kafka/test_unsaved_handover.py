"""A refused revoke commit's progress goes to the partition's next owner.

noida refuses a commit racing a rebalance, so a member's revoke commit fails when a
second member joins. The first member reports what it could not commit at its join,
the leader hands it to whoever gets the partition, and that member commits it and
starts there: a partition that moves repeats nothing its last owner handled.
"""

from __future__ import annotations

import uuid
from collections import Counter

import anyio
import pytest
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata
from structlog.testing import capture_logs

from fairstream import App, Record, SchedulerConfig
from fairstream.assign import Assignment
from fairstream.runtime._kafka._member_data import (
    decode_handover,
    encode_handover,
    encode_owned,
    read_reports,
    reported_owners,
    route_unsaved,
)
from fairstream.runtime.flow._offsets import Unsaved
from tests.conftest import Broker
from tests.support.kafka_helpers import create_topic, produce
from tests.support.live_traffic import wait_until

PER_PARTITION = 150


def _member(owned: dict[str, list[int]], unsaved: Unsaved) -> ConsumerProtocolMemberMetadata:
    return ConsumerProtocolMemberMetadata(0, ["t"], encode_owned(owned, 0, unsaved))


def test_the_leader_hands_each_entry_to_the_partitions_next_owner() -> None:
    entry = ((120, "meta"), (40, ""))
    members = {
        "a": _member({"t": [0, 1]}, {("t", 1): entry, ("t", 0): ((9, ""), (None, ""))}),
        "b": _member({}, {}),
    }
    reports = read_reports(members)
    owned = Assignment({"a": {"t": (0, 1)}, "b": {}})
    assert reported_owners(reports, {"t": 2}) == (owned, frozenset())

    plan = Assignment({"a": {"t": (0,)}, "b": {"t": (1,)}})
    routed = route_unsaved(reports, plan)
    assert routed == {"a": {("t", 0): ((9, ""), (None, ""))}, "b": {("t", 1): entry}}
    assert decode_handover(encode_handover(routed["b"])) == {("t", 1): entry}
    assert encode_handover({}) == b""


def test_entries_claimed_twice_or_for_nobody_are_dropped() -> None:
    members = {
        "a": _member({}, {("t", 0): ((10, ""), (0, "")), ("t", 2): ((5, ""), (0, ""))}),
        "b": _member({}, {("t", 0): ((12, ""), (0, ""))}),
    }
    plan = Assignment({"a": {"t": (0, 1)}, "b": {}})
    assert route_unsaved(read_reports(members), plan) == {}


def test_user_data_that_is_not_ours_hands_nothing_over() -> None:
    members = {
        "a": ConsumerProtocolMemberMetadata(0, ["t"], b'{"t":[0],"#unsaved":[["t",0]]}'),
        "b": ConsumerProtocolMemberMetadata(0, ["t"], b"\x00\x01"),
    }
    with capture_logs() as logs:
        reports = read_reports(members)
        assert decode_handover(b"not json") == {}
    assert route_unsaved(reports, Assignment({"a": {"t": (0,)}})) == {}
    assert reported_owners(reports, {"t": 1}) == (None, frozenset())
    assert [e["event"] for e in logs] == [
        "owned_partitions_unreadable",
        "owned_partitions_unreadable",
        "handover_unreadable",
    ]


def _app(broker: Broker, group_id: str, topic: str, name: str, seen: Counter[str]) -> App:
    # No periodic commit before the rebalance: all the first member handled rides on
    # its revoke commit, which noida refuses.
    app = App(
        bootstrap=broker.bootstrap,
        group_id=group_id,
        instance_id=name,
        scheduler=SchedulerConfig(commit_interval=60),
    )

    @app.subscriber(topic)
    async def handle(record: Record[str]) -> None:
        seen[record.value] += 1
        await anyio.sleep(0.05)

    return app


@pytest.mark.broker
async def test_a_partition_that_moves_starts_where_its_last_owner_ended(
    noida: Broker, group_id: str
) -> None:
    topic = f"ho-{uuid.uuid4().hex[:10]}"
    await create_topic(noida.bootstrap, topic, 2)
    values = [(i % 2, f"v{i}".encode()) for i in range(2 * PER_PARTITION)]
    await produce(noida.bootstrap, topic, values)
    seen: Counter[str] = Counter()

    with capture_logs() as logs:
        async with _app(noida, group_id, topic, "first", seen) as first:
            with anyio.fail_after(30):
                await first.wait_ready()
            await wait_until(lambda: sum(seen.values()) >= 60, 30)
            async with _app(noida, group_id, topic, "second", seen):
                await wait_until(
                    lambda: len(seen) == len(values), 60, lambda: f"{len(seen)} records handled"
                )

    events = [e["event"] for e in logs]
    assert "commit_failed" in events, "noida accepted the revoke commit: nothing to hand over"
    handed = [
        (e["partition"], e["offset"]) for e in logs if e["event"] == "unsaved_progress_committed"
    ]
    assert handed, "no unsaved progress was committed by the partition's next owner"
    twice = sorted(v for v, n in seen.items() if n > 1)
    assert not twice, f"{len(twice)} records handled twice: {twice[:10]}"


def test_a_report_keeps_its_commit_metadata_within_a_bound() -> None:
    big = "m" * 3_000  # an offset map near the commit metadata limit
    unsaved: Unsaved = {("t", p): ((p + 10, big), (p, big)) for p in range(100)}
    with capture_logs() as logs:
        reports = read_reports({"a": _member({}, unsaved)})
    reported = reports["a"].unsaved
    assert 0 < len(reported) < 100
    assert all(reported[tp] == unsaved[tp] for tp in reported)
    assert [e["partitions"] for e in logs if e["event"] == "unsaved_progress_left_out"] == [
        100 - len(reported)
    ]
