"""The ports: what the runtime's rooms need from Kafka, as Protocols.

The engine talks to :class:`KafkaClients`; ``_clients.AIOKafkaClients`` implements
it with aiokafka for real clusters and ``fairstream.testing`` with an in-memory
broker, so no room depends on aiokafka's classes.

Parallel rebalance (KIP-333) needs more: committed metadata, true end offsets, a
seek, and group-less shadow readers. That is :class:`ShadowClients`, a separate,
optional Protocol: clients without it (the in-memory kit, for now) consume plainly.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal, Protocol, runtime_checkable

from aiokafka import ConsumerRebalanceListener
from aiokafka.errors import KafkaError

from fairstream.config import ConsumerConfig, ProducerConfig, SecurityConfig
from fairstream.errors import MembershipError
from fairstream.runtime._kafka._member_data import Handover
from fairstream.runtime._record import TP, Headers, Record
from fairstream.runtime._subscriber import Subscriber
from fairstream.runtime.flow._transactions import Transactions

__all__ = [
    "AppSettings",
    "ConsumerPort",
    "DriftWatcher",
    "InTurn",
    "KafkaClients",
    "MembershipRefused",
    "ShadowClients",
    "ShadowReader",
    "TransactionalClients",
    "consumer_broken",
]


class AppSettings(Protocol):
    """What Kafka clients are built from: an App's connection settings."""

    bootstrap: str
    group_id: str
    assignor: str | Sequence[str]
    consumer_config: ConsumerConfig
    producer_config: ProducerConfig
    security: SecurityConfig
    instance_id: str | None
    replan_interval: float | None
    cooperative: bool | Literal["upgrade"]
    processing: Literal["at_least_once", "exactly_once"]


class ConsumerPort(Protocol):
    """The part of aiokafka's consumer API the engine uses.

    ``getmany`` returns aiokafka's records, or undecoded Records where
    they are built directly (``_direct_records``); the engine copies the former.
    """

    async def getmany(
        self, *partitions: Any, timeout_ms: int = ..., max_records: int | None = ...
    ) -> dict[Any, list[Any]]: ...
    def pause(self, *partitions: Any) -> None: ...
    def resume(self, *partitions: Any) -> None: ...
    def seek(self, partition: Any, offset: int) -> None: ...
    async def seek_to_beginning(self, *partitions: Any) -> None: ...
    async def commit(self, offsets: Mapping[Any, Any] | None = ...) -> None: ...
    def highwater(self, partition: Any) -> int | None: ...


class InTurn(Protocol):
    """A consumer whose pulls give each partition its allowance, in turn (aiokafka's
    own consumer, hooked in ``_kafka._pull_in_turn``)."""

    @property
    def holding(self) -> bool:
        """A pull left a trickle's buffer to wait (due at the latest ``linger`` on)."""
        ...

    def wake(self) -> None:
        """An allowance grew, or the handlers ran out of work: a waiting pull drains now."""
        ...


class KafkaClients(Protocol):
    """What the engine needs from a Kafka connection."""

    @property
    def consumer(self) -> ConsumerPort: ...
    @property
    def member_id(self) -> str | None: ...
    @property
    def protocol(self) -> str | None:
        """The protocol the group chose at the last assignment; ``None`` before one."""
        ...

    async def start(self, topics: Sequence[str], listener: ConsumerRebalanceListener) -> None: ...
    async def restart_consumer(self) -> None:
        """Replace the consumer with a new one, subscribed as :meth:`start` left it.

        For a consumer that :func:`consumer_broken` says will not recover; the engine
        revokes its partitions first. The new one rejoins the group (same instance id).

        :raises BrokerError: the new consumer could not start.
        """
        ...

    def pull_in_turn(
        self, allowance: Callable[[Any], int], *, linger: float, busy: Callable[[], bool]
    ) -> InTurn | None:
        """Make the current consumer's ``getmany()`` take at most ``allowance(tp)`` per
        partition, in turn, a trickle's buffer waiting up to ``linger`` seconds while
        ``busy()``; ``None``: this consumer cannot (pulls stay small to stay fair).

        Per consumer: ask again after :meth:`restart_consumer`.
        """
        ...

    async def partition_counts(self, topics: Collection[str]) -> dict[str, int]:
        """Topic -> partition count, for the topics of ``topics`` that exist.

        :raises BrokerError: the query failed.
        """
        ...

    async def publish(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Headers = (),
        partition: int | None = None,
    ) -> None: ...
    async def dead_letter(
        self, subscriber: Subscriber, raw: Any, error: BaseException, attempts: int
    ) -> None: ...
    async def aclose(self) -> None: ...


class ShadowReader(Protocol):
    """A group-less reader of one partition, for a KIP-333 shadow task."""

    def seek(self, offset: int) -> None: ...
    async def read(self, end: int) -> list[Record[bytes]] | None:
        """The next records below ``end`` (maybe none yet); ``None`` once it reached ``end``.

        Undecoded, and marked ``replay``.

        :raises BrokerError: reading failed (``retriable`` says whether to try again).
        """
        ...


@runtime_checkable
class DriftWatcher(Protocol):
    """Clients whose lag assignor re-plans on drift (``replan_interval``); optional."""

    async def watch_drift(self) -> None:
        """Re-read lag every interval on the leader and rebalance if it pays; returns at
        once when re-planning is off."""


@runtime_checkable
class ShadowClients(Protocol):
    """What parallel rebalance needs beyond :class:`KafkaClients`; optional."""

    async def committed_offsets(self, tps: Collection[TP]) -> dict[TP, tuple[int, str] | None]:
        """The group's committed offset and metadata per partition (``None``: no commit).

        :raises BrokerError: the query failed.
        """
        ...

    async def offset_bounds(self, tps: Collection[TP]) -> dict[TP, tuple[int, int]]:
        """Log start and end offset (high watermark) per partition.

        :raises BrokerError: the query failed.
        """
        ...

    async def log_start_offsets(self, tps: Collection[TP]) -> dict[TP, int]:
        """The first offset retention kept, per partition.

        :raises BrokerError: the query failed.
        """
        ...

    def seek(self, tp: TP, offset: int) -> None:
        """Move the group consumer's next fetch of ``tp`` (in the assign listener)."""
        ...

    def reset_by_rule(self, tps: Collection[TP]) -> None:
        """Have the group consumer reset the new ``tps`` by ``auto_offset_reset`` when
        it next fetches, asking the coordinator for no commit of theirs (in the assign
        listener, before its first await; a seek then replaces the reset)."""
        ...

    @property
    def handover(self) -> Handover:
        """Progress a refused revoke commit left unsaved, to and from the group's leader."""
        ...

    def shadow_reader(self, tp: TP) -> AbstractAsyncContextManager[ShadowReader]: ...


@runtime_checkable
class TransactionalClients(Protocol):
    """Clients that run ``processing="exactly_once"``; ``transactions`` is ``None``
    under at-least-once."""

    transactions: Transactions | None


class MembershipRefused(KafkaError):  # type: ignore[misc]  # aiokafka is untyped
    """What ``getmany`` raises in place of aiokafka's error: the group will not keep us
    (``_kafka._membership`` raises it; the fetch room stops the app with ``error``)."""

    def __init__(self, error: MembershipError) -> None:
        super().__init__(error)  # copy.copy (aiokafka copies it) rebuilds from args
        self.error = error


def consumer_broken(exc: KafkaError) -> bool:
    """Whether ``exc`` from ``getmany`` means the consumer must be replaced.

    aiokafka raises failures of group coordination it did not foresee as a bare
    ``KafkaError``, among them its coordinator task ending on a SyncGroup assignment
    it cannot decode: every later call then raises it again. Errors a user must act
    on (authorization, invalid settings) have classes of their own.
    """
    return type(exc) is KafkaError
