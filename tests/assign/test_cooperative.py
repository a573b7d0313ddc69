"""Cooperative hold-back (KIP-429): a partition changes owner in two rounds, never read twice."""

from __future__ import annotations

import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fairstream.assign import STRATEGIES, Assignment, GroupSnapshot, TopicPartition, resolve_owned
from fairstream.assign.claims import Claim
from fairstream.assign.cooperative import held_back, hold_back_moves
from tests.assign.test_properties import FAST, with_previous

Owned = tuple[GroupSnapshot, Assignment]


def _live_owners(snapshot: GroupSnapshot, owned: Assignment) -> dict[tuple[str, int], str]:
    return {tp: m for tp, m in owned.owner_map().items() if m in snapshot.members}


@pytest.mark.parametrize("strategy", ["sticky", "lag"])
@FAST
@given(case=with_previous())
def test_no_partition_is_read_by_two_members(strategy: str, case: Owned) -> None:
    snapshot, owned = case
    planned = STRATEGIES[strategy](snapshot, owned)
    result = hold_back_moves(planned, owned)
    assert set(result.members) == set(planned.members)
    given_out = [(t, p) for ts in result.members.values() for t, ps in ts.items() for p in ps]
    assert len(given_out) == len(set(given_out))
    live = _live_owners(snapshot, owned)
    for tp, member_id in result.owner_map().items():
        # Given to someone: either its owner keeps it, or no live member owns it now.
        assert live.get(tp, member_id) == member_id
        assert planned.owner_map()[tp] == member_id


@pytest.mark.parametrize("strategy", ["sticky", "lag"])
@FAST
@given(case=with_previous())
def test_only_moves_between_live_members_wait(strategy: str, case: Owned) -> None:
    snapshot, owned = case
    planned = STRATEGIES[strategy](snapshot, owned)
    result = hold_back_moves(planned, owned)
    live = _live_owners(snapshot, owned)
    moving = {tp for tp, m in planned.owner_map().items() if tp in live and live[tp] != m}
    assert held_back(planned, owned) == moving
    # What stays, and what nobody alive owns, is assigned at once and untouched.
    assert {tp: m for tp, m in planned.owner_map().items() if tp not in moving} == (
        result.owner_map()
    )
    # The held-back partition's old owner does not keep it.
    for tp in moving:
        assert tp not in result.owner_map()


# A group hypothesis found: the second plan's shortest chain (1 -> 0 via c) moved a
# kept partition where a chain of newly placed ones (1 -> z via b, z -> 0 via a) keeps it.
_CHAINED = (
    GroupSnapshot(
        members={
            "0": frozenset("ac"),
            "1": frozenset("abc"),
            "z": frozenset("ab"),
            "000": frozenset("b"),
            **{m: frozenset() for m in ("c", "m", "00")},
        },
        partitions={"a": 1, "b": 5, "c": 2},
    ),
    Assignment({"0": {"b": (0, 1, 2, 3, 4), "c": (0,)}, "1": {"a": (0,), "c": (1,)}}),
)


@FAST
@given(case=with_previous())
@example(case=_CHAINED)
def test_sticky_settles_in_the_second_round(case: Owned) -> None:
    """The owners revoke what was held back; the next plan then holds back nothing."""
    snapshot, owned = case
    first = hold_back_moves(STRATEGIES["sticky"](snapshot, owned), owned)
    second = STRATEGIES["sticky"](snapshot, first)
    assert hold_back_moves(second, first) == second


def test_no_owners_reported_changes_nothing() -> None:
    planned = Assignment({"a": {"t": (0, 1)}, "b": {"t": (2,)}})
    assert hold_back_moves(planned, None) is planned


def test_a_joining_member_gets_the_moved_partition_one_round_later() -> None:
    owned = Assignment({"a": {"t": (0, 1, 2, 3)}})
    planned = Assignment({"a": {"t": (0, 1)}, "b": {"t": (2, 3)}})
    first = hold_back_moves(planned, owned)
    assert first == Assignment({"a": {"t": (0, 1)}, "b": {}})
    assert hold_back_moves(planned, first) == planned


def test_a_contested_partition_goes_to_no_one_in_the_round_that_revokes_it() -> None:
    # a and b both claim t[0] in generation 5: both may read it now. The plan gives it
    # to c; it must wait until both revoked it, as a partition moving from a to c does.
    owned, contested = resolve_owned({"a": (5, {"t": [0]}), "b": (5, {"t": [0]}), "c": (5, {})})
    planned = Assignment({"a": {}, "b": {}, "c": {"t": (0,)}})
    assert hold_back_moves(planned, owned, contested) == Assignment({"a": {}, "b": {}, "c": {}})
    assert held_back(planned, owned, contested) == {("t", 0)}
    # Next round both report it gone: c gets it.
    assert hold_back_moves(planned, Assignment({"a": {}, "b": {}, "c": {}})) == planned


@st.composite
def claimed_groups(draw: st.DrawFn) -> tuple[GroupSnapshot, dict[str, Claim]]:
    """Up to 50 members, 20 topics of up to 40 partitions, mixed subscriptions; each
    partition claimed by up to three members, each member of a random generation
    (few generations, so claims often tie). A seeded ``Random`` draws the bulk: as
    hypothesis draws, thousands of choices an example take seconds."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    partitions = {f"t{i:02}": rng.randint(0, 40) for i in range(draw(st.integers(1, 20)))}
    names = [f"m{i:02}" for i in range(draw(st.integers(1, 50)))]
    topics = sorted(partitions)
    members = {m: frozenset(rng.sample(topics, rng.randint(0, len(topics)))) for m in names}
    lag = {t: tuple(rng.randint(0, 1_000) for _ in range(n)) for t, n in partitions.items()}
    owned: dict[str, dict[str, list[int]]] = {m: {} for m in names}
    for topic, count in partitions.items():
        for partition in range(count):
            for member_id in rng.sample(names, min(len(names), rng.choice([0, 1, 1, 2, 3]))):
                owned[member_id].setdefault(topic, []).append(partition)
    claims: dict[str, Claim] = {m: (rng.randint(-1, 2), owned[m]) for m in names}
    return GroupSnapshot(members=members, partitions=partitions, lag=lag), claims


@pytest.mark.parametrize("strategy", ["sticky", "lag"])
@settings(max_examples=40, deadline=None)
@given(case=claimed_groups())
def test_no_partition_goes_to_a_new_reader_while_a_claimant_still_reads_it(
    strategy: str, case: tuple[GroupSnapshot, dict[str, Claim]]
) -> None:
    """Every claimant is in this join, so still reads what it claims: a partition is
    given only to one of its claimants, or, unclaimed, to anyone."""
    snapshot, claims = case
    owned, contested = resolve_owned(claims)
    result = hold_back_moves(STRATEGIES[strategy](snapshot, owned), owned, contested)
    claimants: dict[TopicPartition, set[str]] = {}
    for member_id, (_, topics) in claims.items():
        for topic, partitions in topics.items():
            for partition in partitions:
                claimants.setdefault((topic, partition), set()).add(member_id)
    for tp, member_id in result.owner_map().items():
        assert member_id in claimants.get(tp, {member_id}), (tp, member_id, claimants[tp])
