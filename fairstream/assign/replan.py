"""The one re-plan rule: what a new plan moves, what it buys, and whether ``lag`` re-plans.

Every moved partition costs a revoke, a commit, a re-fetch and often a KIP-333
catch-up, so a re-plan is worth it only when it buys something. The rule is the
``lag`` planner's own: planned with the current assignment as the previous one, it
moves a partition only when that lowers the busiest member's lag by more than
``min_improvement``; a plan that moves nothing keeps the group as it is. The drift
watch (``replan_interval``, in the runtime) rebalances on it, and
``fairstream plan --group`` shows it, so both come from :func:`lag_replan` here.
Pure functions on the planner's values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fairstream.assign.lag import MIN_IMPROVEMENT
from fairstream.assign.lag import plan as lag_plan
from fairstream.assign.model import Assignment, GroupSnapshot
from fairstream.assign.quality import member_lags

__all__ = ["Move", "Replan", "lag_replan", "replan"]


@dataclass(frozen=True, slots=True)
class Move:
    """One partition changing owner: ``source`` revokes it, ``target`` is given it."""

    topic: str
    partition: int
    source: str
    target: str

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "from": self.source,
            "to": self.target,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Replan:
    """A plan against the current assignment: its moves and what they buy."""

    moves: tuple[Move, ...]
    busiest_now: int
    busiest_after: int

    def to_json(self) -> dict[str, Any]:
        return {
            "moves": [move.to_json() for move in self.moves],
            "busiest_lag_now": self.busiest_now,
            "busiest_lag_after": self.busiest_after,
        }


def replan(snapshot: GroupSnapshot, current: Assignment, planned: Assignment) -> Replan:
    """The partitions ``planned`` takes from their current owners, sorted by topic and
    partition, and the busiest member's lag under each plan.

    A partition nobody holds now (a new partition, a member gone) is not a move: taking
    it up revokes nothing.
    """
    before = current.owner_map()
    moves = tuple(
        Move(topic, partition, before[(topic, partition)], owner)
        for (topic, partition), owner in sorted(planned.owner_map().items())
        if before.get((topic, partition), owner) != owner
    )
    return Replan(
        moves=moves,
        busiest_now=max(member_lags(snapshot, current).values(), default=0),
        busiest_after=max(member_lags(snapshot, planned).values(), default=0),
    )


def lag_replan(
    snapshot: GroupSnapshot,
    current: Assignment,
    *,
    min_improvement: float = MIN_IMPROVEMENT,
) -> Replan:
    """What ``lag`` would do to ``current`` now: it re-plans if and only if this moves
    something (lag noise below ``min_improvement`` moves nothing).

    :raises ConfigError: ``min_improvement`` is not in [0, 1).
    """
    return replan(snapshot, current, lag_plan(snapshot, current, min_improvement=min_improvement))
