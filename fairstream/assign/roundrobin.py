"""``roundrobin``: the Java client's ``RoundRobinAssignor``.

Members in Kafka's order (static members by instance id, then the others by
member_id: :meth:`GroupSnapshot.kafka_order`) form one circle; all subscribed
topic-partitions, sorted by topic then partition, are dealt around it in a single
walk. A member not subscribed to a partition's topic is skipped, which is where
round-robin loses its balance under heterogeneous subscriptions.
"""

from __future__ import annotations

from fairstream.assign.model import Assignment, GroupSnapshot

__all__ = ["plan"]


def plan(snapshot: GroupSnapshot, previous: Assignment | None = None) -> Assignment:
    """One circular walk over the members in order, skipping non-subscribers; ``previous``
    is ignored."""
    circle = snapshot.kafka_order(snapshot.members)
    owners: dict[str, list[str]] = {}
    position = 0
    for topic in snapshot.subscribers():
        topic_owners = owners[topic] = []
        for _ in range(snapshot.partitions[topic]):
            while topic not in snapshot.members[circle[position]]:
                position = (position + 1) % len(circle)
            topic_owners.append(circle[position])
            position = (position + 1) % len(circle)
    return Assignment.from_owners(snapshot.members, owners)
