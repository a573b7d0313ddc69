"""``sticky``: as balanced as ``fair``, moving as few partitions as it can.

Every previous owner keeps its partitions while it is still in the group and
still subscribed; orphaned and new partitions go out by KIP-49's greedy, and the
chains of :func:`fairstream.assign.fair.balance` move only what a count-optimal
plan requires, newly placed partitions first. So an unchanged balanced group
moves nothing, and when one member leaves only its partitions move.

Unlike aiokafka's ``StickyPartitionAssignor`` (class-level state, aiokafka issue
#1175) the previous plan is an argument: nothing is remembered between calls.
"""

from __future__ import annotations

from fairstream.assign.fair import balance
from fairstream.assign.model import Assignment, GroupSnapshot, TopicPartition

__all__ = ["plan", "still_valid"]


def plan(snapshot: GroupSnapshot, previous: Assignment | None = None) -> Assignment:
    """Count-optimal plan that keeps every previous partition a balanced plan allows."""
    kept = still_valid(snapshot, previous)
    return Assignment.from_owners(snapshot.members, balance(snapshot, kept))


def still_valid(snapshot: GroupSnapshot, previous: Assignment | None) -> dict[TopicPartition, str]:
    """The previous owners that may keep their partitions: present, subscribed, in range."""
    if previous is None:
        return {}
    return {
        (topic, partition): member_id
        for (topic, partition), member_id in previous.owner_map().items()
        if topic in snapshot.members.get(member_id, ()) and partition < snapshot.partitions[topic]
    }
