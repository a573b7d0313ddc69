"""A member's producer: what the app publishes, its dead letters, its transactions.

The producer side of :class:`~fairstream.runtime._kafka._clients.AIOKafkaClients`,
apart from the group consumer it shares nothing with but the connection settings.
Under ``processing="exactly_once"`` a record published or dead-lettered while a
partition's record is handled goes into that partition's transaction
(:mod:`~fairstream.runtime.flow._transactions`); everything else goes through the
member's one idempotent producer.
"""

from __future__ import annotations

from typing import Any

import structlog
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, KafkaError, MessageSizeTooLargeError

from fairstream.config import ProducerConfig
from fairstream.errors import BrokerError, describe
from fairstream.runtime._kafka._admin import may_pass, stop_quietly
from fairstream.runtime._kafka._starting import start_client
from fairstream.runtime._record import Headers
from fairstream.runtime._subscriber import Subscriber
from fairstream.runtime.flow._dead_letter import dead_letter_copies
from fairstream.runtime.flow._transactions import Transactions, handled_partition

__all__ = ["Producing"]

log = structlog.get_logger(__name__)


class Producing:
    """The member's producer, and its transactions where the app is exactly-once.

    ``common`` are the connection kwargs every client of the member is built with;
    ``transactions_of`` is the group whose transactions they are, or ``None``.
    """

    def __init__(
        self,
        *,
        bootstrap: str,
        common: dict[str, Any],
        client_id: str,
        config: ProducerConfig,
        transactions_of: str | None,
    ) -> None:
        self.bootstrap = bootstrap
        self._common = common
        self._client_id = client_id
        self._config = config
        self.producer = self._new_producer(idempotent=True)
        self.transactions = (
            Transactions(
                group_id=transactions_of,
                bootstrap=bootstrap,
                new_producer=self._transactional_producer,
            )
            if transactions_of is not None
            else None
        )

    def _new_producer(self, *, idempotent: bool) -> AIOKafkaProducer:
        return AIOKafkaProducer(
            **self._common,
            client_id=self._client_id,
            **self._config.aiokafka_kwargs(idempotent=idempotent),
        )

    def _transactional_producer(self, transactional_id: str) -> AIOKafkaProducer:
        return AIOKafkaProducer(
            **self._common,
            client_id=self._client_id,
            **self._config.aiokafka_kwargs(idempotent=True),
            transactional_id=transactional_id,
        )

    async def start(self) -> None:
        """Start the producer; without idempotence where the broker gives no producer id.

        An idempotent producer asks for a producer id when it starts (InitProducerId);
        tansu answers that with an error, which would stop every app on it. The
        broker answered, so it is up: a producer without idempotence is the best
        there is, and the warning says so.
        """
        try:
            await self._start()
        except BrokerError as exc:
            unreachable = isinstance(exc.__cause__, KafkaConnectionError)
            if unreachable or not self._config.enable_idempotence:
                raise
            await stop_quietly(self.producer.stop)
            log.warning(
                "producer_idempotence_unavailable",
                reason=f"{exc}; dead letters and publish use a producer without idempotence "
                "(a retried send may be written twice)",
            )
            self.producer = self._new_producer(idempotent=False)
            await self._start()

    async def _start(self) -> None:
        await start_client(self.producer, "producer", bootstrap=self.bootstrap, common=self._common)

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
            await self.transactions.publish(
                *handled, topic, value, key=key, headers=headers, partition=partition
            )
            return
        try:
            await self.producer.send_and_wait(
                topic, value, key=key, headers=list(headers), partition=partition
            )
        except KafkaError as exc:
            raise BrokerError(
                f"publishing to topic {topic!r} failed: {describe(exc)}",
                bootstrap=self.bootstrap,
                retriable=may_pass(exc),
            ) from exc

    async def dead_letter(
        self, subscriber: Subscriber, raw: Any, error: BaseException, attempts: int
    ) -> None:
        topic = subscriber.dead_letter.topic_for(raw.topic)
        copies = dead_letter_copies(raw, error, attempts)
        for copy in copies:
            # Kafka allows a record with neither key nor value, aiokafka's producer
            # does not: such a record is dead-lettered with an empty key instead.
            key = b"" if copy.key is None and copy.value is None else copy.key
            try:
                if self.transactions is not None:
                    await self.transactions.publish(
                        (raw.topic, raw.partition),
                        raw.offset,
                        topic,
                        copy.value,
                        key=key,
                        headers=copy.headers,
                        partition=None,
                    )
                else:
                    await self.producer.send_and_wait(
                        topic, copy.value, key=key, headers=list(copy.headers)
                    )
            except KafkaError as exc:
                if isinstance(exc, MessageSizeTooLargeError) and copy is not copies[-1]:
                    continue  # the next copy drops the largest part left
                raise BrokerError(
                    f"dead-lettering {raw.topic}[{raw.partition}]@{raw.offset} to {topic!r} "
                    f"failed: {describe(exc)}; the record stays uncommitted",
                    bootstrap=self.bootstrap,
                    retriable=may_pass(exc),
                ) from exc
            if copy.dropped:
                log.warning(
                    "dead_letter_parts_dropped",
                    topic=raw.topic,
                    partition=raw.partition,
                    offset=raw.offset,
                    reason="record too large for the dead-letter topic",
                    **{f"{part}_bytes": size for part, size in copy.dropped},
                )
            return

    async def aclose(self) -> None:
        """Flush and stop the producer, then abort or close the transactions' producers.

        Stopped even if its start failed: aiokafka needs stop() to release what
        start() opened, or it warns about an unclosed client at exit.
        """
        await stop_quietly(self.producer.stop)
        if self.transactions is not None:
            await stop_quietly(self.transactions.aclose)
