"""fairstream's ``range`` and ``roundrobin`` against Kafka's documented rules.

A group runs ``range`` or ``roundrobin`` with whichever member leads planning for
everyone, fairstream or not (README, "Migrating an existing group"), so our two must
plan what the Java, librdkafka and aiokafka assignors of those names plan. Each
expected assignment below was worked out by hand from the rules as Kafka documents
them (``RangeAssignor`` and ``RoundRobinAssignor`` javadoc), not from our output:

- range: topic by topic, the topic's subscribers sorted by member id (string order)
  each get a contiguous run of ``partitions // subscribers``; the first
  ``partitions % subscribers`` of them get one more. Each topic starts again at the
  first member.
- roundrobin: every subscribed topic-partition, sorted by topic then partition, is
  dealt around one circle of all members sorted by member id; a member not
  subscribed to the partition's topic is skipped. The circle does not restart per
  topic.
- both: a static member (KIP-345) sorts by its ``group.instance.id``, before every
  dynamic member (``MemberInfo.compareTo``), so a restart keeps its partitions.

``tests/runtime/kafka/test_assignors.py`` also checks both against aiokafka's own
assignors on generated groups.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from fairstream.assign import GroupSnapshot, plan

Expected = Mapping[str, Mapping[str, list[int]]]


def snapshot(members: Mapping[str, set[str]], partitions: Mapping[str, int]) -> GroupSnapshot:
    return GroupSnapshot(
        members={m: frozenset(topics) for m, topics in members.items()}, partitions=partitions
    )


CASES = [
    pytest.param(
        "range",
        snapshot({"c0": {"t"}, "c1": {"t"}, "c2": {"t"}}, {"t": 7}),
        {"c0": {"t": [0, 1, 2]}, "c1": {"t": [3, 4]}, "c2": {"t": [5, 6]}},
        id="range-first-n-mod-m-get-one-more",
    ),
    pytest.param(
        "range",
        # String order: "consumer-10" < "consumer-2" < "consumer-9".
        snapshot({"consumer-9": {"t"}, "consumer-2": {"t"}, "consumer-10": {"t"}}, {"t": 4}),
        {"consumer-10": {"t": [0, 1]}, "consumer-2": {"t": [2]}, "consumer-9": {"t": [3]}},
        id="range-member-ids-in-string-order",
    ),
    pytest.param(
        "range",
        snapshot({"a": {"t"}, "b": {"t"}, "c": {"t"}}, {"t": 2}),
        {"a": {"t": [0]}, "b": {"t": [1]}, "c": {}},
        id="range-more-members-than-partitions",
    ),
    pytest.param(
        "range",
        # x: A, B read it (3 partitions: 2 + 1); y: A, B, C read it (4: 2 + 1 + 1).
        snapshot({"A": {"x", "y"}, "B": {"x", "y"}, "C": {"y"}}, {"x": 3, "y": 4}),
        {"A": {"x": [0, 1], "y": [0, 1]}, "B": {"x": [2], "y": [2]}, "C": {"y": [3]}},
        id="range-per-topic-subscribers",
    ),
    pytest.param(
        "range",
        snapshot({"A": {"t1", "t2", "t3"}, "B": {"t1", "t2", "t3"}}, {"t1": 1, "t2": 1, "t3": 1}),
        {"A": {"t1": [0], "t2": [0], "t3": [0]}, "B": {}},
        id="range-every-topic-restarts-at-the-first-member",
    ),
    pytest.param(
        "roundrobin",
        # x0 A, x1 B, y0 C, y1 A: the circle goes on from topic to topic.
        snapshot({"A": {"x", "y"}, "B": {"x", "y"}, "C": {"x", "y"}}, {"x": 2, "y": 2}),
        {"A": {"x": [0], "y": [1]}, "B": {"x": [1]}, "C": {"y": [0]}},
        id="roundrobin-one-circle-across-topics",
    ),
    pytest.param(
        "roundrobin",
        # String order: "m-10" before "m-2"; t0 m-10, t1 m-2, t2 m-10.
        snapshot({"m-2": {"t"}, "m-10": {"t"}}, {"t": 3}),
        {"m-10": {"t": [0, 2]}, "m-2": {"t": [1]}},
        id="roundrobin-member-ids-in-string-order",
    ),
    pytest.param(
        "roundrobin",
        # x0 A; x1: B skipped, A; y0 B; y1 A.
        snapshot({"A": {"x", "y"}, "B": {"y"}}, {"x": 2, "y": 2}),
        {"A": {"x": [0, 1], "y": [1]}, "B": {"y": [0]}},
        id="roundrobin-skips-members-not-subscribed",
    ),
    pytest.param(
        "roundrobin",
        # x0 A, x1 B, x2 (C skipped) A, y0 B, y1 C, y2 (A skipped) B.
        snapshot({"A": {"x"}, "B": {"x", "y"}, "C": {"y"}}, {"x": 3, "y": 3}),
        {"A": {"x": [0, 2]}, "B": {"x": [1], "y": [0, 2]}, "C": {"y": [1]}},
        id="roundrobin-skips-and-goes-on",
    ),
    pytest.param(
        "roundrobin",
        # Topics in name order: a-topic before b-topic, whatever the subscription says.
        snapshot(
            {"A": {"b-topic", "a-topic"}, "B": {"b-topic", "a-topic"}},
            {"b-topic": 1, "a-topic": 1},
        ),
        {"A": {"a-topic": [0]}, "B": {"b-topic": [0]}},
        id="roundrobin-topics-in-name-order",
    ),
]


@pytest.mark.parametrize(("strategy", "group", "expected"), CASES)
def test_kafkas_rule(strategy: str, group: GroupSnapshot, expected: Expected) -> None:
    assert plan(strategy, group).to_json() == expected


@pytest.mark.parametrize(("strategy", "group", "expected"), CASES)
def test_the_order_members_and_topics_arrive_in_changes_nothing(
    strategy: str, group: GroupSnapshot, expected: Expected
) -> None:
    reversed_group = GroupSnapshot(
        members=dict(reversed(list(group.members.items()))),
        partitions=dict(reversed(list(group.partitions.items()))),
    )
    assert plan(strategy, reversed_group).to_json() == expected


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_a_static_member_keeps_its_partitions_across_a_restart(strategy: str) -> None:
    """KIP-345: a restart gives ``instance1`` a new member id, sorting after ``m-b``'s;
    Kafka orders static members by instance id, so its partitions stay put."""
    both = {"t": 4}
    before = GroupSnapshot(
        members={"m-a": frozenset({"t"}), "m-b": frozenset({"t"})},
        partitions=both,
        instance_ids={"m-a": "instance1", "m-b": "instance2"},
    )
    after = GroupSnapshot(
        members={"m-z": frozenset({"t"}), "m-b": frozenset({"t"})},
        partitions=both,
        instance_ids={"m-z": "instance1", "m-b": "instance2"},
    )
    first, second = plan(strategy, before), plan(strategy, after)
    assert second.members["m-z"] == first.members["m-a"]
    assert second.members["m-b"] == first.members["m-b"]


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        pytest.param("range", {"s2": {"t": [0]}, "s1": {"t": [1]}, "a": {"t": [2]}}, id="range"),
        pytest.param("roundrobin", {"s2": {"t": [0]}, "s1": {"t": [1]}, "a": {"t": [2]}}, id="rr"),
    ],
)
def test_static_members_come_first_by_instance_id_then_the_others_by_member_id(
    strategy: str, expected: Expected
) -> None:
    # Kafka's MemberInfo.compareTo: "a" sorts first by member id, but it is dynamic.
    group = GroupSnapshot(
        members={m: frozenset({"t"}) for m in ("a", "s1", "s2")},
        partitions={"t": 3},
        instance_ids={"s1": "zeta", "s2": "alpha"},
    )
    assert plan(strategy, group).to_json() == expected
