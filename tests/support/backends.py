"""One behaviour suite, several backends: the real engines and the in-memory kit.

A test written against :class:`Backend` runs on noida, tansu (or an external
cluster) and on ``fairstream.testing.MemoryBroker``; the kit earns its place as a
user-facing fake by passing the same tests as the real brokers.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any, Protocol

from fairstream import App, ConsumerConfig
from fairstream.testing import MemoryBroker
from tests.support.kafka_helpers import committed, create_topic, produce, read_all


class Backend(Protocol):
    name: str

    def app(self, **kwargs: Any) -> App: ...
    def instance_id(self, name: str) -> str | None: ...
    async def create_topic(self, partitions: int) -> str: ...
    async def produce(
        self, topic: str, records: Iterable[tuple[int, bytes | None]], *, key: bytes | None = None
    ) -> int: ...
    async def committed(self, group_id: str, topic: str, partitions: int) -> list[int | None]: ...
    async def read_all(self, topic: str, partitions: int, expected: int) -> list[Any]: ...


def _topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


QUICK_JOIN = ConsumerConfig(session_timeout_ms=6_000, heartbeat_interval_ms=2_000)
"""A short session for tests that build their own App on tansu.

tansu answers every JoinGroup round after half the session timeout (5 s under the
default 10 s, 3 s under 6 s, measured), so each test's first join waited 5 s there.
6 s is the least a Kafka broker accepts (group.min.session.timeout.ms). Not for a
test whose behaviour needs the default session (a member that must outlive a pause).
"""


class KafkaBackend:
    """A real Kafka-protocol broker reached over the network."""

    def __init__(self, name: str, bootstrap: str, evicts_dead_members: bool) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self._static = not evicts_dead_members

    def app(self, **kwargs: Any) -> App:
        if self.name == "tansu":
            kwargs.setdefault("consumer", QUICK_JOIN)
        return App(bootstrap=self.bootstrap, **kwargs)

    def instance_id(self, name: str) -> str | None:
        # noida never evicts a member, so a rejoin under a new id stalls the group.
        return name if self._static else None

    async def create_topic(self, partitions: int) -> str:
        name = _topic_name()
        await create_topic(self.bootstrap, name, partitions)
        return name

    async def produce(
        self, topic: str, records: Iterable[tuple[int, bytes | None]], *, key: bytes | None = None
    ) -> int:
        return await produce(self.bootstrap, topic, records, key=key)

    async def committed(self, group_id: str, topic: str, partitions: int) -> list[int | None]:
        return await committed(self.bootstrap, group_id, topic, partitions)

    async def read_all(self, topic: str, partitions: int, expected: int) -> list[Any]:
        return await read_all(self.bootstrap, topic, partitions, expected)


class MemoryBackend:
    """``fairstream.testing.MemoryBroker``: the kit users test their apps with."""

    name = "memory"

    def __init__(self) -> None:
        self.broker = MemoryBroker()

    def app(self, **kwargs: Any) -> App:
        return App(clients=self.broker.clients, **kwargs)

    def instance_id(self, name: str) -> str | None:
        return None

    async def create_topic(self, partitions: int) -> str:
        name = _topic_name()
        self.broker.create_topic(name, partitions)
        return name

    async def produce(
        self, topic: str, records: Iterable[tuple[int, bytes | None]], *, key: bytes | None = None
    ) -> int:
        count = 0
        for partition, value in records:
            await self.broker.publish(topic, value, key=key, partition=partition)
            count += 1
        return count

    async def committed(self, group_id: str, topic: str, partitions: int) -> list[int | None]:
        return [self.broker.committed(group_id, topic, p) for p in range(partitions)]

    async def read_all(self, topic: str, partitions: int, expected: int) -> list[Any]:
        return self.broker.records(topic)
