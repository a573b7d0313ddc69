"""The asynchronous side of the lag assignor: a rebalance listener that reads the
group's lag before each join, and the request for a follow-up rebalance.

aiokafka awaits the listener's ``on_partitions_revoked`` before every join (the
first one included), so the reading is fresh when the leader's synchronous
``assign`` plans; ``on_partitions_assigned`` asks for the follow-up rebalance the
leader wants after a plan that lacked some topic's lag.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, final

import structlog
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

__all__ = ["LagReader", "RefreshingListener", "request_rebalance"]

log = structlog.get_logger(__name__)


class LagReader(Protocol):
    """What the listener needs of the lag assignor (``PlanningAssignor``)."""

    async def refresh_lag(self, topics: Iterable[str]) -> Mapping[str, tuple[int, ...]] | None:
        """Read the group's lag before a join."""

    def take_follow_up(self) -> bool:
        """Whether the group should rebalance again (asked once per plan)."""


@final
class RefreshingListener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(
        self,
        assignor: LagReader,
        consumer: AIOKafkaConsumer,
        inner: ConsumerRebalanceListener | None,
    ) -> None:
        self._assignor = assignor
        self._consumer = consumer
        self._inner = inner

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        # The inner listener may commit first, so the lag read afterwards is current.
        if self._inner is not None:
            await _maybe_await(self._inner.on_partitions_revoked(revoked))
        await self._assignor.refresh_lag(self._consumer.subscription())

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        """KIP-429: another member may own ``lost`` now; the inner listener drops them."""
        if self._inner is not None:
            drop = getattr(self._inner, "on_partitions_lost", self._inner.on_partitions_revoked)
            await _maybe_await(drop(lost))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        if self._inner is not None:
            await _maybe_await(self._inner.on_partitions_assigned(assigned))
        if self._assignor.take_follow_up():
            request_rebalance(self._consumer)


def request_rebalance(consumer: AIOKafkaConsumer) -> bool:
    """Make the consumer rejoin its group, so that the group rebalances.

    aiokafka has no public call for it; ``_coordinator.request_rejoin()`` is what it
    uses itself on a subscription change (private, guarded: a warning if it is gone).
    aiokafka resets the request before SyncGroup, so asking from the assigned
    callback is not lost.
    """
    rejoin = getattr(getattr(consumer, "_coordinator", None), "request_rejoin", None)
    if not callable(rejoin):
        log.warning("rebalance_request_unavailable", reason="aiokafka has no request_rejoin")
        return False
    rejoin()
    return True


async def _maybe_await(result: Any) -> None:
    if inspect.isawaitable(result):
        await result
