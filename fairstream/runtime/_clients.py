"""The engine's edge to Kafka: a consumer, a producer, and the start-up checks.

The engine talks to :class:`KafkaClients`, a small Protocol; :class:`AIOKafkaClients`
implements it with aiokafka for real clusters and ``fairstream.testing`` with an
in-memory broker. Third-party errors are wrapped here, at the boundary, into
messages that say what to check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, KafkaError, TopicAlreadyExistsError

from fairstream.config import ConsumerConfig, SecurityConfig
from fairstream.errors import BrokerError, ConfigError
from fairstream.runtime._assignors import PlanningAssignor
from fairstream.runtime._record import Headers
from fairstream.runtime._subscriber import Subscriber

__all__ = ["AIOKafkaClients", "ConsumerPort", "KafkaClients", "dead_letter_headers"]

log = structlog.get_logger(__name__)


class ConsumerPort(Protocol):
    """The part of aiokafka's consumer API the engine uses."""

    async def getmany(self, *partitions: Any, timeout_ms: int = ...) -> dict[Any, list[Any]]: ...
    def pause(self, *partitions: Any) -> None: ...
    def resume(self, *partitions: Any) -> None: ...
    async def commit(self, offsets: Mapping[Any, Any] | None = ...) -> None: ...
    def highwater(self, partition: Any) -> int | None: ...


class KafkaClients(Protocol):
    """What the engine needs from a Kafka connection."""

    @property
    def consumer(self) -> ConsumerPort: ...
    @property
    def member_id(self) -> str | None: ...
    async def start(self, topics: Sequence[str], listener: ConsumerRebalanceListener) -> None: ...
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


def dead_letter_headers(raw: Any, error: BaseException, attempts: int) -> Headers:
    """The record's own headers plus where it came from and why it failed."""
    message = str(error)[:1000]
    return (
        *tuple(raw.headers),
        ("fairstream.error.type", type(error).__name__.encode()),
        ("fairstream.error.message", message.encode("utf-8", "replace")),
        ("fairstream.source.topic", raw.topic.encode()),
        ("fairstream.source.partition", str(raw.partition).encode()),
        ("fairstream.source.offset", str(raw.offset).encode()),
        ("fairstream.attempts", str(attempts).encode()),
    )


class AIOKafkaClients:
    """aiokafka consumer and producer for one group member."""

    def __init__(
        self,
        *,
        bootstrap: str,
        group_id: str,
        consumer_config: ConsumerConfig,
        security: SecurityConfig,
        assignor: PlanningAssignor,
        instance_id: str | None,
        dead_letter_topics: Mapping[str, str],
    ) -> None:
        self.bootstrap = bootstrap
        self.group_id = group_id
        self._dead_letter_topics = dict(dead_letter_topics)
        common = {"bootstrap_servers": bootstrap, **security.aiokafka_kwargs()}
        self._common = common
        config = consumer_config
        self._consumer = AIOKafkaConsumer(
            **common,
            group_id=group_id,
            client_id=config.client_id,
            group_instance_id=instance_id,
            enable_auto_commit=False,
            auto_offset_reset=config.auto_offset_reset,
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            max_poll_interval_ms=config.max_poll_interval_ms,
            fetch_max_bytes=config.fetch_max_bytes,
            max_partition_fetch_bytes=config.max_partition_fetch_bytes,
            partition_assignment_strategy=(assignor,),
        )
        self._producer = AIOKafkaProducer(**common, client_id=f"{config.client_id}-producer")
        self._assignor = assignor
        self._started: list[Any] = []

    @property
    def consumer(self) -> ConsumerPort:
        return self._consumer  # type: ignore[no-any-return]

    @property
    def member_id(self) -> str | None:
        coordinator = getattr(self._consumer, "_coordinator", None)
        member = getattr(coordinator, "member_id", None)
        return member if isinstance(member, str) and member else None

    async def _start(self, client: Any, what: str) -> None:
        try:
            await client.start()
        except KafkaConnectionError as exc:
            raise BrokerError(
                f"cannot reach the Kafka cluster to start the {what}: {exc}; check the "
                "bootstrap address (--bootstrap or FAIRSTREAM_BOOTSTRAP) and that the broker runs",
                bootstrap=self.bootstrap,
                retriable=True,
            ) from exc
        except KafkaError as exc:
            raise BrokerError(
                f"the {what} could not start: {type(exc).__name__}: {exc}",
                bootstrap=self.bootstrap,
                retriable=bool(getattr(exc, "retriable", False)),
            ) from exc
        self._started.append(client)

    async def start(self, topics: Sequence[str], listener: ConsumerRebalanceListener) -> None:
        """Connect, check the topics exist, create missing dead-letter topics, subscribe."""
        await self._start(self._producer, "producer")
        await self._start(self._consumer, "consumer")
        existing = await self._consumer.topics()
        missing = sorted(set(topics) - existing)
        if missing:
            raise ConfigError(
                "topics",
                missing,
                "not found on the cluster",
                "create them first (or check the spelling); fairstream does not auto-create "
                "source topics",
            )
        await self._ensure_dead_letter_topics(existing)
        # The assignor's listener reads the group's lag after our revoke committed.
        self._consumer.subscribe(
            list(topics), listener=self._assignor.listener(self._consumer, listener)
        )

    async def _ensure_dead_letter_topics(self, existing: set[str]) -> None:
        wanted = {dlq: src for src, dlq in self._dead_letter_topics.items() if dlq not in existing}
        if not wanted:
            return
        new = []
        for dlq, source in sorted(wanted.items()):
            partitions = self._consumer.partitions_for_topic(source) or {0}
            new.append(NewTopic(dlq, len(partitions), 1))
        admin = AIOKafkaAdminClient(**self._common)
        await admin.start()
        try:
            await admin.create_topics(new)
        except TopicAlreadyExistsError:
            pass
        finally:
            await admin.close()
        log.info("dead_letter_topics_created", topics=sorted(wanted))

    async def publish(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Headers = (),
        partition: int | None = None,
    ) -> None:
        try:
            await self._producer.send_and_wait(
                topic, value, key=key, headers=list(headers), partition=partition
            )
        except KafkaError as exc:
            raise BrokerError(
                f"publishing to topic {topic!r} failed: {type(exc).__name__}: {exc}",
                bootstrap=self.bootstrap,
                retriable=bool(getattr(exc, "retriable", False)),
            ) from exc

    async def dead_letter(
        self, subscriber: Subscriber, raw: Any, error: BaseException, attempts: int
    ) -> None:
        # Kafka allows a record with neither key nor value, aiokafka's producer does
        # not: such a record is dead-lettered with an empty key instead.
        key = b"" if raw.key is None and raw.value is None else raw.key
        await self.publish(
            subscriber.dead_letter.topic_for(raw.topic),
            raw.value,
            key=key,
            headers=dead_letter_headers(raw, error, attempts),
        )

    async def aclose(self) -> None:
        """Stop the consumer (leaving the group), flush the producer, close lag reads."""
        while self._started:
            client = self._started.pop()
            try:
                await client.stop()
            except KafkaError as exc:
                log.warning("client_stop_failed", reason=f"{type(exc).__name__}: {exc}")
        await self._assignor.aclose()
