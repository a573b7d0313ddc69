"""Cooperative hold-back (KIP-429): a partition changes owner in two rounds, never read twice."""

from __future__ import annotations

import pytest
from hypothesis import example, given

from fairstream.assign import STRATEGIES, Assignment, GroupSnapshot
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
