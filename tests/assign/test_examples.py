"""Worked examples: the seeds' tables, the Java clients' documented layouts, stickiness."""

from __future__ import annotations

import pytest

from fairstream.assign import STRATEGIES, Assignment, GroupSnapshot, moved, plan, stats
from fairstream.errors import ConfigError

# KIP-49's inventory: T1..T5 with 2,1,2,1,2 partitions; C2 and C3 read T1, T3, T5 only.
KIP49 = GroupSnapshot(
    members={
        "C1": frozenset({"T1", "T2", "T3", "T4", "T5"}),
        "C2": frozenset({"T1", "T3", "T5"}),
        "C3": frozenset({"T1", "T3", "T5"}),
        "C4": frozenset({"T1", "T2", "T3", "T4", "T5"}),
    },
    partitions={"T1": 2, "T2": 1, "T3": 2, "T4": 1, "T5": 2},
)

# KAFKA-5337's example: C0 and C1 read t0 with lags 100k, 60k, 50k.
KAFKA5337 = GroupSnapshot(
    members={"C0": frozenset({"t0"}), "C1": frozenset({"t0"})},
    partitions={"t0": 3},
    lag={"t0": (100_000, 60_000, 50_000)},
)


def homogeneous(members: int, partitions: dict[str, int]) -> GroupSnapshot:
    return GroupSnapshot(
        members={f"c{i}": frozenset(partitions) for i in range(members)}, partitions=partitions
    )


@pytest.mark.parametrize(
    ("strategy", "snapshot", "expected"),
    [
        pytest.param(
            "fair",
            KIP49,
            {
                "C1": {"T2": [0], "T3": [0]},
                "C2": {"T1": [0], "T3": [1]},
                "C3": {"T1": [1], "T5": [0]},
                "C4": {"T4": [0], "T5": [1]},
            },
            id="kip49-fair-table",
        ),
        pytest.param(
            "range",
            KIP49,
            {
                "C1": {"T1": [0], "T2": [0], "T3": [0], "T4": [0], "T5": [0]},
                "C2": {"T1": [1], "T3": [1], "T5": [1]},
                "C3": {},
                "C4": {},
            },
            id="kip49-range-table",
        ),
        pytest.param(
            "roundrobin",
            KIP49,
            {
                "C1": {"T1": [0], "T3": [0], "T5": [0]},
                "C2": {"T1": [1], "T3": [1], "T5": [1]},
                "C3": {},
                "C4": {"T2": [0], "T4": [0]},
            },
            id="kip49-roundrobin-table",
        ),
        pytest.param(
            "lag", KAFKA5337, {"C0": {"t0": [0]}, "C1": {"t0": [1, 2]}}, id="kafka5337-lag"
        ),
        pytest.param(
            "range", KAFKA5337, {"C0": {"t0": [0, 1]}, "C1": {"t0": [2]}}, id="kafka5337-range"
        ),
        pytest.param(
            "range",
            homogeneous(2, {"t0": 3, "t1": 3}),
            {"c0": {"t0": [0, 1], "t1": [0, 1]}, "c1": {"t0": [2], "t1": [2]}},
            id="java-range-doc",
        ),
        pytest.param(
            "roundrobin",
            homogeneous(2, {"t0": 3, "t1": 3}),
            {"c0": {"t0": [0, 2], "t1": [1]}, "c1": {"t0": [1], "t1": [0, 2]}},
            id="java-roundrobin-doc",
        ),
        pytest.param(
            "roundrobin",
            GroupSnapshot(
                members={
                    "C0": frozenset({"t0"}),
                    "C1": frozenset({"t0", "t1"}),
                    "C2": frozenset({"t0", "t1", "t2"}),
                },
                partitions={"t0": 1, "t1": 2, "t2": 3},
            ),
            {"C0": {"t0": [0]}, "C1": {"t1": [0]}, "C2": {"t1": [1], "t2": [0, 1, 2]}},
            id="java-roundrobin-skips",
        ),
    ],
)
def test_worked_example(
    strategy: str, snapshot: GroupSnapshot, expected: dict[str, dict[str, list[int]]]
) -> None:
    assert plan(strategy, snapshot).to_json() == expected


def test_kip49_every_balanced_strategy_gives_each_consumer_two() -> None:
    for strategy in ("fair", "sticky"):
        result = plan(strategy, KIP49)
        assert [result.count(m) for m in KIP49.members] == [2, 2, 2, 2], strategy


def test_kafka5337_figures() -> None:
    figures = stats(KAFKA5337, plan("lag", KAFKA5337))
    assert figures.max_member_lag == 110_000
    assert figures.lag_lower_bound == 105_000.0
    assert figures.count_spread == 1
    assert stats(KAFKA5337, plan("range", KAFKA5337)).max_member_lag == 160_000


def test_strategy_names_are_the_cli_names() -> None:
    assert list(STRATEGIES) == ["range", "roundrobin", "sticky", "fair", "lag"]


def test_unknown_strategy_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="choose one of range, roundrobin, sticky, fair, lag"):
        plan("leastloaded", KIP49)


def test_empty_group_plans_nothing() -> None:
    empty = GroupSnapshot(members={}, partitions={"t": 4})
    for strategy in STRATEGIES:
        assert plan(strategy, empty).to_json() == {}


# --- stickiness -----------------------------------------------------------------------

GROUP = homogeneous(4, {"a": 7, "b": 5, "c": 3})


def test_sticky_moves_nothing_in_an_unchanged_balanced_group() -> None:
    first = plan("sticky", GROUP)
    assert plan("sticky", GROUP, first) == first


def test_sticky_moves_only_the_leavers_partitions() -> None:
    before = plan("sticky", GROUP)
    smaller = GroupSnapshot(
        members={m: t for m, t in GROUP.members.items() if m != "c2"}, partitions=GROUP.partitions
    )
    after = plan("sticky", smaller, before)
    owners = after.owner_map()
    for key, owner in before.owner_map().items():
        if owner != "c2":
            assert owners[key] == owner
    assert moved(before, after) == before.count("c2")
    assert stats(smaller, after).count_spread <= 1


def test_sticky_gives_a_joiner_only_its_share() -> None:
    before = plan("sticky", GROUP)
    bigger = homogeneous(5, dict(GROUP.partitions))
    after = plan("sticky", bigger, before)
    assert moved(before, after) == after.count("c4") == 3
    assert stats(bigger, after).count_spread <= 1


def test_sticky_keeps_partitions_of_a_lopsided_start() -> None:
    lopsided = Assignment({"c0": {"a": tuple(range(7)), "b": tuple(range(5))}})
    after = plan("sticky", GROUP, lopsided)
    assert stats(GROUP, after).count_spread <= 1
    assert moved(lopsided, after) == 12 - 4  # c0 keeps its share of 15 / 4, rounded up


@pytest.mark.parametrize("lag_value", [0, 250], ids=["quiet", "equal-lags"])
def test_lag_keeps_partitions_where_they_were_when_lags_are_equal(lag_value: int) -> None:
    group = GroupSnapshot(
        members=GROUP.members,
        partitions=GROUP.partitions,
        lag={t: (lag_value,) * n for t, n in GROUP.partitions.items()},
    )
    # The group's own lag plan with members renamed in a circle is just as good.
    best = plan("lag", group).members
    names = list(best)
    before = Assignment(
        {new: best[old] for old, new in zip(names, names[1:] + names[:1], strict=True)}
    )
    assert plan("lag", group) != before
    assert plan("lag", group, before) == before
