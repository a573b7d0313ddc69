"""Issue #34's contracts 1-3: count balance over members, topic spread, fewest moves.

Kafka's sticky assignors promise a balanced plan first ("no partition can move to
another subscriber of its topic that holds two or more fewer partitions") and, among
balanced plans, the one that preserves as many existing assignments as possible.
fairstream's ``fair``, ``sticky`` and ``lag`` are held to the same order: count balance
over each member's total, then (``lag`` only) the busiest member's lag, then moves.
The smallest examples come first, then properties over large random groups; the
checks live in ``benchmarks/assign_contracts.py``, which counts the same breaches.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.assign_contracts import give_backs, kafka_unbalanced, large_group
from fairstream.assign import STRATEGIES, Assignment, GroupSnapshot, moved, plan
from fairstream.assign.cooperative import hold_back_moves

BALANCED = ["fair", "sticky", "lag"]
STICKY = ["sticky", "lag"]


def group(
    members: Mapping[str, set[str]],
    partitions: Mapping[str, int],
    lag: Mapping[str, tuple[int, ...]] | None = None,
) -> GroupSnapshot:
    return GroupSnapshot(
        members={m: frozenset(topics) for m, topics in members.items()},
        partitions=partitions,
        lag=lag or {},
    )


# --- contract 1: count balance over each member's total -------------------------------

BOTH = {"topic1", "topic2"}
JOINER_PREVIOUS = Assignment(
    {"c1": {"topic1": (0,), "topic2": (0,)}, "c2": {"topic1": (1,), "topic2": (1,)}}
)


@pytest.mark.parametrize("strategy", BALANCED)
@pytest.mark.parametrize("lag", [None, {"topic1": (100, 100), "topic2": (100, 100)}])
@pytest.mark.parametrize("previous", [None, JOINER_PREVIOUS], ids=["fresh", "c3-joins"])
def test_a_third_member_of_a_two_topic_group_gets_a_partition(
    strategy: str, lag: dict[str, tuple[int, ...]] | None, previous: Assignment | None
) -> None:
    """Issue #34's smallest example: under ``lag``, c3 got nothing (2, 2, 0)."""
    snapshot = group({"c1": BOTH, "c2": BOTH, "c3": BOTH}, {"topic1": 2, "topic2": 2}, lag)
    result = plan(strategy, snapshot, previous)
    assert sorted(result.count(m) for m in snapshot.members) == [1, 1, 2]
    if previous is not None and strategy != "fair":
        assert moved(previous, result) == 1  # c3's one partition, nothing else


@pytest.mark.parametrize("strategy", BALANCED)
@pytest.mark.parametrize("lag", [None, {"t03": (5,), "t04": (9,)}])
def test_a_member_reading_one_of_two_topics_gets_that_topic(
    strategy: str, lag: dict[str, tuple[int, ...]] | None
) -> None:
    """m02 reads t03 and t04, m03 t03 only: m02 used to get both, m03 nothing."""
    snapshot = group({"m02": {"t03", "t04"}, "m03": {"t03"}}, {"t03": 1, "t04": 1}, lag)
    assert plan(strategy, snapshot).to_json() == {"m02": {"t04": [0]}, "m03": {"t03": [0]}}


# --- contract 2: topic spread at equal cost ------------------------------------------


@pytest.mark.parametrize("strategy", STICKY)
def test_a_joiner_gets_half_of_each_of_two_topics(strategy: str) -> None:
    """Kafka's sticky assignor gives the joiner 6 + 6; fairstream's gave it 12 of one."""
    snapshot = group({"c0": {"a", "b"}, "c1": {"a", "b"}}, {"a": 12, "b": 12})
    previous = Assignment({"c0": {"a": tuple(range(12)), "b": tuple(range(12))}})
    result = plan(strategy, snapshot, previous)
    assert {t: len(ps) for t, ps in result.members["c1"].items()} == {"a": 6, "b": 6}
    assert moved(previous, result) == 12


@pytest.mark.parametrize("strategy", STICKY)
def test_a_joiner_of_three_members_takes_each_topic_evenly(strategy: str) -> None:
    """Three members hold 4 + 4 of a and b; the joiner gets 3 + 3 and all keep 3 + 3."""
    snapshot = group({f"c{i}": {"a", "b"} for i in range(4)}, {"a": 12, "b": 12})
    previous = Assignment(
        {f"c{i}": {t: tuple(range(4 * i, 4 * i + 4)) for t in "ab"} for i in range(3)}
    )
    result = plan(strategy, snapshot, previous)
    for member_id in snapshot.members:
        assert {t: len(ps) for t, ps in result.members[member_id].items()} == {"a": 3, "b": 3}
    assert moved(previous, result) == 6


# --- contract 3: fewest moves --------------------------------------------------------


def test_sticky_swaps_back_what_an_owner_lost_for_what_it_newly_got() -> None:
    """A group found by search: the old plan moved t0[0] from c0 to c1 and gave c0
    t1[0], which c1 reads too; swapping the two back keeps every count and moves less."""
    snapshot = group(
        {"c0": {"t0", "t1", "t2"}, "c1": {"t0", "t1", "t2"}, "c2": {"t2"}},
        {"t0": 2, "t1": 2, "t2": 2},
    )
    previous = Assignment(
        {
            "c0": {"t0": (0,), "t1": (1,)},
            "c1": {"t2": (0,)},
            "gone": {"t0": (1,), "t1": (0,), "t2": (1,)},
        }
    )
    result = plan("sticky", snapshot, previous)
    assert give_backs(snapshot, previous, result) == []
    assert result.members["c0"] == {"t0": (0,), "t1": (1,)}
    # Beyond the departed member's three, only t2[0] moves: c2 reads nothing else.
    assert moved(previous, result) == 3 + 1


# --- Kafka's own scenarios (AbstractStickyAssignorTest), as data ----------------------


@pytest.mark.parametrize("strategy", STICKY)
def test_kafka_all_consumers_under_min_quota(strategy: str) -> None:
    snapshot = group({c: {"t1", "t2"} for c in ("c1", "c2", "c3")}, {"t1": 2, "t2": 3})
    previous = Assignment({"c1": {"t1": (0,)}, "c2": {"t1": (1,)}})
    result = plan(strategy, snapshot, previous)
    assert moved(previous, result) == 0
    assert sorted(result.count(c) for c in snapshot.members) == [1, 2, 2]


@pytest.mark.parametrize("strategy", STICKY)
def test_kafka_consumer_owning_min_quota_expected_max_quota(strategy: str) -> None:
    snapshot = group({c: {"t1", "t2"} for c in ("c1", "c2")}, {"t1": 2, "t2": 3})
    previous = Assignment({"c1": {"t1": (0,), "t2": (1,)}, "c2": {"t1": (1,), "t2": (2,)}})
    result = plan(strategy, snapshot, previous)
    assert moved(previous, result) == 0
    assert sorted(result.count(c) for c in snapshot.members) == [2, 3]


@pytest.mark.parametrize("strategy", STICKY)
def test_kafka_add_then_remove_two_consumers_two_topics(strategy: str) -> None:
    topics = {"t1": 3, "t2": 4}
    two = group({"c1": set(topics), "c2": set(topics)}, topics)
    first = plan(strategy, two)
    four = group({c: set(topics) for c in ("c1", "c2", "c3", "c4")}, topics)
    second = plan(strategy, four, first)
    assert sorted(second.count(c) for c in four.members) == [1, 2, 2, 2]
    assert moved(first, second) == 3  # only what c3 and c4 need
    rest = group({"c3": set(topics), "c4": set(topics)}, topics)
    third = plan(strategy, rest, second)
    assert sorted(third.count(c) for c in rest.members) == [3, 4]
    assert moved(second, third) == second.count("c1") + second.count("c2")


@pytest.mark.parametrize("strategy", STICKY)
def test_kafka_add_and_remove_a_topic_keeps_what_each_owned(strategy: str) -> None:
    one = group({"c1": {"topic"}, "c2": {"topic"}}, {"topic": 3})
    first = plan(strategy, one)
    both = group({"c1": {"topic", "topic2"}, "c2": {"topic", "topic2"}}, {"topic": 3, "topic2": 3})
    second = plan(strategy, both, first)
    assert [second.count(c) for c in both.members] == [3, 3]
    assert moved(first, second) == 0
    only = group({"c1": {"topic2"}, "c2": {"topic2"}}, {"topic": 3, "topic2": 3})
    third = plan(strategy, only, second)
    assert sorted(third.count(c) for c in only.members) == [1, 2]
    assert moved(second, third) == 0


@pytest.mark.parametrize("strategy", STICKY)
def test_kafka_one_consumer_leaves_nested_subscriptions(strategy: str) -> None:
    """topic i has i partitions (1..19); consumer i reads topics 1..i; consumer10 leaves."""
    topics = {f"topic{i:02d}": i for i in range(1, 20)}
    names = sorted(topics)
    members = {f"consumer{i:02d}": set(names[:i]) for i in range(1, 20)}
    first = plan(strategy, group(members, topics))
    del members["consumer10"]
    after = group(members, topics)
    second = plan(strategy, after, first)
    assert kafka_unbalanced(after, second) == []
    assert give_backs(after, first, second) == []


@pytest.mark.parametrize("strategy", STICKY)
def test_kafka_same_subscriptions_one_leaves(strategy: str) -> None:
    """14 topics of 1..14 partitions, 8 consumers reading all; consumer5 leaves."""
    topics = {f"topic{i:02d}": i for i in range(1, 15)}
    members = {f"consumer{i}": set(topics) for i in range(1, 9)}
    first = plan(strategy, group(members, topics))
    del members["consumer5"]
    after = group(members, topics)
    second = plan(strategy, after, first)
    counts = [second.count(c) for c in after.members]
    assert max(counts) - min(counts) <= 1
    assert moved(first, second) == first.count("consumer5")


# --- properties over large random groups ----------------------------------------------

LARGE = settings(max_examples=25, deadline=None)


def large_groups() -> st.SearchStrategy[tuple[GroupSnapshot, Assignment]]:
    """Up to 50 members, 20 topics of up to 40 partitions, mixed subscriptions, and
    previous owners skewed towards a few members (some of them gone)."""
    return st.integers(0, 2**32).map(lambda seed: large_group(random.Random(seed)))


@pytest.mark.parametrize("strategy", BALANCED)
@LARGE
@given(case=large_groups())
def test_every_plan_is_count_balanced_over_members(
    strategy: str, case: tuple[GroupSnapshot, Assignment]
) -> None:
    snapshot, previous = case
    assert kafka_unbalanced(snapshot, plan(strategy, snapshot)) == []
    assert kafka_unbalanced(snapshot, plan(strategy, snapshot, previous)) == []


@pytest.mark.parametrize("strategy", STICKY)
@LARGE
@given(case=large_groups())
def test_a_cooperative_second_round_is_count_balanced(
    strategy: str, case: tuple[GroupSnapshot, Assignment]
) -> None:
    snapshot, owned = case
    live = Assignment({m: ts for m, ts in owned.members.items() if m in snapshot.members})
    first = hold_back_moves(STRATEGIES[strategy](snapshot, live), live)
    assert kafka_unbalanced(snapshot, STRATEGIES[strategy](snapshot, first)) == []


@LARGE
@given(case=large_groups())
def test_sticky_leaves_no_partition_it_could_give_back(
    case: tuple[GroupSnapshot, Assignment],
) -> None:
    snapshot, previous = case
    assert give_backs(snapshot, previous, plan("sticky", snapshot, previous)) == []


@LARGE
@given(case=large_groups())
def test_lag_gives_back_all_it_can_without_a_busier_member(
    case: tuple[GroupSnapshot, Assignment],
) -> None:
    snapshot, previous = case
    result = plan("lag", snapshot, previous)
    assert give_backs(snapshot, previous, result, with_lag=True) == []
