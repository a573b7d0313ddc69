"""How ``fairstream plan --group`` prints a re-plan of a live group.

What a re-plan moves and whether ``lag`` would re-plan at all is
:mod:`fairstream.assign.replan`, the rule the drift watch applies too; this module
only formats it, so the text is tested without a cluster. Imported only by
:mod:`fairstream.cli._groups`.
"""

from __future__ import annotations

from fairstream.assign.replan import Move, Replan

__all__ = ["move_rows", "verdict"]


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
