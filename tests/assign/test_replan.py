"""The re-plan rule, pure: what a plan moves from whom, what it buys, whether lag re-plans."""

from __future__ import annotations

from fairstream.assign import Assignment, GroupSnapshot
from fairstream.assign.replan import Move, lag_replan, replan

SNAPSHOT = GroupSnapshot(
    members={"a": frozenset({"t"}), "b": frozenset({"t"})},
    partitions={"t": 4},
    lag={"t": (900, 800, 50, 60)},
)
CURRENT = Assignment({"a": {"t": (0, 1)}, "b": {"t": (2, 3)}})


def test_moves_list_each_partition_taken_from_its_owner_and_the_busiest_lags() -> None:
    planned = Assignment({"a": {"t": (0, 2)}, "b": {"t": (1, 3)}})
    change = replan(SNAPSHOT, CURRENT, planned)
    assert change.moves == (Move("t", 1, "a", "b"), Move("t", 2, "b", "a"))
    assert (change.busiest_now, change.busiest_after) == (1_700, 950)
    assert change.to_json() == {
        "moves": [
            {"topic": "t", "partition": 1, "from": "a", "to": "b"},
            {"topic": "t", "partition": 2, "from": "b", "to": "a"},
        ],
        "busiest_lag_now": 1_700,
        "busiest_lag_after": 950,
    }


def test_taking_up_an_unowned_partition_is_not_a_move() -> None:
    current = Assignment({"a": {"t": (0, 1)}, "b": {"t": (2,)}})  # t[3] held by nobody
    planned = Assignment({"a": {"t": (0, 1)}, "b": {"t": (2, 3)}})
    assert replan(SNAPSHOT, current, planned).moves == ()


def test_lag_replans_only_when_it_lowers_the_busiest_lag_by_more_than_the_margin() -> None:
    # a holds 1,700 of the group's 1,810; swapping t[1] and t[2] brings it to 950 (-44%).
    change = lag_replan(SNAPSHOT, CURRENT, min_improvement=0.1)
    assert change.moves and change.busiest_after < change.busiest_now * 0.9
    assert lag_replan(SNAPSHOT, CURRENT, min_improvement=0.99).moves == ()
