"""An in-memory Kafka for users' own tests: topics, groups, commits, no process.

``MemoryBroker`` plugs into :class:`~fairstream.App` through its public
``clients=`` seam, the same interface the aiokafka clients implement, so the
engine under test is the real one: fair scheduling, retries, dead letters and
commits all run as in production. fairstream's own runtime suite runs on it and
on the real brokers alike, which is what earns it trust.

>>> broker = MemoryBroker()                          # doctest: +SKIP
>>> broker.create_topic("orders", partitions=3)
>>> app = App(group_id="billing", clients=broker.clients)
>>> async with app:
...     await broker.publish("orders", b'{"amount": 3}')
...     await broker.drain(app)                     # every record handled
>>> broker.records("orders.dlq")                    # what was dead-lettered

An app built at module level runs on it for the length of a block, its own clients
restored afterwards (FastStream's ``TestKafkaBroker(broker)`` habit):

>>> async with MemoryBroker().run(app) as broker:   # doctest: +SKIP
...     await broker.publish("orders", b'{"amount": 3}', key=b"customer-7")
...     await broker.drain(app)
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, final

import anyio
from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.partitioner import murmur2
from aiokafka.structs import ConsumerRecord

from fairstream.assign import GroupSnapshot, plan
from fairstream.errors import ConfigError
from fairstream.runtime._ports import ConsumerPort, InTurn, KafkaClients
from fairstream.runtime._record import TP, Headers
from fairstream.runtime._subscriber import Subscriber
from fairstream.runtime.flow._dead_letter import dead_letter_headers
from fairstream.runtime.flow._transactions import Transactions, handled_partition
from fairstream.testing._transactions import MemoryProducer

if TYPE_CHECKING:
    from fairstream.runtime._app import App

__all__ = ["MemoryBroker", "partition_for"]

_FETCH_LIMIT = 500  # records per partition per poll, like a bounded fetch


def partition_for(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for ``key`` among ``partitions``.

    The Java client's ``Utils.toPositive(Utils.murmur2(key)) % numPartitions``, which
    aiokafka's ``DefaultPartitioner`` (the app's producer) repeats with the same
    murmur2: a key lands where it would on Kafka, so a key-order test means the same.
    """
    hashed: int = murmur2(key)
    return (hashed & 0x7FFFFFFF) % partitions


@dataclass(slots=True)
class _Group:
    members: dict[str, _MemoryConsumer] = field(default_factory=dict)
    generation: int = 0
    assignment: dict[str, set[TopicPartition]] = field(default_factory=dict)
    committed: dict[TopicPartition, tuple[int, str]] = field(default_factory=dict)


@final
class MemoryBroker:
    """Topics and consumer groups in memory; one per test is the usual scope."""

    def __init__(self) -> None:
        self._topics: dict[str, list[list[ConsumerRecord[bytes, bytes]]]] = {}
        self._groups: dict[str, _Group] = {}
        self._changed = anyio.Event()
        self._members = itertools.count(1)
        self._round_robin = itertools.count()
        self._epochs: dict[str, int] = {}
        """Per transactional id, the epoch of its live producer (``_transactions``)."""

    # --- topics ---------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1) -> None:
        if partitions <= 0:
            raise ConfigError("partitions", partitions, "must be > 0")
        self._topics.setdefault(name, [[] for _ in range(partitions)])

    def topics(self) -> set[str]:
        return set(self._topics)

    def partitions(self, topic: str) -> int:
        return len(self._topics[topic])

    async def publish(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Headers = (),
        partition: int | None = None,
    ) -> int:
        """Append a record and return its offset.

        Without ``partition``, a keyed record goes where Kafka's default partitioner
        puts it (:func:`partition_for`), a record without a key round-robin.
        """
        return self._append(topic, value, key=key, headers=headers, partition=partition)

    def _log(self, topic: str) -> list[list[ConsumerRecord[bytes, bytes]]]:
        log = self._topics.get(topic)
        if log is None:
            raise ConfigError("topic", topic, "does not exist", "call create_topic first")
        return log

    def _append(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None,
        headers: Headers,
        partition: int | None,
    ) -> int:
        log = self._log(topic)
        if partition is None:
            partition = (
                next(self._round_robin) % len(log) if key is None else partition_for(key, len(log))
            )
        records = log[partition]
        offset = len(records)
        records.append(
            ConsumerRecord(
                topic=topic,
                partition=partition,
                offset=offset,
                timestamp=int(time.time() * 1000),
                timestamp_type=0,
                key=key,
                value=value,
                checksum=None,
                serialized_key_size=len(key) if key is not None else -1,
                serialized_value_size=len(value) if value is not None else -1,
                headers=tuple(headers),
            )
        )
        self._notify()
        return offset

    def _commit(self, group_id: str, tp: TopicPartition, committed: tuple[int, str]) -> None:
        self._groups.setdefault(group_id, _Group()).committed[tp] = committed

    def records(self, topic: str) -> list[ConsumerRecord[bytes, bytes]]:
        """Every record of ``topic``, partition by partition (e.g. a dead-letter topic)."""
        return [r for log in self._topics.get(topic, []) for r in log]

    def end_offset(self, topic: str, partition: int) -> int:
        return len(self._topics[topic][partition])

    def committed(self, group_id: str, topic: str, partition: int) -> int | None:
        group = self._groups.get(group_id)
        entry = group.committed.get(TopicPartition(topic, partition)) if group else None
        return entry[0] if entry else None

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def _wait_changed(self) -> None:
        await self._changed.wait()

    # --- groups ---------------------------------------------------------------------

    def _join(self, group_id: str, consumer: _MemoryConsumer) -> str:
        member_id = f"memory-{next(self._members)}"
        group = self._groups.setdefault(group_id, _Group())
        group.members[member_id] = consumer
        self._rebalance(group)
        return member_id

    def _leave(self, group_id: str, member_id: str) -> None:
        group = self._groups[group_id]
        if group.members.pop(member_id, None) is not None:
            self._rebalance(group)

    def _rebalance(self, group: _Group) -> None:
        """Plan the group with the fair strategy; members pick it up on their next poll."""
        counts = {t: len(self._topics[t]) for m in group.members.values() for t in m.topics}
        snapshot = GroupSnapshot(
            members={m: frozenset(c.topics) for m, c in group.members.items()},
            partitions=counts,
            lag={},
        )
        result = plan("fair", snapshot)
        group.assignment = {
            member: {TopicPartition(t, p) for t, ps in topics.items() for p in ps}
            for member, topics in result.members.items()
        }
        group.generation += 1
        self._notify()

    # --- the App seam ---------------------------------------------------------------

    def clients(self, app: App, subscribers: Sequence[Subscriber]) -> KafkaClients:
        """Pass as ``App(clients=broker.clients)`` to run the app on this broker."""
        return _MemoryClients(
            self,
            app.group_id,
            app.consumer_config.auto_offset_reset,
            exactly_once=app.processing == "exactly_once",
        )

    @asynccontextmanager
    async def run(self, app: App, *, partitions: int = 1) -> AsyncIterator[MemoryBroker]:
        """Run ``app`` on this broker for the block; its own clients come back after it.

        For an app built at module level with the real clients: no factory, no rebuild.
        Subscribed topics, and those their handlers publish to (``@app.publisher``),
        that do not exist yet are created with ``partitions`` each (create a topic first
        to choose its count). The app starts and joins as under
        ``async with app`` and stops, committing, when the block ends.

        :raises ConfigError: ``partitions`` is not positive.
        """
        for subscriber in app._subscribers:
            for topic in (*subscriber.topics, *subscriber.publishes):
                self.create_topic(topic, partitions)
        # The factory is read when the app starts (App._new_engine), so swapping it
        # for the block is all it takes; restored even if the block or the app fails.
        own, app._clients_factory = app._clients_factory, self.clients
        try:
            async with app:
                yield self
        finally:
            app._clients_factory = own

    async def drain(self, app: App) -> None:
        """Wait until ``app`` has handled every record published to its partitions.

        Bound it yourself: ``with anyio.fail_after(5): await broker.drain(app)``.
        """
        while True:
            stats = app.stats()
            group = self._groups.get(app.group_id)
            mine = group.assignment.get(stats.member_id or "", set()) if group else set()
            owned = {(p.topic, p.partition) for p in stats.partitions}
            if (
                stats.state == "running"
                and owned == {(tp.topic, tp.partition) for tp in mine}
                and all(
                    p.queue_depth == 0
                    and (
                        p.lag == 0 or (p.lag is None and not self.end_offset(p.topic, p.partition))
                    )
                    for p in stats.partitions
                )
            ):
                return
            await anyio.sleep(0.01)


class _MemoryConsumer:
    """The consumer side: polls, pauses, commits, follows the group's generation."""

    def __init__(self, broker: MemoryBroker, group_id: str, reset: str) -> None:
        self._broker = broker
        self._group_id = group_id
        self._reset = reset
        self.topics: tuple[str, ...] = ()
        self.member_id: str | None = None
        self._listener: ConsumerRebalanceListener | None = None
        self._generation = 0
        self._positions: dict[TopicPartition, int] = {}
        self._paused: set[TopicPartition] = set()

    def subscribe(self, topics: Sequence[str], listener: ConsumerRebalanceListener) -> None:
        self.topics = tuple(topics)
        self._listener = listener
        self.member_id = self._broker._join(self._group_id, self)

    async def _follow_rebalance(self) -> None:
        group = self._broker._groups[self._group_id]
        if self._generation == group.generation or self.member_id is None:
            return
        assert self._listener is not None
        await self._listener.on_partitions_revoked(set(self._positions))
        self._generation = group.generation
        mine = group.assignment.get(self.member_id, set())
        self._positions = {}
        for tp in mine:
            committed = group.committed.get(tp)
            if committed is not None:
                self._positions[tp] = committed[0]
            else:
                end = self._broker.end_offset(tp.topic, tp.partition)
                self._positions[tp] = 0 if self._reset == "earliest" else end
        self._paused &= mine
        await self._listener.on_partitions_assigned(set(mine))

    async def getmany(
        self, *partitions: Any, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]:
        deadline = anyio.current_time() + timeout_ms / 1000
        wanted = set(partitions)  # a tuple's `in` would scan it for every partition
        while True:
            await self._follow_rebalance()
            batches = {}
            budget = max_records or _FETCH_LIMIT * len(self._positions)
            for tp, position in self._positions.items():
                if budget <= 0:
                    break
                if tp in self._paused or (wanted and tp not in wanted):
                    continue
                log = self._broker._topics[tp.topic][tp.partition]
                if position < len(log):
                    chunk = log[position : position + min(_FETCH_LIMIT, budget)]
                    budget -= len(chunk)
                    self._positions[tp] = position + len(chunk)
                    batches[tp] = chunk
            for tp in batches:  # their turn is over: the others go first next time
                self._positions[tp] = self._positions.pop(tp)
            remaining = deadline - anyio.current_time()
            if batches or remaining <= 0:
                return batches
            with anyio.move_on_after(remaining):
                await self._broker._wait_changed()

    def pause(self, *partitions: TopicPartition) -> None:
        self._paused.update(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._paused.difference_update(partitions)
        self._broker._notify()

    def seek(self, partition: TopicPartition, offset: int) -> None:
        if partition in self._positions:
            self._positions[partition] = offset
            self._broker._notify()

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for partition in partitions:
            self.seek(partition, 0)

    async def commit(self, offsets: Mapping[TopicPartition, Any] | None = None) -> None:
        group = self._broker._groups[self._group_id]
        for tp, value in (offsets or {}).items():
            offset, metadata = value if isinstance(value, tuple) else (value, "")
            group.committed[tp] = (offset, metadata)

    def highwater(self, partition: TopicPartition) -> int | None:
        return self._broker.end_offset(partition.topic, partition.partition)

    def leave(self) -> None:
        if self.member_id is not None:
            self._broker._leave(self._group_id, self.member_id)
            self.member_id = None


class _MemoryClients:
    """``KafkaClients`` on a :class:`MemoryBroker`."""

    def __init__(
        self, broker: MemoryBroker, group_id: str, reset: str, *, exactly_once: bool
    ) -> None:
        self._broker = broker
        self._group_id = group_id
        self._reset = reset
        self._consumer = _MemoryConsumer(broker, group_id, reset)
        self._subscription: tuple[Sequence[str], ConsumerRebalanceListener] | None = None
        self.transactions = (
            Transactions(
                group_id=group_id,
                bootstrap="memory",
                new_producer=lambda tid: MemoryProducer(broker, tid, broker._epochs),
            )
            if exactly_once
            else None
        )
        """Exactly-once's transactions, each on a ``MemoryProducer`` (``_transactions``)."""

    @property
    def consumer(self) -> ConsumerPort:
        return self._consumer

    @property
    def member_id(self) -> str | None:
        return self._consumer.member_id

    @property
    def protocol(self) -> str | None:
        """No group protocol: the in-memory broker plans ``fair`` itself."""
        return None

    async def start(self, topics: Sequence[str], listener: ConsumerRebalanceListener) -> None:
        missing = sorted(set(topics) - self._broker.topics())
        if missing:
            raise ConfigError(
                "topics",
                missing,
                "not found on the cluster",
                "create them first (or check the spelling)",
            )
        self._subscription = (topics, listener)
        self._consumer.subscribe(topics, listener)

    async def restart_consumer(self) -> None:
        """Leave the group and join again as a new member, as a rebuilt consumer does."""
        assert self._subscription is not None, "start() subscribes first"
        self._consumer.leave()
        self._consumer = _MemoryConsumer(self._broker, self._group_id, self._reset)
        self._consumer.subscribe(*self._subscription)

    def pull_in_turn(
        self, allowance: Callable[[Any], int], *, linger: float, busy: Callable[[], bool]
    ) -> InTurn | None:
        """``None``: the in-memory consumer has no aiokafka fetcher to hook; the fetch room
        names the partitions it wants and caps each pull instead."""
        return None

    async def partition_counts(self, topics: Collection[str]) -> dict[str, int]:
        return {t: self._broker.partitions(t) for t in topics if t in self._broker.topics()}

    async def publish(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Headers = (),
        partition: int | None = None,
    ) -> None:
        if self.transactions is not None and (handled := handled_partition()) is not None:
            await self._transactional(handled, topic, value, key, headers, partition)
            return
        await self._broker.publish(topic, value, key=key, headers=headers, partition=partition)

    async def _transactional(
        self,
        handled: tuple[TP, int],
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Headers,
        partition: int | None,
    ) -> None:
        """Into the transaction of the handled record's partition (exactly-once)."""
        assert self.transactions is not None
        await self.transactions.publish(
            *handled, topic, value, key=key, headers=headers, partition=partition
        )

    async def dead_letter(
        self, subscriber: Subscriber, raw: Any, error: BaseException, attempts: int
    ) -> None:
        topic = subscriber.dead_letter.topic_for(raw.topic)
        self._broker.create_topic(topic, self._broker.partitions(raw.topic))
        headers = dead_letter_headers(raw, error, attempts)
        if self.transactions is not None:
            source = ((raw.topic, raw.partition), raw.offset)
            await self._transactional(source, topic, raw.value, raw.key, headers, None)
            return
        await self._broker.publish(topic, raw.value, key=raw.key, headers=headers)

    async def aclose(self) -> None:
        if self.transactions is not None:
            await self.transactions.aclose()
        self._consumer.leave()
