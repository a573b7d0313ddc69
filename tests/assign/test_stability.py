"""The lag plan stays put under lag noise and moves little on a join or a leave.

Lag read a second apart differs by a few percent; before ``min_improvement`` such
noise moved about a quarter of all partitions on every rebalance. These tests plan
200 seeded random groups of the assignor benchmark (homogeneous and heterogeneous
subscriptions; uniform, zipf, one-hot and bimodal lag), so their figures are
deterministic; the benchmark prints the same figures as a table.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.assign_bench import SHAPES, moved_others, scenario
from fairstream.assign import STRATEGIES, Assignment, GroupSnapshot, member_lags, moved
from fairstream.assign.lag import MIN_IMPROVEMENT, plan
from fairstream.errors import ConfigError
from tests.assign.test_properties import snapshots


def groups(seed: int, count: int = 200) -> Iterator[GroupSnapshot]:
    rng = random.Random(seed)
    for index in range(count):
        yield scenario(rng, index % 2 == 0, SHAPES[(index // 2) % 4])


def noisy(snapshot: GroupSnapshot, noise: float, rng: random.Random) -> GroupSnapshot:
    lag = {
        topic: tuple(int(value * rng.uniform(1 - noise, 1 + noise)) for value in values)
        for topic, values in snapshot.lag.items()
    }
    return GroupSnapshot(members=snapshot.members, partitions=snapshot.partitions, lag=lag)


def worst(snapshot: GroupSnapshot, assignment: Assignment) -> int:
    return max(member_lags(snapshot, assignment).values(), default=0)


def moved_shares(noise: float, *min_improvements: float) -> list[float]:
    """The share of partitions moved under ``noise``, for each margin, over the same
    noisy groups: each group's previous plan is made once, not once a margin."""
    rng = random.Random(5)
    moves, partitions = [0] * len(min_improvements), 0
    for group in groups(7):
        previous = plan(group)
        now = noisy(group, noise, rng)
        for index, margin in enumerate(min_improvements):
            moves[index] += moved(previous, plan(now, previous, min_improvement=margin))
        partitions += sum(group.partitions.values())
    return [count / partitions for count in moves]


def test_noise_within_the_margin_moves_almost_nothing() -> None:
    with_margin, without = moved_shares(0.05, MIN_IMPROVEMENT, 0.0)
    assert with_margin <= 0.01  # 0.0% measured (#34; 0.8% before)
    # Without the margin the same noise reshuffles the groups (the old behaviour).
    assert without >= 0.1  # 18.5% measured


@settings(max_examples=60, deadline=None)
@given(snapshot=snapshots(), seed=st.integers(0, 2**16))
def test_a_moved_plan_is_better_than_the_kept_one(snapshot: GroupSnapshot, seed: int) -> None:
    """Whatever the lags, the previous owners lose partitions only to a better plan."""
    previous = plan(snapshot)
    now = noisy(snapshot, 0.05, random.Random(seed))
    result = plan(now, previous)
    assert result == previous or worst(now, result) < worst(now, previous)


def test_a_leave_moves_little_beyond_the_leavers_partitions() -> None:
    rng = random.Random(11)
    others = partitions = 0
    for group in groups(11):
        previous = plan(group)
        gone = rng.choice(sorted(group.members))
        members = {m: topics for m, topics in group.members.items() if m != gone}
        left = GroupSnapshot(members=members, partitions=group.partitions, lag=group.lag)
        others += moved_others(previous, plan(left, previous), gone)
        partitions += sum(group.partitions.values())
    assert others / partitions <= 0.05  # 2.3% measured; 21.7% with min_improvement=0


def test_a_join_moves_close_to_what_count_balance_needs() -> None:
    rng = random.Random(13)
    moves = needed = 0
    for index, group in enumerate(groups(13)):
        previous = plan(group)
        topics = sorted(group.partitions)
        wanted = topics if index % 2 == 0 else rng.sample(topics, rng.randint(1, len(topics)))
        joined = GroupSnapshot(
            members={**group.members, "joiner": frozenset(wanted)},
            partitions=group.partitions,
            lag=group.lag,
        )
        moves += moved(previous, plan(joined, previous))
        # Count balance over members alone: what count-only ``sticky`` moves.
        needed += moved(previous, STRATEGIES["sticky"](joined, previous))
    assert moves <= 1.15 * needed  # 1.04x measured


@pytest.mark.parametrize("margin", [-0.1, 1.0, 2.0])
def test_the_margin_is_a_fraction(margin: float) -> None:
    group = next(groups(1, 1))
    with pytest.raises(ConfigError, match="min_improvement"):
        plan(group, None, min_improvement=margin)
