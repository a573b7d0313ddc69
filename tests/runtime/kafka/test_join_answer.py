"""The leader plans with the generations members report and the static members'
instance ids, both from the JoinGroup answer (``fairstream/runtime/_kafka/_join.py``'s
``report_join``, a guarded hook on aiokafka's private group coordinator)."""

from __future__ import annotations

import inspect
import json
import uuid

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from aiokafka.protocol.group import JoinGroupResponse_v2, JoinGroupResponse_v5
from structlog.testing import capture_logs

from fairstream.assign import Assignment
from fairstream.runtime._kafka._assignors import PlanningAssignor, make_assignor
from fairstream.runtime._kafka._join import (
    _MEMBER_FIELDS,
    _member_fields,
    instance_ids,
    report_join,
)
from fairstream.runtime._kafka._member_data import (
    decode_generation,
    encode_handover,
    read_reports,
    reported_owners,
)
from tests.conftest import Broker
from tests.runtime.kafka.test_assignors import cluster
from tests.support.kafka_helpers import create_topic
from tests.support.live_traffic import wait_until


def test_aiokafka_still_has_the_join_answer_this_fairstream_reads() -> None:
    """If this fails, aiokafka changed: fix ``report_join`` (it now stands aside)."""
    assert _member_fields(JoinGroupResponse_v5) == _MEMBER_FIELDS
    assert list(inspect.signature(GroupCoordinator._perform_assignment).parameters) == [
        "self",
        "response",
    ]
    static = [("m1", "pod-1", b""), ("m2", "", b"")]
    answer = JoinGroupResponse_v5(0, 0, 4, "range", "m1", "m1", static)
    assert instance_ids(answer) == {"m1": "pod-1"}
    assert instance_ids(JoinGroupResponse_v2(0, 0, 4, "range", "m1", "m1", [("m1", b"")])) == {}
    with capture_logs() as logs:
        assert report_join(object(), make_assignor("range")) is False
    assert [e["event"] for e in logs] == ["join_answer_unread"]


def test_a_member_of_todays_format_counts_as_generation_minus_one() -> None:
    # Today's user data: owned partitions and the restart count under "" (no generation).
    today = ConsumerProtocolMemberMetadata(0, ["t"], b'{"":[1],"t":[0,1]}')
    fresh = make_assignor("sticky")
    fresh.assigned("fairstream-sticky", _given({"t": [1]}, generation=0))
    reports = read_reports({"old": today, "new": fresh.metadata(["t"])})
    assert (reports["old"].generation, reports["new"].generation) == (-1, 0)
    previous, contested = reported_owners(reports, {"t": 2})
    assert previous == Assignment({"old": {"t": (0,)}, "new": {"t": (1,)}})
    assert contested == frozenset()
    # ... and a leader of today's format reads the new user data: every value a list of
    # ints (the generation under a name no topic has), the assignment's under "#unsaved".
    new = json.loads(fresh.metadata(["t"]).user_data)
    assert new == {"t": [1], "#generation": [0]}
    assert json.loads(encode_handover({}, 4)) == {"#generation": [4], "#unsaved": []}


def _given(owned: dict[str, list[int]], *, generation: int) -> ConsumerProtocolMemberAssignment:
    """An assignment as a leader of ``generation`` hands it out."""
    return ConsumerProtocolMemberAssignment(0, list(owned.items()), encode_handover({}, generation))


def test_the_leader_hands_out_the_generation_and_keeps_the_newest_claim() -> None:
    members = {m: make_assignor("sticky") for m in ("m0", "m1", "m2")}
    members["m0"].assigned("fairstream-sticky", _given({"a": [0, 1, 2]}, generation=6))
    members["m1"].assigned("fairstream-sticky", _given({"a": [0, 1]}, generation=5))  # stale
    leader = members["m0"]
    leader.joining(7, {"m2": "pod-2", "gone": "pod-9"})
    metadata = {m: a.metadata(["a"]) for m, a in members.items()}
    result = leader.assign(cluster({"a": 3}), metadata)
    record = leader.last_plan
    assert record is not None and record.generation == 7
    assert record.previous == Assignment({"m0": {"a": (0, 1, 2)}, "m1": {}, "m2": {}})
    assert record.snapshot.instance_ids == {"m2": "pod-2"}
    assert {decode_generation(r.user_data) for r in result.values()} == {7}


def test_a_cooperative_leader_gives_a_contested_partition_to_no_one() -> None:
    members = {m: make_assignor("sticky", cooperative=True) for m in ("m0", "m1", "m2")}
    for member_id in ("m0", "m1"):  # both claim a[0] from generation 5: both may read it
        members[member_id].assigned("fairstream-sticky-coop", _given({"a": [0]}, generation=5))
    metadata = {m: a.metadata(["a"]) for m, a in members.items()}
    result = members["m0"].assign(cluster({"a": 3}), metadata)
    assert members["m0"].last_plan is not None
    assert members["m0"].last_plan.contested == {("a", 0)}
    given = [p for r in result.values() for _, ps in r.assignment for p in ps]
    assert sorted(given) == [1, 2]


def _member(bootstrap: str, group_id: str, name: str) -> tuple[PlanningAssignor, AIOKafkaConsumer]:
    assignor = make_assignor("sticky")
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group_id,
        group_instance_id=name,
        enable_auto_commit=False,
        # 6 s, the least Kafka accepts, not aiokafka's 10 s: tansu answers each
        # JoinGroup round after half the session timeout, and this test has two.
        session_timeout_ms=6_000,
        heartbeat_interval_ms=200,
        partition_assignment_strategy=assignor.protocols,
    )
    return assignor, consumer


@pytest.mark.broker
async def test_a_stale_claim_does_not_take_a_partition_from_its_owner(
    broker: Broker, group_id: str
) -> None:
    """``second`` joins claiming both partitions from the generation before the one
    ``first`` got them in, as a member that missed a rebalance would. The leader keeps
    ``first``'s claim (before generations both claims were dropped: no previous)."""
    topic = f"gen-{uuid.uuid4().hex[:8]}"
    await create_topic(broker.bootstrap, topic, 2)
    first, one = _member(broker.bootstrap, group_id, "first")
    second, two = _member(broker.bootstrap, group_id, "second")
    try:
        await one.start()
        assert report_join(one, first)
        one.subscribe([topic])
        await wait_until(lambda: len(one.assignment()) == 2, 30)
        owned_since = read_reports({"first": first.metadata([topic])})["first"].generation
        assert owned_since >= 0  # tansu counts generations from 0, Kafka and noida from 1
        second.assigned("fairstream-sticky", _given({topic: [0, 1]}, generation=owned_since - 1))
        await two.start()
        assert report_join(two, second)
        two.subscribe([topic])
        await wait_until(lambda: len(one.assignment()) == len(two.assignment()) == 1, 30)

        record = next(a.last_plan for a in (first, second) if a.leading and a.last_plan)
        # The JoinGroup answer named both static members: that is how we tell them apart.
        by_name = {name: m for m, name in record.snapshot.instance_ids.items()}
        assert sorted(by_name) == ["first", "second"]
        assert set(record.snapshot.members) == set(by_name.values())
        assert record.previous == Assignment(
            {by_name["first"]: {topic: (0, 1)}, by_name["second"]: {}}
        )
        assert record.contested == frozenset() and record.generation > owned_since
    finally:
        await one.stop()
        await two.stop()
