"""A member's helper clients keep metadata of its own topics, not of the whole cluster.

Besides its group consumer a member runs a producer (publish, dead letters), an admin
client and a group-less consumer (offsets, lags). An aiokafka client that tracks no
topic asks the cluster for *every* topic whenever it refreshes its metadata (every
``metadata_max_age_ms``, and after a connection breaks; noida answers even the
bootstrap's empty list so): each of those clients then holds a ``PartitionMetadata``
with its replica lists, and a ``TopicPartition`` in a set per broker, for every
partition of the cluster. On a cluster of tens of thousands of partitions that is
memory and garbage-collector work proportional to the cluster, three times over, in a
member that consumes a few topics (on the benchmarks' noida with 4,196 partitions:
~50k of the member's 172k tracked objects; ``benchmarks/notes/per_record_cost.md``,
"The buffer and the garbage collector").

:func:`keep_metadata_of` makes such a client track the member's topics instead, with
the client's own ``set_topics`` (what aiokafka's consumer calls when it subscribes or
is assigned). A producer then adds each topic it sends to, as aiokafka does. The
admin client and the group-less consumer keep their aiokafka client in ``_client``
(private, so guarded: an aiokafka without it leaves the client tracking every topic,
logged) and pinned by ``tests/runtime/kafka/test_metadata_scope.py``. aiokafka cannot
track *no* topic (an empty set means all), so a client that needs none tracks the
member's topics, which its group consumer holds anyway.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import structlog

__all__ = ["keep_metadata_of"]

log = structlog.get_logger(__name__)


def keep_metadata_of(owner: Any, topics: Collection[str]) -> bool:
    """Have ``owner`` (an aiokafka producer, consumer or admin client, before or after
    it starts) refresh metadata of ``topics`` only; ``False`` if nothing changed (no
    topics, or a client this fairstream does not know, logged).

    Before the start is best: the client's first refresh, right after its bootstrap,
    then already names the topics."""
    if not topics:
        return False
    client = getattr(owner, "client", None) or getattr(owner, "_client", None)
    set_topics = getattr(client, "set_topics", None)
    if not callable(set_topics):
        log.info(
            "metadata_scope_unavailable",
            client=type(owner).__name__,
            reason="aiokafka's client is not where this fairstream expects it; it keeps "
            "metadata of every topic of the cluster",
        )
        return False
    # The refresh it starts runs in the client's own metadata task; nothing waits for it.
    set_topics(sorted(topics))
    return True
