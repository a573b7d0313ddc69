"""How good a plan is: lag per member against a lower bound, count spread, churn.

The lower bound is ``max(total lag / members, largest partition lag)``: no plan
can beat the average, and no plan can split a partition. The benchmark and
``fairstream plan`` report a plan's largest member lag against it.
"""

from __future__ import annotations

from fairstream.assign.model import Assignment, GroupSnapshot, PlanStats

__all__ = ["count_spread", "lag_lower_bound", "member_lags", "moved", "stats"]


def member_lags(snapshot: GroupSnapshot, assignment: Assignment) -> dict[str, int]:
    """Member_id -> total lag of the partitions it is given."""
    return {
        member_id: sum(
            snapshot.lag_of(topic, partition)
            for topic, partitions in topics.items()
            for partition in partitions
        )
        for member_id, topics in assignment.members.items()
    }


def lag_lower_bound(snapshot: GroupSnapshot) -> float:
    """A floor under any plan's largest member lag, to judge plans against."""
    lags = [lag for topic in snapshot.subscribers() for lag in snapshot.topic_lags(topic)]
    if not lags or not snapshot.members:
        return 0.0
    return float(max(sum(lags) / len(snapshot.members), max(lags)))


def count_spread(assignment: Assignment) -> int:
    """Most partitions any member holds minus the fewest (0 for an empty group)."""
    counts = [assignment.count(member_id) for member_id in assignment.members]
    return max(counts) - min(counts) if counts else 0


def moved(previous: Assignment | None, assignment: Assignment) -> int:
    """Partitions that had an owner before and have a different one now."""
    if previous is None:
        return 0
    before = previous.owner_map()
    return sum(
        1
        for key, member_id in assignment.owner_map().items()
        if key in before and before[key] != member_id
    )


def stats(
    snapshot: GroupSnapshot, assignment: Assignment, previous: Assignment | None = None
) -> PlanStats:
    """All the figures ``fairstream plan`` prints for one plan."""
    lags = member_lags(snapshot, assignment)
    return PlanStats(
        max_member_lag=max(lags.values(), default=0),
        lag_lower_bound=lag_lower_bound(snapshot),
        count_spread=count_spread(assignment),
        moved=moved(previous, assignment),
    )
