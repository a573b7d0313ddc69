"""`fairstream plan --group`'s re-plan view, pure: the move table and the lag verdict."""

from __future__ import annotations

from fairstream.assign import Assignment, GroupSnapshot
from fairstream.assign.replan import Move, replan
from fairstream.cli._replan import move_rows, verdict

SNAPSHOT = GroupSnapshot(
    members={"a": frozenset({"t"}), "b": frozenset({"t"})},
    partitions={"t": 4},
    lag={"t": (900, 800, 50, 60)},
)
CURRENT = Assignment({"a": {"t": (0, 1)}, "b": {"t": (2, 3)}})


def test_move_rows_name_from_and_to_and_cut_long_lists() -> None:
    moves = tuple(Move("t", p, "a", "b") for p in range(5))
    assert move_rows(()) == []
    assert move_rows(moves[:1]) == [("t[0]", "a", "b")]
    assert move_rows(moves, limit=2) == [
        ("t[0]", "a", "b"),
        ("t[1]", "a", "b"),
        ("+3 more", "", ""),
    ]


def test_verdict_says_whether_lag_would_re_plan_with_both_figures() -> None:
    kept = replan(SNAPSHOT, CURRENT, CURRENT)
    assert verdict(kept, 0.1) == (
        "lag (min_improvement 0.1) would keep the current assignment: no plan lowers "
        "the busiest member's lag (1,700) by more than that"
    )
    planned = Assignment({"a": {"t": (0, 2)}, "b": {"t": (1, 3)}})
    assert verdict(replan(SNAPSHOT, CURRENT, planned), 0.25) == (
        "lag (min_improvement 0.25) would re-plan: 2 partitions move, "
        "busiest member's lag 1,700 -> 950"
    )
