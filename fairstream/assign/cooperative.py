"""Incremental cooperative rebalancing (KIP-429): a partition changes owner in two rounds.

Under the eager protocol every member gives up all its partitions before it joins,
so the leader may hand any partition to anyone. Cooperative members keep theirs
while they join, so a partition the plan moves from one live member to another
would be read by both at once. :func:`hold_back_moves` takes such a partition out of
this round's assignment: its owner, not given it, revokes it (committing what it
handled) and asks for another rebalance, in which nobody owns it any more and the
plan gives it to its new owner. Partitions that stay, and partitions nobody alive
owns (a member that left, a new partition), are assigned at once.

A partition that two members of the same generation claim (``contested``, see
:func:`fairstream.assign.resolve_owned`) may be read by both now: it waits the same
way, given to no one in the round that revokes it from both, whoever the plan chose.
"""

from __future__ import annotations

from fairstream.assign.model import Assignment, TopicPartition

__all__ = ["held_back", "hold_back_moves"]


def hold_back_moves(
    planned: Assignment,
    owned: Assignment | None,
    contested: frozenset[TopicPartition] = frozenset(),
) -> Assignment:
    """``planned`` without the partitions it moves away from a member that still owns them.

    ``owned`` is what each member of this join reports owning (members that left are
    not in it). A partition is held back when its reported owner is a member of
    ``planned`` that the plan does not give it to: that owner still reads it. Every
    ``contested`` partition is held back: its claimants, members of this join, may all
    still read it.
    """
    if owned is None and not contested:
        return planned
    owner = owned.owner_map() if owned is not None else {}
    return Assignment(
        {
            member_id: {
                topic: tuple(
                    p
                    for p in partitions
                    if (topic, p) not in contested
                    and (
                        owner.get((topic, p), member_id) == member_id
                        or owner[(topic, p)] not in planned.members
                    )
                )
                for topic, partitions in topics.items()
            }
            for member_id, topics in planned.members.items()
        }
    )


def held_back(
    planned: Assignment,
    owned: Assignment | None,
    contested: frozenset[TopicPartition] = frozenset(),
) -> set[TopicPartition]:
    """The partitions :func:`hold_back_moves` takes out of ``planned``, for logs."""
    kept = hold_back_moves(planned, owned, contested).owner_map()
    return set(planned.owner_map()) - set(kept)
