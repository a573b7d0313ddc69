"""What a re-plan of a live group would move, for ``fairstream plan --group``.

Every moved partition costs a revoke, a commit, a re-fetch and often a KIP-333
catch-up, so before switching strategies (or turning on ``replan_interval``) an
operator wants to see which partitions a strategy would take from whom, what that
buys (the busiest member's lag now and after), and whether the ``lag`` strategy with
its ``min_improvement`` would re-plan at all - the same rule the drift watch applies:
it rebalances only when the lag plan, made with the current assignment as the
previous one, moves something. Pure functions on the planner's values, so the
formatting is tested without a cluster. Imported only by :mod:`fairstream._cli_groups`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fairstream.assign import Assignment, GroupSnapshot, member_lags

__all__ = ["Move", "Replan", "move_rows", "replan", "verdict"]


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
    """A strategy's plan against the current assignment: its moves and what they buy."""

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


def move_rows(moves: tuple[Move, ...], *, limit: int = 8) -> list[tuple[str, str, str]]:
    """Table rows ``(partition, from, to)`` for the first ``limit`` moves, then one
    ``(+N more, "", "")`` row: member ids are long, a row each keeps them readable."""
    rows = [(f"{m.topic}[{m.partition}]", m.source, m.target) for m in moves[:limit]]
    if len(moves) > limit:
        rows.append((f"+{len(moves) - limit} more", "", ""))
    return rows


def verdict(lag: Replan, min_improvement: float) -> str:
    """Whether ``lag`` would re-plan the group now, in the drift watch's terms."""
    margin = f"min_improvement {min_improvement:g}"
    if not lag.moves:
        return (
            f"lag ({margin}) would keep the current assignment: no plan lowers the "
            f"busiest member's lag ({lag.busiest_now:,}) by more than that"
        )
    count = len(lag.moves)
    return (
        f"lag ({margin}) would re-plan: {count} partition{'s' if count != 1 else ''} "
        f"move, busiest member's lag {lag.busiest_now:,} -> {lag.busiest_after:,}"
    )
