"""Kafka transactions on the in-memory broker, for ``App(processing="exactly_once")``.

The app's exactly-once machinery (``fairstream.runtime.flow._transactions``) runs as on
Kafka; only the producer under it is this one. The visibility rules are Kafka's as
a ``read_committed`` reader sees them: a transaction's records reach their topics,
and its offsets the group, together when it commits and never when it aborts. Until
then they wait here, so no reader of the broker (the app's consumer,
``MemoryBroker.records``) sees an uncommitted or aborted output. Unlike Kafka they
take no offsets before the commit and leave no control records, so an output
topic's offsets count committed records only.

Fencing is Kafka's too: starting a producer with a transactional id fences the
previous producer of that id, whose open transaction is dropped and whose every
later call raises ``ProducerFenced``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol, final

from aiokafka import TopicPartition
from aiokafka.errors import ProducerFenced
from aiokafka.structs import OffsetAndMetadata

from fairstream.runtime._record import Headers


class _Broker(Protocol):
    """What a producer needs of the :class:`~fairstream.testing.MemoryBroker` that made
    it: its logs and its groups' commits. A protocol, so this module does not import
    the broker that imports it."""

    def _log(self, topic: str) -> object: ...

    def _append(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None,
        headers: Headers,
        partition: int | None,
    ) -> int: ...

    def _commit(self, group_id: str, tp: TopicPartition, committed: tuple[int, str]) -> None: ...


__all__ = ["MemoryProducer"]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Send:
    topic: str
    value: bytes | None
    key: bytes | None
    headers: Headers
    partition: int | None


@final
class MemoryProducer:
    """A transactional producer of a :class:`MemoryBroker` (one transactional id)."""

    def __init__(self, broker: _Broker, transactional_id: str, epochs: dict[str, int]) -> None:
        self._broker = broker
        self._id = transactional_id
        self._epochs = epochs
        self._epoch = -1
        self._sends: list[_Send] = []
        self._offsets: dict[tuple[str, TopicPartition], tuple[int, str]] = {}

    async def start(self) -> None:
        """InitProducerId: fence the id's previous producer."""
        self._epoch = self._epochs[self._id] = self._epochs.get(self._id, -1) + 1

    async def stop(self) -> None:
        self._drop()

    async def begin_transaction(self) -> None:
        self._check()
        self._drop()

    async def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None,
        headers: list[tuple[str, bytes]],
        partition: int | None,
    ) -> asyncio.Future[Any]:
        self._check()
        self._broker._log(topic)  # a missing topic fails the send, as publish does
        self._sends.append(
            _Send(topic=topic, value=value, key=key, headers=tuple(headers), partition=partition)
        )
        delivered: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        delivered.set_result(None)
        return delivered

    async def send_offsets_to_transaction(
        self, offsets: dict[TopicPartition, OffsetAndMetadata], group_id: str
    ) -> None:
        self._check()
        for tp, committed in offsets.items():
            self._offsets[group_id, tp] = (committed.offset, committed.metadata)

    async def commit_transaction(self) -> None:
        """Append the transaction's records and commit its offsets, at once (no await
        between them: no reader can see one without the other)."""
        self._check()
        for send in self._sends:
            self._broker._append(
                send.topic, send.value, key=send.key, headers=send.headers, partition=send.partition
            )
        for (group_id, tp), committed in self._offsets.items():
            self._broker._commit(group_id, tp, committed)
        self._drop()

    async def abort_transaction(self) -> None:
        self._check()
        self._drop()

    def _check(self) -> None:
        if self._epochs.get(self._id) != self._epoch:
            self._drop()
            raise ProducerFenced()

    def _drop(self) -> None:
        self._sends.clear()
        self._offsets.clear()
