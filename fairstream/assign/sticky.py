"""``sticky``: as balanced as ``fair``, moving as few partitions as it can.

Every previous owner keeps its partitions while it is still in the group and
still subscribed; orphaned and new partitions go out by KIP-49's greedy, and the
chains of :func:`fairstream.assign.fair.balance` move only what a count-optimal
plan requires, newly placed partitions first. Then :func:`give_back` returns every
moved partition it can without changing the counts, so no plan with the same counts
moves fewer partitions by giving one back, alone or in exchange for one its old
owner newly got (the promise Kafka's sticky assignor makes: "preserve as many
existing assignments as possible" once the assignment is balanced). So an
unchanged balanced group moves nothing, and when one member leaves only its
partitions move.

Unlike aiokafka's ``StickyPartitionAssignor`` (class-level state, aiokafka issue
#1175) the previous plan is an argument: nothing is remembered between calls.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

from fairstream.assign.fair import balance
from fairstream.assign.model import Assignment, GroupSnapshot, TopicPartition

__all__ = ["give_back", "plan", "still_valid"]


def plan(snapshot: GroupSnapshot, previous: Assignment | None = None) -> Assignment:
    """Count-optimal plan that keeps every previous partition a balanced plan allows."""
    kept = still_valid(snapshot, previous)
    owners = balance(snapshot, kept)
    give_back(snapshot, owners, kept)
    return Assignment.from_owners(snapshot.members, owners)


def still_valid(snapshot: GroupSnapshot, previous: Assignment | None) -> dict[TopicPartition, str]:
    """The previous owners that may keep their partitions: present, subscribed, in range."""
    if previous is None:
        return {}
    return {
        (topic, partition): member_id
        for (topic, partition), member_id in previous.owner_map().items()
        if topic in snapshot.members.get(member_id, ()) and partition < snapshot.partitions[topic]
    }


def give_back(
    snapshot: GroupSnapshot,
    owners: dict[str, list[str]],
    kept: Mapping[TopicPartition, str],
    *,
    cap: int | None = None,
) -> None:
    """Return moved partitions to their previous owners wherever the counts allow.

    ``owners`` (topic -> owner per partition) is changed in place. A partition that
    moved from ``o`` to ``n`` goes back to ``o`` when ``n`` holds one more than ``o``
    (the two counts trade places, the plan stays as balanced), or in exchange for a
    partition ``o`` newly got that ``n`` reads (one ``n`` owned before, if any). Each
    return saves at least one move, so the loop ends; at its end no such return is
    left. With ``cap`` (``lag``'s busiest member), a return must leave both members'
    lag at or under it, so lag balance comes before fewer moves.
    """
    if not kept:
        return
    subscriptions = snapshot.members
    count = Counter(member for topic_owners in owners.values() for member in topic_owners)
    total: dict[str, int] = Counter()
    if cap is not None:
        for topic, topic_owners in owners.items():
            for partition, member_id in enumerate(topic_owners):
                total[member_id] += snapshot.lag_of(topic, partition)
    # What each member holds that it did not own before, by topic and by old owner.
    fresh: dict[str, dict[str, set[int]]] = {m: {} for m in subscriptions}
    back: dict[tuple[str, str], set[TopicPartition]] = {}
    for topic, topic_owners in owners.items():
        for partition, member_id in enumerate(topic_owners):
            before = kept.get((topic, partition))
            if before != member_id:
                fresh[member_id].setdefault(topic, set()).add(partition)
                if before is not None:
                    back.setdefault((member_id, before), set()).add((topic, partition))

    def hand(tp: TopicPartition, giver: str, taker: str) -> None:
        topic, partition = tp
        owners[topic][partition] = taker
        count[giver] -= 1
        count[taker] += 1
        lag = snapshot.lag_of(topic, partition) if cap is not None else 0
        total[giver] -= lag
        total[taker] += lag
        held = fresh[giver][topic]
        held.discard(partition)
        if not held:
            del fresh[giver][topic]
        before = kept.get(tp)
        if before is not None:
            back[(giver, before)].discard(tp)
        if before != taker:
            fresh[taker].setdefault(topic, set()).add(partition)
            if before is not None:
                back.setdefault((taker, before), set()).add(tp)

    def fits(owner: str, holder: str, delta: int) -> bool:
        """``owner`` gains ``delta`` lag and ``holder`` loses it: both stay under the cap."""
        return cap is None or (total[owner] + delta <= cap and total[holder] - delta <= cap)

    def swap_fits(owner: str, holder: str, lag: int) -> Callable[[TopicPartition], bool]:
        return lambda other: fits(owner, holder, lag - snapshot.lag_of(*other))

    moved = sorted(tp for tp, member_id in kept.items() if owners[tp[0]][tp[1]] != member_id)
    changed = True
    while changed:
        changed = False
        for tp in moved:
            owner, holder = kept[tp], owners[tp[0]][tp[1]]
            if owner == holder:
                continue
            lag = snapshot.lag_of(*tp) if cap is not None else 0
            if count[holder] == count[owner] + 1 and fits(owner, holder, lag):
                hand(tp, holder, owner)
                changed = True
                continue
            partner = _partner(
                fresh[owner],
                back.get((owner, holder), set()),
                subscriptions[holder],
                swap_fits(owner, holder, lag),
            )
            if partner is not None:
                hand(tp, holder, owner)
                hand(partner, owner, holder)
                changed = True


def _partner(
    fresh: Mapping[str, set[int]],
    theirs: set[TopicPartition],
    readable: frozenset[str],
    allowed: Callable[[TopicPartition], bool],
) -> TopicPartition | None:
    """A partition the owner newly got that the holder can take in exchange.

    One the holder owned before first (that saves two moves), else any it reads.
    """
    for tp in sorted(theirs):
        if allowed(tp):
            return tp
    for topic in sorted(fresh.keys() & readable):
        for partition in sorted(fresh[topic]):
            if allowed((topic, partition)):
                return (topic, partition)
    return None
