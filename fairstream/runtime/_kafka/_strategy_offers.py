"""The further strategies a member offers, as aiokafka assignor entries.

A member may offer several strategies, best first (Kafka's
``partition.assignment.strategy`` list); aiokafka takes one
``AbstractPartitionAssignor`` per protocol it sends in JoinGroup. Each further
strategy is a :class:`StrategyOffer` whose calls go to the member's one planner
(``_assignors.PlanningAssignor``). It subclasses an aiokafka coordinator class, so
it lives behind the aiokafka seam; what the names mean is
:mod:`fairstream.runtime.group._protocol_names`.
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

from fairstream.runtime.group._protocol_names import protocol_name

__all__ = ["Planner", "StrategyOffer"]


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
