"""Re-planning on drift (opt-in): lag changes after the plan is made.

A topic that gets a burst an hour after the last rebalance leaves one member far
behind until something else makes the group rebalance. With a ``replan_interval``
the member that led the last rebalance re-reads the group's lag every interval,
plans ``lag`` again with the current assignment as the previous one, and asks the
group to rebalance only when that plan moves something - which the planner does
only when it lowers the busiest member's lag by more than ``min_improvement`` (so
lag noise never triggers one). Each check logs ``lag_replan_checked`` with both
figures and the decision. The rule is :func:`fairstream.assign.replan.lag_replan`,
which ``fairstream plan --group`` shows too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import anyio
import structlog
from aiokafka import AIOKafkaConsumer

from fairstream.assign import GroupSnapshot
from fairstream.assign.lag import MIN_IMPROVEMENT
from fairstream.assign.replan import Replan, lag_replan
from fairstream.runtime._kafka._assignors import PlanningAssignor, PlanRecord
from fairstream.runtime._kafka._lag_listener import request_rebalance

__all__ = ["check_drift", "plan_to_check", "watch_drift"]

log = structlog.get_logger(__name__)


def check_drift(
    record: PlanRecord,
    lag: Mapping[str, tuple[int, ...]],
    *,
    min_improvement: float = MIN_IMPROVEMENT,
) -> Replan:
    """The re-plan of the current assignment on the lag read now (pure): it asks for a
    rebalance if and only if it moves something.

    Topics whose lag was not read count as zero, as at the join.
    """
    known = record.snapshot.partitions
    snapshot = GroupSnapshot(
        members=record.snapshot.members,
        partitions=known,
        lag={t: lag[t] for t, count in known.items() if len(lag.get(t, ())) == count},
    )
    return lag_replan(snapshot, record.assignment, min_improvement=min_improvement)


def plan_to_check(assignor: PlanningAssignor, asked_for: PlanRecord | None) -> PlanRecord | None:
    """The plan to re-check now, or ``None`` if this member should not check.

    Only the leader of this generation checks, once per plan (a rebalance it asked
    for is under way until a new plan replaces ``asked_for``), and only a lag plan:
    another protocol the group chose, or a fair fallback, is not ours to redo.
    """
    record = assignor.last_plan
    if not assignor.leading or record is None or record is asked_for:
        return None
    return record if record.strategy == "lag" else None


async def watch_drift(assignor: PlanningAssignor, consumer: Callable[[], AIOKafkaConsumer]) -> None:
    """Every ``replan_interval_s``, on the leader, re-plan and rebalance if it pays.

    ``consumer`` gives the member's current consumer (it is rebuilt after a failure).
    Returns at once without an interval; otherwise runs until cancelled.
    """
    interval = assignor.replan_interval_s
    if interval is None:
        return
    asked_for: PlanRecord | None = None
    while True:
        await anyio.sleep(interval)
        record = plan_to_check(assignor, asked_for)
        if record is None:
            continue
        lag = await assignor.refresh_lag(record.snapshot.partitions)
        if lag is None:
            continue
        change = check_drift(record, lag)
        decision = "rebalance" if change.moves else "keep"
        log.info(
            "lag_replan_checked",
            busiest_lag=change.busiest_now,
            planned_busiest_lag=change.busiest_after,
            moves=len(change.moves),
            min_improvement=MIN_IMPROVEMENT,
            decision=decision,
        )
        if change.moves and request_rebalance(consumer()):
            asked_for = record
