"""The aiokafka adapters without a broker: per-instance state, no I/O in assign,
the lag reading handed over before a join, and the fair fallback with its reason."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocol,
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from aiokafka.protocol.metadata import MetadataResponse_v0
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from fairstream import App
from fairstream.assign import STRATEGIES, GroupSnapshot, plan, strategy_names
from fairstream.errors import ConfigError
from fairstream.runtime._kafka._assignors import PlanningAssignor, make_assignor

LAGS = {"a": (400, 30, 20), "b": (350, 25, 15)}


def cluster(partitions: dict[str, int]) -> ClusterMetadata:
    metadata = ClusterMetadata()
    topics = [(0, t, [(0, p, 0, [0], [0]) for p in range(n)]) for t, n in partitions.items()]
    metadata.update_metadata(MetadataResponse_v0(brokers=[(0, "localhost", 9092)], topics=topics))
    return metadata


def join(
    assignor: PlanningAssignor, members: dict[str, PlanningAssignor]
) -> dict[str, dict[str, list[int]]]:
    """Run one leader assignment over members' join metadata, delivering the result."""
    metadata = {m: a.metadata(["a", "b"]) for m, a in members.items()}
    result = assignor.assign(cluster({"a": 3, "b": 3}), metadata)
    for member_id, member_assignor in members.items():
        member_assignor.on_assignment(result[member_id])
    return {m: {t: sorted(ps) for t, ps in r.assignment} for m, r in result.items()}


def lag_assignor(clock: list[float] | None = None) -> PlanningAssignor:
    now = clock if clock is not None else [0.0]
    return PlanningAssignor(
        "lag", bootstrap="unused:9092", group_id="g", max_lag_age_s=30, clock=lambda: now[0]
    )


def test_kafkas_strategies_keep_kafkas_protocol_names_and_ours_our_prefix() -> None:
    names = [make_assignor(s, bootstrap="h:1", group_id="g").name for s in STRATEGIES]
    assert names == [
        "range",
        "roundrobin",
        "fairstream-sticky",
        "fairstream-fair",
        "fairstream-lag",
    ]


def test_a_list_offers_every_strategy_in_order_with_one_shared_state() -> None:
    assignor = make_assignor(["lag", "roundrobin", "range"], bootstrap="h:1", group_id="g")
    assert [p.name for p in assignor.protocols] == ["fairstream-lag", "roundrobin", "range"]
    assert assignor.protocols[0] is assignor
    # The group chose roundrobin: the entry of that name takes the assignment ...
    given = ConsumerProtocolMemberAssignment(0, [("a", [1])], b"")
    with capture_logs() as logs:
        assignor.protocols[1].on_assignment(given)
    assert assignor.protocol == "roundrobin"
    chosen = [e for e in logs if e["event"] == "group_protocol_chosen"]
    assert chosen == [
        {
            "event": "group_protocol_chosen",
            "log_level": "info",
            "protocol": "roundrobin",
            "preferred": "fairstream-lag",
            "partitions": 1,
        }
    ]
    # ... and every entry reports it at the next join, in the standard schema.
    for entry in assignor.protocols:
        raw = entry.metadata(["a"]).encode()
        decoded = ConsumerProtocol.METADATA.decode(raw)
        assert (decoded.version, decoded.subscription) == (0, ["a"])
        assert json.loads(decoded.user_data) == {"a": [1]}


@pytest.mark.parametrize("strategy", ["roundrobin", "range"])
def test_the_leader_plans_with_the_strategy_the_group_chose(strategy: str) -> None:
    members = {m: make_assignor(["fair", "roundrobin", "range"]) for m in ("m0", "m1")}
    metadata = {m: a.metadata(["a", "b"]) for m, a in members.items()}
    entry = next(p for p in members["m0"].protocols if p.name == strategy)
    with capture_logs() as logs:
        result = entry.assign(cluster({"a": 3, "b": 3}), metadata)
    snapshot = GroupSnapshot(
        members={m: frozenset({"a", "b"}) for m in members}, partitions={"a": 3, "b": 3}
    )
    actual = {m: {t: sorted(ps) for t, ps in r.assignment} for m, r in result.items()}
    assert actual == plan(strategy, snapshot).to_json()
    planned = [e for e in logs if e["event"] == "assignment_planned"]
    assert [(e["protocol"], e["strategy"]) for e in planned] == [(strategy, strategy)]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ([], "names no assignment strategy"),
        ("", "names no assignment strategy"),
        (["lag", "leastloaded"], "unknown assignment strategy"),
        (["lag", "range", "lag"], "names 'lag' twice"),
        (["lag", 3], "must be a strategy name or a list of them"),
        (3, "must be a strategy name or a list of them"),
    ],
    ids=["empty-list", "empty-name", "unknown", "duplicate", "not-a-name", "not-a-list"],
)
def test_a_bad_strategy_list_is_a_config_error_naming_the_field(
    value: object, problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem) as raised:
        App(group_id="g", bootstrap="h:1", assignor=value)  # type: ignore[arg-type]
    assert raised.value.field == "assignor"


def test_a_comma_list_is_the_same_list() -> None:
    assert strategy_names("lag, roundrobin,range") == ("lag", "roundrobin", "range")
    assert strategy_names(["lag"]) == strategy_names("lag") == ("lag",)


def test_bad_factory_arguments_raise_config_error() -> None:
    with pytest.raises(ConfigError, match="choose one of"):
        make_assignor("leastloaded")
    with pytest.raises(ConfigError, match="pass bootstrap= and group_id="):
        make_assignor("lag")


def test_instances_keep_their_own_state() -> None:
    first, second = make_assignor("sticky"), make_assignor("sticky")
    first.on_assignment(ConsumerProtocolMemberAssignment(0, [("a", [2, 0])], b""))
    assert json.loads(first.metadata(["a"]).user_data) == {"a": [0, 2]}
    assert second.metadata(["a"]).user_data == b"{}"


def test_lag_plans_from_the_handed_over_reading() -> None:
    members = {m: lag_assignor() for m in ("m0", "m1", "m2")}
    leader = members["m0"]
    leader.use_lag(LAGS)
    actual = join(leader, members)
    snapshot = GroupSnapshot(
        members={m: frozenset({"a", "b"}) for m in members}, partitions={"a": 3, "b": 3}, lag=LAGS
    )
    assert actual == plan("lag", snapshot).to_json()
    assert leader.last_plan is not None and leader.last_plan.strategy == "lag"


@pytest.mark.parametrize(
    ("reading", "age", "reason"),
    [
        pytest.param(None, 0.0, "no_lag_snapshot", id="missing"),
        pytest.param(LAGS, 31.0, "lag_snapshot_stale", id="stale"),
    ],
)
def test_unusable_reading_falls_back_to_fair_and_says_why(
    reading: dict[str, tuple[int, ...]] | None, age: float, reason: str
) -> None:
    clock = [0.0]
    members = {m: lag_assignor(clock) for m in ("m0", "m1", "m2")}
    if reading is not None:
        members["m0"].use_lag(reading)
    clock[0] = age
    with capture_logs() as logs:
        actual = join(members["m0"], members)
    warnings = [e for e in logs if e["event"] == "lag_snapshot_unusable"]
    assert warnings == [
        {
            "event": "lag_snapshot_unusable",
            "reason": reason,
            "fallback": "fair",
            "log_level": "warning",
        }
    ]
    snapshot = GroupSnapshot(
        members={m: frozenset({"a", "b"}) for m in members}, partitions={"a": 3, "b": 3}
    )
    assert actual == plan("fair", snapshot).to_json()


SUBSCRIPTIONS = {"m0": ["a", "b", "c"], "m1": ["a", "b"], "m2": ["a"]}
"""KIP-49's rolling update: one topic shared by all, one by two, one by one member."""


def join_subscribed(
    leader: PlanningAssignor, members: dict[str, PlanningAssignor]
) -> dict[str, dict[str, list[int]]]:
    metadata = {m: a.metadata(SUBSCRIPTIONS[m]) for m, a in members.items()}
    result = leader.assign(cluster({"a": 3, "b": 3, "c": 2}), metadata)
    for member_id, member_assignor in members.items():
        member_assignor.on_assignment(result[member_id])
    return {m: {t: sorted(ps) for t, ps in r.assignment} for m, r in result.items()}


def test_a_topic_without_lag_is_planned_by_count_and_the_rest_by_lag() -> None:
    members = {m: lag_assignor() for m in SUBSCRIPTIONS}
    leader = members["m0"]
    leader.use_lag(LAGS)  # read before the leader knew anyone subscribes to "c"
    with capture_logs() as logs:
        actual = join_subscribed(leader, members)
    snapshot = GroupSnapshot(
        members={m: frozenset(ts) for m, ts in SUBSCRIPTIONS.items()},
        partitions={"a": 3, "b": 3, "c": 2},
        lag=LAGS,  # "c" has no lag: zero everywhere, so only its count is balanced
    )
    assert actual == plan("lag", snapshot).to_json()
    assert leader.last_plan is not None
    assert (leader.last_plan.strategy, leader.last_plan.by_count) == ("lag", frozenset({"c"}))
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert warnings == [
        {
            "event": "lag_snapshot_partial",
            "topics": ["c"],
            "planned_by": "count",
            "log_level": "warning",
        }
    ]
    # One follow-up rebalance, at which the leader has read "c" too.
    assert leader.take_follow_up()
    assert not leader.take_follow_up()
    leader.use_lag({**LAGS, "c": (900, 5)})
    second = join_subscribed(leader, members)
    assert leader.last_plan is not None and leader.last_plan.by_count == frozenset()
    full = GroupSnapshot(
        members=snapshot.members, partitions=snapshot.partitions, lag={**LAGS, "c": (900, 5)}
    )
    assert second == plan("lag", full, leader.last_plan.previous).to_json()
    assert not leader.take_follow_up()


def test_a_topic_whose_lag_stays_unreadable_gets_one_follow_up_not_a_loop() -> None:
    members = {m: lag_assignor() for m in SUBSCRIPTIONS}
    leader = members["m0"]
    leader.use_lag(LAGS)
    join_subscribed(leader, members)
    assert leader.take_follow_up()
    join_subscribed(leader, members)  # "c" still unread: count again, no second request
    assert leader.last_plan is not None and leader.last_plan.by_count == frozenset({"c"})
    assert not leader.take_follow_up()


def test_members_report_owned_partitions_so_any_leader_stays_sticky() -> None:
    members = {m: make_assignor("sticky") for m in ("m0", "m1", "m2")}
    first = join(members["m0"], members)
    # A fourth member joins and m2 leads this time: m2 never planned before, yet
    # it learns the previous assignment from the join metadata.
    members["m3"] = make_assignor("sticky")
    second = join(members["m2"], members)
    kept = sum(
        len(set(first[m].get(t, [])) & set(second[m].get(t, []))) for m in first for t in ("a", "b")
    )
    assert kept == 6 - 1  # only the partition handed to the newcomer moved
    assert sum(len(ps) for ps in second["m3"].values()) == 1


@pytest.mark.parametrize(
    "user_data",
    [
        pytest.param(b"not json", id="not-json"),
        pytest.param(b'{"format": 2, "owned": {"a": [0]}}', id="another-version"),
        pytest.param(b"[1, 2]", id="not-an-object"),
    ],
)
def test_unreadable_owned_data_is_ignored_with_a_warning(user_data: bytes) -> None:
    assignor = make_assignor("sticky")
    metadata = {
        "m0": ConsumerProtocolMemberMetadata(0, ["a"], user_data),
        "m1": ConsumerProtocolMemberMetadata(0, ["a"], b'{"a": [0, 1, 2]}'),
    }
    with capture_logs() as logs:
        result = assignor.assign(cluster({"a": 3}), metadata)
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
        "owned_partitions_unreadable"
    ]
    assert sorted(len(r.partitions()) for r in result.values()) == [1, 2]


def test_members_beyond_the_partitions_get_a_decodable_empty_assignment() -> None:
    """The leader never sends b"" (what aiokafka cannot decode): a member with no
    partitions gets an encoded assignment with an empty partition list."""
    members = {m: make_assignor("fair") for m in ("m0", "m1", "m2", "m3", "m4")}
    metadata = {m: a.metadata(["a"]) for m, a in members.items()}
    result = members["m0"].assign(cluster({"a": 3}), metadata)
    assert set(result) == set(members)
    decoded = {
        m: ConsumerProtocolMemberAssignment.decode(assignment.encode())
        for m, assignment in result.items()
    }
    assert sorted(len(d.partitions()) for d in decoded.values()) == [0, 0, 1, 1, 1]


def test_restarted_consumer_joins_with_new_metadata_every_leader_ignores() -> None:
    """After a restart the member owns nothing, and its join metadata differs from
    the last join's, so a broker keeping its static slot rebalances."""
    restarted, other = make_assignor("sticky"), make_assignor("sticky")
    restarted.on_assignment(ConsumerProtocolMemberAssignment(0, [("a", [0, 1])], b""))
    before = restarted.metadata(["a"]).user_data
    restarted.consumer_restarted()
    first = restarted.metadata(["a"]).user_data
    restarted.consumer_restarted()
    second = restarted.metadata(["a"]).user_data
    assert len({before, first, second, other.metadata(["a"]).user_data}) == 4
    members = {"m0": restarted, "m1": other}
    with capture_logs() as logs:
        result = join(other, members)
    assert not [e for e in logs if e["log_level"] == "warning"]
    assert other.last_plan is not None and other.last_plan.previous is None
    assert sum(len(ps) for r in result.values() for ps in r.values()) == 6


_TOPICS = ("a", "b", "c")


@settings(max_examples=150, deadline=None)
@given(
    strategy=st.sampled_from(["range", "roundrobin"]),
    counts=st.tuples(*(st.integers(1, 7) for _ in _TOPICS)),
    members=st.dictionaries(
        st.from_regex(r"(consumer|aiokafka|rdkafka)-[0-9]{1,2}-[a-f0-9]{2}", fullmatch=True),
        st.sets(st.sampled_from(_TOPICS), min_size=1),
        min_size=1,
        max_size=6,
    ),
)
def test_kafka_named_strategies_plan_what_aiokafkas_own_assignors_plan(
    strategy: str, counts: tuple[int, ...], members: dict[str, set[str]]
) -> None:
    """Whoever leads a mixed group under range or roundrobin, the plan is the same."""
    partitions = dict(zip(_TOPICS, counts, strict=True))
    metadata = {
        m: ConsumerProtocolMemberMetadata(0, sorted(topics), b"") for m, topics in members.items()
    }
    theirs = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}[strategy]
    ours = make_assignor(strategy)

    def plain(result: Mapping[str, ConsumerProtocolMemberAssignment]) -> dict[str, Any]:
        return {m: {t: sorted(ps) for t, ps in a.assignment if ps} for m, a in result.items()}

    expected = plain(theirs.assign(cluster(partitions), metadata))
    assert plain(ours.assign(cluster(partitions), metadata)) == expected
