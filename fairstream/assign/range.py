"""``range``: the Java client's ``RangeAssignor``, topic by topic.

For each topic, its subscribers sorted by member_id each get a contiguous run of
partitions; the first ``partitions % subscribers`` of them get one extra. Every
topic starts again at the first member, which is why range piles work onto the
lowest member_ids when a group reads many small topics.
"""

from __future__ import annotations

from fairstream.assign.model import Assignment, GroupSnapshot

__all__ = ["plan"]


def plan(snapshot: GroupSnapshot, previous: Assignment | None = None) -> Assignment:
    """Contiguous runs per topic, as Kafka's RangeAssignor does; ``previous`` is ignored."""
    owners: dict[str, list[str]] = {}
    for topic, readers in snapshot.subscribers().items():
        share, extra = divmod(snapshot.partitions[topic], len(readers))
        owners[topic] = [
            member_id
            for index, member_id in enumerate(readers)
            for _ in range(share + (index < extra))
        ]
    return Assignment.from_owners(snapshot.members, owners)
