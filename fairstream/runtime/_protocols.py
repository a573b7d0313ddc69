"""The JoinGroup protocols a member offers: their names, and one entry per strategy.

A member may offer several strategies, best first (Kafka's
``partition.assignment.strategy`` list): the coordinator picks a protocol every
member offers, so fairstream members can join a group of plain aiokafka,
librdkafka or Java consumers and take it over once the last of those leaves.
``range`` and ``roundrobin`` are offered under Kafka's own protocol names for that;
the metadata is the standard consumer protocol's (version 0: the subscription,
and fairstream's owned partitions only in the user data), which those clients read.

The names live apart from the planner (:mod:`fairstream.runtime._assignors`)
because the rebalance room asks them too: a group on a shared protocol may hold
consumers that cannot read KIP-333 ranges (:func:`shared_protocol`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol, final

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

__all__ = ["Planner", "StrategyOffer", "protocol_name", "shared_protocol"]

_KAFKA_NAMED = frozenset({"range", "roundrobin"})
"""Strategies every Kafka client has under these protocol names, assigning alike
(``tests/assign/test_kafka_rules.py``), so a mixed group can agree on them."""


def protocol_name(strategy: str, cooperative: bool = False) -> str:
    """The JoinGroup protocol name of a strategy: Kafka's own, or ``fairstream-<name>``.

    ``lag``, ``fair`` and ``sticky`` plan differently from anything another client
    offers (Kafka's ``sticky`` keeps its own user data), so they keep our prefix;
    cooperative members (KIP-429) never share a protocol with eager ones: ``-coop``.
    """
    if cooperative or strategy not in _KAFKA_NAMED:
        return f"fairstream-{strategy}" + ("-coop" if cooperative else "")
    return strategy


def shared_protocol(protocol: str | None) -> bool:
    """Whether a group on ``protocol`` may hold members that are not fairstream apps.

    Any Kafka client can join a group on ``range`` or ``roundrobin``, and such a
    member cannot read the KIP-333 ranges kept in commit metadata: a partition that
    jumped and then moved to it would lose its shadow's records.
    """
    return protocol is not None and not protocol.startswith("fairstream-")


class Planner(Protocol):
    """The planner every entry of one member shares (``_assignors.PlanningAssignor``)."""

    @property
    def cooperative(self) -> bool: ...

    def metadata(
        self, topics: Iterable[str], *, owned: bool = True
    ) -> ConsumerProtocolMemberMetadata: ...

    def assigned(self, protocol: str, assignment: ConsumerProtocolMemberAssignment) -> None: ...

    def plan_group(
        self,
        chosen: str,
        cluster: ClusterMetadata,
        members: Mapping[str, ConsumerProtocolMemberMetadata],
        cooperative: bool = False,
    ) -> dict[str, ConsumerProtocolMemberAssignment]: ...


@final
class StrategyOffer(AbstractPartitionAssignor):  # type: ignore[misc]
    """A further strategy of a planner, as its own protocol entry.

    aiokafka asks the entry whose name the group chose to plan (on the leader)
    and to take the assignment (on every member); both go to the shared planner.
    """

    version = 0

    def __init__(self, planner: Planner, strategy: str, cooperative: bool) -> None:
        self._planner = planner
        self.strategy = strategy
        self.cooperative = cooperative

    @property
    def name(self) -> str:
        return protocol_name(self.strategy, self.cooperative)

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        # An eager member offering -coop owns nothing when it joins: it revoked all.
        owned = self._planner.cooperative or not self.cooperative
        return self._planner.metadata(topics, owned=owned)

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        self._planner.assigned(self.name, assignment)

    def assign(
        self, cluster: ClusterMetadata, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        return self._planner.plan_group(self.strategy, cluster, members, self.cooperative)
