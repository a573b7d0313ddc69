"""The planner's data model rejects bad input with a PlanError that says where."""

from __future__ import annotations

import pytest

from fairstream.assign import Assignment, GroupSnapshot, partition_lag
from fairstream.errors import PlanError


def snapshot(**overrides: object) -> GroupSnapshot:
    fields: dict[str, object] = {
        "members": {"c0": frozenset({"orders"}), "c1": frozenset({"orders", "audit"})},
        "partitions": {"orders": 3, "audit": 1},
        "lag": {"orders": (5, 0, 7)},
    }
    fields.update(overrides)
    return GroupSnapshot(**fields)  # type: ignore[arg-type]


def test_valid_snapshot_answers_lag_per_partition() -> None:
    group = snapshot()
    assert group.lag_of("orders", 2) == 7
    assert group.lag_of("audit", 0) == 0
    assert group.topic_lags("audit") == (0,)
    assert group.subscribers() == {"audit": ["c1"], "orders": ["c0", "c1"]}


@pytest.mark.parametrize(
    ("end", "committed", "log_start", "reset", "lag"),
    [
        pytest.param(100, 40, 10, "latest", 60, id="committed"),
        pytest.param(100, 5, 10, "latest", 90, id="commit-below-log-start-counts-from-it"),
        pytest.param(100, 5, 100, "earliest", 0, id="everything-deleted"),
        pytest.param(100, 120, 0, "latest", 0, id="commit-past-end-is-not-negative"),
        pytest.param(100, None, 10, "latest", 0, id="never-committed-latest"),
        pytest.param(100, None, 10, "earliest", 90, id="never-committed-earliest"),
    ],
)
def test_partition_lag_raises_the_commit_to_the_log_start_and_follows_the_reset(
    end: int, committed: int | None, log_start: int, reset: str, lag: int
) -> None:
    assert partition_lag(end, committed, log_start, reset) == lag  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("overrides", "where", "words"),
    [
        pytest.param(
            {"lag": {"orders": (1, 2)}},
            "lag.orders",
            "lag for topic 'orders' has 2 values but the topic has 3 partitions "
            "(input key lag.orders); give one value per partition",
            id="lag-length",
        ),
        pytest.param({"lag": {"orders": (1, -2, 0)}}, "lag.orders[1]", "is -2", id="negative-lag"),
        pytest.param({"lag": {"billing": (1,)}}, "lag.billing", "unknown topic", id="lag-topic"),
        pytest.param(
            {"members": {"c0": frozenset({"billing"})}},
            "members.c0",
            "subscribes to unknown topic 'billing'",
            id="unknown-subscription",
        ),
        pytest.param(
            {"partitions": {"orders": -1, "audit": 1}},
            "partitions.orders",
            "partition count -1",
            id="negative-count",
        ),
    ],
)
def test_bad_snapshot_names_the_key(overrides: dict[str, object], where: str, words: str) -> None:
    with pytest.raises(PlanError) as caught:
        snapshot(**overrides)
    assert caught.value.where == where
    assert words in str(caught.value)
    assert caught.value.hint


def test_assignment_normalises_order_and_empty_topics() -> None:
    plan = Assignment({"c1": {"t": (2, 0)}, "c0": {"t": (), "u": (1,)}})
    assert list(plan.members) == ["c0", "c1"]
    assert plan.to_json() == {"c0": {"u": [1]}, "c1": {"t": [0, 2]}}
    assert plan == Assignment({"c0": {"u": (1,)}, "c1": {"t": (0, 2)}})
    assert plan.owner_map() == {("u", 1): "c0", ("t", 0): "c1", ("t", 2): "c1"}
    assert plan.count("c1") == 2
    assert plan.count("gone") == 0


def test_from_owners_lists_idle_members() -> None:
    plan = Assignment.from_owners(["c0", "c1", "c2"], {"t": ["c1", "c0", "c1"]})
    assert plan.to_json() == {"c0": {"t": [1]}, "c1": {"t": [0, 2]}, "c2": {}}


@pytest.mark.parametrize(
    ("data", "where", "words"),
    [
        pytest.param({"c0": {"orders": [3]}}, "previous.c0.orders", "does not exist", id="range"),
        pytest.param({"c0": {"billing": [0]}}, "previous.c0.billing", "unknown topic", id="topic"),
        pytest.param(
            {"c0": {"orders": [0]}, "c1": {"orders": [0]}},
            "previous.c1.orders",
            "owned by both 'c0' and 'c1'",
            id="twice",
        ),
        pytest.param({"c0": {"orders": [-1]}}, "previous.c0.orders", "not a partition", id="neg"),
    ],
)
def test_previous_is_checked_against_the_snapshot(
    data: dict[str, dict[str, list[int]]], where: str, words: str
) -> None:
    with pytest.raises(PlanError) as caught:
        Assignment.from_json(data, snapshot())
    assert caught.value.where == where
    assert words in str(caught.value)


def test_previous_may_name_members_that_left() -> None:
    plan = Assignment.from_json({"gone": {"orders": [1]}}, snapshot())
    assert plan.owner_map() == {("orders", 1): "gone"}


def test_a_plan_built_directly_rejects_a_partition_owned_twice_as_from_json_does() -> None:
    twice = {"c0": {"orders": (0,)}, "c1": {"orders": (0, 1)}}
    with pytest.raises(PlanError) as built:
        Assignment(twice)
    with pytest.raises(PlanError) as read:
        Assignment.from_json(twice)
    assert (built.value.problem, built.value.hint) == (read.value.problem, read.value.hint)
    assert built.value.problem == "partition orders[0] is owned by both 'c0' and 'c1'"
    assert (built.value.where, read.value.where) == ("c1.orders", "previous.c1.orders")


@pytest.mark.parametrize(
    ("instance_ids", "where", "words"),
    [
        pytest.param({"gone": "i1"}, "instance_ids.gone", "unknown member", id="unknown"),
        pytest.param({"c0": "i1", "c1": "i1"}, "instance_ids.c1", "both 'c0' and 'c1'", id="twice"),
    ],
)
def test_instance_ids_name_members_one_each(
    instance_ids: dict[str, str], where: str, words: str
) -> None:
    with pytest.raises(PlanError) as caught:
        snapshot(instance_ids=instance_ids)
    assert caught.value.where == where
    assert words in str(caught.value)
