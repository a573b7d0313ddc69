"""``range``: the Java client's ``RangeAssignor``, topic by topic.

For each topic, its subscribers in Kafka's order (static members by instance id,
then the others by member_id: :meth:`GroupSnapshot.kafka_order`) each get a
contiguous run of partitions; the first ``partitions % subscribers`` of them get
one extra. Every topic starts again at the first member, which is why range piles
work onto the first members when a group reads many small topics.
"""

from __future__ import annotations

from fairstream.assign.model import Assignment, GroupSnapshot

__all__ = ["plan"]


def plan(snapshot: GroupSnapshot, previous: Assignment | None = None) -> Assignment:
    """Contiguous runs per topic, as Kafka's RangeAssignor does; ``previous`` is ignored."""
    owners: dict[str, list[str]] = {}
    for topic, subscribed in snapshot.subscribers().items():
        readers = snapshot.kafka_order(subscribed)
        share, extra = divmod(snapshot.partitions[topic], len(readers))
        owners[topic] = [
            member_id
            for index, member_id in enumerate(readers)
            for _ in range(share + (index < extra))
        ]
    return Assignment.from_owners(snapshot.members, owners)
